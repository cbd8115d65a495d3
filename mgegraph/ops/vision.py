"""Detection and geometry ops over NCHW images: sampling at given points (grid_sample, remap;
grid_sample3d over NCDHW volumes), region pooling (roi_align, roi_pooling), non-maximum
suppression (nms), and the backward ops their gradient rules are made of.

The family lives in: ops/vision.py (meaning), functional/vision.py (public functions, with
warp_perspective and warp_affine as compositions over remap), kernel_abi/vision.py (parameter
blocks), _kernels/vision.pyx with its .pxi files and _kernels/lowering/vision.py (CPU),
csrc_cuda/vision.cu with its .cuh files and cuda/kernels/vision.py (CUDA),
onnx/convert_vision.py and onnx/exporter.py (ONNX).

NOTE: nms's output length depends on the data, a plan's cannot: nms gives ``max_output``
int32 indices, those kept first (by descending score) and -1 after them; the count kept is the
number of entries >= 0 (``F.vision.nms`` trims eager results to it).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.facts import require_at_least
from ..ir.types import TensorType
from .builder import apply
from .matmul import same_dtype
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, named, register, require_dtypes, same_shape

GRID_MODES = ("bilinear", "nearest", "bicubic")
GRID_PADDINGS = ("zeros", "border", "reflection")
REMAP_BORDERS = ("replicate", "reflect", "reflect_101", "wrap", "constant")
REMAP_INTERPS = ("linear", "nearest")
ROI_MODES = ("average", "max")
# MegEngine's roi_align, or ONNX's RoiAlign (torchvision's): _kernels/vision_roi.pxi says how
# they differ
ROI_CONVENTIONS = ("megengine", "onnx")


def _choice(attrs, key, allowed):
    if attrs[key] not in allowed:
        raise ValueError(f"{key} must be one of {allowed}, got {attrs[key]!r}")
    return attrs[key]


def _flag(attrs, key):
    if not isinstance(attrs[key], bool):
        raise TypeError(f"{key} must be a bool, got {attrs[key]!r}")


def _number(attrs, key, positive=False):
    value = attrs[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or (positive and not value > 0):
        raise ValueError(f"{key} must be a {'positive ' * positive}number, got {value!r}")


def _size_pair(attrs, key, names=False):
    """A pair of sizes >= 1; ``names``: a named size too (an image side a rule passes on)."""
    value = attrs[key]
    if (not isinstance(value, tuple) or len(value) != 2
            or not all((names and named(v))
                       or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
                       for v in value)):
        raise ValueError(f"{key} must be a pair of ints >= 1, got {value!r}")
    return value


def _image(name, x, what="input", dtypes=FLOAT_DTYPES):
    require_dtypes(name, x, dtypes, what)
    if x.ndim != 4:
        raise ValueError(f"{what} must be 4-D (N, C, H, W), got shape {x.shape}")


def _same_batch(a, b, what):
    if not same_shape(a.shape[:1], b.shape[:1], what):
        raise ValueError(f"{what} has batch {b.shape[0]}, the input {a.shape[0]}")


# -- sampling: grid_sample and remap ---------------------------------------------------------
# Both read the input at one point per output cell, given per batch image as (N, OH, OW, 2)
# (x, y) pairs: grid_sample's normalised to [-1, 1] (PyTorch's semantics), remap's in pixels
# (OpenCV's, MegEngine's remap). The kernels share one sampler (kernel_abi/vision.py says how
# each op's attributes map onto it).
def _check_sample_attrs(name, attrs):
    if name.startswith("grid_sample"):
        _choice(attrs, "mode", GRID_MODES)
        _choice(attrs, "padding_mode", GRID_PADDINGS)
        _flag(attrs, "align_corners")
    else:
        _choice(attrs, "border_mode", REMAP_BORDERS)
        _choice(attrs, "interp_mode", REMAP_INTERPS)
        _number(attrs, "scalar")


def _points(name, x, grid):
    """Validate ``grid`` (N, OH, OW, 2) against the input ``x``; the sampled output type."""
    require_dtypes(name, grid, FLOAT_DTYPES, "grid")
    if grid.ndim != 4 or grid.shape[3] != 2:
        raise ValueError(f"grid must be (N, OH, OW, 2), got shape {grid.shape}")
    _same_batch(x, grid, "grid")
    return TensorType((x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]), x.dtype)


def _sampled_image(name, x, what="input", dtypes=FLOAT_DTYPES):
    # a border mode folds a point into the image, which needs a pixel to fold it onto
    _image(name, x, what, dtypes)
    for side in x.shape[2:]:
        if named(side):  # checked when the name is bound
            require_at_least(side, 1, f"{name}'s image side")
        elif side == 0:
            raise ValueError(f"{what} has an empty image {x.shape[2:]}: there is no pixel to "
                             "sample")


def _sample_infer(name):
    def infer(in_types, attrs):
        x, grid = in_types
        if name == "remap" and x.dtype == np.uint8:
            return _remap_u8_infer(x, grid, attrs)
        same_dtype(in_types)
        _sampled_image(name, x)
        _check_sample_attrs(name, attrs)
        return (_points(name, x, grid),)
    return infer


def _sample_data_infer(name):
    # (grid, dy) -> dx of shape (N, C, *input_hw)
    def infer(in_types, attrs):
        grid, dy = in_types
        same_dtype(in_types)
        _image(name, dy, "output gradient")
        _check_sample_attrs(name, attrs)
        x = TensorType(dy.shape[:2] + _size_pair(attrs, "input_hw", names=True), dy.dtype)
        _check_sampled(name, x, grid, dy)
        return (x,)
    return infer


def _sample_points_infer(name):
    # (x, grid, dy) -> dgrid
    def infer(in_types, attrs):
        x, grid, dy = in_types
        same_dtype(in_types)
        _sampled_image(name, x)
        _check_sample_attrs(name, attrs)
        _check_sampled(name, x, grid, dy)
        return (grid,)
    return infer


def _check_sampled(name, x, grid, dy):
    want = _points(name, x, grid)
    if not same_shape(dy.shape, want.shape, "the sampling's output gradient"):
        raise ValueError(f"output gradient has shape {dy.shape}, but sampling a {x.shape} "
                         f"input at a {grid.shape} grid gives {want.shape}")


def _sample_rules(data_op, points_op):
    # The output is linear in x, so x's gradient scatters dy back with the same weights; the
    # grid's is the spatial derivative of the interpolation, summed over channels.
    def grad(node, out_grads):
        x, grid = node.inputs
        if x.dtype.kind != "f":  # a uint8 image's remap (see _remap_u8_infer)
            return None, None
        (g,) = out_grads
        dx = apply(data_op, (grid, g), input_hw=tuple(x.shape[2:]), **node.attr)
        return dx, apply(points_op, (x, grid, g), **node.attr)
    return grad


def _register_sampler(name, attrs):
    data_op, points_op = f"{name}_backward_data", f"{name}_backward_{_POINTS[name]}"
    register(OpDef(name, "nn", _sample_infer(name), attrs=attrs,
                   grad=_sample_rules(data_op, points_op), flops_per_element=8.0))
    register(OpDef(data_op, "nn", _sample_data_infer(data_op),
                   attrs={**attrs, "input_hw": REQUIRED}))
    register(OpDef(points_op, "nn", _sample_points_infer(points_op), attrs=attrs))


# remap on a camera's uint8 frame (MegEngine's remap and warps take uint8 images): float32
# points, each output the sampler's sum in double as for float images, rounded to nearest, ties
# to even, saturated to [0, 255] (_kernels/pixels.pxd); NaN points give 0 outside the constant
# border. No gradient: neither the integer image nor, through a rounding, the points have one.
REMAP_DTYPES = FLOAT_DTYPES + (np.dtype(np.uint8),)


def _remap_u8_infer(x, grid, attrs):
    if grid.dtype != np.float32:
        raise TypeError(f"a uint8 image is remapped at float32 points, got map_xy {grid.dtype}")
    _sampled_image("remap", x, dtypes=REMAP_DTYPES)
    _check_sample_attrs("remap", attrs)
    return (_points("remap", x, grid),)


_POINTS = {"grid_sample": "grid", "remap": "map"}
_register_sampler("grid_sample", {"mode": "bilinear", "padding_mode": "zeros",
                                  "align_corners": False})
_register_sampler("remap", {"border_mode": "replicate", "scalar": 0.0, "interp_mode": "linear"})


# -- grid_sample3d: grid_sample over volumes --------------------------------------------------
# PyTorch's grid_sample of an (N, C, D, H, W) input at an (N, OD, OH, OW, 3) grid of (x, y, z)
# points: trilinear ("bilinear", as PyTorch and ONNX name it) or nearest, each axis handled as
# grid_sample's. Bicubic is 2-D only in PyTorch and ONNX, so it is refused here.
GRID3D_MODES = ("bilinear", "nearest")


def _check_volume_attrs(attrs):
    if attrs["mode"] == "bicubic":
        raise ValueError("mode 'bicubic' samples 2-D images only (PyTorch and ONNX define no "
                         "tricubic): use 'bilinear' (trilinear) or 'nearest' on a 5-D input")
    _choice(attrs, "mode", GRID3D_MODES)
    _choice(attrs, "padding_mode", GRID_PADDINGS)
    _flag(attrs, "align_corners")


def _volume(name, x, what="input"):
    require_dtypes(name, x, FLOAT_DTYPES, what)
    if x.ndim != 5:
        raise ValueError(f"{what} must be 5-D (N, C, D, H, W), got shape {x.shape}")


def _volume_points(name, x, grid):
    """Validate ``grid`` (N, OD, OH, OW, 3) against the volume ``x``; the sampled type."""
    require_dtypes(name, grid, FLOAT_DTYPES, "grid")
    if grid.ndim != 5 or grid.shape[4] != 3:
        raise ValueError(f"grid must be (N, OD, OH, OW, 3) for a 5-D input, got shape "
                         f"{grid.shape}")
    _same_batch(x, grid, "grid")
    return TensorType((*x.shape[:2], *grid.shape[1:4]), x.dtype)


def _sampled_volume(name, x, grid, dy=None):
    _volume(name, x)
    for side in x.shape[2:]:
        if named(side):  # checked when the name is bound
            require_at_least(side, 1, f"{name}'s volume side")
        elif side == 0:
            raise ValueError(f"input has an empty volume {x.shape[2:]}: there is no voxel to "
                             "sample")
    want = _volume_points(name, x, grid)
    if dy is not None and not same_shape(dy.shape, want.shape, "the output gradient"):
        raise ValueError(f"output gradient has shape {dy.shape}, but sampling a {x.shape} "
                         f"input at a {grid.shape} grid gives {want.shape}")
    return want


def _grid3d_infer(in_types, attrs):
    same_dtype(in_types)
    _check_volume_attrs(attrs)
    return (_sampled_volume("grid_sample3d", *in_types),)


def _grid3d_data_infer(in_types, attrs):  # (grid, dy) -> dx of shape (N, C, *input_dhw)
    grid, dy = in_types
    same_dtype(in_types)
    _check_volume_attrs(attrs)
    _volume("grid_sample3d_backward_data", dy, "output gradient")
    sides = attrs["input_dhw"]
    if not isinstance(sides, tuple) or len(sides) != 3 or not all(
            named(v) or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
            for v in sides):
        raise ValueError(f"input_dhw must be three ints >= 1, got {sides!r}")
    x = TensorType(dy.shape[:2] + sides, dy.dtype)
    _sampled_volume("grid_sample3d_backward_data", x, grid, dy)
    return (x,)


def _grid3d_points_infer(in_types, attrs):  # (x, grid, dy) -> dgrid
    same_dtype(in_types)
    _check_volume_attrs(attrs)
    _sampled_volume("grid_sample3d_backward_grid", *in_types)
    return (in_types[1],)


def _grid3d_grad(node, out_grads):
    # as grid_sample's: dx scatters dy with the sampling's weights; dgrid is the spatial
    # derivative of the interpolation, summed over channels
    x, grid = node.inputs
    (g,) = out_grads
    dx = apply("grid_sample3d_backward_data", (grid, g), input_dhw=tuple(x.shape[2:]),
               **node.attr)
    return dx, apply("grid_sample3d_backward_grid", (x, grid, g), **node.attr)


_GRID3D_ATTRS = {"mode": "bilinear", "padding_mode": "zeros", "align_corners": False}
register(OpDef("grid_sample3d", "nn", _grid3d_infer, attrs=_GRID3D_ATTRS, grad=_grid3d_grad,
               flops_per_element=16.0))
register(OpDef("grid_sample3d_backward_data", "nn", _grid3d_data_infer,
               attrs={**_GRID3D_ATTRS, "input_dhw": REQUIRED}))
register(OpDef("grid_sample3d_backward_grid", "nn", _grid3d_points_infer, attrs=_GRID3D_ATTRS))


# -- region pooling: roi_align and roi_pooling ------------------------------------------------
# rois (K, 5): the batch index of each box's image, then its corners x0, y0, x1, y1 in input
# pixels before ``scale``. The index is truncated toward zero, as MegEngine reads it (its own
# examples pass fractions); one outside [0, N) then fails the run (KernelError): it would read
# past the images.
def _check_roi_attrs(name, attrs):
    _size_pair(attrs, "output_shape")
    _choice(attrs, "mode", ROI_MODES)
    if name.startswith("roi_pooling"):
        _number(attrs, "scale", positive=True)
        return
    _number(attrs, "spatial_scale", positive=True)
    _flag(attrs, "aligned")
    _choice(attrs, "convention", ROI_CONVENTIONS)
    if attrs["sample_points"] != (0, 0):  # (0, 0): ceil(bin size) per axis, per box
        try:
            _size_pair(attrs, "sample_points")
        except ValueError:
            raise ValueError(f"sample_points must be (0, 0) (as many as each bin spans) or a "
                             f"pair of ints >= 1, got {attrs['sample_points']!r}") from None
    if name.startswith("roi_align_backward") and attrs["convention"] == "onnx" \
            and attrs["mode"] == "max":
        raise ValueError("ONNX's max mode (the largest weighted tap of any sample) has no "
                         "gradient")


def _pooled_rois(name, x, rois, attrs):
    _image(name, x)
    _check_roi_attrs(name, attrs)
    require_dtypes(name, rois, FLOAT_DTYPES, "rois")
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise ValueError(f"rois must be (K, 5) rows of (batch index, x0, y0, x1, y1), got "
                         f"shape {rois.shape}")
    return TensorType((rois.shape[0], x.shape[1], *attrs["output_shape"]), x.dtype)


def _roi_infer(name):
    def infer(in_types, attrs):
        x, rois = in_types
        same_dtype(in_types)
        return (_pooled_rois(name, x, rois, attrs),)
    return infer


def _roi_backward_infer(name):
    # (x, rois, dy) -> dx (x gives the shape and, for max, where each bin's maximum was), or
    # -> drois for roi_align_backward_rois
    def infer(in_types, attrs):
        x, rois, dy = in_types
        same_dtype(in_types)
        want = _pooled_rois(name, x, rois, attrs)
        if not same_shape(dy.shape, want.shape, "the region pooling's output gradient"):
            raise ValueError(f"output gradient has shape {dy.shape}, but pooling {rois.shape[0]} "
                             f"regions of a {x.shape} input gives {want.shape}")
        return (rois,) if name.endswith("_rois") else (x,)
    return infer


def _roi_rule(backward, boxes):
    # roi_pooling's boxes get none (a zero gradient): its rounded bins move in steps, so zero
    # is exact almost everywhere. roi_align's samples move with its boxes' corners.
    def grad(node, out_grads):
        x, rois = node.inputs
        inputs = (x, rois, out_grads[0])
        return (apply(backward, inputs, **node.attr),
                apply(boxes, inputs, **node.attr) if boxes else None)
    return grad


def _register_roi(name, attrs, box_gradient):
    backward, boxes = f"{name}_backward", f"{name}_backward_rois" if box_gradient else None
    register(OpDef(name, "nn", _roi_infer(name), attrs=attrs, grad=_roi_rule(backward, boxes),
                   flops_per_element=16.0))
    for op in (backward, boxes) if boxes else (backward,):
        register(OpDef(op, "nn", _roi_backward_infer(op), attrs=attrs))


_register_roi("roi_align", {"output_shape": REQUIRED, "mode": "average", "spatial_scale": 1.0,
                            "sample_points": (2, 2), "aligned": True, "convention": "megengine"},
              box_gradient=True)
_register_roi("roi_pooling", {"output_shape": REQUIRED, "mode": "max", "scale": 1.0},
              box_gradient=False)


# -- nms ------------------------------------------------------------------------------------
def _nms_infer(in_types, attrs):
    boxes, scores = in_types
    same_dtype(in_types)
    require_dtypes("nms", boxes, FLOAT_DTYPES, "boxes")
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must be (N, 4) rows of (x0, y0, x1, y1), got {boxes.shape}")
    if scores.ndim != 1 or not same_shape(scores.shape, boxes.shape[:1], "the scores"):
        raise ValueError(f"scores must be ({boxes.shape[0]},), one per box, got {scores.shape}")
    _number(attrs, "iou_thresh")
    keep = attrs["max_output"]
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValueError(f"max_output must be an int >= 0, got {keep!r}")
    return (TensorType((keep,), np.dtype("int32")),)


def _nms_flops(node) -> float:
    # an IoU (about 8 operations) of each box with each one kept so far, at most
    boxes = node.inputs[0].shape[0]
    return 0.0 if named(boxes) else 8.0 * boxes * max(node.attr["max_output"], 1)


register(OpDef("nms", "nn", _nms_infer, attrs={"iou_thresh": REQUIRED, "max_output": REQUIRED},
               flops=_nms_flops))
