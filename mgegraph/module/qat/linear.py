"""QAT ``Linear`` (MegEngine's ``module.qat.linear``)."""
from __future__ import annotations

from ... import functional as F
from ...nn.layers import Linear as FloatLinear
from .module import QATModule

__all__ = ["Linear"]


class Linear(FloatLinear, QATModule):
    """``x @ w.T + b`` of the fake-quantized weight and bias, its output observed and
    fake-quantized."""

    def forward(self, inp):
        w_qat = self.apply_quant_weight(self.weight, inp.graph)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.apply_quant_activation(F.linear(inp, w_qat, b_qat))
