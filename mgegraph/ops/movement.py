"""Movement ops: reshape views, strided copies (transpose, broadcast_to, slice), concat, split,
pad, gather/take, one_hot, fills (fill, arange, linspace), and the adjoints their gradients need
(slice_backward, pad_backward, index_add, scatter_add): what each means (shape rules, gradients,
view rules). The public functions are in mgegraph.ops.movement_api, which builds on this module;
the CPU lowerings are in mgegraph/_kernels/lowering/movement.py.

Design: reshape and the functions built on it (flatten, expand_dims, squeeze, subscript's axis
changes) are views, as is a slice that is one contiguous run of its input: the plan aliases the
input buffer and no kernel runs.

Design: each gradient rule is the adjoint op of its forward op, and each adjoint op's own rule is
the forward op again (slice <-> slice_backward, pad <-> pad_backward, take <-> index_add,
gather <-> scatter_add), so gradients of any order stay within this family.
"""
from __future__ import annotations

import functools
import itertools
import math
import numbers
import operator

import numpy as np

from ..ir.dims import Dim, ceil_div, is_known_nonnegative
from ..ir.facts import require_at_least, require_equal
from ..ir.graph import Graph, Var, eager_graph
from ..ir.types import INT_DTYPES, TensorType, as_dim, as_dtype, broadcast_shapes, tensor_type
from .builder import apply, apply_multi
from .registry import (
    NUMERIC_DTYPES,
    REQUIRED,
    OpDef,
    named,
    register,
    require_dtypes,
    same_shape,
    whole_input,
)

# The pad modes; a backend maps them to its kernels' codes (the CPU lowering checks on import
# that _kernels/movement.pyx implements exactly these).
PAD_MODES = ("constant", "edge", "reflect")
PAD_MODES += ("wrap",)  # NumPy's and ONNX's: the axis repeated, as on a torus


def _shape_attr(shape) -> tuple[int | Dim, ...]:
    dims = (shape,) if isinstance(shape, (numbers.Integral, np.integer, Dim)) else tuple(shape)
    if not all(isinstance(d, Dim) or (isinstance(d, (numbers.Integral, np.integer))
                                      and not isinstance(d, bool)) for d in dims):
        raise TypeError(f"a shape must be a sequence of ints and named dimensions, got "
                        f"{shape!r}")
    return tuple(d if isinstance(d, Dim) else int(d) for d in dims)


