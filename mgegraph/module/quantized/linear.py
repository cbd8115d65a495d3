"""The int8 ``Linear`` and ``LinearRelu`` (MegEngine's ``module.quantized.linear``) and
``LinearBn1d``, ``LinearBnRelu1d`` (``module.quantized.linear_bn``: the batch norm folded by the
QAT module, so all four are one layer), run by ``ops.quantized.quantized_linear``."""
from __future__ import annotations

import numpy as np

from ...nn.module import Buffer
from ...ops.builder import graph_of
from ...ops.quantize import as_quantized
from ...ops.quantized import quantized_linear
from ..qat.conv_bn import BnFolded
from .conv import input_scale, int32_bias
from .module import QuantizedModule, quantized_weight

__all__ = ["Linear", "LinearBn1d", "LinearBnRelu1d", "LinearRelu"]


class Linear(QuantizedModule):
    """``x @ w.T + b`` of int8 values and int8 weights, int32 accumulation, requantised."""

    relu = False

    @classmethod
    def from_qat_module(cls, qat) -> Linear:
        if isinstance(qat, BnFolded):
            _, weight, bias = qat.fold(graph_of(qat.linear.weight))
        else:
            weight, bias = qat.weight, qat.bias
        module = cls.__new__(cls)
        module.training = False
        module.weight, module.weight_scale, module.weight_zero_point = quantized_weight(
            weight, qat.get_weight_qparams())
        module.bias = None if bias is None else Buffer(np.asarray(bias, np.float32))
        module._set_output(qat)
        return module

    def forward(self, inp):
        scale = input_scale(inp, type(self).__name__)
        g = inp.graph
        weight = as_quantized(g.lift(self.weight), self.weight_scale, self.weight_zero_point)
        return quantized_linear(inp, weight, int32_bias(g, self.bias, scale * self.weight_scale),
                                relu=self.relu, **self.out_params)


class LinearRelu(Linear):
    relu = True


class LinearBn1d(Linear):
    pass


class LinearBnRelu1d(Linear):
    relu = True
