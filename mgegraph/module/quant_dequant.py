"""MegEngine's ``megengine.module.quant_dequant``: where a model's quantized part begins
(``QuantStub``) and ends (``DequantStub``). Identities in float; ``quantize_qat`` makes the
first observe and fake-quantize, ``quantize`` makes them quantize and dequantize.

>>> self.quant, self.dequant = QuantStub(), DequantStub()
"""
from __future__ import annotations

from ..nn.module import Module

__all__ = ["DequantStub", "QuantStub"]


class QuantStub(Module):
    """Where values enter the quantized part (an identity in float)."""

    def forward(self, inp):
        return inp


class DequantStub(Module):
    """Where values leave the quantized part (an identity in float)."""

    def forward(self, inp):
        return inp
