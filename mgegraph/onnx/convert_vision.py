"""The converters of ONNX's image sampling and detection ops: ``GridSample`` (opsets 16 and
20: 2-D images, and 20's volumes, grid_sample3d; 20's ``linear``/``cubic`` are 16's
``bilinear``/``bicubic``) and ``RoiAlign``
(roi_align in ONNX's convention: its interpolation clamps points at the image's edge and its
max mode takes the largest weighted tap, where MegEngine's reads zeros outside and takes the
largest sample), and ``MaxRoiPool`` (roi_pooling's max mode: both are Caffe's ROI pooling).

``DeformConv`` (opset 19) is deformable_conv2d, torchvision's modulated deformable convolution.

``NonMaxSuppression`` (mgegraph's nms per batch and class) gives its selected indices, whose
number is known only at run time, padded to a bound with rows of -1, as mgegraph's nms does: the
importer takes it as a graph output only (its block below says how).
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ops.builder import apply
from .context import Context, shape_of

_GRID_MODES = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest",
               "bicubic": "bicubic", "cubic": "bicubic"}


def _text(at, key, default) -> str:
    value = at.get(key, default)
    return value.decode() if isinstance(value, bytes) else value


def _grid_sample(cx: Context, ins, at):
    x, grid = cx.var(ins[0]), cx.var(ins[1])
    if x.ndim not in (4, 5):
        cx.fail(f"GridSample of a {x.ndim}-D input {x.shape}: mgegraph samples 2-D images "
                "(N, C, H, W) and volumes (N, C, D, H, W) only")
    mode = _text(at, "mode", "bilinear")
    if mode not in _GRID_MODES:
        cx.fail(f"mode {mode!r} is not one of {sorted(_GRID_MODES)}")
    return [F.vision.grid_sample(x, grid, _GRID_MODES[mode], _text(at, "padding_mode", "zeros"),
                                 bool(at.get("align_corners", 0)))]


def _roi_align(cx: Context, ins, at):
    x, rois, index = (cx.var(v) for v in ins[:3])
    if x.ndim != 4:
        cx.fail(f"RoiAlign of a {x.ndim}-D input {x.shape}: it pools (N, C, H, W) images")
    mode = _text(at, "mode", "avg")
    coords = _text(at, "coordinate_transformation_mode",
                   "half_pixel" if cx.opset >= 16 else "output_half_pixel")
    if mode not in ("avg", "max") or coords not in ("half_pixel", "output_half_pixel"):
        cx.fail(f"mode {mode!r} or coordinate_transformation_mode {coords!r} is not one of "
                "avg, max and half_pixel, output_half_pixel")
    ratio = int(at.get("sampling_ratio", 0))
    if ratio < 0:
        cx.fail(f"sampling_ratio must be >= 0, got {ratio}")
    boxes = F.concat([F.reshape(F.astype(index, rois.dtype), (-1, 1)), rois], axis=1)
    return [F.vision.roi_align(
        x, boxes, (int(at.get("output_height", 1)), int(at.get("output_width", 1))),
        "average" if mode == "avg" else "max", float(at.get("spatial_scale", 1.0)), ratio,
        aligned=coords == "half_pixel", convention="onnx")]


def _max_roi_pool(cx: Context, ins, at):
    x, rois = cx.var(ins[0]), cx.var(ins[1])
    if x.ndim != 4 or "pooled_shape" not in at:
        cx.fail(f"MaxRoiPool needs an (N, C, H, W) input (got {x.shape}) and pooled_shape")
    return [F.vision.roi_pooling(x, rois, tuple(int(v) for v in at["pooled_shape"]), "max",
                                 float(at.get("spatial_scale", 1.0)))]


CONVERTERS = {"GridSample": _grid_sample, "RoiAlign": _roi_align, "MaxRoiPool": _max_roi_pool}


# -- deformable convolution (ops/deform.py) -------------------------------------------------------
def _pairs(cx, at, key, default, low):
    values = tuple(int(v) for v in at.get(key, default))
    if len(values) != len(default) or min(values) < low:
        cx.fail(f"{key} must be {len(default)} ints >= {low}, got {list(values)}")
    return values


def _deform_conv(cx: Context, ins, at):
    """DeformConv (opset 19): deformable_conv2d, with the mask ones where none is given and
    unequal pads as a zero pad first (a point in the pad reads zeros either way)."""
    x, w, offset = (cx.var(v) for v in ins[:3])
    given = [cx.var(ins[i]) if len(ins) > i and ins[i] is not None else None for i in (3, 4)]
    if x.ndim != 4 or w.ndim != 4 or offset.ndim != 4:
        cx.fail(f"DeformConv over 2-D images only: X {x.shape}, W {w.shape}, offset "
                f"{offset.shape} must be 4-D")
    taps, groups = w.shape[2] * w.shape[3], int(at.get("offset_group", 1))
    if tuple(at.get("kernel_shape", w.shape[2:])) != tuple(w.shape[2:]) \
            or offset.shape[1] != 2 * groups * taps:
        cx.fail(f"kernel_shape {at.get('kernel_shape')} and offset_group {groups} must match the "
                f"weight {w.shape} and the offset's {offset.shape[1]} channels")
    pads = _pairs(cx, at, "pads", (0, 0, 0, 0), 0)
    if pads[:2] != pads[2:]:
        x = F.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
        pads = (0, 0, 0, 0)
    mask = given[1]
    if mask is None:
        ones = cx.g.const(np.ones((1, 1, 1, 1), x.dtype))
        mask = F.broadcast_to(ones, (offset.shape[0], groups * taps, *offset.shape[2:]))
    return [F.vision.deformable_conv2d(
        x, w, offset, mask, given[0], _pairs(cx, at, "strides", (1, 1), 1), pads[:2],
        _pairs(cx, at, "dilations", (1, 1), 1), int(at.get("group", 1)))]


CONVERTERS |= {"DeformConv": _deform_conv}


# -- NonMaxSuppression ------------------------------------------------------------------------
# ONNX's output, selected_indices (num_selected, 3) int64 rows of (batch, class, box), has a
# length known only at run time; a plan's lengths are fixed. So the import gives it as
# mgegraph's nms gives its indices: B * C * M rows (M = min(max_output_boxes_per_class, N), the
# most any batch and class can select), the selected rows first, in ONNX's order (by batch,
# class, then descending score, ties by box index), and rows of -1 after them: count the rows
# >= 0. Reading such an output would read the padding, so it may only be a graph output
# (Context.refuse_padded). Each (batch, class) is one nms; the score threshold then drops the
# kept boxes at or below it (they rank after every box above it, so they suppressed none), and
# one stable partition (a prefix sum of the kept flags) moves the kept rows first.
def _nms_scalar(cx, ins, i, what, default, cast):
    value = cx.known(ins[i], what) if len(ins) > i else None
    if value is None or value.size == 0:
        return default
    if value.size != 1:
        cx.fail(f"{what} must hold one value, got shape {list(value.shape)}")
    return cast(value.reshape(-1)[0])


def _nms_types(cx, boxes, scores):
    """(B, C, N) of boxes (B, N, 4) and scores (B, C, N) of known sizes."""
    bs, ss = shape_of(boxes), shape_of(scores)
    if len(bs) != 3 or bs[2:] != (4,) or len(ss) != 3 or (ss[0], ss[2]) != bs[:2]:
        cx.fail(f"boxes must be (B, N, 4) and scores (B, C, N), got {list(bs)} and {list(ss)}")
    if not all(isinstance(n, int) for n in ss):
        cx.fail(f"scores of shape {list(map(str, ss))}: the number of batches, classes and "
                "boxes must be known (the output's bound is made of them)")
    if boxes.dtype.kind != "f" or scores.dtype != boxes.dtype:
        cx.fail(f"boxes and scores must be of one float dtype, got {boxes.dtype} and "
                f"{scores.dtype}")
    return ss


def _nms_corners(cx, boxes, center):
    """(x0, y0, x1, y1)-like corners mgegraph's nms reads: IoU is the same with x and y
    swapped, so ONNX's (y1, x1, y2, x2) only needs its corners ordered (they may come
    flipped); centre_point_box 1 gives (x centre, y centre, width, height), a negative width
    or height taken as its size (ONNX Runtime lets such a box suppress nothing)."""
    a, b = boxes[:, :, :2], boxes[:, :, 2:]
    if center:
        half = b * cx.g.const(np.asarray(0.5, boxes.dtype))
        a, b = a - half, a + half
    return F.concat([F.minimum(a, b), F.maximum(a, b)], axis=2)


def _nms_block(g, corners, scores, b, c, iou, bound, threshold):
    """(rows (bound, 3) int64, kept flags) of one batch and class."""
    keep = F.vision.nms(corners[b], scores[b, c], iou, max_output=bound)
    if threshold is not None:  # a -1 entry reads the last score: it stays -1 either way
        above = F.take(scores[b, c], keep, 0) > g.const(np.asarray(threshold, scores.dtype))
        keep = F.where(above, keep, g.const(np.asarray(-1, np.int32)))
    kept = keep >= g.const(np.asarray(0, np.int32))
    ids = g.const(np.asarray([b, c], np.int64))
    rows = F.concat([F.broadcast_to(ids, (bound, 2)), F.reshape(F.astype(keep, "int64"),
                                                                (bound, 1))], axis=1)
    return F.where(F.reshape(kept, (bound, 1)), rows, g.const(np.asarray(-1, np.int64))), kept


def _prefix_sum(g, v):
    """Inclusive prefix sums of the 1-D ``v`` by log2(n) shifted adds (Hillis and Steele)."""
    n, shift = shape_of(v)[0], 1
    while shift < n:
        v = v + F.pad(v[:n - shift], ((shift, 0),))
        shift *= 2
    return v


def _kept_first(g, rows, kept):
    """``rows`` with those ``kept`` first and the others after, each in their order."""
    n = shape_of(kept)[0]
    before = _prefix_sum(g, F.astype(kept, "int64"))  # kept rows up to each, itself included
    index = g.const(np.arange(n, dtype=np.int64))
    dest = F.where(kept, before - g.const(np.asarray(1, np.int64)),
                   before[n - 1] + index - before)
    return apply("index_add", (rows, dest), axis=0, size=n)


def _non_max_suppression(cx: Context, ins, at):
    boxes, scores = cx.var(ins[0]), cx.var(ins[1])
    batches, classes, n = _nms_types(cx, boxes, scores)
    center = int(at.get("center_point_box", 0))
    if center not in (0, 1):
        cx.fail(f"center_point_box must be 0 or 1, got {center}")
    most = _nms_scalar(cx, ins, 2, "max_output_boxes_per_class", 0, int)
    iou = _nms_scalar(cx, ins, 3, "iou_threshold", 0.0, float)
    threshold = _nms_scalar(cx, ins, 4, "score_threshold", None, float)
    if not 0 <= iou <= 1:
        cx.fail(f"iou_threshold {iou} must be within [0, 1]")
    bound = min(max(most, 0), n)
    if bound * batches * classes == 0:
        return [np.zeros((0, 3), np.int64)]
    corners = _nms_corners(cx, boxes, center)
    blocks = [_nms_block(cx.g, corners, scores, b, c, iou, bound, threshold)
              for b in range(batches) for c in range(classes)]
    rows = F.concat([r for r, _ in blocks], axis=0)
    kept = F.concat([k for _, k in blocks], axis=0)
    selected = _kept_first(cx.g, rows, kept)
    cx.padded[selected.id] = f"NonMaxSuppression {cx.where()}"
    return [selected]


CONVERTERS["NonMaxSuppression"] = _non_max_suppression
