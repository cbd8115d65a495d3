"""Resampling and padding layers under PyTorch's names: Upsample, PixelShuffle,
PixelUnshuffle, and the 2-D pads (zero, constant, reflection, replication)."""
from __future__ import annotations

import numbers

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from .module import Module


class Upsample(Module):
    """``F.vision.interpolate`` as a layer: to ``size`` or by ``scale_factor``.

    >>> up = nn.Upsample(scale_factor=2, mode="bilinear")   # (N, C, H, W) -> (N, C, 2H, 2W)
    """

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None):
        self.size, self.scale_factor = size, scale_factor
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x):
        return F.vision.interpolate(x, self.size, self.scale_factor, self.mode,
                                    self.align_corners)


class PixelShuffle(Module):
    """(N, C r^2, H, W) -> (N, C, H r, W r). ``nn.PixelShuffle(2)``"""

    def __init__(self, upscale_factor: int):
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return F.pixel_shuffle(x, self.upscale_factor)


class PixelUnshuffle(Module):
    """(N, C, H r, W r) -> (N, C r^2, H, W). ``nn.PixelUnshuffle(2)``"""

    def __init__(self, downscale_factor: int):
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return F.pixel_unshuffle(x, self.downscale_factor)


def _padding(owner: str, padding) -> tuple[int, int, int, int]:
    """PyTorch's 2-D padding: an int for all four sides, or (left, right, top, bottom)."""
    sides = tuple(padding) if isinstance(padding, (tuple, list)) else (padding,) * 4
    if len(sides) != 4 or not all(isinstance(p, (numbers.Integral, np.integer))
                                  and not isinstance(p, bool) and p >= 0 for p in sides):
        raise GraphError(f"{owner}: padding must be an int >= 0 or four of them (left, right, "
                         f"top, bottom), got {padding!r}")
    return tuple(int(p) for p in sides)


class _Pad2d(Module):
    mode = "constant"

    def __init__(self, padding, value: float = 0.0):
        self.padding = _padding(type(self).__name__, padding)
        self.value = float(value)

    def forward(self, x):
        if x.ndim not in (3, 4):
            raise GraphError(f"{type(self).__name__}: input must be 3-D or 4-D ((N,) C, H, W), "
                             f"got shape {x.shape}")
        left, right, top, bottom = self.padding
        width = ((0, 0),) * (x.ndim - 2) + ((top, bottom), (left, right))
        return F.pad(x, width, mode=self.mode, constant_value=self.value)


class ZeroPad2d(_Pad2d):
    """Zeros around the last two axes. ``nn.ZeroPad2d((1, 1, 2, 0))``"""

    def __init__(self, padding):
        super().__init__(padding)


class ConstantPad2d(_Pad2d):
    """``value`` around the last two axes. ``nn.ConstantPad2d(2, 3.5)``"""


class ReflectionPad2d(_Pad2d):
    """The input mirrored about its edge cells (which are not repeated). ``nn.ReflectionPad2d(1)``
    """

    mode = "reflect"

    def __init__(self, padding):
        super().__init__(padding)


class ReplicationPad2d(_Pad2d):
    """The edge cells repeated. ``nn.ReplicationPad2d((0, 2, 1, 1))``"""

    mode = "edge"

    def __init__(self, padding):
        super().__init__(padding)
