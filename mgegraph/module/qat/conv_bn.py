"""QAT ``ConvBn2d`` and ``ConvBnRelu2d`` (MegEngine's ``module.qat.conv_bn``): the batch norm
folded into the convolution, so that training sees the weight the int8 layer will hold.

The folded weight is ``w * gamma / sqrt(running_var + eps)`` per output channel, fake-quantized.
In training (MegEngine's "approx" way), the convolution of the folded weight is divided back by
that factor and the batch norm runs on it with the batch's statistics (updating the running
ones), so gradients see the batch's normalisation; in eval the folded bias
``beta + gamma * (b - running_mean) / sqrt(running_var + eps)``, fake-quantized to qint32 as the
int8 layer holds it (``QATModule.apply_quant_bias``), is added instead, which is what
``module.quantized`` deploys.
"""
from __future__ import annotations

import numpy as np

from ... import functional as F
from ..conv_bn import ConvBn2d as FloatConvBn2d
from ..conv_bn import ConvBnRelu2d as FloatConvBnRelu2d
from .module import QATModule

__all__ = ["ConvBn2d", "ConvBnRelu2d"]


def _channels(g, value, channels: int, default: float):
    """A batch norm's per-channel array as (C,) in graph ``g`` (``default`` where absent)."""
    if value is None:
        return g.const(np.full(channels, default, np.float32))
    return F.reshape(g.lift(value), (channels,))


class _ConvBnActivation2d(QATModule):
    def fold(self, g):
        """(per-channel factor gamma / std, folded weight, folded bias) from the running
        statistics, as values of graph ``g``."""
        bn, conv = self.bn, self.conv
        c = bn.num_features
        gamma, beta = _channels(g, bn.weight, c, 1.0), _channels(g, bn.bias, c, 0.0)
        mean, var = _channels(g, bn.running_mean, c, 0.0), _channels(g, bn.running_var, c, 1.0)
        factor = gamma / F.sqrt(var + bn.eps)
        w_fold = g.lift(conv.weight) * F.reshape(factor, (c, 1, 1, 1))
        conv_bias = _channels(g, conv.bias, c, 0.0)
        b_fold = beta + (conv_bias - mean) * factor
        return factor, w_fold, b_fold

    def calc_conv_bn_qat(self, inp):
        conv, g = self.conv, inp.graph
        factor, w_fold, b_fold = self.fold(g)
        w_qat = self.apply_quant_weight(w_fold)
        geometry = (conv.stride, conv.padding, conv.dilation, conv.groups)
        if not self.training:
            return F.conv2d(inp, w_qat, self.apply_quant_bias(b_fold, inp, w_qat), *geometry)
        folded = F.conv2d(inp, w_qat, None, *geometry)
        unfolded = folded / F.reshape(factor, (1, -1, 1, 1))
        if conv.bias is not None:
            unfolded = unfolded + F.reshape(g.lift(conv.bias), (1, -1, 1, 1))
        return self.bn(unfolded)


class ConvBn2d(_ConvBnActivation2d, FloatConvBn2d):
    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_bn_qat(inp))


class ConvBnRelu2d(_ConvBnActivation2d, FloatConvBnRelu2d):
    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_bn_qat(inp)))
