"""MegEngine's ``megengine.module.concat``: ``Concat``, concatenation as a module (so that
quantization can give its output its own parameters).

>>> y = Concat()([a, b], axis=1)
"""
from __future__ import annotations

from .. import functional as F
from ..nn.module import Module

__all__ = ["Concat"]


class Concat(Module):
    """``F.concat(inps, axis)``."""

    def forward(self, inps, axis: int = 0):
        return F.concat(inps, axis)
