"""QAT ``ConvBn2d`` and ``ConvBnRelu2d`` (MegEngine's ``module.qat.conv_bn``): the batch norm
folded into the convolution, so that training sees the weight the int8 layer will hold.
``BnFolded`` is the fold for every layer with a batch norm after it (``qat.conv_transpose_bn``,
``qat.linear_bn`` too).

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

__all__ = ["BnFolded", "ConvBn2d", "ConvBnRelu2d"]


def _channels(g, value, channels: int, default: float):
    """A batch norm's per-channel array as (C,) in graph ``g`` (``default`` where absent)."""
    if value is None:
        return g.const(np.full(channels, default, np.float32))
    return F.reshape(g.lift(value), (channels,))


class BnFolded(QATModule):
    """A layer (the attribute ``LAYER`` names: a convolution, a transposed one, a linear layer)
    and the batch norm after it (``bn``), the norm folded into the layer's weight and bias."""

    LAYER = "conv"

    def calc_layer(self, inp, weight, bias):
        """The layer's map of ``inp`` with ``weight`` and ``bias``."""
        raise NotImplementedError

    def scale_weight(self, weight, factor):
        """``weight`` with each output channel's slice multiplied by ``factor`` (C,)."""
        return weight * F.reshape(factor, (-1,) + (1,) * (weight.ndim - 1))

    def fold(self, g):
        """(per-channel factor gamma / std, folded weight, folded bias) from the running
        statistics, as values of graph ``g``."""
        bn, layer = self.bn, getattr(self, self.LAYER)
        c = bn.num_features
        gamma, beta = _channels(g, bn.weight, c, 1.0), _channels(g, bn.bias, c, 0.0)
        mean, var = _channels(g, bn.running_mean, c, 0.0), _channels(g, bn.running_var, c, 1.0)
        factor = gamma / F.sqrt(var + bn.eps)
        w_fold = self.scale_weight(g.lift(layer.weight), factor)
        b_fold = beta + (_channels(g, layer.bias, c, 0.0) - mean) * factor
        return factor, w_fold, b_fold

    def calc_bn_qat(self, inp):
        layer, g = getattr(self, self.LAYER), inp.graph
        factor, w_fold, b_fold = self.fold(g)
        w_qat = self.apply_quant_weight(w_fold)
        if not self.training:
            return self.calc_layer(inp, w_qat, self.apply_quant_bias(b_fold, inp, w_qat))
        folded = self.calc_layer(inp, w_qat, None)
        channel = (1, -1) + (1,) * (folded.ndim - 2)
        unfolded = folded / F.reshape(factor, channel)
        if layer.bias is not None:
            unfolded = unfolded + F.reshape(g.lift(layer.bias), channel)
        return self.bn(unfolded)


class _ConvBnActivation2d(BnFolded):
    def calc_layer(self, inp, weight, bias):
        return self.conv.calc_conv(inp, weight, bias)


class ConvBn2d(_ConvBnActivation2d, FloatConvBn2d):
    def forward(self, inp):
        return self.apply_quant_activation(self.calc_bn_qat(inp))


class ConvBnRelu2d(_ConvBnActivation2d, FloatConvBnRelu2d):
    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_bn_qat(inp)))
