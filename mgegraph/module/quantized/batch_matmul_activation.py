"""The int8 ``BatchMatMulActivation`` (MegEngine's
``module.quantized.batch_matmul_activation``), run by ``ops.quantized.quantized_batch_matmul``.

Design: MegEngine runs it as a batched int8 convolution of 1x1 kernels
(``batch_conv_bias_activation``); here it is the batched int8 GEMM ``weight @ x`` per batch, on
the int8 weights and the qint32 bias (per output feature, as MegEngine's int8 module adds it)
the QAT module's fake quantizers stood for, summed exactly in int32 and requantised once.
"""
from __future__ import annotations

from ...ir.errors import GraphError
from ...ops.quantized import quantized_batch_matmul
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
        if inp.ndim != 3 or tuple(inp.shape[:2]) != (self.batch, self.in_features):
            raise GraphError(f"BatchMatMulActivation({self.batch}, {self.in_features}, "
                             f"{self.out_features}): needs a (batch, in_features, n) input, got "
                             f"shape {tuple(inp.shape)}")
        weight, bias = self.int8_operands(inp)
        return quantized_batch_matmul(weight, inp, bias, relu=self.nonlinear_mode == "relu",
                                      **self.out_params)
