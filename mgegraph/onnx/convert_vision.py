"""The converters of ONNX's image sampling and detection ops: ``GridSample`` (opsets 16 and
20: 2-D images; 20's ``linear``/``cubic`` are 16's ``bilinear``/``bicubic``).

Not converted: ``RoiAlign`` (ONNX's interpolation clamps points at the image's edge and its
max mode takes the largest weighted tap, where MegEngine's roi_align reads zeros outside and
takes the largest sample) and ``NonMaxSuppression`` (its output's length is the number of boxes
kept, known only at run time; mgegraph's nms gives a fixed length padded with -1).
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
    if x.ndim != 4:
        cx.fail(f"GridSample of a {x.ndim}-D input {x.shape}: mgegraph samples 2-D images "
                "(N, C, H, W) only")
    mode = _text(at, "mode", "bilinear")
    if mode not in _GRID_MODES:
        cx.fail(f"mode {mode!r} is not one of {sorted(_GRID_MODES)}")
    return [F.vision.grid_sample(x, grid, _GRID_MODES[mode], _text(at, "padding_mode", "zeros"),
                                 bool(at.get("align_corners", 0)))]


CONVERTERS = {"GridSample": _grid_sample}
