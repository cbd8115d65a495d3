"""The int8 transposed convolutions (MegEngine's ``ConvTranspose2d`` and ``ConvTransposeRelu2d``
of ``module.quantized.conv``, ``ConvTransposeBn2d`` and ``ConvTransposeBnRelu2d`` of
``module.quantized.conv_transpose_bn``: the batch norm folded by the QAT module, so all four are
one layer).

Design: there is no int8 transposed-convolution kernel, so the layer runs as dequantize ->
float32 ``conv_transpose2d`` -> quantize. Its weight is stored as int8 (the model file holds
the integers) and its bias as the qint32 integers in units of input scale x weight scale that
the QAT module's bias fake quantizer stood for; the float convolution then takes exactly the
numbers the QAT forward took, so the int8 output is the QAT output's integers (float32 rounding
of the same float ops aside). A kernel would make it faster, not different.
"""
from __future__ import annotations

from ... import functional as F
from ...ops.quantize import dequantize
from .module import QuantizedModule

__all__ = ["ConvTranspose2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d",
           "ConvTransposeRelu2d"]


class ConvTranspose2d(QuantizedModule):
    """conv_transpose2d of an int8 value and int8 weights, computed in float32, requantised."""

    relu = False

    @classmethod
    def from_qat_module(cls, qat) -> ConvTranspose2d:
        module = cls.__new__(cls)
        geometry = module._take_weights(qat, "conv_transpose2d")
        module.stride, module.padding = geometry.stride, geometry.padding
        module.output_padding, module.dilation = geometry.output_padding, geometry.dilation
        module.groups = geometry.groups
        return module

    def extra_repr(self) -> str:
        i, o, kh, kw = self.weight.shape
        return f"{i}, {o * self.groups}, kernel_size=({kh}, {kw}), stride={self.stride}, " \
               f"padding={self.padding}, output_padding={self.output_padding}"

    def forward(self, inp):
        weight, bias = self.int8_operands(inp)
        y = F.conv_transpose2d(dequantize(inp), dequantize(weight),
                               None if bias is None else dequantize(bias), self.stride,
                               self.padding, self.output_padding, self.dilation, self.groups)
        return self.requantized(F.relu(y) if self.relu else y)


class ConvTransposeRelu2d(ConvTranspose2d):
    relu = True


class ConvTransposeBn2d(ConvTranspose2d):
    pass


class ConvTransposeBnRelu2d(ConvTranspose2d):
    relu = True

