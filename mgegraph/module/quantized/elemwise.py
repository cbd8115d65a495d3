"""The int8 ``Elemwise``, ``Concat``, ``QuantStub`` and ``DequantStub`` (MegEngine's
``module.quantized.elemwise``, ``concat`` and ``quant_dequant``).

``Elemwise("add")`` and ``"fuse_add_relu"`` run ``ops.quantized.quantized_add``; other modes
and ``Concat`` compute on the real numbers (dequantize, the float function, quantize), the
meaning of their fake-quantized QAT forward."""
from __future__ import annotations

from ... import functional as F
from ...nn.elemwise import MODES
from ...ops.quantize import dequantize
from ...ops.quantized import quantized_add
from .module import QuantizedModule

__all__ = ["Concat", "DequantStub", "Elemwise", "QuantStub"]

_QUANTIZED_ADDS = {"add": False, "fuse_add_relu": True}  # mode -> relu


class _Requantizing(QuantizedModule):
    @classmethod
    def from_qat_module(cls, qat):
        module = cls.__new__(cls)
        module.training = False
        module.method = getattr(qat, "method", None)
        module._set_output(qat)
        return module


class Elemwise(_Requantizing):
    def forward(self, *inps):
        if self.method in _QUANTIZED_ADDS:
            return quantized_add(*inps, relu=_QUANTIZED_ADDS[self.method], **self.out_params)
        return self.requantized(MODES[self.method](*(dequantize(x) for x in inps)))


class Concat(_Requantizing):
    def forward(self, inps, axis: int = 0):
        return self.requantized(F.concat([dequantize(x) for x in inps], axis))


class QuantStub(_Requantizing):
    """Quantizes the model's float input with its QAT observer's parameters."""

    def forward(self, inp):
        return self.requantized(inp)


class DequantStub(QuantizedModule):
    """The real numbers of a quantized value."""

    @classmethod
    def from_qat_module(cls, qat):
        module = cls.__new__(cls)
        module.training = False
        return module

    def forward(self, inp):
        return dequantize(inp)
