"""The int8 ``Linear`` and ``LinearRelu`` (MegEngine's ``module.quantized.linear``) and
``LinearBn1d``, ``LinearBnRelu1d`` (``module.quantized.linear_bn``: the batch norm folded by the
QAT module, so all four are one layer), run by ``ops.quantized.quantized_linear``."""
from __future__ import annotations

from ...ops.quantized import quantized_linear
from .module import QuantizedModule

__all__ = ["Linear", "LinearBn1d", "LinearBnRelu1d", "LinearRelu"]


class Linear(QuantizedModule):
    """``x @ w.T + b`` of int8 values and int8 weights, int32 accumulation, requantised."""

    relu = False

    @classmethod
    def from_qat_module(cls, qat) -> Linear:
        module = cls.__new__(cls)
        module._take_weights(qat, "linear")
        return module

    def forward(self, inp):
        weight, bias = self.int8_operands(inp)
        return quantized_linear(inp, weight, bias, relu=self.relu, **self.out_params)


class LinearRelu(Linear):
    relu = True


class LinearBn1d(Linear):
    pass


class LinearBnRelu1d(Linear):
    relu = True
