"""Eager dispatch: the graph whose nodes run when they are made.

``EAGER`` is the graph every Tensor belongs to. The functions of ``mgegraph.functional`` build
nodes on it exactly as on a user's graph; its ``add_node`` checks the node with the op's own
rules (the same OpErrors naming the op, the types and the user's line), runs the op's CPU kernel
on the inputs' arrays, and returns output Tensors instead of keeping the node.

What one op needs besides its inputs' arrays (output types, the eager launcher the backend
makes from its kernel and lowering, whether the output is a view) depends only on the op, its
attributes and the input types, so it is made once per such key (``fastpath.Entry``) and reused.
Once made, an op of one output on computed tensors runs in C (eager/fastpath.pyx: Python's
operators on a Tensor and ``add_node``) when nothing records on any thread; the rest runs here.

Recorders see every node that runs while they are active on this thread: a GradManager's tape
(``with gm:``) and a trace. ``mg.lazy()`` makes nodes pending instead (eager/lazy.py).
"""
from __future__ import annotations

import contextlib
import functools
import math
import types

import numpy as np

from .. import backend as _backend
from .. import functional
from ..ir.dims import Dim
from ..ir.errors import GraphError, KernelError, OpError, user_location
from ..ir.graph import Graph, Node, Var, _as_array, install
from ..ir.specialize import holds_dim
from ..ir.types import HALF_DTYPES, TensorType
from ..kernel_abi.status import MESSAGES
from ..ops import get_op
from ..ops.builder import mixing_error
from ..planner.passes.half import backend_runs_half, needs_widening
from ..weight_writes import written
from . import tensor as _tensor

# MODE, Recorder and the recording switches live in mode.py; imported from here too
from .mode import MODE, Recorder, not_recording, recording, value_read  # noqa: F401
from .symbolic_shape import bound_attrs
from .tensor import _IDS, Held, Tensor, fastpath, type_of, wrap, wrap_view

# The device eager tensors live on: its backend makes each op's launcher (``_prepare``)
DEVICE = "cpu"


# What ``add_node`` returns when no Node is kept: its ``outputs`` (a C-made object: cheaper
# to make than an instance of a class of ours; fastpath.Made on the C path)
_Made = types.SimpleNamespace


class EagerGraph(Graph):
    """The graph of eager mode: ``add_node`` runs the node's kernel and keeps nothing.

    Its consts are new Tensors, a Parameter is its own value (``bind``), and ``assign`` copies
    into the target's array (at the end of the outermost optimiser step or module call, so that,
    as in a plan, every read in it sees the state as it was when it began)."""

    eager = True  # what graph_of tells an eager value's graph by

    @property
    def replayed(self) -> bool:
        """Whether a recorder on this thread (a trace) replays the nodes made now."""
        return any(recorder.replays for recorder in MODE.recorders)

    def _add_node(self, op, inputs, attrs, types=None, location=None):
        """``add_node`` in Python: the first call on some types, and every call while a
        recorder or a lazy block is active (fastpath.add_node runs the others)."""
        mode = MODE
        if mode.lazy is not None:
            return mode.lazy.add_node(op, inputs, attrs, location)
        shown = attrs  # what recorders see: a symbolic-shape trace's names kept
        if mode.symbolic_trace is not None and attrs:
            attrs = bound_attrs(attrs, mode.symbolic_trace.bindings)
        for v in inputs:
            if type(v) is not Tensor and not isinstance(v, Tensor):
                raise mixing_error(op, inputs)
            if v._value is None:  # pending in a lazy graph that is no longer recording
                v._array()
        try:
            entry = _ENTRIES[(op, tuple(attrs.items()) if attrs else (), inputs[0].type)
                             if len(inputs) == 1 else
                             (op, tuple(attrs.items()) if attrs else (), *[v.type for v in inputs])]
        except KeyError:
            entry = _prepare(op, inputs, attrs)
        except TypeError:  # an attribute that is not hashable: no memo
            entry = _prepare(op, inputs, attrs, memo=False)
        outputs = entry.run(inputs) if entry.simple else _run(entry, inputs)
        if mode.recorders or len(outputs) > 1:
            location = location or user_location()
            node = Node(entry.opdef, tuple(inputs), entry.attrs if shown is attrs else
                        _completed(entry, shown, location), outputs, location)
            if len(outputs) > 1:  # batch norm's statistics are read through y.node.outputs
                for out in outputs:
                    out.node = node
            for recorder in mode.recorders:
                recorder.record_node(node)
            return node
        return _Made(outputs=outputs)

    add_node = fastpath.add_node if fastpath is not None else _add_node

    def add_copy(self, node, inputs):
        raise GraphError("passes do not run on the eager graph")

    def input(self, name, shape, dtype="float32"):
        raise GraphError("eager mode has no inputs: make a tensor with mg.tensor(array)")

    def param(self, name, value, share=False):
        raise GraphError("eager mode has no graph params: use nn.Parameter(array)")

    def const(self, value, dtype=None) -> Tensor:
        return wrap(_as_array(value, dtype))

    def lift(self, value, like=None) -> Tensor:
        if isinstance(value, Tensor):
            return value
        if isinstance(value, Var):
            raise mixing_error(None, (like, value))
        if type(value) in (float, int, bool):
            # a Python scalar's tensor is made once per (value, dtype): tensors are immutable
            key = _scalar_key(value, None if like is None else like.dtype)
            t = _SCALARS.get(key)
            if t is None:
                t = super().lift(value, like)
                if len(_SCALARS) < MAX_SCALARS:
                    _SCALARS[key] = t
            return t
        if isinstance(value, Dim):  # a named x.shape[0] in a trace(symbolic_shape=...)
            raise GraphError(f"the named dimension {value} is used as a tensor's value (at "
                             f"{user_location()}): a recording with symbolic_shape keeps "
                             "shapes as names, and no op reads a name's size; compute it with "
                             "ops (F.mean instead of a sum divided by x.shape[0]) or pass the "
                             "number as an argument")
        return super().lift(value, like)

    def bind(self, parameter):
        return parameter  # a Parameter is a Tensor: its array is the value

    def assign(self, target, value) -> None:
        if not (isinstance(target, Tensor) and target._held is not None
                and target._value.flags.writeable):
            raise GraphError("assign(): the target must be a Parameter or a state buffer")
        value = self.lift(value, target)
        if value.type != target.type:
            raise GraphError(f"assign(): value {value.type} does not match {target!r:.60} "
                             f"{target.type}")
        mode = MODE
        if mode.lazy is not None:
            mode.lazy.assign(target, value)
            return
        for recorder in mode.recorders:
            recorder.assigned(target, value)
        if mode.update_depth:
            mode.pending.append((target, value))
        else:
            _write(target, value)

    def __str__(self) -> str:
        return "<the eager graph: its nodes run when made>"


