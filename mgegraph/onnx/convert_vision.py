"""The converters of ONNX's image sampling and detection ops: ``GridSample`` (opsets 16 and
20: 2-D images, and 20's volumes, grid_sample3d; 20's ``linear``/``cubic`` are 16's
``bilinear``/``bicubic``) and ``RoiAlign``
(roi_align in ONNX's convention: its interpolation clamps points at the image's edge and its
max mode takes the largest weighted tap, where MegEngine's reads zeros outside and takes the
largest sample), and ``MaxRoiPool`` (roi_pooling's max mode: both are Caffe's ROI pooling).

Not converted: ``NonMaxSuppression``, whose output's length is the number of boxes kept, known
only at run time; mgegraph's nms gives a fixed length padded with -1.
"""
from __future__ import annotations

from .. import functional as F
from .context import Context

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
