"""``mgegraph.functional.vision``: image functions under MegEngine's
``megengine.functional.vision`` names.

>>> import mgegraph.functional as F
>>> y = F.vision.interpolate(x, scale_factor=2, mode="bilinear")
"""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from ..ir.errors import OpError, user_location
from ..ops.builder import apply
from ..ops.movement_api import reshape, transpose
from ..ops.registry import named

__all__ = ["interpolate", "pixel_shuffle", "pixel_unshuffle"]


def _fail(op: str, inp, reason: str):
    raise OpError(op, [inp.type], reason, user_location())


# -- resizing: interpolate, pixel_shuffle, pixel_unshuffle ----------------------------------------
# PyTorch's (and MegEngine's) modes: the resize op's mode and how many trailing axes it resizes
# (nearest: all but N and C)
_MODES = {"nearest": ("nearest", None), "linear": ("linear", 1), "bilinear": ("linear", 2),
          "bicubic": ("cubic", 2), "trilinear": ("linear", 3)}


def _per_axis(inp, what, value, axes, kind):
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * axes
    if len(values) != axes or not all(isinstance(v, kind) and not isinstance(v, bool)
                                       and v > 0 for v in values):
        _fail("resize", inp, f"{what} must be a positive number or {axes} of them (one per "
              f"resized axis), got {value!r}")
    return values


def _target(inp, size, scale_factor, axes):
    """(output sizes, scales or None) of the trailing ``axes`` axes, PyTorch's way: a scale
    factor gives floor(input * factor) and is itself the coordinate scale."""
    if (size is None) == (scale_factor is None):
        _fail("resize", inp, "give exactly one of size and scale_factor, got "
              f"size={size!r}, scale_factor={scale_factor!r}")
    if size is not None:
        sizes = _per_axis(inp, "size", size, axes, (numbers.Integral, np.integer))
        return tuple(operator.index(s) for s in sizes), None
    scales = tuple(map(float, _per_axis(inp, "scale_factor", scale_factor, axes, numbers.Real)))
    ins = inp.shape[-axes:]
    if named(*ins):
        _fail("resize", inp, f"a scale factor needs numeric sizes, got named ones {ins}: give "
              "size instead")
    sizes = tuple(math.floor(n * s) for n, s in zip(ins, scales))
    if min(sizes) < 1:
        _fail("resize", inp, f"scale_factor {scale_factor} makes an empty output {sizes}")
    return sizes, scales


def interpolate(inp, size=None, scale_factor=None, mode="bilinear", align_corners=None):
    """Resize the spatial axes of an (N, C, ...) input to ``size`` or by ``scale_factor``, as
    PyTorch's ``F.interpolate``: modes nearest (any of 1-3 spatial axes), linear (N, C, W),
    bilinear and bicubic (N, C, H, W, cubic coefficient -0.75), trilinear (N, C, D, H, W).
    ``align_corners`` maps the corner cells onto each other (not for nearest).

    >>> y = F.vision.interpolate(x, size=(64, 64), mode="bicubic", align_corners=True)
    """
    if mode not in _MODES:
        _fail("resize", inp, f"mode must be one of {sorted(_MODES)}, got {mode!r}")
    kind, axes = _MODES[mode]
    axes = inp.ndim - 2 if axes is None else axes
    if inp.ndim != axes + 2 or not 1 <= axes <= 3:
        _fail("resize", inp, f"mode {mode!r} takes a {axes + 2}-D input (N, C and "
              f"{axes} spatial axes), got shape {inp.shape}"
              if kind != "nearest" else f"mode 'nearest' takes a 3-D to 5-D input, got shape "
              f"{inp.shape}")
    if kind == "nearest" and align_corners:
        _fail("resize", inp, "align_corners applies to the linear and cubic modes, not nearest")
    sizes, scales = _target(inp, size, scale_factor, axes)
    if kind == "nearest":
        coord = "asymmetric"
    elif align_corners:
        coord, scales = "align_corners", None  # the corners alone decide the mapping
    else:
        coord = "half_pixel"
    return apply("resize", (inp,), size=sizes, scale=scales, mode=kind, coord=coord,
                 nearest_mode="floor")


def _factor(op, inp, factor) -> int:
    if not isinstance(factor, (numbers.Integral, np.integer)) or isinstance(factor, bool) \
            or factor < 1:
        _fail(op, inp, f"the factor must be an int >= 1, got {factor!r}")
    if inp.ndim < 3:
        _fail(op, inp, f"the input must be (..., C, H, W), got shape {inp.shape}")
    return int(factor)


def pixel_shuffle(inp, upscale_factor):
    """(..., C r^2, H, W) -> (..., C, H r, W r): each group of r^2 channels becomes an r x r
    block (ONNX DepthToSpace in CRD mode). A reshape and a transpose, so no kernel of its own.

    >>> y = F.pixel_shuffle(x, 2)   # (1, 8, 3, 3) -> (1, 2, 6, 6)
    """
    r = _factor("pixel_shuffle", inp, upscale_factor)
    *lead, c, h, w = inp.shape
    if not named(c) and c % (r * r):
        _fail("pixel_shuffle", inp, f"channels {c} must be a multiple of upscale_factor^2 = "
              f"{r * r}")
    n = len(lead)
    x = reshape(inp, (*lead, c // (r * r), r, r, h, w))
    x = transpose(x, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return reshape(x, (*lead, c // (r * r), h * r, w * r))


def pixel_unshuffle(inp, downscale_factor):
    """(..., C, H r, W r) -> (..., C r^2, H, W), the inverse of ``pixel_shuffle`` (ONNX
    SpaceToDepth orders the channels otherwise: block offset first).

    >>> x = F.pixel_unshuffle(F.pixel_shuffle(y, 2), 2)   # y again
    """
    r = _factor("pixel_unshuffle", inp, downscale_factor)
    *lead, c, h, w = inp.shape
    if any(not named(d) and d % r for d in (h, w)):
        _fail("pixel_unshuffle", inp, f"height and width must be multiples of "
              f"downscale_factor {r}, got {h}x{w}")
    n = len(lead)
    x = reshape(inp, (*lead, c, h // r, r, w // r, r))
    x = transpose(x, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return reshape(x, (*lead, c * r * r, h // r, w // r))
