"""QAT ``ConvTransposeBn2d`` and ``ConvTransposeBnRelu2d`` (MegEngine's
``module.qat.conv_transpose_bn``): the batch norm folded into the transposed convolution as
``conv_bn.BnFolded`` folds it (MegEngine's "approx" training)."""
from __future__ import annotations

from ... import functional as F
from ..conv_transpose_bn import ConvTransposeBn2d as FloatConvTransposeBn2d
from ..conv_transpose_bn import ConvTransposeBnRelu2d as FloatConvTransposeBnRelu2d
from .conv_bn import BnFolded

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d"]


class _ConvTransposeBnActivation2d(BnFolded):
    LAYER = "conv_transpose2d"

    def calc_layer(self, inp, weight, bias):
        layer = self.conv_transpose2d
        return F.conv_transpose2d(inp, weight, bias, *layer._args())

    def scale_weight(self, weight, factor):
        """The weight is (in, out/groups, kh, kw): output channel grp * out/groups + j is
        column j of group grp's rows."""
        groups = self.conv_transpose2d.groups
        i, o, kh, kw = weight.shape
        grouped = F.reshape(weight, (groups, i // groups, o, kh, kw))
        scaled = grouped * F.reshape(factor, (groups, 1, o, 1, 1))
        return F.reshape(scaled, (i, o, kh, kw))


class ConvTransposeBn2d(_ConvTransposeBnActivation2d, FloatConvTransposeBn2d):
    def forward(self, inp):
        return self.apply_quant_activation(self.calc_bn_qat(inp))


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d, FloatConvTransposeBnRelu2d):
    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_bn_qat(inp)))
