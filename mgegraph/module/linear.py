"""MegEngine's ``megengine.module.linear`` path: the linear layer, and ``LinearRelu`` (the float
form of the QAT and int8 ``LinearRelu``)."""
from __future__ import annotations

from .. import functional as F
from ..nn.layers import Linear

__all__ = ["Linear", "LinearRelu"]


class LinearRelu(Linear):
    """``relu(linear(x))``, one module to quantize."""

    def forward(self, x):
        return F.relu(super().forward(x))
