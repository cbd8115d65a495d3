"""MegEngine's ``megengine.module.batch_matmul_activation``: ``BatchMatMulActivation``, a
batch of linear maps with their own weights, then an optional relu.

Design: ``weight`` is (batch, out_features, in_features) and the input (batch, in_features, n),
the output ``weight @ x`` (batch, out_features, n) plus the bias (out_features,) per output
feature. MegEngine's float module adds its bias on the last axis instead (``res += bias``, which
only broadcasts when n equals out_features), while its int8 module adds it per output feature;
the int8 module's meaning is taken here for both, so that QAT trains what deploys.

>>> bmm = BatchMatMulActivation(4, 16, 8, nonlinear_mode="relu")
>>> y = bmm(x)   # x: (4, 16, n) -> (4, 8, n)
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from ..nn import init
from ..nn.layers import _size
from ..nn.module import Module, Parameter

__all__ = ["BatchMatMulActivation"]

NONLINEAR_MODES = ("identity", "relu")


class BatchMatMulActivation(Module):
    """``activation(weight @ x + bias)`` over a (batch, in_features, n) input; weight initialised
    normal with std sqrt(1 / in_features), bias zeros, as MegEngine's."""

    def __init__(self, batch: int, in_features: int, out_features: int, bias: bool = True,
                 nonlinear_mode: str = "identity", name: str | None = None):
        super().__init__(name)
        owner = "BatchMatMulActivation"
        self.batch = _size(owner, "batch", batch)
        self.in_features = _size(owner, "in_features", in_features)
        self.out_features = _size(owner, "out_features", out_features)
        mode = nonlinear_mode.lower() if isinstance(nonlinear_mode, str) else nonlinear_mode
        if mode not in NONLINEAR_MODES:
            raise GraphError(f"{owner}: nonlinear_mode must be one of {NONLINEAR_MODES} (any "
                             f"case), got {nonlinear_mode!r}")
        self.nonlinear_mode = mode
        shape = (self.batch, self.out_features, self.in_features)
        self.weight = Parameter(np.zeros(shape, np.float32))
        init.normal_(self.weight, 0.0, float(np.sqrt(1 / self.in_features)))
        self.bias = Parameter(np.zeros(self.out_features, np.float32)) if bias else None

    def calc_bmm(self, x, weight, bias):
        """The layer's map of ``x`` with ``weight`` and ``bias`` (a QAT layer passes its
        fake-quantized ones)."""
        if x.ndim != 3 or tuple(x.shape[:2]) != (self.batch, self.in_features):
            raise GraphError(f"BatchMatMulActivation({self.batch}, {self.in_features}, "
                             f"{self.out_features}): needs a (batch, in_features, n) input, got "
                             f"shape {tuple(x.shape)}")
        y = F.matmul(weight, x)
        if bias is not None:
            y = y + F.reshape(bias, (self.out_features, 1))
        return F.relu(y) if self.nonlinear_mode == "relu" else y

    def forward(self, x):
        return self.calc_bmm(x, self.weight, self.bias)

    def extra_repr(self):
        return f"batch={self.batch}, in_features={self.in_features}, " \
               f"out_features={self.out_features}, bias={self.bias is not None}"
