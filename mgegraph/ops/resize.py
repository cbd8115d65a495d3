"""Resizing the trailing axes of a tensor by interpolation (nearest, linear, cubic), as ONNX's
Resize defines it, and its gradient, ``resize_backward``.

Each output index ``o`` along a resized axis maps to an input coordinate ``x`` by the
coordinate transformation (``coord``, ONNX's names), with ``scale`` = output / input length
(the caller's scale factor where one was given, as ONNX and PyTorch use it) and ``L`` the
resized length scale * in (the output's length where sizes were given):

    half_pixel            x = (o + 0.5) / scale - 0.5
    half_pixel_symmetric  x = c (1 - out / L) + (o + 0.5) / scale - 0.5,  c = in / 2
    pytorch_half_pixel    x = (o + 0.5) / scale - 0.5 if L > 1 else 0
    align_corners         x = o (in - 1) / (L - 1) if L > 1 else 0
    asymmetric            x = o / scale
    tf_half_pixel_for_nearest  x = (o + 0.5) / scale

Where sizes were given, ``/ scale`` is a product by the input length and one division by the
output's, so an index that lands on an input cell exactly lands there in floating point too
(26 -> 22 cells, nearest: o / (out / in), ONNX's reference arithmetic, and PyTorch's float32
scale read cell 12 at o = 11, not 13). The kernels then read x's taps: nearest one
(``nearest_mode`` rounds x), linear two, cubic four (Keys' kernel with ``cubic_a``: -0.75 is
PyTorch's and ONNX's default). A tap outside the input reads the edge (ONNX's and PyTorch's
rule), or, with ``exclude_outside``, weighs 0 and the others are scaled to sum to 1. A resize
over several axes is separable: an output is the sum over the taps of every axis of the
products of their weights times the input there.

``antialias`` (ONNX opset 18's, PIL's and PyTorch's ``antialias=True``; linear and cubic only):
an axis downscaled by s = scale < 1 stretches the filter by 1 / s: input position p weighs
filter((p - x) * s) (the tent 1 - |d| for linear, Keys' kernel for cubic, 0 past their
radius), over the 2 ceil(R / s) positions nearest x (R the radius: 1, 2), the weights
normalised to sum 1; outside positions read the edge or, with ``exclude_outside``, weigh 0
(PyTorch's clipped window). At s >= 1 this is the plain filter, normalised.

The kernels (mgegraph/_kernels/resize.pyx, csrc_cuda/resize.cu) compute the taps from the same
formulas; the parameter block is mgegraph/kernel_abi/resize.py's. Dtypes: float32, float64 and
uint8 (a camera's frame, forward only). A uint8 resize sums its taps in double exactly as a
float one does, then rounds to nearest, ties to even, saturating to [0, 255] (a cubic overshoot
clips): nearest is an exact copy. PyTorch's uint8 bilinear and bicubic weigh in fixed point
and may differ by 1 (tests/ops/test_resize_u8.py measures it). Not supported:
tf_crop_and_resize (a region of interest). Public
functions: mgegraph/functional/vision.py (``interpolate``); modules: mgegraph/nn/resample.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.types import TensorType
from .builder import apply
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, named, register, require_dtypes

# what a resize reads: uint8 images too (no gradient: resize_backward is float only)
IMAGE_DTYPES = FLOAT_DTYPES + (np.dtype(np.uint8),)

MODES = ("nearest", "linear", "cubic")
COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
          "asymmetric", "tf_half_pixel_for_nearest")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
MAX_AXES = 3  # the kernels' parameter block holds three resized axes
TAPS = {"nearest": 1, "linear": 2, "cubic": 4}

_ATTRS = {"size": REQUIRED, "scale": None, "mode": "linear", "coord": "half_pixel",
          "nearest_mode": "round_prefer_floor", "cubic_a": -0.75, "exclude_outside": False,
          "antialias": False}


def _choice(attrs, key, allowed):
    if attrs[key] not in allowed:
        raise ValueError(f"{key} must be one of {list(allowed)}, got {attrs[key]!r}")


def _check_attrs(x, attrs) -> tuple[int, ...]:
    """The resized sizes, once every attribute is checked against input ``x``."""
    _choice(attrs, "mode", MODES)
    _choice(attrs, "coord", COORDS)
    _choice(attrs, "nearest_mode", NEAREST_MODES)
    size = attrs["size"]
    if (not isinstance(size, tuple) or not 1 <= len(size) <= MAX_AXES
            or not all(isinstance(s, int) and s >= 1 for s in size)):
        raise ValueError(f"size must be 1 to {MAX_AXES} ints >= 1 (the trailing axes' new "
                         f"lengths), got {size!r}")
    if len(size) > x.ndim:
        raise ValueError(f"size {size} resizes {len(size)} axes of a {x.ndim}-D input")
    scale = attrs["scale"]
    if scale is not None and (not isinstance(scale, tuple) or len(scale) != len(size)
                              or not all(isinstance(s, float) and s > 0 for s in scale)):
        raise ValueError(f"scale must be None or {len(size)} floats > 0 (one per resized "
                         f"axis), got {scale!r}")
    if not isinstance(attrs["cubic_a"], float):
        raise TypeError(f"cubic_a must be a float, got {attrs['cubic_a']!r}")
    _check_antialias(attrs)
    return size


def _check_antialias(attrs):
    if not isinstance(attrs["antialias"], bool):
        raise TypeError(f"antialias must be a bool, got {attrs['antialias']!r}")
    if attrs["antialias"] and attrs["mode"] == "nearest":
        raise ValueError("antialias applies to the linear and cubic modes, not nearest")


def _check_sizes(ins, attrs):
    """An input length is never 0, and a scale gives the output length: floor(in * scale), or
    round(in * scale) as ONNX's keep_aspect_ratio_policy rounds."""
    if any(n == 0 for n in ins if not named(n)):
        raise ValueError(f"cannot resize an empty axis: input lengths {ins}")
    if attrs["scale"] is None:
        return
    for n, s, o in zip(ins, attrs["scale"], attrs["size"]):
        if not named(n) and o not in (math.floor(n * s), math.floor(n * s + 0.5)):
            raise ValueError(f"scale {attrs['scale']} resizes lengths {ins} to "
                             f"floor(length * scale), not to size {attrs['size']}")


