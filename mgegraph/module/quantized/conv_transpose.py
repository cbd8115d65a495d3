"""The int8 transposed convolutions (MegEngine's ``ConvTranspose2d`` and ``ConvTransposeRelu2d``
of ``module.quantized.conv``, ``ConvTransposeBn2d`` and ``ConvTransposeBnRelu2d`` of
``module.quantized.conv_transpose_bn``: the batch norm folded by the QAT module, so all four are
one layer), run by ``ops.quantized.quantized_conv_transpose2d``.

Design: the weight is stored as int8 (the model file holds the integers) and the bias as the
qint32 integers in units of input scale x weight scale that the QAT module's bias fake quantizer
stood for; the int8 kernel sums the same products exactly in int32 and requantises once, so its
output is the QAT output's integers wherever the float sums do not cross a rounding boundary,
and one step away where they do.
"""
from __future__ import annotations

from ...ops.quantized import quantized_conv_transpose2d
from .module import QuantizedModule

__all__ = ["ConvTranspose2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d",
           "ConvTransposeRelu2d"]


class ConvTranspose2d(QuantizedModule):
    """conv_transpose2d of an int8 value and int8 weights, int32 accumulation, requantised."""

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
        return quantized_conv_transpose2d(inp, weight, bias, self.stride, self.padding,
                                          self.output_padding, self.dilation, self.groups,
                                          relu=self.relu, **self.out_params)


class ConvTransposeRelu2d(ConvTranspose2d):
    relu = True


class ConvTransposeBn2d(ConvTranspose2d):
    pass


class ConvTransposeBnRelu2d(ConvTranspose2d):
    relu = True
