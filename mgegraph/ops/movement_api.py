"""The public movement functions, re-exported by mgegraph.functional.

Design: these validate user arguments and pick node attributes; the ops themselves, their shape
rules and gradient rules live in mgegraph.ops.movement, which this module builds on (and which
never imports it). Several functions (flip, tile, repeat, roll, stack, subscript) are
compositions of the ops, so their gradients come for free.
"""
from __future__ import annotations

import itertools
import math
import numbers
import operator

import numpy as np

from ..ir.dims import Dim
from ..ir.errors import GraphError, OpError, user_location
from ..ir.graph import Var, value_dtype
from ..ir.types import as_dim, as_dtype
from .builder import apply, apply_multi, graph_of, promote
from .movement import axis_index, full_node, named_range, no_input_node, reshaped
from .registry import named

__all__ = ["reshape", "flatten", "expand_dims", "squeeze", "transpose", "broadcast_to", "concat",
           "stack", "split", "pad", "subscript", "gather", "take", "one_hot", "flip", "tile",
           "repeat", "roll", "full", "zeros", "ones", "full_like", "zeros_like", "ones_like",
           "arange", "linspace", "swapaxes"]


def _fail(op: str, inputs, reason: str):
    """Build-time errors found by a public function read like those of an op's shape rule."""
    raise OpError(op, [v.type for v in inputs], reason, user_location())


def _int_tuple(op: str, inp, values) -> tuple[int, ...]:
    # an eager 0-d Tensor stands for its value (MegEngine's tests pass every argument as one)
    single = isinstance(values, (numbers.Integral, np.integer)) or \
        (isinstance(values, Var) and values.ndim == 0)
    values = (values,) if single else values
    try:
        ints = tuple(operator.index(v) for v in values)
    except TypeError:
        ints = None
    # operator.index takes True for 1: a bool is refused as a dim or an axis, as a float is
    if ints is None or any(isinstance(v, (bool, np.bool_)) for v in values):
        _fail(op, [inp], f"expected an int or a sequence of ints, got {values!r}")
    return ints


def _axes(op: str, inp, axis, ndim: int) -> tuple[int, ...]:
    axes = _int_tuple(op, inp, axis)
    try:
        result = tuple(axis_index(a, ndim) for a in axes)
    except ValueError as exc:
        _fail(op, [inp], str(exc))
    if len(set(result)) != len(result):
        _fail(op, [inp], f"repeated axis in {axis}")
    return result


def reshape(inp, target_shape):
    """Reshape without copying (the result views ``inp``'s buffer); one dimension may be -1,
    and a dimension may be named (``F.reshape(x, (batch, -1))`` with ``batch = x.shape[0]``,
    or the name ``"batch"``).

    >>> y = F.reshape(x, (2, -1))
    """
    return apply("reshape", (inp,), shape=_shape_tuple("reshape", inp, target_shape))


def _shape_tuple(op: str, inp, values) -> tuple:
    """A target shape: ints, ``Dim``s and names as text (``"batch"``)."""
    items = (values,) if isinstance(values, (numbers.Integral, np.integer, Dim, str)) else \
        tuple(values)
    if not any(isinstance(v, (Dim, str)) for v in items):
        return _int_tuple(op, inp, values)  # the messages of an all-int shape stay as they were
    dims = []
    for v in items:
        if isinstance(v, (Dim, str)):
            try:
                dims.append(as_dim(v, items))
            except GraphError as exc:
                _fail(op, [inp], str(exc))
        elif isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_)):
            dims.append(int(v))
        else:
            _fail(op, [inp], f"expected ints and named dimensions, got {values!r}")
    return tuple(dims)


def flatten(inp, start_axis=0, end_axis=-1):
    """Merge axes ``start_axis..end_axis`` (inclusive) into one. ``F.flatten(x, 1)``"""
    if inp.ndim == 0:
        return reshaped(inp, (1,))
    start, end = (_axes("flatten", inp, a, inp.ndim)[0] for a in (start_axis, end_axis))
    if start > end:
        _fail("flatten", [inp], f"start_axis {start_axis} comes after end_axis {end_axis}")
    s = inp.shape
    return reshaped(inp, s[:start] + (math.prod(s[start:end + 1]),) + s[end + 1:])


