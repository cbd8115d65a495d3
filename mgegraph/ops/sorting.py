"""Sorting and scans: sort (argsort is its indices), topk, cumsum, cumprod and cumprod's
gradient; kernels _kernels/sorting.pyx and csrc_cuda/sorting.cu, parameter blocks
kernel_abi/sorting.py, ONNX onnx/convert_sorting.py (TopK, CumSum) and onnx/exporter.py.

Order: sort and topk order the last axis ascending (descending=True: the largest first) and are
stable, equal values keeping their order by index (PyTorch's ``stable=True``, ONNX TopK's "lower
index first"); NaN counts as larger than every number, so it sorts last ascending (NumPy) and
first descending (PyTorch). Indices are int32, as MegEngine's.

Scans: cumsum and cumprod run along one axis, accumulating in the input's dtype, in order, as
NumPy does (float32 sums are NumPy's bits). ``exclusive`` leaves each element out of its own
result (ONNX CumSum's attribute), ``reverse`` scans from the end.

Gradients: a sorted value's gradient goes back to the index it came from (scatter_add along the
last axis); cumsum's is the reversed cumsum of the output gradient; cumprod's is its own op,
``cumprod_backward``, which multiplies the product of the elements before each one by a
reverse recurrence over those after it, so zeros in the input need no division (PyTorch's
results where an input is 0).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Var
from ..ir.types import TensorType
from .builder import apply, apply_multi
from .movement_api import squeeze, swapaxes
from .registry import (
    NUMERIC_DTYPES,
    REQUIRED,
    OpDef,
    named,
    normalize_axis,
    register,
    require_dtypes,
    same_shape,
)

__all__ = ["argsort", "cumprod", "cumsum", "sort", "topk"]

INDEX_DTYPE = np.dtype(np.int32)  # MegEngine's sort and topk indices
INDEX_LIMIT = int(np.iinfo(np.int32).max) + 1  # an axis of up to this many values


def _flag(attrs, key: str) -> bool:
    value = attrs[key]
    if not isinstance(value, bool):
        raise TypeError(f"{key} must be a bool, got {value!r}")
    return value


def _rows_input(name: str, x: TensorType) -> int:
    require_dtypes(name, x, NUMERIC_DTYPES)
    if x.ndim < 1:
        raise ValueError(f"{name} orders the last axis: the input must be at least 1-d, got a "
                         "scalar")
    n = x.shape[-1]
    if not named(n) and n > INDEX_LIMIT:
        raise ValueError(f"the last axis has {n} values; int32 indices cover at most {INDEX_LIMIT}")
    return n


def _sort_infer(in_types, attrs):
    (x,) = in_types
    _rows_input("sort", x)
    _flag(attrs, "descending")
    return x, TensorType(x.shape, INDEX_DTYPE)


def _topk_infer(in_types, attrs):
    (x,) = in_types
    n, k = _rows_input("topk", x), attrs["k"]
    _flag(attrs, "descending")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    if not named(n) and k > n:
        raise ValueError(f"k={k} is larger than the last axis ({n} values)")
    shape = x.shape[:-1] + (int(k),)
    return TensorType(shape, x.dtype), TensorType(shape, INDEX_DTYPE)


def _ordered_grad(node, out_grads):
    g = out_grads[0]
    if g is None:
        return (None,)
    (x,) = node.inputs
    return (apply("scatter_add", (g, node.outputs[1]), axis=x.ndim - 1, shape=x.shape),)


def _sort_flops(node) -> float:
    # about n log2 n comparisons per row
    n = node.inputs[0].shape[-1]
    if named(*node.inputs[0].shape):
        return 0.0
    return node.inputs[0].size * max(math.log2(max(n, 1)), 1.0)


ORDER_ATTRS = {"descending": False}
register(OpDef("sort", "nn", _sort_infer, attrs=ORDER_ATTRS, grad=_ordered_grad,
               flops=_sort_flops))
register(OpDef("topk", "nn", _topk_infer, attrs={"k": REQUIRED, **ORDER_ATTRS},
               grad=_ordered_grad, flops=_sort_flops))


# -- scans ------------------------------------------------------------------------------------
def _scan_infer(name: str):
    def infer(in_types, attrs):
        x = in_types[0]
        require_dtypes(name, x, NUMERIC_DTYPES)
        axis = attrs["axis"]
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"axis must be an int, got {axis!r}")
        normalize_axis(int(axis), x.ndim)
        _flag(attrs, "exclusive")
        _flag(attrs, "reverse")
        for other in in_types[1:]:  # cumprod_backward's output gradient
            if other.dtype != x.dtype or not same_shape(other.shape, x.shape, "the gradient"):
                raise ValueError(f"the output gradient {other} must have the input's type {x}")
        return (x,)
    return infer


def scan_axis(node) -> int:
    """The non-negative axis a scan node runs along."""
    return normalize_axis(int(node.attr["axis"]), node.inputs[0].ndim)


def _cumsum_grad(node, out_grads):
    attrs = dict(node.attr, reverse=not node.attr["reverse"])
    return (apply("cumsum", (out_grads[0],), **attrs),)


def _cumprod_grad(node, out_grads):
    return (apply("cumprod_backward", (node.inputs[0], out_grads[0]), **node.attr),)


SCAN_ATTRS = {"axis": REQUIRED, "exclusive": False, "reverse": False}
register(OpDef("cumsum", "reduce", _scan_infer("cumsum"), attrs=SCAN_ATTRS, grad=_cumsum_grad,
               inplace=True))
register(OpDef("cumprod", "reduce", _scan_infer("cumprod"), attrs=SCAN_ATTRS,
               grad=_cumprod_grad, inplace=True))
# Inputs x and the output gradient; no gradient rule: cumprod differentiates once.
register(OpDef("cumprod_backward", "reduce", _scan_infer("cumprod_backward"), attrs=SCAN_ATTRS,
               flops_per_element=3))


# -- public functions -------------------------------------------------------------------------
def _number(value):
    """A NumPy integer as a Python int; anything else as it is, for the shape rule to judge
    (a float is refused there, not truncated here)."""
    return int(value) if isinstance(value, np.integer) else value


def sort(inp: Var, descending: bool = False, dim: int = -1) -> tuple[Var, Var]:
    """Axis ``dim`` (MegEngine's name; the last by default) sorted, and the int32 indices along
    it that sort it (stable; NaN largest). ``values, indices = F.sort(x, True, 0)``"""
    if inp.ndim == 0:
        return apply_multi("sort", (inp,), descending=bool(descending))  # the rule refuses it
    moved = swapaxes(inp, dim, -1)
    values, indices = apply_multi("sort", (moved,), descending=bool(descending))
    return swapaxes(values, dim, -1), swapaxes(indices, dim, -1)


def argsort(inp: Var, descending: bool = False) -> Var:
    """The int32 indices that sort the last axis, as ``sort``'s. ``order = F.argsort(scores)``"""
    return sort(inp, descending)[1]


def topk(inp: Var, k: int, descending: bool = False, kth_only: bool = False,
         no_sort: bool = False) -> tuple[Var, Var]:
    """The k smallest values of the last axis (``descending=True``: the k largest), in order,
    and their int32 indices; ``kth_only``: the k-th alone, the last axis dropped. ``no_sort``
    allows any order (these are sorted anyway). A k larger than the axis takes the whole axis
    (MegEngine's rule). ``top, idx = F.topk(logits, 5, descending=True)``
    """
    k = _number(k)  # the shape rule refuses anything but an int >= 1, naming the op
    if isinstance(k, int) and inp.ndim and isinstance(inp.shape[-1], int):
        k = min(k, inp.shape[-1])
    values, indices = apply_multi("topk", (inp,), k=k, descending=bool(descending))
    if kth_only:
        last = [slice(None)] * (inp.ndim - 1) + [slice(k - 1, k)]
        return squeeze(values[tuple(last)], -1), squeeze(indices[tuple(last)], -1)
    return values, indices


def cumsum(inp: Var, axis: int) -> Var:
    """Running sums along ``axis``, in the input's dtype and order (NumPy's float32 bits).
    ``F.cumsum(x, axis=1)``"""
    return apply("cumsum", (inp,), axis=_number(axis))


def cumprod(inp: Var, axis: int) -> Var:
    """Running products along ``axis``, in the input's dtype and order. ``F.cumprod(x, 0)``"""
    return apply("cumprod", (inp,), axis=_number(axis))
