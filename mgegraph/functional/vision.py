"""``megengine.functional.vision``: resizing, image sampling, warps and detection
post-processing, under MegEngine's names.

>>> import mgegraph.functional as F
>>> y = F.vision.interpolate(x, scale_factor=2, mode="bilinear")
>>> keep = F.vision.nms(boxes, scores, iou_thresh=0.5)
"""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from ..ir.errors import OpError, user_location
from ..ops.builder import apply, graph_of, promote
from ..ops.elementwise import floor_div
from ..ops.matmul import matmul
from ..ops.movement_api import concat, reshape, take, transpose
from ..ops.registry import named

__all__ = ["cvt_color", "grid_sample", "interpolate", "nms", "pixel_shuffle", "pixel_unshuffle",
           "remap", "roi_align", "roi_pooling", "warp_affine", "warp_perspective"]


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


def interpolate(inp, size=None, scale_factor=None, mode="bilinear", align_corners=None,
                antialias=False):
    """Resize the spatial axes of an (N, C, ...) input to ``size`` or by ``scale_factor``, as
    PyTorch's ``F.interpolate``: modes nearest (any of 1-3 spatial axes), linear (N, C, W),
    bilinear and bicubic (N, C, H, W, cubic coefficient -0.75), trilinear (N, C, D, H, W).
    ``align_corners`` maps the corner cells onto each other (not for nearest). ``antialias``
    (bilinear and bicubic, as PyTorch's): a downscaled axis's filter is stretched by the
    factor, so every input cell counts (PIL's resize; bicubic then takes PIL's coefficient -0.5).

    >>> y = F.vision.interpolate(x, size=(64, 64), mode="bicubic", align_corners=True)
    """
    if antialias:
        return _antialiased(inp, size, scale_factor, mode, align_corners)
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


# -- interpolate(antialias=True) ----------------------------------------------------------------
def _antialiased(inp, size, scale_factor, mode, align_corners):
    """PyTorch's antialiased bilinear and bicubic: the resize op's antialias filter over a
    window clipped to the input (exclude_outside), bicubic with PIL's -0.5."""
    if mode not in ("bilinear", "bicubic") or inp.ndim != 4:
        _fail("resize", inp, f"antialias takes the bilinear and bicubic modes of a 4-D input "
              f"(as PyTorch's), got mode {mode!r} and shape {inp.shape}")
    if align_corners:
        _fail("resize", inp, "antialias with align_corners is not supported: its filter is "
              "stretched by (in - 1) / (out - 1) in PyTorch, which the resize op does not say")
    sizes, scales = _target(inp, size, scale_factor, 2)
    cubic = mode == "bicubic"
    return apply("resize", (inp,), size=sizes, scale=scales, mode="cubic" if cubic else "linear",
                 coord="half_pixel", cubic_a=-0.5 if cubic else -0.75, exclude_outside=True,
                 antialias=True)


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


# -- detection and geometry (ops/vision.py) ---------------------------------------------------
def _pair(value):
    """An int becomes (v, v), a sequence a tuple of ints; the op's rule validates the rest."""
    if hasattr(value, "__index__"):
        return (int(value), int(value))
    try:
        return tuple(int(v) if hasattr(v, "__index__") else v for v in value)
    except TypeError:
        return value