def expand_dims(inp, axis):
    """Insert axes of size 1 at ``axis`` (int or tuple, positions in the result)."""
    ndim = inp.ndim + len(_int_tuple("expand_dims", inp, axis))
    new = set(_axes("expand_dims", inp, axis, ndim))
    dims = iter(inp.shape)
    return reshaped(inp, [1 if d in new else next(dims) for d in range(ndim)])


def squeeze(inp, axis=None):
    """Remove axes of size 1: all of them, or those in ``axis``, which must have size 1."""
    axes = [d for d, n in enumerate(inp.shape) if n == 1] if axis is None else \
        _axes("squeeze", inp, axis, inp.ndim)
    for d in axes:
        if inp.shape[d] != 1:
            _fail("squeeze", [inp], f"cannot squeeze axis {d} of size {inp.shape[d]}")
    return reshaped(inp, [n for d, n in enumerate(inp.shape) if d not in axes])


def transpose(inp, pattern):
    """Permute axes; ``pattern=None`` reverses them and ``"x"`` inserts a new axis of size 1.

    >>> F.transpose(x, (1, "x", 0)).shape  # x: (2, 3) -> (3, 1, 2)
    """
    if pattern is None:
        pattern = tuple(reversed(range(inp.ndim)))
    if len(pattern) == 1 and isinstance(pattern[0], (tuple, list)):
        pattern = pattern[0]  # Var.transpose((1, 0)) as well as Var.transpose(1, 0)
    pattern = tuple("x" if p == "x" else _int_tuple("transpose", inp, p)[0] for p in pattern)
    if pattern == tuple(range(inp.ndim)):
        return inp
    return apply("transpose", (inp,), pattern=pattern)


def swapaxes(inp, axis1, axis2):
    """``inp`` with two axes exchanged (a transpose). ``F.swapaxes(x, 0, -1)``"""
    a, b = (_axes("swapaxes", inp, axis, inp.ndim)[0] for axis in (axis1, axis2))
    pattern = list(range(inp.ndim))
    pattern[a], pattern[b] = b, a
    return transpose(inp, pattern)


def broadcast_to(inp, shape):
    """Broadcast to ``shape`` by NumPy's rules (copies; size-1 axes are read with stride 0); a
    ``None`` keeps the size of the input's axis it lines up with (MegEngine's rule), and a size
    may be an eager 0-d Tensor. ``F.broadcast_to(x, (4, None, 3))``"""
    shape = _shape_tuple("broadcast_to", inp, _kept_sizes(inp, _listed(shape)))
    return inp if inp.shape == shape else apply("broadcast_to", (inp,), shape=shape)


def _listed(shape):
    """A shape given as a 1-d Tensor (``F.ones(x.shape)`` where shapes are tensors) as a tuple
    of its sizes; anything else as it came."""
    if isinstance(shape, Var) and shape.ndim == 1:
        return tuple(shape)  # 0-d items, each read by operator.index where its size is needed
    if isinstance(shape, Var) and shape.ndim == 0:
        return (shape,)  # one size, as an int is
    return shape


def _kept_sizes(inp, shape):
    """``None`` in a target shape replaced by the size of the input's axis it lines up with,
    counting from the right; a ``None`` with no axis there is refused."""
    if shape is None or isinstance(shape, (numbers.Integral, np.integer, str, Dim, Var)):
        return shape
    shape = tuple(shape)
    lead = len(shape) - inp.ndim
    for i, size in enumerate(shape):
        if size is None and i < lead:
            _fail("broadcast_to", [inp], f"None at position {i} of {shape} keeps an input "
                  f"size, but the input's {inp.ndim} axes line up with the last {inp.ndim}")
    return tuple(inp.shape[i - lead] if size is None else size for i, size in enumerate(shape))


