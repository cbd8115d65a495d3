"""QAT ``LinearBn1d`` and ``LinearBnRelu1d`` (MegEngine's ``module.qat.linear_bn``): the batch
norm folded into the linear layer as ``conv_bn.BnFolded`` folds it (MegEngine's "approx"
training)."""
from __future__ import annotations

from ... import functional as F
from ..linear_bn import LinearBn1d as FloatLinearBn1d
from ..linear_bn import LinearBnRelu1d as FloatLinearBnRelu1d
from .conv_bn import BnFolded

__all__ = ["LinearBn1d", "LinearBnRelu1d"]


class _LinearBnActivation1d(BnFolded):
    LAYER = "linear"

    def calc_layer(self, inp, weight, bias):
        return F.linear(inp, weight, bias)


class LinearBn1d(_LinearBnActivation1d, FloatLinearBn1d):
    def forward(self, inp):
        return self.apply_quant_activation(self.calc_bn_qat(inp))


class LinearBnRelu1d(_LinearBnActivation1d, FloatLinearBnRelu1d):
    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_bn_qat(inp)))
