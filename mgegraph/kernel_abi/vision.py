"""The vision ops' parameter blocks (the Sample, Roi and Nms structs), read by
_kernels/vision.pyx and csrc_cuda/vision.cu.

Design: grid_sample and remap run one sampler. A point is mapped to input pixels (``coord``),
optionally folded back into the image as a continuous coordinate (``coord_pad``: PyTorch's
border and reflection padding for its nearest and bilinear modes), interpolated from 1, 2x2 or
4x4 taps (``interp``), and each tap outside the image is resolved by ``border`` (OpenCV's
border modes; PyTorch's bicubic padding is one of them per tap: zeros is a constant 0, border
replicates, reflection reflects about the pixel edges (reflect) or, with align_corners, about
the pixel centres (reflect_101)).
"""
from __future__ import annotations

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from ..ops.vision import REMAP_DTYPES
from .layout import one_thread, pack

SAMPLE_FIELDS = ("coord", "coord_pad", "interp", "border", "n", "c", "h", "w", "oh", "ow",
                 "threads")
COORDS = {"aligned": 0, "unaligned": 1, "pixel": 2}  # [-1, 1] to corner or edge pixels; pixels
COORD_PADS = {"none": 0, "clip": 1, "reflect": 2}
INTERPS = {"nearest": 0, "linear": 1, "cubic": 2}
BORDERS = {"constant": 0, "replicate": 1, "reflect": 2, "reflect_101": 3, "wrap": 4}

# the volume sampler (grid_sample3d): Sample's fields with a depth and an output depth
SAMPLE3_FIELDS = ("coord", "coord_pad", "interp", "border", "n", "c", "d", "h", "w", "od", "oh",
                  "ow", "threads")

ROI_FIELDS = ("kind", "mode", "n", "c", "h", "w", "k", "oh", "ow", "sh", "sw", "threads")
ROI_KINDS = {"align": 0, "align_onnx": 1, "pooling": 2}
ROI_MODES = {"average": 0, "max": 1}

NMS_FIELDS = ("boxes", "max_output")
NMS_SCRATCH = 2 * 8 + 1  # workspace bytes per box: two index arrays (merge sort), a flag


def _grid_sample_block(attrs) -> tuple[dict, float]:
    interp = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}[attrs["mode"]]
    padding, aligned = attrs["padding_mode"], attrs["align_corners"]
    if interp == "cubic":  # PyTorch pads each of the 16 taps, never the point itself
        border = {"zeros": "constant", "border": "replicate",
                  "reflection": "reflect_101" if aligned else "reflect"}[padding]
        pad = "none"
    else:
        border, pad = "constant", {"zeros": "none", "border": "clip", "reflection": "reflect"}[
            padding]
    return {"coord": COORDS["aligned" if aligned else "unaligned"], "coord_pad": COORD_PADS[pad],
            "interp": INTERPS[interp], "border": BORDERS[border]}, 0.0


def _remap_block(attrs) -> tuple[dict, float]:
    return {"coord": COORDS["pixel"], "coord_pad": COORD_PADS["none"],
            "interp": INTERPS[attrs["interp_mode"]], "border": BORDERS[attrs["border_mode"]]}, \
        float(attrs["scalar"])


BLOCKS = {"grid_sample": _grid_sample_block, "remap": _remap_block}


def _sample_lower(family, sides, threads):
    def lower(node) -> Launch:
        x, grid = sides(node)
        fields, value = BLOCKS[family](node.attr)
        return Launch(pack(SAMPLE_FIELDS, **fields, n=x.shape[0], c=x.shape[1], h=x.shape[2],
                           w=x.shape[3], oh=grid.shape[1], ow=grid.shape[2],
                           threads=threads(node)), (value,))
    return lower


def _roi_lower(threads):
    def lower(node) -> Launch:
        x, rois = node.inputs[0].type, node.inputs[1].type
        attrs = node.attr
        align = "sample_points" in attrs
        sh, sw = attrs["sample_points"] if align else (0, 0)
        scale = attrs["spatial_scale"] if align else attrs["scale"]
        offset = 0.5 if align and attrs["aligned"] else 0.0
        kind = ("align_onnx" if attrs["convention"] == "onnx" else "align") if align \
            else "pooling"
        return Launch(pack(ROI_FIELDS, kind=ROI_KINDS[kind],
                           mode=ROI_MODES[attrs["mode"]], n=x.shape[0], c=x.shape[1],
                           h=x.shape[2], w=x.shape[3], k=rois.shape[0],
                           oh=attrs["output_shape"][0], ow=attrs["output_shape"][1], sh=sh,
                           sw=sw, threads=threads(node)), (float(scale), offset))
    return lower


def _nms_lower(node) -> Launch:
    boxes = node.inputs[0].shape[0]
    return Launch(pack(NMS_FIELDS, boxes=boxes, max_output=node.attr["max_output"]),
                  (float(node.attr["iou_thresh"]),), workspace=NMS_SCRATCH * boxes)


# Which of a node's types are the sampled image and the grid
def _sample_forward_sides(node):
    return node.inputs[0].type, node.inputs[1].type


def _sample_data_sides(node):  # (grid, dy) -> dx
    return node.outputs[0].type, node.inputs[0].type


def _sample_points_sides(node):  # (x, grid, dy) -> dgrid
    return node.inputs[0].type, node.inputs[1].type


def _sample3d_lower(sides, threads):
    def lower(node) -> Launch:
        x, grid = sides(node)
        fields, value = _grid_sample_block(node.attr)
        return Launch(pack(SAMPLE3_FIELDS, **fields, n=x.shape[0], c=x.shape[1], d=x.shape[2],
                           h=x.shape[3], w=x.shape[4], od=grid.shape[1], oh=grid.shape[2],
                           ow=grid.shape[3], threads=threads(node)), (value,))
    return lower


def _implement_volumes(table, threads) -> None:
    """grid_sample3d and its gradients on the volume sampler (sample3d kernels)."""
    for op, kernel, sides in (
            ("grid_sample3d", "sample3d", _sample_forward_sides),
            ("grid_sample3d_backward_data", "sample3d_backward_data", _sample_data_sides),
            ("grid_sample3d_backward_grid", "sample3d_backward_points", _sample_points_sides)):
        table.implement(op, kernel=kernel, dtypes=FLOAT_DTYPES,
                        lower=_sample3d_lower(sides, threads))


def implement(table, threads=one_thread) -> None:
    """Register the vision ops on ``table``; ``threads(node)`` fills the threads fields."""
    for family, points in (("grid_sample", "grid"), ("remap", "map")):
        for op, kernel, sides in (
                (family, "sample", _sample_forward_sides),
                (f"{family}_backward_data", "sample_backward_data", _sample_data_sides),
                (f"{family}_backward_{points}", "sample_backward_points", _sample_points_sides)):
            table.implement(op, kernel=kernel,
                            dtypes=REMAP_DTYPES if op == "remap" else FLOAT_DTYPES,
                            lower=_sample_lower(family, sides, threads))
    for op in ("roi_align", "roi_pooling"):
        table.implement(op, kernel="roi", dtypes=FLOAT_DTYPES, lower=_roi_lower(threads))
        table.implement(f"{op}_backward", kernel="roi_backward", dtypes=FLOAT_DTYPES,
                        lower=_roi_lower(threads))
    table.implement("roi_align_backward_rois", kernel="roi_backward_rois", dtypes=FLOAT_DTYPES,
                    lower=_roi_lower(threads))
    table.implement("nms", kernel="nms", dtypes=FLOAT_DTYPES, lower=_nms_lower)
    _implement_volumes(table, threads)
