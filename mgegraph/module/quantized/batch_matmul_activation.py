"""The int8 ``BatchMatMulActivation`` (MegEngine's
``module.quantized.batch_matmul_activation``).

Design: MegEngine runs it as a batched int8 convolution of 1x1 kernels; mgegraph has no batched
int8 GEMM, so the layer runs as dequantize -> float32 batched matmul -> quantize, on the int8
weights and the qint32 bias the QAT module's fake quantizers stood for (the same numbers the
QAT forward took, so the same integers out, float32 rounding aside).
"""
from __future__ import annotations

from ... import functional as F
from ...ops.quantize import dequantize
from .module import QuantizedModule

__all__ = ["BatchMatMulActivation"]


class BatchMatMulActivation(QuantizedModule):
    """``activation(weight @ x + bias)`` of an int8 value, requantised."""

    @classmethod
    def from_qat_module(cls, qat) -> BatchMatMulActivation:
        module = cls.__new__(cls)
        module._take_weights(qat, "")
        module.batch, module.in_features = qat.batch, qat.in_features
        module.out_features, module.nonlinear_mode = qat.out_features, qat.nonlinear_mode
        return module

    def extra_repr(self) -> str:
        return f"batch={self.batch}, in_features={self.in_features}, " \
               f"out_features={self.out_features}, bias={self.bias is not None}"

    def forward(self, inp):
        weight, bias = self.int8_operands(inp)
        y = F.matmul(dequantize(weight), dequantize(inp))
        if bias is not None:
            y = y + F.reshape(dequantize(bias), (self.out_features, 1))
        if self.nonlinear_mode == "relu":
            y = F.relu(y)
        return self.requantized(y)