def concat(inps, axis=0, device=None):
    """Join along an existing axis; dtypes are promoted as NumPy does. ``device`` is
    MegEngine's, and eager values live in host memory (``check_host_device``).

    >>> F.concat([a, b], axis=1)
    """
    check_host_device("concat", device)
    inps = list(inps)
    if not inps:
        raise ValueError("concat needs at least one input")
    inps = promote(*inps)
    return inps[0] if len(inps) == 1 else apply("concat", inps, axis=axis)


def stack(inps, axis=0, device=None):
    """Join equally shaped inputs along a new axis. ``F.stack([a, b], axis=-1)``"""
    check_host_device("stack", device)
    inps = promote(*inps)
    if len({v.shape for v in inps}) != 1 and not all(
            _agree(v.shape, inps[0].shape) for v in inps[1:]):
        _fail("stack", inps, "all inputs must have the same shape")
    (axis,) = _axes("stack", inps[0], axis, inps[0].ndim + 1)
    return concat([expand_dims(v, axis) for v in inps], axis)


def _agree(a: tuple, b: tuple) -> bool:
    """Shapes equal, or equal once named sizes that differ in form agree: the concat that
    stacks them records that fact."""
    return len(a) == len(b) and all(x == y or named(x, y) for x, y in zip(a, b))