def _resize_infer(in_types, attrs):
    (x,) = in_types
    require_dtypes("resize", x, IMAGE_DTYPES)
    size = _check_attrs(x, attrs)
    _check_sizes(x.shape[-len(size):], attrs)
    return (TensorType(x.shape[:-len(size)] + size, x.dtype),)


def _resize_backward_infer(in_types, attrs):
    (dy,) = in_types
    require_dtypes("resize_backward", dy, FLOAT_DTYPES)
    size = _check_attrs(dy, attrs)
    if dy.shape[-len(size):] != size:
        raise ValueError(f"the gradient's trailing axes must be the resized size {size}, got "
                         f"shape {dy.shape}")
    input_size = attrs["input_size"]
    if (not isinstance(input_size, tuple) or len(input_size) != len(size)
            or not all(named(n) or (isinstance(n, int) and n >= 1) for n in input_size)):
        raise ValueError(f"input_size must be {len(size)} sizes >= 1, got {input_size!r}")
    _check_sizes(input_size, attrs)
    return (TensorType(dy.shape[:-len(size)] + input_size, dy.dtype),)


# resize is linear in its input: the gradient scatters each output's gradient onto its taps
# (resize_backward, the adjoint), whose own gradient is resize again. A uint8 image has none,
# as a cast to an integer has none: rounding's derivative is 0 wherever it has one
def _resize_grad(node, out_grads):
    if node.inputs[0].dtype.kind != "f":
        return (None,)
    size = node.attr["size"]
    return (apply("resize_backward", out_grads, input_size=node.inputs[0].shape[-len(size):],
                  **node.attr),)


def _resize_backward_grad(node, out_grads):
    attrs = {k: v for k, v in node.attr.items() if k != "input_size"}
    return (apply("resize", out_grads, **attrs),)


def _flops(node) -> float:
    """A multiply and an add per tap of every resized axis, per output element; the antialias
    filter widens a downscaled axis's taps by in / out."""
    a, x = node.attr, node.inputs[0]
    if named(*x.shape):
        return 0.0
    taps = TAPS[a["mode"]] ** len(a["size"])
    if a["antialias"] and node.op.name == "resize":
        ins = x.shape[-len(a["size"]):]
        taps = math.prod(TAPS[a["mode"]] * max(1.0, n / o) for n, o in zip(ins, a["size"]))
    big = max(node.inputs[0].size, node.outputs[0].size)
    return 2.0 * taps * big


register(OpDef("resize", "nn", _resize_infer, attrs=_ATTRS, grad=_resize_grad, flops=_flops))
register(OpDef("resize_backward", "nn", _resize_backward_infer,
               attrs={**_ATTRS, "input_size": REQUIRED}, grad=_resize_backward_grad,
               flops=_flops))
