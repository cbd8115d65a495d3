"""Quantization parameters of a tensor type: how its integers stand for real numbers.

A quantized tensor stores integers q and means ``scale * (q - zero_point)``. Per tensor, one
scale and one zero point; per channel (a weight's output channels), one of each per index of
``axis``. The storage dtype stays the tensor type's ``dtype`` (int8 for qint8, uint8 for
quint8, int32 for qint32: MegEngine's QuantizedS8, Quantization8Asymm and QuantizedS32).

Design: the parameters are part of a value's type (``TensorType.quant``), so they take part in
its equality and hash, print in the IR (``qs8(0.05)[1,64,56,56]``) and are checked by every
op's rule. NumPy's dtype metadata, MegEngine's carrier, is invisible to ``==`` and ``hash``
(``np.dtype(np.int8, metadata=m) == np.dtype(np.int8)``), so two tensors of different scales
would compare equal: it can carry the parameters on public dtype objects only, converted to
these at the boundary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# storage dtype -> (short name in the IR, the integers it holds)
QUANT_STORAGE = {
    np.dtype(np.int8): ("qs8", (-128, 127)),
    np.dtype(np.uint8): ("qu8", (0, 255)),
    np.dtype(np.int32): ("qs32", (-(2 ** 31), 2 ** 31 - 1)),
}


@dataclass(frozen=True)
class QuantParams:
    """``scales`` and ``zero_points`` (one each per tensor, or one per index of ``axis``)."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int | None = None

    def __post_init__(self):
        scales = tuple(float(s) for s in self.scales)
        zero_points = tuple(int(z) for z in self.zero_points)
        if not scales or len(scales) != len(zero_points):
            raise ValueError(f"quantization needs as many zero points as scales, got "
                             f"{len(scales)} scales and {len(zero_points)} zero points")
        bad = [s for s in scales if not (math.isfinite(s) and s > 0)]
        if bad:
            raise ValueError(f"a quantization scale must be positive and finite, got {bad[0]}")
        if self.axis is None and len(scales) != 1:
            raise ValueError(f"{len(scales)} scales need an axis (per-channel quantization)")
        object.__setattr__(self, "scales", scales)
        object.__setattr__(self, "zero_points", zero_points)

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    @property
    def scale(self) -> float:
        """The one scale of a per-tensor quantization."""
        self._require_per_tensor("scale")
        return self.scales[0]

    @property
    def zero_point(self) -> int:
        """The one zero point of a per-tensor quantization."""
        self._require_per_tensor("zero_point")
        return self.zero_points[0]

    def _require_per_tensor(self, what: str) -> None:
        if self.per_channel:
            raise ValueError(f"a per-channel quantization (axis {self.axis}, "
                             f"{len(self.scales)} channels) has no single {what}")

    def check(self, shape: tuple, dtype: np.dtype) -> None:
        """Raise ValueError unless these parameters fit a tensor of ``shape`` stored as
        ``dtype``."""
        if dtype not in QUANT_STORAGE:
            raise ValueError(f"{dtype} cannot hold quantized values (int8, uint8 or int32 can)")
        lo, hi = QUANT_STORAGE[dtype][1]
        outside = [z for z in self.zero_points if not lo <= z <= hi]
        if outside:
            raise ValueError(f"zero point {outside[0]} is outside {dtype}'s range [{lo}, {hi}]")
        if self.per_channel:
            if not 0 <= self.axis < len(shape):
                raise ValueError(f"per-channel axis {self.axis} is not an axis of shape "
                                 f"{tuple(shape)}")
            if isinstance(shape[self.axis], int) and shape[self.axis] != len(self.scales):
                raise ValueError(f"{len(self.scales)} per-channel scales for axis {self.axis} "
                                 f"of size {shape[self.axis]}")

    def text(self, dtype: np.dtype) -> str:
        """The IR's name of the type: ``qs8(0.05)``, ``qu8(0.1,128)``, ``qs8(axis 0, 64)``."""
        name = QUANT_STORAGE[dtype][0]
        if self.per_channel:
            return f"{name}(axis {self.axis}, {len(self.scales)})"
        zp = f",{self.zero_point}" if self.zero_point else ""
        return f"{name}({self.scale:.6g}{zp})"


def per_tensor(scale: float, zero_point: int = 0) -> QuantParams:
    return QuantParams((scale,), (zero_point,))


def per_channel(scales, zero_points, axis: int) -> QuantParams:
    scales = tuple(np.asarray(scales, np.float64).reshape(-1).tolist())
    zps = np.asarray(zero_points).reshape(-1).tolist() if zero_points is not None else ()
    return QuantParams(scales, tuple(zps) or (0,) * len(scales), int(axis))
