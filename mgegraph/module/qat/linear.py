"""QAT ``Linear`` and ``LinearRelu`` (MegEngine's ``module.qat.linear``)."""
from __future__ import annotations

from ... import functional as F
from ...nn.layers import Linear as FloatLinear
from .module import QATModule

__all__ = ["Linear", "LinearRelu"]


class Linear(FloatLinear, QATModule):
    """``x @ w.T + b`` of the fake-quantized weight and bias, its output observed and
    fake-quantized."""

    def calc_linear_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight, inp.graph)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return F.linear(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_linear_qat(inp))


class LinearRelu(Linear):
    """``relu`` of the QAT linear layer, then its observer and fake quantizer."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_linear_qat(inp)))