EAGER = EagerGraph()
_tensor.EAGER_GRAPH = EAGER
install("eager", EAGER)  # F.zeros(shape) and the other fills without graph= make Tensors


@contextlib.contextmanager
def updates():
    """Defer eager assigns to the end of the outermost ``updates()`` block (an optimiser step,
    a module call); dropped when the block fails, as a failed plan run writes no state."""
    mode = MODE
    mode.update_depth += 1
    ok = False
    try:
        yield
        ok = True
    finally:
        mode.update_depth -= 1
        if mode.update_depth == 0:
            pending, mode.pending = mode.pending, []
            if ok:
                for target, value in pending:
                    _write(target, value)


def _write(target: Tensor, value: Tensor) -> None:
    """Land an eager assign; a tape holding ``target`` keeps the value it recorded."""
    for recorder in MODE.recorders:
        recorder.overwriting(target)
    np.copyto(target._value, value._array(), casting="no")
    written(target._value)


def binary(name: str, a: Tensor, b, swapped: bool = False):
    """``a <name> b`` (``b <name> a`` when ``swapped``) for Python's operators on a Tensor,
    through ``mgegraph.functional`` (its checks, casts and errors): the C path's (fastpath.pyx)
    way when the op is not cached for these types, or something records."""
    fn = getattr(functional, name)
    return fn(b, a) if swapped else fn(a, b)


# -- one op's cached preparation ----------------------------------------------------------------
# A call whose GIL release lets another Python thread run meanwhile (smaller ones keep it: the
# release costs more than it gives).
RELEASE_GIL_BYTES = 1 << 16

_ENTRIES: dict = {}
_SCALARS: dict = {}
MAX_SCALARS = 4096


def _scalar_key(value, dtype):
    # -0.0 == 0.0 (and they hash alike), so a float's sign is part of its key; NaN never
    # equals itself, so it is simply made again each time
    if type(value) is float:
        return (float, value, dtype, math.copysign(1.0, value))
    return (type(value), value, dtype)


def _run(entry, inputs) -> tuple:
    """The outputs of an entry that is not simple: a view, several outputs, a workspace, a
    half-precision op computed in float32."""
    if entry.widened:
        return _run_widened(entry, inputs)
    if entry.view is not None:
        return (_view(inputs[0], entry.view, entry.types[0]),)
    outputs = [np.empty(t.shape, t.dtype) for t in entry.types]
    arrays = (*[v._value for v in inputs], *outputs)
    if entry.workspace:
        held = Held(entry.workspace)  # noqa: F841  (counted while the kernel runs)
        arrays += (np.empty(entry.workspace, np.uint8),)
    status = entry.launcher(arrays)
    if status:
        raise _failure(entry, status, inputs)
    return tuple([wrap(out, t) for out, t in zip(outputs, entry.types)])


