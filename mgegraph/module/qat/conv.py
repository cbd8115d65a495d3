"""QAT convolutions (MegEngine's ``module.qat.conv``): ``Conv2d``, ``ConvRelu2d``,
``ConvTranspose2d`` and ``ConvTransposeRelu2d`` with a fake-quantized weight, bias (qint32,
``QATModule.apply_quant_bias``) and output."""
from __future__ import annotations

from ... import functional as F
from ...nn.conv import ConvTranspose2d as FloatConvTranspose2d
from ...nn.layers import Conv2d as FloatConv2d
from .module import QATModule

__all__ = ["Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d"]


class Conv2d(FloatConv2d, QATModule):
    """conv2d of the fake-quantized weight and bias, its output observed and fake-quantized."""

    def calc_conv_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight, inp.graph)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_qat(inp))


class ConvRelu2d(Conv2d):
    """``relu`` of the QAT convolution, then its observer and fake quantizer."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_qat(inp)))


class ConvTranspose2d(FloatConvTranspose2d, QATModule):
    """conv_transpose2d of the fake-quantized weight and bias, its output observed and
    fake-quantized."""

    def calc_conv_transpose2d_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight, inp.graph)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return F.conv_transpose2d(inp, w_qat, b_qat, *self._args())

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_transpose2d_qat(inp))


class ConvTransposeRelu2d(ConvTranspose2d):
    """``relu`` of the QAT transposed convolution, then its observer and fake quantizer."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_transpose2d_qat(inp)))
