"""QAT ``BatchMatMulActivation`` (MegEngine's ``module.qat.batch_matmul_activation``): the float
module's map of the fake-quantized weight and bias, its output observed and fake-quantized."""
from __future__ import annotations

from ..batch_matmul_activation import BatchMatMulActivation as FloatBatchMatMulActivation
from .module import QATModule

__all__ = ["BatchMatMulActivation"]


class BatchMatMulActivation(FloatBatchMatMulActivation, QATModule):
    def forward(self, inp):
        w_qat = self.apply_quant_weight(self.weight, inp.graph)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.apply_quant_activation(self.calc_bmm(inp, w_qat, b_qat))