def axis_index(axis, ndim: int) -> int:
    """A non-negative axis; unlike registry.normalize_axis a 0-d input has none."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {ndim}-d input")
    return axis % ndim


def _same_shape(t: TensorType, shape) -> TensorType:
    return TensorType(tuple(shape), t.dtype)


# -- nodes the gradient rules (and the public functions) build ----------------------------------
def reshaped(x: Var, shape) -> Var:
    """``x`` as ``shape``: a reshape view, or ``x`` itself when it has that shape already."""
    shape = tuple(shape)
    return x if x.shape == shape else apply("reshape", (x,), shape=shape)


def no_input_node(graph, op: str, **attrs) -> Var:
    """The output of a new ``op`` node without inputs (fill, arange, linspace) in ``graph``
    (None: the eager graph, which runs it at once)."""
    if graph is None:
        graph = eager_graph()
    if not isinstance(graph, Graph):
        raise TypeError(f"{op} has no input Var, so it needs graph=<mgegraph.Graph>, got {graph!r}")
    (out,) = graph.add_node(op, (), attrs).outputs
    return out




def full_node(shape, value, dtype, graph) -> Var:
    """``shape`` filled with ``value`` cast to ``dtype``: a fill node (no constant stored).
    A dimension may be named (``("batch", 3)``), and ``value`` may be a named size (``batch``:
    the count a mean divides by), which the specialised graph replaces by its number."""
    dtype = as_dtype(dtype)
    shape = (shape,) if isinstance(shape, (str, Dim)) else tuple(shape)
    shape = tuple(as_dim(d, shape) if isinstance(d, str) else d for d in shape)
    if isinstance(value, numbers.Integral) and dtype.kind in "iu":
        value = int(value)  # kept whole: fill's rule refuses one outside the dtype
    elif not isinstance(value, Dim):
        value = np.array(value).astype(dtype).item()
    return no_input_node(graph, "fill", shape=shape, dtype=str(dtype), value=value)


# -- reshape (a view) -------------------------------------------------------------------------
def _reshape_infer(in_types, attrs):
    (x,) = in_types
    shape = list(_shape_attr(attrs["shape"]))
    if shape.count(-1) > 1:
        raise ValueError(f"shape {tuple(shape)} has more than one -1")
    if any(d < -1 for d in shape):
        raise ValueError(f"shape {tuple(shape)} has a negative dimension")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        shape[shape.index(-1)] = _inferred_size(x.size, known, shape)
    total = math.prod(shape)
    if named(total, x.size) and total != x.size:
        require_equal(total, x.size, f"reshape to {_text(shape)}")
    elif total != x.size:
        raise ValueError(f"cannot reshape {x.size} elements into shape {tuple(shape)}")
    return (_same_shape(x, shape),)


def _inferred_size(size, known, shape):
    """The size of reshape's -1: ``size / known``, exactly (a named size divides only where
    the forms show it does: ``12*batch`` by ``batch`` or by 4, not ``batch`` by 2)."""
    if not named(size, known):
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape {size} elements into shape {tuple(shape)}")
        return size // known
    if known == 0:
        raise ValueError(f"cannot reshape {size} elements into shape {_text(shape)}")
    try:
        part = size // known
    except ValueError:  # a DimError: no exact quotient of two named sizes
        part = None
    if part is None or part * known != size:
        raise ValueError(f"cannot infer the -1 of shape {_text(shape)}: {size} elements are "
                         f"not known to be a multiple of {known}")
    return part


def _text(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _reshape_grad(node, out_grads):
    return (apply("reshape", (out_grads[0],), shape=node.inputs[0].shape),)


register(OpDef("reshape", "movement", _reshape_infer, attrs={"shape": REQUIRED}, view=whole_input,
               grad=_reshape_grad))


# -- strided copies: transpose, broadcast_to, slice --------------------------------------------
def transpose_axes(pattern, ndim) -> tuple:
    """Normalised pattern: input axes (non-negative) and "x" for new axes of size 1."""
    axes = tuple("x" if p == "x" else axis_index(p, ndim) for p in pattern)
    if sorted(a for a in axes if a != "x") != list(range(ndim)):
        raise ValueError(f"pattern {tuple(pattern)} must name each of the {ndim} input axes "
                         "exactly once ('x' inserts a new axis)")
    return axes


def _transpose_infer(in_types, attrs):
    (x,) = in_types
    axes = transpose_axes(attrs["pattern"], x.ndim)
    return (_same_shape(x, [1 if a == "x" else x.shape[a] for a in axes]),)


def _transpose_grad(node, out_grads):
    """Drop the inserted axes, then apply the inverse permutation."""
    (x,), (g,) = node.inputs, out_grads
    axes = transpose_axes(node.attr["pattern"], x.ndim)
    kept = [a for a in axes if a != "x"]
    g = reshaped(g, [n for n, a in zip(g.shape, axes) if a != "x"])
    inverse = tuple(kept.index(d) for d in range(x.ndim))
    return (g if inverse == tuple(range(x.ndim)) else apply("transpose", (g,), pattern=inverse),)


def _broadcast_infer(in_types, attrs):
    (x,) = in_types
    shape = _shape_attr(attrs["shape"])
    pad = len(shape) - x.ndim
    if pad < 0 or any(not named(d) and d < 0 for d in shape) or any(
            s not in (1, shape[pad + i]) and not named(s, shape[pad + i])
            for i, s in enumerate(x.shape)):
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}")
    for s, d in zip(x.shape, shape[pad:]):
        if s not in (1, d):  # a named size meets another: they must agree
            require_equal(s, d, f"broadcasting {_text(x.shape)} to {_text(shape)}")
    return (_same_shape(x, shape),)


def slice_ranges(x: TensorType, attrs):
    """(start, length, step) per axis; the attrs follow Python slice semantics (None allowed)."""
    starts, stops, steps = attrs["starts"], attrs["stops"], attrs["steps"]
    if not len(starts) == len(stops) == len(steps) == x.ndim:
        raise ValueError(f"starts, stops and steps need one entry per axis ({x.ndim})")
    ranges = []
    for n, *bounds in zip(x.shape, starts, stops, steps):
        if bounds[2] == 0:
            raise ValueError("slice step cannot be zero")
        if isinstance(n, Dim):
            ranges.append(named_range(n, *bounds))
            continue
        r = range(*slice(*bounds).indices(n))
        ranges.append((r.start, len(r), r.step))
    return ranges


# Design: Python clamps a slice's bounds to the axis (``x[5:]`` of 3 rows is empty). On a
# named axis the clamp depends on the size, so the rule takes the bounds to lie inside it and
# records that (``x[-2:]`` of ``batch`` rows: ``batch >= 2``); the result is then the exact
# formula (``batch - 2`` rows for ``x[2:]``), and a feed that breaks the fact is a FeedError.
def named_range(n: Dim, start, stop, step) -> tuple:
    """(start, length, step) of ``slice(start, stop, step)`` on an axis of named size ``n``,
    recording the facts that keep its bounds inside the axis."""
    step = 1 if step is None else operator.index(step)
    what = f"slicing {start}:{stop}:{step} from an axis of size {n}"
    if step > 0:
        first = _position(n, 0 if start is None else start, what)
        end = n if stop is None else _position(n, stop, what)
        require_at_least(end, first, what)
        return first, ceil_div(end - first, step), step
    first = n - 1 if start is None else _position(n, start, what, inside=True)
    if stop is None:  # down to index 0 included
        return first, first // -step + 1, step
    end = _position(n, stop, what)
    require_at_least(first, end, what)
    return first, ceil_div(first - end, -step), step


def _position(n: Dim, index, what: str, inside: bool = False):
    """Where ``index`` (negative: from the end) lies on an axis of named size ``n``; it must
    lie in [0, n], or in [0, n) when ``inside`` (an element, not a bound)."""
    index = index if isinstance(index, Dim) else operator.index(index)
    at = index if isinstance(index, Dim) or index >= 0 else n + index
    require_at_least(at, 0, what)
    require_at_least(n, at + 1 if inside else at, what)
    return at


def _slice_infer(in_types, attrs):
    (x,) = in_types
    return (_same_shape(x, [length for _, length, _ in slice_ranges(x, attrs)]),)


def _slice_view(node) -> int | None:
    """The window's byte offset when it is one contiguous run of the input (the axes before
    the last cut one taken at a single index, that one cut to a unit-step range, the rest
    whole), else None: then the slice kernel copies."""
    x = node.inputs[0].type
    ranges = slice_ranges(x, node.attr)
    if any(length == 0 for _, length, _ in ranges):
        return 0
    cut = [d for d, r in enumerate(ranges) if r != (0, x.shape[d], 1)]
    if cut:
        _, length, step = ranges[cut[-1]]
        if (length > 1 and step != 1) or any(n != 1 for _, n, _ in ranges[:cut[-1]]):
            return None
    return _element_offset(x.shape, [start for start, _, _ in ranges]) * x.dtype.itemsize


def _element_offset(shape, index) -> int:
    """The position of element ``index`` in a contiguous ``shape``."""
    offset = 0
    for n, i in zip(shape, index):
        offset = offset * n + i
    return offset


def _slice_backward_infer(in_types, attrs):
    (g,) = in_types
    full = TensorType(_shape_attr(attrs["shape"]), g.dtype)
    (window,) = _slice_infer((full,), attrs)
    if not same_shape(window.shape, g.shape, "slice_backward's gradient"):
        raise ValueError(f"slicing shape {full.shape} gives {window.shape}, not the input's "
                         f"{g.shape}")
    return (full,)


_SLICE_ATTRS = ("starts", "stops", "steps")
register(OpDef("transpose", "movement", _transpose_infer, attrs={"pattern": REQUIRED},
               flops_per_element=0, grad=_transpose_grad))
# the walker sums a gradient over the axes its input was broadcast along, so this rule is empty
register(OpDef("broadcast_to", "movement", _broadcast_infer, attrs={"shape": REQUIRED},
               flops_per_element=0, grad=lambda node, out_grads: out_grads))
register(OpDef("slice", "movement", _slice_infer, attrs=dict.fromkeys(_SLICE_ATTRS, REQUIRED),
               view=_slice_view, flops_per_element=0,
               grad=lambda node, out_grads: (apply(
                   "slice_backward", out_grads, shape=node.inputs[0].shape, **node.attr),)))
# slice's adjoint: zeros of `shape` with the input written where slicing `shape` reads
register(OpDef("slice_backward", "movement", _slice_backward_infer,
               attrs={"shape": REQUIRED, **dict.fromkeys(_SLICE_ATTRS, REQUIRED)},
               flops_per_element=0,
               grad=lambda node, out_grads: (apply(
                   "slice", out_grads, **{k: node.attr[k] for k in _SLICE_ATTRS}),)))


# -- concat and split: rows of bytes ----------------------------------------------------------
def _concat_infer(in_types, attrs):
    if not in_types:
        raise ValueError("needs at least one input")
    first = in_types[0]
    axis = axis_index(attrs["axis"], first.ndim)
    for t in in_types[1:]:
        if t.dtype != first.dtype:
            raise TypeError("input dtypes differ; mgegraph.functional.concat promotes them")
        if t.ndim != first.ndim or not same_shape(
                _without(t.shape, axis), _without(first.shape, axis),
                f"concat's axes other than {axis}"):
            raise ValueError(f"shapes must agree except on axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in in_types)
    return (_same_shape(first, shape),)


def _without(shape: tuple, axis: int) -> tuple:
    return shape[:axis] + shape[axis + 1:]


def _split_infer(in_types, attrs):
    (x,) = in_types
    axis = axis_index(attrs["axis"], x.ndim)
    out = []
    for start, stop in attrs["ranges"]:
        if named(start, stop, x.shape[axis]):
            what = f"splitting [{start}, {stop}) from axis {axis} of size {x.shape[axis]}"
            for low, high in ((0, start), (start, stop), (stop, x.shape[axis])):
                require_at_least(high, low, what)
        elif not 0 <= start <= stop <= x.shape[axis]:
            raise ValueError(f"range [{start}, {stop}) is not inside axis {axis} of size "
                             f"{x.shape[axis]}")
        shape = list(x.shape)
        shape[axis] = stop - start
        out.append(_same_shape(x, shape))
    if not out:
        raise ValueError("needs at least one range")
    return tuple(out)


def _concat_grad(node, out_grads):
    axis = axis_index(node.attr["axis"], node.inputs[0].ndim)
    stops = list(itertools.accumulate(v.shape[axis] for v in node.inputs))  # Dims too
    ranges = tuple(zip([0] + stops[:-1], stops))
    return apply_multi("split", out_grads, axis=axis, ranges=ranges)


def _split_grad(node, out_grads):
    """Concat the output gradients back in axis order, zeros where an output or a gap between
    ranges got none. Overlapping ranges (the op allows them) add one scattered window each."""
    (x,) = node.inputs
    axis = axis_index(node.attr["axis"], x.ndim)
    ranges = node.attr["ranges"]
    grads = [g if g is not None else _zeros_like(v) for g, v in zip(out_grads, node.outputs)]
    order, disjoint = _axis_order(ranges, x.shape[axis])
    if not disjoint:
        return (functools.reduce(operator.add, (_embed_along(x, axis, ranges[k], grads[k])
                                                for k in order)),)
    parts, at = [], 0
    for k in order:
        (start, stop), g = ranges[k], grads[k]
        parts += [_zeros_along(x, axis, start - at)] if _some(start - at) else []
        parts += [g] if _some(stop - start) else []
        at = stop
    parts += [_zeros_along(x, axis, x.shape[axis] - at)] if _some(x.shape[axis] - at) else []
    if not parts:
        return (_zeros_like(x),)
    return (parts[0] if len(parts) == 1 else apply("concat", parts, axis=axis),)


def _axis_order(ranges, n) -> tuple[list[int], bool]:
    """The ranges' indices in axis order, and whether they are disjoint. Named bounds cannot be
    sorted before they are bound: they keep the order given (concat's gradient and F.split
    give them in axis order) where the forms show every gap to be a size (>= 0); else they
    count as overlapping, whose gradient needs no order."""
    if not named(n, *(b for r in ranges for b in r)):
        order = sorted(range(len(ranges)), key=lambda k: ranges[k])
        return order, not any(ranges[a][1] > ranges[b][0] for a, b in itertools.pairwise(order))
    bounds = [0, *(b for r in ranges for b in r), n]
    return list(range(len(ranges))), all(
        is_known_nonnegative(high - low) for low, high in itertools.pairwise(bounds))


def _some(size) -> bool:
    """Whether a part of ``size`` rows is made: a named size may be 0 once bound, and its part
    is then empty."""
    return named(size) or size > 0


def _zeros_like(x: Var) -> Var:
    return full_node(x.shape, 0, x.dtype, x.graph)


def _zeros_along(x: Var, axis: int, n: int) -> Var:
    shape = x.shape[:axis] + (n,) + x.shape[axis + 1:]
    return full_node(shape, 0, x.dtype, x.graph)


def _embed_along(x: Var, axis: int, bounds, g: Var) -> Var:
    starts = tuple(bounds[0] if d == axis else 0 for d in range(x.ndim))
    stops = tuple(bounds[1] if d == axis else n for d, n in enumerate(x.shape))
    return apply("slice_backward", (g,), shape=x.shape, starts=starts, stops=stops,
                 steps=(1,) * x.ndim)


register(OpDef("concat", "movement", _concat_infer, attrs={"axis": 0}, flops_per_element=0,
               grad=_concat_grad))
register(OpDef("split", "movement", _split_infer, attrs={"axis": 0, "ranges": REQUIRED},
               flops_per_element=0, grad=_split_grad))


# -- pad -----------------------------------------------------------------------------------------
def _pad_infer(in_types, attrs):
    (x,) = in_types
    widths, mode = attrs["pad_width"], attrs["mode"]
    if mode not in PAD_MODES:
        raise ValueError(f"mode must be one of {sorted(PAD_MODES)}, got {mode!r}")
    if len(widths) != x.ndim or any(len(w) != 2 or min(w) < 0 for w in widths):
        raise ValueError(f"pad_width must be {x.ndim} pairs of non-negative ints, got {widths}")
    for n, w in zip(x.shape, widths):
        if n == 0 and any(w) and mode != "constant":
            raise ValueError(f"{mode} padding cannot extend an empty axis")
    return (_same_shape(x, [n + a + b for n, (a, b) in zip(x.shape, widths)]),)


def _pad_grad(node, out_grads):
    (x,), (g,) = node.inputs, out_grads
    widths, mode = node.attr["pad_width"], node.attr["mode"]
    if not any(a or b for a, b in widths):
        return (g,)
    if mode == "constant":  # a plain strided copy of the interior
        return (apply("slice", (g,), starts=tuple(a for a, _ in widths),
                      stops=tuple(a + n for (a, _), n in zip(widths, x.shape)),
                      steps=(1,) * x.ndim),)
    return (apply("pad_backward", (g,), pad_width=widths, mode=mode),)


def _pad_backward_infer(in_types, attrs):
    (g,) = in_types
    require_dtypes("pad_backward", g, NUMERIC_DTYPES)
    widths = attrs["pad_width"]
    if len(widths) != g.ndim or any(len(w) != 2 for w in widths):
        raise ValueError(f"pad_width must be {g.ndim} pairs of non-negative ints, got {widths}")
    small = _same_shape(g, [n - a - b for n, (a, b) in zip(g.shape, widths)])
    for d in small.shape:
        if named(d):
            require_at_least(d, 0, f"removing pad_width {widths} from {_text(g.shape)}")
    if any(d < 0 for d in small.shape if not named(d)):
        raise ValueError(f"pad_width {widths} is wider than the input shape {g.shape}")
    _pad_infer((small,), {**attrs, "constant_value": 0.0})
    return (small,)


register(OpDef("pad", "movement", _pad_infer,
               attrs={"pad_width": REQUIRED, "mode": "constant", "constant_value": 0.0},
               flops_per_element=0, grad=_pad_grad))
# pad's adjoint: each padded element adds into the input element it was copied from
register(OpDef("pad_backward", "movement", _pad_backward_infer,
               attrs={"pad_width": REQUIRED, "mode": "constant"},
               grad=lambda node, out_grads: (apply(
                   "pad", out_grads, constant_value=0.0, **node.attr),)))


# -- indexing: gather, take, one_hot ------------------------------------------------------------
def _gather_infer(in_types, attrs):
    x, index = in_types
    require_dtypes("gather", index, INT_DTYPES, "index")
    if index.ndim != x.ndim:
        raise ValueError(f"index must have the input's number of dims ({x.ndim}), got "
                         f"{index.ndim}")
    axis = axis_index(attrs["axis"], x.ndim)
    # NumPy's take_along_axis: the other axes broadcast against each other
    others = [(a, b) for i, (a, b) in enumerate(zip(x.shape, index.shape)) if i != axis]
    shape = list(broadcast_shapes(*map(tuple, zip(*others)))) if others else []
    shape.insert(axis, index.shape[axis])
    return (_same_shape(x, shape),)


def _scatter_add_infer(in_types, attrs):
    src, index = in_types
    require_dtypes("scatter_add", src, NUMERIC_DTYPES)
    out = TensorType(_shape_attr(attrs["shape"]), src.dtype)
    (window,) = _gather_infer((out, index), attrs)
    if not same_shape(window.shape, src.shape, "scatter_add's source"):
        raise ValueError(f"gathering from shape {out.shape} gives {window.shape}, not the "
                         f"source's {src.shape}")
    return (out,)


def _take_infer(in_types, attrs):
    x, indices = in_types
    require_dtypes("take", indices, INT_DTYPES, "indices")
    axis = axis_index(attrs["axis"], x.ndim)
    return (_same_shape(x, x.shape[:axis] + indices.shape + x.shape[axis + 1:]),)


def _index_add_infer(in_types, attrs):
    src, indices = in_types
    require_dtypes("index_add", src, NUMERIC_DTYPES)
    require_dtypes("index_add", indices, INT_DTYPES, "indices")
    size, k = attrs["size"], indices.ndim
    if not isinstance(size, Dim) and (not isinstance(size, int) or size < 0):
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    axis = axis_index(attrs["axis"], src.ndim - k + 1)
    if not same_shape(src.shape[axis:axis + k], indices.shape, "index_add's indices"):
        raise ValueError(f"source axes {axis}..{axis + k - 1} must have the indices' shape "
                         f"{indices.shape}")
    return (_same_shape(src, src.shape[:axis] + (size,) + src.shape[axis + k:]),)


def _gather_grad(node, out_grads):
    (x, index), (g,) = node.inputs, out_grads
    axis = axis_index(node.attr["axis"], x.ndim)
    return apply("scatter_add", (g, index), axis=axis, shape=x.shape), None


def _take_grad(node, out_grads):
    (x, indices), (g,) = node.inputs, out_grads
    axis = axis_index(node.attr["axis"], x.ndim)
    return apply("index_add", (g, indices), axis=axis, size=x.shape[axis]), None


def _one_hot_infer(in_types, attrs):
    (x,) = in_types
    require_dtypes("one_hot", x, INT_DTYPES)
    classes = attrs["num_classes"]
    if not isinstance(classes, int) or classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {classes!r}")
    return (_same_shape(x, x.shape + (classes,)),)


# Indices never get a gradient. The adjoints (scatter_add of gather, index_add of take) add into
# zeros, so repeated indices accumulate; their own rules gather/take again, for grad of grad.
register(OpDef("gather", "movement", _gather_infer, attrs={"axis": REQUIRED},
               flops_per_element=0, grad=_gather_grad))
register(OpDef("take", "movement", _take_infer, attrs={"axis": 0}, flops_per_element=0,
               grad=_take_grad))
register(OpDef("scatter_add", "movement", _scatter_add_infer,
               attrs={"axis": REQUIRED, "shape": REQUIRED},
               grad=lambda node, out_grads: (apply(
                   "gather", (out_grads[0], node.inputs[1]), axis=node.attr["axis"]), None)))
register(OpDef("index_add", "movement", _index_add_infer,
               attrs={"axis": REQUIRED, "size": REQUIRED},
               grad=lambda node, out_grads: (apply(
                   "take", (out_grads[0], node.inputs[1]), axis=node.attr["axis"]), None)))
register(OpDef("one_hot", "movement", _one_hot_infer, attrs={"num_classes": REQUIRED},
               flops_per_element=0, grad=lambda node, out_grads: (None,)))


# -- fills: ops without inputs ----------------------------------------------------------------
def _fill_infer(in_types, attrs):
    t = tensor_type(_shape_attr(attrs["shape"]), attrs["dtype"])
    value = attrs["value"]
    # an integer outside the dtype's range would be stored wrapped (NumPy 2's np.full refuses it)
    if t.dtype.kind in "iu" and isinstance(value, numbers.Integral) and \
            not np.iinfo(t.dtype).min <= value <= np.iinfo(t.dtype).max:
        raise ValueError(f"fill value {value} does not fit {t.dtype}")
    return (t,)


def _arange_count(start, stop, step) -> int | Dim:
    if step == 0:
        raise ValueError("step must not be zero")
    if named(start, stop):
        return _named_count(start, stop, step)
    if not all(math.isfinite(v) for v in (start, stop, step)):
        raise ValueError(f"start {start}, stop {stop} and step {step} must be finite")
    return max(0, math.ceil((stop - start) / step))


def _named_count(start, stop, step) -> Dim:
    """arange's length when a bound is a named size (``arange(seq)``): integer bounds and
    step, the range not empty (recorded)."""
    if not all(isinstance(v, (int, Dim)) for v in (start, stop, step)):
        raise ValueError(f"with a named bound, start {start}, stop {stop} and step {step} must "
                         "be integers")
    what = f"arange({start}, {stop}, {step})"
    if step > 0:
        require_at_least(stop, start, what)
        return ceil_div(stop - start, step)
    require_at_least(start, stop, what)
    return ceil_div(start - stop, -step)


# The range kernel computes start + i * step in float64 and casts: integers beyond 2**53 would
# round, and values outside the dtype would saturate where NumPy wraps, so both are refused.
_EXACT_IN_FLOAT64 = 2**53


def _check_int_range(attrs, count: int, dtype: np.dtype):
    # a named length is a size: far inside the exact range, and checked again once bound
    if dtype.kind not in "iu" or count == 0 or named(count):
        return
    start = attrs["start"]
    last = start + (count - 1) * attrs.get("step", 0) if "step" in attrs else attrs["stop"]
    info = np.iinfo(dtype)
    low, high = max(info.min, -_EXACT_IN_FLOAT64), min(info.max, _EXACT_IN_FLOAT64)
    for v in (start, last):
        if not low <= v <= high:
            raise ValueError(f"value {v} is outside [{low}, {high}], the {dtype} values it "
                             "computes exactly")


def _range_infer(name, count):
    def infer(in_types, attrs):
        dtype = as_dtype(attrs["dtype"])
        require_dtypes(name, TensorType((), dtype), NUMERIC_DTYPES, "output")
        n = count(attrs)
        _check_int_range(attrs, n, dtype)
        return (TensorType((n,), dtype),)
    return infer


def _linspace_count(attrs) -> int:
    if isinstance(attrs["num"], Dim):
        return attrs["num"]
    if not isinstance(attrs["num"], int) or attrs["num"] < 0:
        raise ValueError(f"num must be a non-negative int, got {attrs['num']!r}")
    return attrs["num"]


def _no_inputs_grad(node, out_grads):
    return ()


_FILL_ATTRS = {"shape": REQUIRED, "dtype": "float32", "value": 0}
register(OpDef("fill", "movement", _fill_infer, attrs=_FILL_ATTRS, flops_per_element=0,
               grad=_no_inputs_grad))
register(OpDef("arange", "movement",
               _range_infer("arange", lambda a: _arange_count(a["start"], a["stop"], a["step"])),
               attrs={"start": 0, "stop": REQUIRED, "step": 1, "dtype": "float32"},
               grad=_no_inputs_grad))
register(OpDef("linspace", "movement", _range_infer("linspace", _linspace_count),
               attrs={"start": REQUIRED, "stop": REQUIRED, "num": REQUIRED, "dtype": "float32"},
               grad=_no_inputs_grad))

