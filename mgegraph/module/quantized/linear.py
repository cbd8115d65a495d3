"""The int8 ``Linear`` (MegEngine's ``module.quantized.linear``), run by
``ops.quantized.quantized_linear``."""
from __future__ import annotations

import numpy as np

from ...nn.module import Buffer
from ...ops.quantize import as_quantized
from ...ops.quantized import quantized_linear
from .conv import input_scale, int32_bias
from .module import QuantizedModule, quantized_weight

__all__ = ["Linear"]


class Linear(QuantizedModule):
    """``x @ w.T + b`` of int8 values and int8 weights, int32 accumulation, requantised."""

    @classmethod
    def from_qat_module(cls, qat) -> Linear:
        module = cls.__new__(cls)
        module.training = False
        module.weight, module.weight_scale, module.weight_zero_point = quantized_weight(
            qat.weight, qat.get_weight_qparams())
        module.bias = None if qat.bias is None else Buffer(np.asarray(qat.bias, np.float32))
        module._set_output(qat)
        return module

    def forward(self, inp):
        scale = input_scale(inp, "Linear")
        g = inp.graph
        weight = as_quantized(g.lift(self.weight), self.weight_scale, self.weight_zero_point)
        return quantized_linear(inp, weight, int32_bias(g, self.bias, scale * self.weight_scale),
                                **self.out_params)
