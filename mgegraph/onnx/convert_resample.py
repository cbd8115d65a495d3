"""Converters of ONNX's resampling ops: Resize (onto mgegraph's resize op, which means what
Resize means over the last one to three axes), DepthToSpace and SpaceToDepth (reshapes and a
transpose, as ``F.pixel_shuffle`` is).

Resize's scales or sizes must be known at import. Leading axes Resize leaves alone (scale 1,
size kept) stay outside the op: every coordinate transformation maps a scale-1 axis onto itself
exactly. ``tf_crop_and_resize`` (a region of interest and an extrapolation value) is refused
by name; ``antialias`` (opset 18) is the resize op's own.
"""
from __future__ import annotations

import math

import numpy as np

from ..functional import vision
from ..ops.builder import apply
from ..ops.movement_api import reshape, transpose
from ..ops.resize import COORDS, MAX_AXES, NEAREST_MODES
from .context import shape_of


def _text(at, key, default):
    value = at.get(key, default)
    return value.decode() if isinstance(value, bytes) else value


def _full_axes(cx, at, values, rank, what):
    """``values`` given for ``axes`` (all axes by default) as one value per axis, or None."""
    if values is None:
        return None
    axes = cx.axes(list(at["axes"]), rank) if "axes" in at else list(range(rank))
    if len(values) != len(axes):
        cx.fail(f"{len(values)} {what} for {len(axes)} axes")
    return axes, values


def _known_floats(cx, x, what):
    v = cx.known(x, what)
    return None if v is None or v.size == 0 else [float(s) for s in np.asarray(v).reshape(-1)]


def _known_ints(cx, x, what):
    v = cx.known(x, what)
    return None if v is None or v.size == 0 else cx.ints(v, what)