def _split_ranges(inp, sections, n: int):
    if isinstance(sections, (numbers.Integral, np.integer)):
        k = int(sections)
        if k < 1 or (named(n) and (named(n % k) or n % k)):  # a named size: where its form shows
            why = f" ({n} is not known to be a multiple of {k})" if named(n) and k >= 1 else ""
            _fail("split", [inp], f"axis of size {n} cannot be split into {k} equal parts{why}")
        if 0 < n < k:  # an empty axis splits into empty parts, as before
            _fail("split", [inp], f"axis of size {n} cannot be split into {k} non-empty parts")
        # MegEngine's rule where k does not divide n: the first n % k parts get one more
        # (20 into 3: 7, 7, 6)
        bounds = [i * (n // k) + min(i, n % k) for i in range(k + 1)]
        return tuple(itertools.pairwise(bounds))
    if named(n):  # as slicing does: the points must lie inside the axis (the rule records it)
        points = (0, *(p if p >= 0 else n + p for p in _int_tuple("split", inp, sections)), n)
        return tuple(itertools.pairwise(points))
    # MegEngine's rule: part i is x[points[i]:points[i + 1]], the points in order inside the
    # axis (a negative one counts from the end, as an index does)
    points = (0, *(p + n if p < 0 else p for p in _int_tuple("split", inp, sections)), n)
    if any(b < a for a, b in itertools.pairwise(points)):
        _fail("split", [inp], f"split points {list(sections)} must be in order and inside the "
              f"axis of size {n}")
    return tuple(itertools.pairwise(points))


def split(inp, nsplits_or_sections, axis=0):
    """Split into a list of parts: an int is a number of parts, equal where they divide the
    axis and else one larger for the first ``size % n`` (MegEngine's rule), a list holds split
    indices as in ``numpy.split``, in order and inside the axis (MegEngine's rule).
    ``a, b = F.split(x, [2], axis=1)``"""
    (axis,) = _axes("split", inp, axis, inp.ndim)
    ranges = _split_ranges(inp, nsplits_or_sections, inp.shape[axis])
    return list(apply_multi("split", (inp,), axis=axis, ranges=ranges))


def _pad_width(src, pad_width):
    ndim = src.ndim
    if isinstance(pad_width, (numbers.Integral, np.integer)):
        return ((int(pad_width),) * 2,) * ndim
    pad_width = tuple(pad_width)
    if len(pad_width) == 2 and all(isinstance(p, (numbers.Integral, np.integer))
                                   for p in pad_width):
        return (_int_tuple("pad", src, pad_width),) * ndim  # NumPy's (before, after) for all
    pairs = tuple(_int_tuple("pad", src, p) for p in pad_width)
    return pairs + ((0, 0),) * (ndim - len(pairs))  # MegEngine: missing trailing axes unpadded


def pad(src, pad_width, mode="constant", constant_value=0.0):
    """Pad with ``pad_width`` (per-axis (before, after) pairs from the first axis, as MegEngine;
    an int or one pair pads every axis, as NumPy). Modes: constant, edge (or replicate),
    reflect, wrap, in any case ("CONSTANT", as MegEngine takes them).

    >>> F.pad(x, ((1, 1), (2, 0)), mode="reflect")
    """
    mode = mode.lower() if isinstance(mode, str) else mode
    mode = "edge" if mode == "replicate" else mode
    return apply("pad", (src,), pad_width=_pad_width(src, pad_width), mode=mode,
                 constant_value=float(constant_value))


def _index_items(inp, index) -> list:
    items = list(index) if isinstance(index, tuple) else [index]
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not (
                item is None or item is Ellipsis or isinstance(item, slice)
                or isinstance(item, (numbers.Integral, np.integer))):
            _fail("subscript", [inp], f"unsupported index {item!r}: use ints, slices, None and "
                  "..., or F.take / F.gather for index arrays")
    if sum(item is Ellipsis for item in items) > 1:
        _fail("subscript", [inp], "an index can only have a single ellipsis")
    used = sum(item is not None and item is not Ellipsis for item in items)
    if used > inp.ndim:
        _fail("subscript", [inp], f"too many indices ({used}) for a {inp.ndim}-d input")
    fill = [slice(None)] * (inp.ndim - used)
    if Ellipsis in items:
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        return items[:at] + fill + items[at + 1:]
    return items + fill


def _index_bounds(inp, item, axis: int):
    """(start, stop, step) for the slice op, the kept length or None, and whether it is a no-op."""
    n = inp.shape[axis]
    if named(n):
        return _named_index_bounds(inp, item, n)
    if isinstance(item, slice):
        try:
            r = range(*item.indices(n))
        except (TypeError, ValueError) as exc:
            _fail("subscript", [inp], f"bad slice {item}: {exc}")
        return (item.start, item.stop, item.step), len(r), len(r) == n and (n < 2 or r.step == 1)
    i = operator.index(item)
    if not -n <= i < n:
        _fail("subscript", [inp], f"index {i} is out of range for axis {axis} of size {n}")
    return (i % n, i % n + 1, 1), None, n == 1


def _named_index_bounds(inp, item, n):
    """``_index_bounds`` on an axis of named size ``n``: the slice op's rule records where the
    bounds must lie (``x[-1]`` needs ``n >= 1``, ``x[2:]`` gives ``n - 2`` rows)."""
    if isinstance(item, slice):
        try:
            _, length, _ = named_range(n, item.start, item.stop, item.step)
        except (TypeError, ValueError) as exc:
            _fail("subscript", [inp], f"bad slice {item}: {exc}")
        return (item.start, item.stop, item.step), length, item == slice(None)
    i = operator.index(item)
    return (i, None if i == -1 else i + 1, 1), None, False


def subscript(inp, index):
    """``inp[index]`` with ints (negative too; each removes its axis), slices with any step,
    ``...`` and ``None`` (a new axis): one ``slice`` node plus a view for removed/added axes.
    An integer Var or array as the whole index takes rows: ``x[ids]`` is ``F.take(x, ids, 0)``.

    >>> y = x[1, ::-2, None]
    """
    if isinstance(index, Var) or (isinstance(index, (list, np.ndarray))
                                  and np.asarray(index).dtype.kind in "iu"):
        return take(inp, index, axis=0)
    bounds, shape, trivial = [], [], True
    for item in _index_items(inp, index):
        if item is None:
            shape.append(1)
            continue
        b, length, same = _index_bounds(inp, item, len(bounds))
        bounds.append(b)
        shape += [] if length is None else [length]
        trivial &= same
    x = inp
    if not trivial:
        starts, stops, steps = zip(*bounds)
        x = apply("slice", (inp,), starts=starts, stops=stops, steps=steps)
    return reshaped(x, shape)


def gather(inp, axis, index):
    """``out[..., i, ...] = inp[..., index[..., i, ...], ...]`` along ``axis``, as
    ``numpy.take_along_axis`` (negative indices count from the end; the other axes broadcast).

    >>> F.gather(x, 1, idx)  # x: (N, C), idx: (N, 1) int32 -> (N, 1)
    """
    return apply("gather", (inp, index), axis=axis)


def take(inp, indices, axis=None):
    """``numpy.take``: rows of ``inp`` along ``axis`` (the flattened input when None) picked by
    integer ``indices`` of any shape; negative indices count from the end."""
    g = graph_of(inp)
    indices = g.const(np.asarray(indices, np.int64)) if not isinstance(indices, Var) else indices
    if axis is None:
        inp, axis = reshaped(inp, (inp.size,)), 0
    return apply("take", (inp, indices), axis=axis)


def one_hot(inp, num_classes):
    """One-hot rows of an int32/int64 input, in the input's dtype (as MegEngine)."""
    try:
        num_classes = operator.index(num_classes)
    except TypeError:
        raise GraphError(f"one_hot: num_classes must be an int, got {num_classes!r} "
                         f"(at {user_location()})") from None
    return apply("one_hot", (inp,), num_classes=num_classes)


def flip(inp, axis):
    """Reverse the order of elements along ``axis`` (int or tuple)."""
    axes = _axes("flip", inp, axis, inp.ndim)
    return subscript(inp, tuple(slice(None, None, -1) if d in axes else slice(None)
                                for d in range(inp.ndim)))


def tile(inp, reps):
    """Repeat the whole input ``reps[i]`` times along axis i, as ``numpy.tile``."""
    reps = _int_tuple("tile", inp, reps)
    ndim = max(len(reps), inp.ndim)
    reps = (1,) * (ndim - len(reps)) + reps
    shape = (1,) * (ndim - inp.ndim) + inp.shape
    x = reshaped(inp, [d for n in shape for d in (1, n)])
    x = broadcast_to(x, [d for r, n in zip(reps, shape) for d in (r, n)])
    return reshaped(x, [r * n for r, n in zip(reps, shape)])


def repeat(inp, repeats, axis=None):
    """Repeat each element ``repeats`` times along ``axis`` (the flattened input when None)."""
    if axis is None:
        inp, axis = reshaped(inp, (inp.size,)), 0
    (axis,) = _axes("repeat", inp, axis, inp.ndim)
    s = inp.shape
    x = broadcast_to(reshaped(inp, s[:axis + 1] + (1,) + s[axis + 1:]),
                     s[:axis + 1] + (operator.index(repeats),) + s[axis + 1:])
    return reshaped(x, s[:axis] + (s[axis] * operator.index(repeats),) + s[axis + 1:])


def roll(inp, shift, axis=None):
    """Roll elements along ``axis`` (int or tuple, with a shift each); None rolls the flat input.
    Each axis is one split into two parts and one concat."""
    if axis is None:
        return reshaped(roll(reshaped(inp, (inp.size,)), shift, 0), inp.shape)
    shifts, axes = _int_tuple("roll", inp, shift), _axes("roll", inp, axis, inp.ndim)
    if len(shifts) != len(axes):
        _fail("roll", [inp], f"shift {shift} and axis {axis} differ in length")
    x = inp
    for s, d in zip(shifts, axes):
        n = x.shape[d]
        if named(n) and s:
            _fail("roll", [inp], f"rolling axis {d} of named size {n}: where it is cut depends "
                  "on the size, known only when it is bound")
        if n and s % n:
            cut = n - s % n
            head, tail = apply_multi("split", (x,), axis=d, ranges=((cut, n), (0, cut)))
            x = apply("concat", (head, tail), axis=d)
    return x


# -- fills -----------------------------------------------------------------------------------
def check_host_device(op: str, device) -> None:
    """MegEngine's ``device=``: eager values live in host memory, so it may name the CPU
    ("cpu0", "cpux", "xpux", or an object that prints so) or be None; a GPU runs compiled
    plans (``mg.compile(device="cuda")``)."""
    if device is None or str(device).lower().startswith(("cpu", "xpu")):
        return
    raise GraphError(f"{op}(device={device!r}): eager values live in host memory (device "
                     f"'cpu0', 'cpux' or 'xpux'); compile a plan with mg.compile(..., "
                     f"device='cuda') to run on a GPU (at {user_location()})")


def shape_sizes(shape):
    """A fill's shape: an int, a sequence (of ints, names, 0-d Tensors) or a 1-d Tensor."""
    shape = _listed(shape)
    if isinstance(shape, (numbers.Integral, np.integer, str, Dim)):
        return (shape,)
    return tuple(d if isinstance(d, (str, Dim)) else _size(d) for d in shape)


def _size(d):
    try:
        return operator.index(d)  # an eager 0-d Tensor gives its value here
    except TypeError:
        return d  # fill's rule names what it refuses


def full(shape, value, dtype=None, *, graph=None, device=None):
    """A tensor of ``shape`` filled with ``value``, made by a fill kernel (no constant stored),
    in ``graph``; without one, an eager Tensor (as are ``zeros``, ``ones``, ``arange`` and
    ``linspace`` without ``graph=``). Without ``dtype``, the one a tensor made of ``value``
    gets (MegEngine's rule: ``True`` makes bool, ``4`` an integer).

    >>> F.full((2, 3), 7, "int32", graph=g)
    """
    check_host_device("full", device)
    if dtype is None:
        dtype = value_dtype(value)
    return full_node(shape_sizes(shape), value, dtype, graph)


def zeros(shape, dtype="float32", *, graph=None, device=None):
    return full(shape, 0, dtype, graph=graph, device=device)


def ones(shape, dtype="float32", *, graph=None, device=None):
    return full(shape, 1, dtype, graph=graph, device=device)


def full_like(inp, value):
    """Shape and dtype of ``inp`` filled with ``value``; does not depend on ``inp``'s values."""
    return full(inp.shape, value, inp.dtype, graph=inp.graph)


def zeros_like(inp):
    return full_like(inp, 0)


def ones_like(inp):
    return full_like(inp, 1)


def arange(start=0, stop=None, step=1, dtype="float32", *, graph=None, device=None):
    """Values ``start, start + step, ...`` below ``stop`` (``arange(n)`` counts from 0).

    >>> F.arange(5, graph=g)
    """
    check_host_device("arange", device)
    if stop is None:
        start, stop = 0, start
    start, stop, step = (_bound("arange", name, v) for name, v in
                         (("start", start), ("stop", stop), ("step", step)))
    return no_input_node(graph, "arange", start=start, stop=stop, step=step,
                         dtype=str(as_dtype(dtype)))


def linspace(start, stop, num, dtype="float32", *, graph=None, device=None):
    """``num`` evenly spaced values from ``start`` to ``stop``, both included."""
    check_host_device("linspace", device)
    start, stop = _bound("linspace", "start", start), _bound("linspace", "stop", stop)
    num = num if isinstance(num, Dim) else operator.index(num)  # a Dim: a named count
    return no_input_node(graph, "linspace", start=start, stop=stop, num=num,
                         dtype=str(as_dtype(dtype)))


def _bound(op: str, name: str, value):
    """A bound of ``arange``/``linspace`` as a number: a NumPy scalar's, or an eager one-value
    Tensor's (MegEngine takes Tensors there); a graph's Var, known only when the plan runs,
    cannot set the op's values and length."""
    if isinstance(value, np.generic):
        return value.item()
    if not isinstance(value, Var):
        return value
    if not value.graph.eager:
        raise OpError(op, (value.type,), f"{name} must be a number or an eager Tensor, not a "
                      f"value of a graph", user_location())
    if value.size != 1:
        raise OpError(op, (value.type,), f"{name} must be a single value, got shape "
                      f"{value.shape}", user_location())
    return value.item()
