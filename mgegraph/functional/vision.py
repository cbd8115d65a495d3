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
from ..ir.graph import Var
from ..ir.types import is_float
from ..ops.builder import apply, cast_to, graph_of, promote
from ..ops.conv import COMPUTE_MODES, weight_dims
from ..ops.elementwise import floor_div
from ..ops.matmul import matmul
from ..ops.movement_api import concat, reshape, take, transpose
from ..ops.movement_api import flip as movement_flip
from ..ops.registry import named

__all__ = ["cvt_color", "grid_sample", "interpolate", "nms", "pixel_shuffle", "pixel_unshuffle",
           "remap", "roi_align", "roi_pooling", "warp_affine", "warp_perspective"]
__all__ += ["normalize"]
__all__ += ["flip", "rot90"]


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


def _frame_and_points(inp, points):
    """(image, points) as remap takes them: a uint8 image stays uint8, with float32 points
    (remap rounds its result back to uint8, as MegEngine's remap and warps give a camera's
    frame back); a float image and its points share one dtype."""
    if np.dtype(getattr(inp, "dtype", np.float32)) != np.uint8:
        return promote(inp, points)
    g = graph_of(inp, points)
    return g.lift(inp), cast_to(g.lift(points), np.float32)


def remap(inp, map_xy, border_mode="replicate", scalar=0.0, interp_mode="linear"):
    """MegEngine's (OpenCV's) remap: ``out[n, c, h, w] = inp[n, c, y, x]`` for
    ``(x, y) = map_xy[n, h, w]`` in input pixels, interpolated ("linear" or "nearest"); taps
    outside the image follow ``border_mode`` ("replicate", "reflect", "reflect_101", "wrap",
    or "constant" with value ``scalar``). Differentiable in ``inp`` and ``map_xy``. A uint8
    image gives uint8: the value in double rounded to nearest, ties to even, saturated to
    [0, 255] (nearest is an exact copy), at float32 points, with no gradient.

    >>> y = F.vision.remap(x, map_xy)   # x: (1, 1, 4, 4), map_xy: (1, 2, 2, 2) -> (1, 1, 2, 2)
    """
    inp, map_xy = _frame_and_points(inp, map_xy)
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
    inp, mat = _frame_and_points(inp, mat)
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
    and interpolations it takes); differentiable in ``inp`` and ``mat``. A uint8 image (a
    camera's frame) gives uint8, rounded as ``remap`` rounds, its points in float32.

    >>> y = F.vision.warp_perspective(x, m, (32, 32))   # x: (N, C, H, W), m: (N, 3, 3)
    """
    return _warp(inp, mat, out_shape, mat_idx, border_mode, border_val, format, interp_mode)


def warp_affine(inp, mat, out_shape, border_mode="replicate", border_val=0.0, format="NHWC",
                interp_mode="linear"):
    """MegEngine's warp_affine: ``mat`` (N, 2, 3) maps each output pixel (w, h, 1) to its input
    point (x, y); NHWC images by default, as MegEngine, uint8 ones too (giving uint8). A
    warp_perspective with the last row (0, 0, 1).

    >>> y = F.vision.warp_affine(x, m, (32, 32))   # x: (N, H, W, C), m: (N, 2, 3)
    """
    inp, mat = _frame_and_points(inp, mat)  # an array for mat becomes a constant
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


# -- normalize: a camera frame to a network's input ------------------------------------------------
_CHANNEL_AXIS = {"NHWC": -1, "NCHW": 1}


def _per_channel(inp, what, value, channels, format, dtype):
    """``value`` (a number, a sequence of one or ``channels`` numbers, or a tensor) as a
    ``dtype`` value that broadcasts along the channel axis of ``inp``."""
    g = graph_of(inp)
    if isinstance(value, Var):  # a tensor (a Parameter too): cast, and shaped for NCHW
        v = cast_to(g.lift(value), dtype)
        if v.ndim == 1 and format == "NCHW":
            v = reshape(v, (v.shape[0],) + (1,) * (inp.ndim - 2))
        return v
    values = np.asarray(value, dtype=np.float64).reshape(-1)
    if values.size not in (1, channels) or not np.all(np.isfinite(values)):
        _fail("normalize", inp, f"{what} must be finite numbers, one or one per channel "
              f"({channels}), got {value!r}")
    if what == "std" and np.any(values == 0):
        _fail("normalize", inp, f"std must not be 0, got {value!r}")
    shape = values.shape if format == "NHWC" else values.shape + (1,) * (inp.ndim - 2)
    return g.const(values.astype(dtype).reshape(shape))


def normalize(inp, mean, std, format="NHWC", dtype="float32"):
    """``(cast(inp) - mean) / std`` per channel: a camera's uint8 frame (or any image) to a
    network's float input, inside the graph. ``mean`` and ``std`` are numbers, sequences with
    one entry or one per channel, or tensors; ``format`` says where the channels are ("NHWC",
    the last axis, or "NCHW", the second); ``dtype`` is the result's float dtype. A
    composition of cast, sub and div: the planner fuses the sub and div into one loop (the
    cast from uint8 stays its own pass: a fused kernel reads its inputs in one dtype).
    MegEngine has no such function (its ``data.transform.Normalize`` runs on NumPy before the
    graph); ``F.normalize`` is its Lp ``functional.nn.normalize``.

    >>> x = F.vision.normalize(frame, (123.7, 116.3, 103.5), (58.4, 57.1, 57.4))
    """
    if format not in _CHANNEL_AXIS:
        _fail("normalize", inp, f"format must be 'NHWC' or 'NCHW', got {format!r}")
    if not is_float(np.dtype(dtype)):
        _fail("normalize", inp, f"dtype must be a float dtype, got {dtype!r}")
    dtype = np.dtype(dtype)
    if inp.ndim < 2:
        _fail("normalize", inp, f"the input must have a channel axis ({format}), got shape "
              f"{inp.shape}")
    channels = inp.shape[_CHANNEL_AXIS[format]]
    m = _per_channel(inp, "mean", mean, channels, format, dtype)
    s = _per_channel(inp, "std", std, channels, format, dtype)
    return (cast_to(inp, dtype) - m) / s


# -- deformable convolution and correlation (ops/deform.py) ---------------------------------------
def _deform_weight(inp, weight, groups):
    """(out channels, in channels per group, kh, kw) of a 4-D (out, in/groups, kh, kw) or
    MegEngine's 5-D grouped (groups, out/groups, in/groups, kh, kw) weight."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        _fail("deformable_conv2d", inp, f"groups must be a positive int, got {groups!r}")
    try:
        oc, cg, kh, kw = weight_dims(weight.type, groups)
    except ValueError as e:
        _fail("deformable_conv2d", weight, str(e))
    if oc % groups or cg * groups != inp.shape[1]:
        _fail("deformable_conv2d", inp, f"a {weight.shape} weight in {groups} group(s) needs "
              f"{cg * groups} input channels and out channels divisible by the groups; the "
              f"input is {inp.shape}")
    return oc, cg, kh, kw


def deformable_conv2d(inp, weight, offset, mask, bias=None, stride=1, padding=0, dilation=1,
                      groups=1, conv_mode="cross_correlation", compute_mode="default"):
    """MegEngine's modulated deformable convolution (DCN v2, torchvision's deform_conv2d):
    each tap (i, j) of the window at output cell p reads ``inp`` bilinearly (zeros outside) at
    its place moved by ``offset`` (N, 2*DG*KH*KW, OH, OW), (dy, dx) pairs, and is scaled by
    ``mask`` (N, DG*KH*KW, OH, OW); DG, the deformable groups, is read from the offsets'
    channels. ``weight`` is (out, in/groups, kh, kw) or MegEngine's (groups, out/groups,
    in/groups, kh, kw); ``bias`` (out,) or (1, out, 1, 1). Differentiable in all five.

    Composed as the ``deform_im2col`` op's columns times the weight (the matmul op), as
    MegEngine's and torchvision's kernels compute it.

    >>> y = F.vision.deformable_conv2d(x, w, offset, mask, padding=1)
    ... # x: (2, 4, 9, 9), w: (8, 4, 3, 3), offset: (2, 18, 9, 9), mask: (2, 9, 9, 9)
    """
    if conv_mode != "cross_correlation" or compute_mode not in COMPUTE_MODES:
        _fail("deformable_conv2d", inp, "supports conv_mode='cross_correlation' and "
              f"compute_mode 'default' or 'float32', got {conv_mode!r}, {compute_mode!r}")
    inp, weight, offset, mask, *rest = promote(inp, weight, offset, mask,
                                               *(() if bias is None else (bias,)))
    oc, cg, kh, kw = _deform_weight(inp, weight, groups)
    cols = apply("deform_im2col", (inp, offset, mask), kernel_size=(kh, kw),
                 stride=_pair(stride), padding=_pair(padding), dilation=_pair(dilation))
    n, _, oh, ow = cols.shape
    per_group = reshape(cols, (n, groups, cg * kh * kw, oh * ow))
    y = matmul(reshape(weight, (groups, oc // groups, cg * kh * kw)), per_group)
    y = reshape(y, (n, oc, oh, ow))
    if rest:
        if rest[0].shape not in ((oc,), (1, oc, 1, 1)):
            _fail("deformable_conv2d", rest[0], f"bias must have shape ({oc},) or "
                  f"(1, {oc}, 1, 1), got {rest[0].shape}")
        y = y + reshape(rest[0], (1, oc, 1, 1))
    return y


def correlation(data1, data2, kernel_size=1, max_displacement=1, stride1=1, stride2=1,
                pad_size=0, is_multiply=True):
    """MegEngine's correlation (FlowNet's): each cell of ``data1`` compared with the cells of
    ``data2`` around it, displaced by up to ``max_displacement`` in steps of ``stride2``: the
    mean over a ``kernel_size`` patch and the channels of their products (``is_multiply``) or
    absolute differences. Output (N, (2 * (max_displacement // stride2) + 1)^2, OH, OW);
    ops/deform.py has the formula. Differentiable in both inputs.

    >>> y = F.vision.correlation(a, b, max_displacement=4, stride2=2, pad_size=4)
    ... # a, b: (1, 8, 16, 16) -> (1, 25, 16, 16)
    """
    data1, data2 = promote(data1, data2)
    ints = {key: int(v) if hasattr(v, "__index__") and not isinstance(v, bool) else v
            for key, v in (("kernel_size", kernel_size), ("max_displacement", max_displacement),
                           ("stride1", stride1), ("stride2", stride2), ("pad_size", pad_size))}
    # MegEngine's parameter is a C++ bool: 0 and 1 (and NumPy's bools) mean False and True
    flag = bool(is_multiply) if isinstance(is_multiply, (bool, np.bool_)) or is_multiply in (0, 1) \
        else is_multiply
    return apply("correlation", (data1, data2), is_multiply=flag, **ints)


__all__ += ["correlation", "deformable_conv2d"]


# -- MegEngine's image flips and quarter turns of NHWC batches (movement ops) -------------------
def _nhwc(op: str, inp):
    x = graph_of(inp).lift(inp)
    if x.ndim != 4:
        _fail(op, x, f"needs an NHWC batch of images (4 dims), got {x.ndim}")
    return x


def flip(inp, vertical=True, horizontal=True):
    """MegEngine's F.vision.flip of NHWC images: upside down (``vertical``) and/or mirrored
    (``horizontal``). ``F.vision.flip(images, vertical=False)``"""
    x = _nhwc("flip", inp)
    axes = [a for a, on in ((1, vertical), (2, horizontal)) if on]
    return movement_flip(x, axes) if axes else x


def rot90(inp, clockwise=True):
    """MegEngine's F.vision.rot90: NHWC images turned a quarter, clockwise by default (an
    (N, H, W, C) batch becomes (N, W, H, C)). ``F.vision.rot90(images, clockwise=False)``"""
    x = _nhwc("rot90", inp)
    if clockwise:
        return movement_flip(transpose(x, (0, 2, 1, 3)), 2)
    return transpose(movement_flip(x, 2), (0, 2, 1, 3))
