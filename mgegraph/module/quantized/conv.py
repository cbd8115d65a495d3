"""The int8 convolutions (MegEngine's ``module.quantized.conv`` and ``conv_bn``): ``Conv2d``,
``ConvRelu2d``, ``ConvBn2d`` and ``ConvBnRelu2d`` (the batch norm folded into the weight and
bias by the QAT module, so all four are one layer), run by ``ops.quantized.quantized_conv2d``.

The float bias becomes int32 in units of input scale x weight scale when the input's scale is
known, at each call, as MegEngine's does. A ``padding_mode`` of "reflect" or "replicate" pads the
int8 input first (dequantized, padded, quantized again with its own scale: the same integers,
moved), then convolves it unpadded."""
from __future__ import annotations

from ...nn.layers import conv_repr, pad_input
from ...ops.quantize import dequantize, quantize
from ...ops.quantized import quantized_conv2d
from ..qat import conv as qat_conv
from ..qat import conv_bn as qat_conv_bn
from .module import QuantizedModule

__all__ = ["Conv2d", "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d"]


def pad_quantized(inp, padding, mode: str):
    """Quantized ``inp`` (per tensor) padded on its last two axes in ``mode`` ("reflect",
    "replicate"): the same integers, moved."""
    quant = inp.type.quant
    return quantize(pad_input(dequantize(inp), padding, mode), quant.scales[0],
                    quant.zero_points[0], inp.dtype.name)


class Conv2d(QuantizedModule):
    """conv2d of int8 values and int8 weights, int32 accumulation, requantised output."""

    relu = False

    @classmethod
    def from_qat_module(cls, qat) -> Conv2d:
        module = cls.__new__(cls)
        geometry = module._take_weights(qat, "conv")
        module.stride, module.padding = geometry.stride, geometry.padding
        module.dilation, module.groups = geometry.dilation, geometry.groups
        module.padding_mode = getattr(geometry, "padding_mode", "zeros")
        return module

    def extra_repr(self) -> str:
        o, i, kh, kw = self.weight.shape
        return conv_repr(self, i * self.groups, o, (kh, kw))

    def forward(self, inp):
        weight, bias = self.int8_operands(inp)
        padding = self.padding
        if getattr(self, "padding_mode", "zeros") != "zeros":  # absent: saved before it
            inp, padding = pad_quantized(inp, self.padding, self.padding_mode), 0
        return quantized_conv2d(inp, weight, bias, self.stride, padding, self.dilation,
                                self.groups, relu=self.relu, **self.out_params)


class ConvRelu2d(Conv2d):
    relu = True


class ConvBn2d(Conv2d):
    pass


class ConvBnRelu2d(Conv2d):
    relu = True


QAT_CLASSES = {qat_conv.Conv2d: Conv2d, qat_conv.ConvRelu2d: ConvRelu2d,
               qat_conv_bn.ConvBn2d: ConvBn2d, qat_conv_bn.ConvBnRelu2d: ConvBnRelu2d}
