"""``megengine.functional.vision``: image sampling, warps and detection post-processing.

>>> import mgegraph.functional as F
>>> keep = F.vision.nms(boxes, scores, iou_thresh=0.5)
"""
from __future__ import annotations

import numpy as np

from ..ops.builder import apply, graph_of, promote
from ..ops.matmul import matmul
from ..ops.movement_api import concat, reshape, take, transpose
from ..ops.registry import named

# -- detection and geometry (ops/vision.py) ---------------------------------------------------
__all__ = ["grid_sample", "nms", "remap", "roi_align", "roi_pooling", "warp_affine",
           "warp_perspective"]


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
    "reflection". Differentiable in ``inp`` and ``grid``.

    >>> y = F.vision.grid_sample(x, grid)   # x: (2, 3, 8, 8), grid: (2, 5, 5, 2) -> (2, 3, 5, 5)
    """
    inp, grid = promote(inp, grid)
    return apply("grid_sample", (inp, grid), mode=mode, padding_mode=padding_mode,
                 align_corners=align_corners)


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