def _run_widened(entry, inputs) -> tuple:
    """The op on float32 copies of its half inputs, its results rounded to their half types:
    what the op means on them (ops.registry), as a plan's ``widen_half`` pass runs it. The
    inner ops are not recorded: a tape or trace sees the half op itself."""
    with not_recording():
        wide = [functional.astype(v, np.float32) if v.dtype in HALF_DTYPES else v
                for v in inputs]
        outs = EAGER.add_node(entry.opdef, wide, dict(entry.attrs)).outputs
        return tuple([out if out.dtype == t.dtype else functional.astype(out, t.dtype)
                      for out, t in zip(outs, entry.types)])


def _completed(entry, attrs: dict, location: str) -> tuple:
    """A node's attributes as ``entry`` completes them, from ``attrs`` (that name dims)."""
    return tuple(sorted(entry.opdef.complete_attrs(attrs, entry.in_types, location).items()))


def _failure(entry, status: int, inputs) -> KernelError:
    return KernelError(f"{entry.opdef.name}({', '.join(str(v.type) for v in inputs)}) "
                       f"(kernel {entry.kernel}, at {user_location()}): "
                       f"{MESSAGES.get(status, f'status {status}')}")


def _view(x: Tensor, offset: int, t: TensorType) -> Tensor:
    """``t``'s elements from byte ``offset`` of ``x``'s array, without a copy."""
    array = x._value
    if t.dtype == array.dtype and offset % array.itemsize == 0:
        start = offset // array.itemsize
        flat = array.reshape(-1)
        array = flat[start:start + t.size].reshape(t.shape) if start or t.size != flat.size \
            else array.reshape(t.shape)
    else:
        raw = array.reshape(-1).view(np.uint8)[offset:offset + t.nbytes]
        array = raw.view(t.dtype).reshape(t.shape)
    return wrap_view(array, x, t)


def _prepare(op, inputs, attrs, memo: bool = True):
    opdef = get_op(op) if isinstance(op, str) else op
    location = user_location()
    in_types = tuple(v.type for v in inputs)
    full = opdef.complete_attrs(attrs, in_types, location)
    if opdef.category == "source":
        raise OpError(opdef.name, in_types, "sources are made by mg.tensor and nn.Parameter in "
                      "eager mode", location)
    # (here, once per cached entry: the entries are keyed by the attributes, so an op with a
    # name among them always comes this way; a symbolic trace has bound its names already)
    if any(map(holds_dim, full.values())):
        raise OpError(opdef.name, in_types, "an eager tensor's sizes are numbers: a named "
                      "dimension needs a graph input with named dimensions, or a "
                      "trace(symbolic_shape=True)", location)
    try:
        types = tuple(type_of(t.shape, t.dtype, t.quant) for t in opdef.infer(in_types, full))
    except (ValueError, TypeError) as exc:
        raise OpError(opdef.name, in_types, str(exc), location) from None
    if fastpath is None:
        raise ImportError("eager ops need mgegraph's compiled build (mgegraph.eager.fastpath)")
    entry = fastpath.Entry()
    entry.opdef, entry.attrs, entry.types = opdef, tuple(sorted(full.items())), types
    entry.in_types = in_types
    # lowerings read types and attributes only: placeholder values, so the memo holds no array
    stand_in = Node(opdef, tuple(Var(EAGER, -1, t, None, i) for i, t in enumerate(in_types)),
                    entry.attrs, tuple(Var(EAGER, -1, t, None, i) for i, t in enumerate(types)),
                    location)
    entry.view = opdef.view_offset(stand_in) if inputs else None
    entry.launcher = entry.kernel = None
    entry.workspace = 0
    backend = _device()
    entry.widened = needs_widening(stand_in) and not backend_runs_half(backend, stand_in)
    if entry.view is None and not entry.widened:
        impl = backend.impl(opdef.name)
        if impl is None:
            raise OpError(opdef.name, in_types, f"the {backend.name} backend does not run it",
                          location)
        try:
            kernel = backend.kernel(opdef.name, impl.dispatch_dtype(stand_in))
            launch = impl.lower(stand_in)
        except (ValueError, LookupError) as exc:
            raise OpError(opdef.name, in_types, str(exc), location) from None
        work = sum(t.nbytes for t in in_types + types)
        entry.kernel = kernel.name
        entry.workspace = launch.workspace
        entry.launcher = backend.launcher(kernel, launch, len(inputs), work >= RELEASE_GIL_BYTES)
    entry.ready()
    if memo:
        _ENTRIES[(op, tuple(attrs.items()), *in_types)] = entry
    return entry


@functools.cache
def _device():
    """The backend of eager tensors' device, resolved once (its factory runs on first use)."""
    return _backend.get_backend(DEVICE)


def clear_cache() -> None:
    """Forget every cached op preparation (they are remade on next use)."""
    _ENTRIES.clear()
    _SCALARS.clear()
    if fastpath is not None:
        fastpath.clear()


if fastpath is not None:
    fastpath.install(Tensor, EAGER, _IDS, _ENTRIES, _SCALARS, binary, EagerGraph._add_node,
                     _failure)