def grid_sample(inp, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """PyTorch's ``grid_sample`` on NCHW images: ``grid`` (N, OH, OW, 2) holds (x, y) points in
    [-1, 1] (the image's corner pixels' centres with ``align_corners``, else its outer edges);
    ``mode`` "bilinear", "nearest" or "bicubic"; ``padding_mode`` "zeros", "border" or
    "reflection". Differentiable in ``inp`` and ``grid``. A 5-D input (N, C, D, H, W) takes an
    (N, OD, OH, OW, 3) grid of (x, y, z) points ("bilinear" is then trilinear; no bicubic).

    >>> y = F.vision.grid_sample(x, grid)   # x: (2, 3, 8, 8), grid: (2, 5, 5, 2) -> (2, 3, 5, 5)
    """
    inp, grid = promote(inp, grid)
    return apply("grid_sample3d" if inp.ndim == 5 else "grid_sample", (inp, grid), mode=mode,
                 padding_mode=padding_mode, align_corners=align_corners)


def remap(inp, map_xy, border_mode="replicate", scalar=0.0, interp_mode="linear"):
    """MegEngine's (OpenCV's) remap: ``out[n, c, h, w] = inp[n, c, y, x]`` for
    ``(x, y) = map_xy[n, h, w]`` in input pixels, interpolated ("linear" or "nearest"); taps
    outside the image follow ``border_mode`` ("replicate", "reflect", "reflect_101", "wrap",
    or "constant" with value ``scalar``). Differentiable in ``inp`` and ``map_xy``.

    >>> y = F.vision.remap(x, map_xy)   # x: (1, 1, 4, 4), map_xy: (1, 2, 2, 2) -> (1, 1, 2, 2)
    """
    inp, map_xy = promote(inp, map_xy)
    return apply("remap", (inp, map_xy), border_mode=border_mode, scalar=float(scalar),
                 interp_mode=interp_mode)


def _perspective_map(mat, out_shape):
    """The (N, OH, OW, 2) input points of a warp: ``mat`` (N, 3, 3) maps each output pixel
    (w, h, 1) to input (x, y) by a projective division, as MegEngine's warp_perspective."""
    oh, ow = out_shape
    rows, cols = np.mgrid[0:oh, 0:ow]
    pixels = np.stack([cols, rows, np.ones_like(cols)], -1).reshape(-1, 3)
    xyz = matmul(graph_of(mat).const(pixels.astype(mat.dtype)), mat, transpose_b=True)
    return reshape(xyz[:, :, :2] / xyz[:, :, 2:], (mat.shape[0], oh, ow, 2))


def _out_shape(out_shape):
    shape = _pair(out_shape)
    if (not isinstance(shape, tuple) or len(shape) != 2
            or not all(isinstance(v, int) and v >= 1 for v in shape)):
        raise ValueError(f"out_shape must be an int >= 1 or a pair of them, got {out_shape!r}")
    return shape


def _warp(inp, mat, out_shape, mat_idx, border_mode, border_val, format, interp_mode):
    if format not in ("NCHW", "NHWC"):
        raise ValueError(f"format must be 'NCHW' or 'NHWC', got {format!r}")
    inp, mat = promote(inp, mat)
    if format == "NHWC":
        inp = transpose(inp, (0, 3, 1, 2))
    if mat_idx is not None:  # one image per matrix, picked by index
        inp = take(inp, mat_idx, axis=0)
    out = remap(inp, _perspective_map(mat, _out_shape(out_shape)), border_mode, border_val,
                interp_mode)
    return transpose(out, (0, 2, 3, 1)) if format == "NHWC" else out


def warp_perspective(inp, mat, out_shape, mat_idx=None, border_mode="replicate",
                     border_val=0.0, format="NCHW", interp_mode="linear"):
    """MegEngine's warp_perspective: ``out[n, c, h, w] = inp[n, c, y, x]`` where
    ``(x, y, z) = mat[n] @ (w, h, 1)`` divided by z; ``mat_idx`` (one image index per matrix)
    warps one image several ways. A composition: the points, then ``remap`` (whose borders
    and interpolations it takes); differentiable in ``inp`` and ``mat``.

    >>> y = F.vision.warp_perspective(x, m, (32, 32))   # x: (N, C, H, W), m: (N, 3, 3)
    """
    return _warp(inp, mat, out_shape, mat_idx, border_mode, border_val, format, interp_mode)


def warp_affine(inp, mat, out_shape, border_mode="replicate", border_val=0.0, format="NHWC",
                interp_mode="linear"):
    """MegEngine's warp_affine: ``mat`` (N, 2, 3) maps each output pixel (w, h, 1) to its input
    point (x, y); NHWC images by default, as MegEngine. A warp_perspective with the last row
    (0, 0, 1).

    >>> y = F.vision.warp_affine(x, m, (32, 32))   # x: (N, H, W, C), m: (N, 2, 3)
    """
    inp, mat = promote(inp, mat)  # an array for mat becomes a constant
    if mat.ndim != 3 or mat.shape[1:] != (2, 3):
        raise ValueError(f"warp_affine: mat must be (N, 2, 3), got shape {mat.shape}")
    last = np.broadcast_to(np.array([0.0, 0.0, 1.0], mat.dtype), (mat.shape[0], 1, 3))
    full = concat([mat, graph_of(mat).const(np.ascontiguousarray(last))], axis=1)
    return _warp(inp, full, out_shape, None, border_mode, border_val, format, interp_mode)


def roi_align(inp, rois, output_shape, mode="average", spatial_scale=1.0, sample_points=2,
              aligned=True, *, convention="megengine"):
    """MegEngine's roi_align: each box of ``rois`` (K, 5) = (batch index, x0, y0, x1, y1),
    scaled by ``spatial_scale`` (and shifted by -0.5 when ``aligned``), cut into
    ``output_shape`` bins, each the average or max of ``sample_points`` bilinear samples
    (zero outside the image; 0 samples: ceil(bin size) per axis, per box). Gives
    (K, C, *output_shape); differentiable in ``inp`` and in the boxes' corners (MegEngine
    gives the boxes none). ``convention="onnx"`` gives ONNX's RoiAlign (torchvision's roi_align)
    instead: unaligned boxes at least a pixel wide, points clamped into the image (0 only
    beyond a pixel outside), and max over each sample's weighted taps (no gradient then).

    >>> y = F.vision.roi_align(feat, rois, (7, 7), spatial_scale=1 / 16)
    """
    inp, rois = promote(inp, rois)
    return apply("roi_align", (inp, rois), output_shape=_pair(output_shape),
                 mode=str(mode).lower(), spatial_scale=float(spatial_scale),
                 sample_points=_pair(sample_points), aligned=aligned, convention=convention)


def roi_pooling(inp, rois, output_shape, mode="max", scale=1.0):
    """MegEngine's roi_pooling (Fast R-CNN's): each box of ``rois`` (K, 5) scaled by ``scale``
    and rounded to pixels, pooled ("max" or "average") over ``output_shape`` bins (an empty bin
    gives 0). Differentiable in ``inp``.

    >>> y = F.vision.roi_pooling(feat, rois, (7, 7), scale=1 / 16)
    """
    inp, rois = promote(inp, rois)
    return apply("roi_pooling", (inp, rois), output_shape=_pair(output_shape),
                 mode=str(mode).lower(), scale=float(scale))


def nms(boxes, scores, iou_thresh, max_output=None):
    """MegEngine's nms: the int32 indices of the boxes (N, 4) = (x0, y0, x1, y1) kept by greedy
    non-maximum suppression (a box is dropped when its IoU with a kept, higher-scored box is
    above ``iou_thresh``), by descending score; ties keep index order. At most ``max_output``
    (default N). Eager calls give exactly the kept indices; in a graph or a trace, whose
    shapes cannot depend on data, the output has ``max_output`` entries, the kept ones first
    and -1 after them (count the entries >= 0).

    >>> keep = F.vision.nms(boxes, scores, iou_thresh=0.7)
    """
    boxes, scores = promote(boxes, scores)
    if max_output is None:
        if named(boxes.shape[0]):
            raise ValueError(f"nms: the number of boxes is the named size {boxes.shape[0]}; "
                             "give max_output, the fixed length of the output")
        max_output = boxes.shape[0]
    keep = apply("nms", (boxes, scores), iou_thresh=float(iou_thresh), max_output=max_output)
    if not boxes.graph.eager or boxes.graph.replayed:  # a replay keeps no length read now
        return keep
    return keep[:int((keep.numpy() >= 0).sum())]


# -- colour conversion ---------------------------------------------------------------------------
# MegEngine's (OpenCV's) luma weights: float images take them as they are; uint8 images take
# them in 14-bit fixed point with rounding, (4899 R + 9617 G + 1868 B + 2^13) >> 14, so a uint8
# frame converts to the same bytes as MegEngine's and OpenCV's kernels give
_LUMA = (0.299, 0.587, 0.114)
_LUMA_FIXED, _LUMA_SHIFT = (4899, 9617, 1868), 14
# mode -> (input channels, output: "gray", "swap" (reverse the channels) or "repeat"), the
# order of the input's channels for a gray output
_CVT_MODES = {"RGB2GRAY": (3, "gray", (0, 1, 2)), "BGR2GRAY": (3, "gray", (2, 1, 0)),
              "RGB2BGR": (3, "swap", None), "BGR2RGB": (3, "swap", None),
              "GRAY2RGB": (1, "repeat", None), "GRAY2BGR": (1, "repeat", None)}


def cvt_color(inp, mode: str = ""):
    """MegEngine's ``cvt_color`` on NHWC images: "RGB2GRAY", "BGR2GRAY" (N, H, W, 3) ->
    (N, H, W, 1); "GRAY2RGB", "GRAY2BGR" (N, H, W, 1) -> (N, H, W, 3); "RGB2BGR", "BGR2RGB".
    uint8 images stay uint8 (gray by MegEngine's and OpenCV's fixed-point weights), float
    images stay float.

    >>> gray = F.vision.cvt_color(frame, mode="RGB2GRAY")   # uint8 (1, 480, 640, 3) -> (.., 1)
    """
    if mode not in _CVT_MODES:
        _fail("cvt_color", inp, f"mode must be one of {sorted(_CVT_MODES)}, got {mode!r}")
    channels, kind, order = _CVT_MODES[mode]
    if inp.ndim != 4 or inp.shape[3] != channels:
        _fail("cvt_color", inp, f"{mode} takes NHWC images with {channels} channel(s), got "
              f"shape {tuple(inp.shape)}")
    if inp.dtype not in (np.uint8, np.float32, np.float64):
        _fail("cvt_color", inp, f"takes uint8, float32 or float64 images, got {inp.dtype}")
    if kind == "repeat":
        return concat([inp] * 3, axis=3)
    planes = [inp[:, :, :, c:c + 1] for c in range(3)]
    if kind == "swap":
        return concat(planes[::-1], axis=3)
    planes = [planes[c] for c in order]
    if inp.dtype != np.uint8:
        return (planes[0] * _LUMA[0] + planes[1] * _LUMA[1]) + planes[2] * _LUMA[2]
    wide = [p.astype(np.int32) for p in planes]
    total = (wide[0] * _LUMA_FIXED[0] + wide[1] * _LUMA_FIXED[1]) + wide[2] * _LUMA_FIXED[2]
    return floor_div(total + (1 << (_LUMA_SHIFT - 1)), 1 << _LUMA_SHIFT).astype(np.uint8)
