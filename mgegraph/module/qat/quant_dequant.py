"""QAT ``QuantStub`` and ``DequantStub`` (MegEngine's ``module.qat.quant_dequant``): the first
observes and fake-quantizes the model's input; the second passes values through."""
from __future__ import annotations

from ..quant_dequant import DequantStub as FloatDequantStub
from ..quant_dequant import QuantStub as FloatQuantStub
from .module import QATModule

__all__ = ["DequantStub", "QuantStub"]


class QuantStub(FloatQuantStub, QATModule):
    with_weight = False

    def forward(self, inp):
        return self.apply_quant_activation(inp)


class DequantStub(FloatDequantStub, QATModule):
    with_weight = False
    with_act = False