def _aspect(cx, policy, in_shape, axes, sizes):
    """Sizes and the one scale of keep_aspect_ratio_policy not_larger / not_smaller."""
    ratios = [s / in_shape[a] for a, s in zip(axes, sizes)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    return [math.floor(scale * in_shape[a] + 0.5) for a in axes], [scale] * len(axes)


def _geometry(cx, ins, at, in_shape):
    """(output shape, scale per axis or None): from scales (output floor(in * scale)) or sizes
    (scale out / in, or keep_aspect_ratio_policy's one scale)."""
    rank = len(in_shape)
    scales = _known_floats(cx, ins[2], "scales") if len(ins) > 2 and ins[2] is not None else None
    sizes = _known_ints(cx, ins[3], "sizes") if len(ins) > 3 and ins[3] is not None else None
    if (scales is None) == (sizes is None):
        cx.fail("exactly one of scales and sizes must be given")
    out, per_axis = list(in_shape), [1.0] * rank
    if scales is not None:
        axes, scales = _full_axes(cx, at, scales, rank, "scales")
        if min(scales) <= 0:
            cx.fail(f"scales {scales} must be positive")
        for a, s in zip(axes, scales):
            out[a], per_axis[a] = math.floor(in_shape[a] * s), s
        return out, per_axis
    axes, sizes = _full_axes(cx, at, sizes, rank, "sizes")
    policy = _text(at, "keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        cx.fail(f"keep_aspect_ratio_policy {policy!r} is not stretch, not_larger or not_smaller")
    if policy == "stretch":
        for a, s in zip(axes, sizes):
            out[a] = s
        return out, None
    sizes, scales = _aspect(cx, policy, in_shape, axes, sizes)
    for a, s, f in zip(axes, sizes, scales):
        out[a], per_axis[a] = s, f
    return out, per_axis


def _resized_axes(cx, in_shape, out, scales) -> int:
    """How many trailing axes the op resizes: from the first one Resize changes."""
    changed = [a for a in range(len(in_shape))
               if out[a] != in_shape[a] or (scales is not None and scales[a] != 1.0)]
    if not changed:
        return 0
    k = len(in_shape) - changed[0]
    if k > MAX_AXES:
        cx.fail(f"resizes axes {changed} of a rank-{len(in_shape)} input; mgegraph resizes the "
                f"last {MAX_AXES} axes at most")
    return k


def _modes(cx, at) -> dict:
    mode = _text(at, "mode", "nearest")
    coord = _text(at, "coordinate_transformation_mode", "half_pixel")
    nearest = _text(at, "nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear", "cubic"):
        cx.fail(f"mode {mode!r} is not nearest, linear or cubic")
    if coord not in COORDS:
        cx.fail(f"coordinate_transformation_mode {coord!r} is not supported (supported: "
                f"{', '.join(COORDS)})")
    if nearest not in NEAREST_MODES:
        cx.fail(f"nearest_mode {nearest!r} is not one of {', '.join(NEAREST_MODES)}")
    return {"mode": mode, "coord": coord, "nearest_mode": nearest,
            "cubic_a": float(at.get("cubic_coeff_a", -0.75)),
            "exclude_outside": bool(at.get("exclude_outside", 0)),
            "antialias": _antialias(cx, at, mode)}


def _antialias(cx, at, mode) -> bool:
    antialias = at.get("antialias", 0)
    if antialias not in (0, 1) or (antialias and mode == "nearest"):
        cx.fail(f"antialias={antialias} with mode {mode!r}: ONNX's antialias is 0 or 1, and "
                "valid for the linear and cubic modes only")
    return bool(antialias)


def _resize(cx, ins, at):
    x = cx.var(ins[0])
    attrs = _modes(cx, at)
    in_shape = shape_of(x)
    if not all(isinstance(n, int) for n in in_shape):
        cx.fail(f"Resize of the named dims of shape {list(map(str, in_shape))}: mgegraph needs "
                "the input's sizes as numbers")
    out, scales = _geometry(cx, ins, at, in_shape)
    if min(out) < 1:
        cx.fail(f"an empty output shape {out} from input shape {list(in_shape)}")
    k = _resized_axes(cx, in_shape, out, scales)
    if k == 0:
        return [reshape(x, in_shape)]
    return [apply("resize", (x,), size=tuple(out[-k:]),
                  scale=None if scales is None else tuple(scales[-k:]), **attrs)]


# -- DepthToSpace, SpaceToDepth -------------------------------------------------------------------
def _block(cx, at, x):
    if x.ndim != 4:
        cx.fail(f"a rank-{x.ndim} input (NCHW needed)")
    bs = int(at.get("blocksize", 0))
    if bs < 1:
        cx.fail(f"blocksize {bs} must be >= 1")
    mode = _text(at, "mode", "DCR")
    if mode not in ("DCR", "CRD"):
        cx.fail(f"mode {mode!r} is not DCR or CRD")
    return bs, mode


def _depth_to_space(cx, ins, at):
    x = cx.var(ins[0])
    bs, mode = _block(cx, at, x)
    if mode == "CRD":
        return [vision.pixel_shuffle(x, bs)]
    b, c, h, w = shape_of(x)
    if c % (bs * bs):
        cx.fail(f"channels {c} are not a multiple of blocksize^2 = {bs * bs}")
    y = transpose(reshape(x, (b, bs, bs, c // (bs * bs), h, w)), (0, 3, 4, 1, 5, 2))
    return [reshape(y, (b, c // (bs * bs), h * bs, w * bs))]


def _space_to_depth(cx, ins, at):
    x = cx.var(ins[0])
    bs, mode = _block(cx, at, x)
    if mode == "CRD":
        return [vision.pixel_unshuffle(x, bs)]
    b, c, h, w = shape_of(x)
    if h % bs or w % bs:
        cx.fail(f"height and width {h}x{w} are not multiples of blocksize {bs}")
    y = transpose(reshape(x, (b, c, h // bs, bs, w // bs, bs)), (0, 3, 5, 1, 2, 4))
    return [reshape(y, (b, c * bs * bs, h // bs, w // bs))]


# ONNX op -> converter
CONVERTERS = {"Resize": _resize, "DepthToSpace": _depth_to_space,
              "SpaceToDepth": _space_to_depth}
