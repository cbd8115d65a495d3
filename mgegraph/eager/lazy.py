"""``with mg.lazy():`` records eager ops instead of running them; the first value Python needs
runs everything pending as one optimised plan.

>>> with mg.lazy():
...     y = F.relu(x @ w + b) * 2      # nothing runs yet
...     print(float(y.sum()))          # one plan: matmul + fused epilogue + sum

Design: the lazy graph is an ordinary Graph; a pending Tensor has a Var in it and no array.
Materialising one compiles the graph for every pending tensor still alive (the others are
dead code the planner drops) and fills them all; later ops start a new graph in which the
now-computed tensors are read in place (shared params, no copy).

Pending work sees the state of its recording: the graph reads parameters in place, so nothing
stays pending past the block (its end runs what is left), and a write that does not go
through the graph (``param.value = ...``, a traced step's plan) runs what is pending first.
A block that raises leaves nothing pending: its state updates are dropped, and a value of it
read later raises a GraphError. A run that fails (a kernel refusing a value) raises; the state
updates recorded with it never run again (those its plan made before the failing instruction
stay made, as after any plan's failed run), and each value still pending then runs on its own,
so only the values that depend on the failing op raise when read.
"""
from __future__ import annotations

import contextlib
import weakref

from ..compiler import compile
from ..ir.errors import GraphError
from ..ir.graph import Graph, Node
from ..ops.builder import mixing_error
from ..weight_writes import on_before_writes
from .dispatch import EAGER, MODE, _Made
from .tensor import _IDS, Held, Tensor


class LazyGraph:
    def __init__(self, **compile_options):
        self.compile_options = compile_options
        self.running = False  # while its own plan runs
        self._reset()

    def _reset(self) -> None:
        self.graph = Graph()
        self.vars: dict[int, object] = {}
        self.pending: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.captured: list = []  # tensors the graph reads in place, kept alive meanwhile

    def var_of(self, t: Tensor):
        if t._lazy is self:
            return self.vars[t.id]
        if t._value is None:  # pending in another lazy graph
            t._array()
        v = self.vars.get(t.id)
        if v is None:
            if hasattr(t, "bind_to"):
                v = self.graph.bind(t)
            elif t._value.flags.writeable:
                v = self.graph.param(f"tensor{t.id}", t._value, share=True)
                self.captured.append(t)
            else:
                v = self.graph.const(t._value)
            self.vars[t.id] = v
        return v

    def add_node(self, op, inputs, attrs, location=None):
        for v in inputs:
            if not isinstance(v, Tensor):
                raise mixing_error(op, inputs)
        made = self.graph.add_node(op, [self.var_of(v) for v in inputs], attrs,
                                   location=location)
        outputs = tuple(self._pending(v) for v in made.outputs)
        if MODE.recorders or len(outputs) > 1:
            node = Node(made.op, tuple(inputs), made.attrs, outputs, made.location)
            for out in outputs if len(outputs) > 1 else ():
                out.node = node
            for recorder in MODE.recorders:
                recorder.record_node(node)
            return node
        return _Made(outputs=outputs)

    def _pending(self, v) -> Tensor:
        t = Tensor.__new__(Tensor)
        t.graph, t.id, t.node, t.index, t.type = EAGER, next(_IDS), None, 0, v.type
        t._value, t._held, t._base, t._lazy, t.grad = None, None, None, self, None
        self.vars[t.id] = v
        self.pending[t.id] = t
        return t

    def assign(self, target, value) -> None:
        self.graph.assign(self.var_of(target), self.var_of(value))

    def materialize(self) -> None:
        """Run everything pending (every pending tensor still alive gets its value)."""
        live = [t for t in self.pending.values() if t._value is None]
        outputs = [self.vars[t.id] for t in live]
        if not outputs and self.graph.assigns:
            outputs = [self.graph.assigns[0].inputs[0]]
        self.running = True
        try:
            if outputs:
                _fill(live, compile(outputs, **self.compile_options).run({}))
        except BaseException as exc:
            self._drop_assigns()  # run once at most, even when the run failed
            if isinstance(exc, Exception):
                self._one_by_one(live)
            else:  # interrupted: nothing more runs now
                self.drop(f"the run of mg.lazy()'s pending values was interrupted "
                          f"({type(exc).__name__}) before it computed this one")
            raise
        finally:
            self.running = False
            self._reset()

    def _drop_assigns(self) -> None:
        assigns = {id(node) for node in self.graph.assigns}  # (nodes with no output)
        self.graph.nodes = [n for n in self.graph.nodes if id(n) not in assigns]
        self.graph.assigns = []

    def _one_by_one(self, live) -> None:
        """Compute each of ``live`` on its own; one that fails raises its error when read."""
        for t in live:
            try:
                _fill([t], compile([self.vars[t.id]], **self.compile_options).run({}))
            except Exception as exc:  # noqa: BLE001  (raised when the value is read)
                t._lazy = _Failed(f"the value pending in mg.lazy() ({t.type}) could not be "
                                  f"computed: {type(exc).__name__}: {exc}")

    def drop(self, reason: str) -> None:
        """Forget everything pending (its state updates too); its values raise when read."""
        for t in list(self.pending.values()):
            if t._value is None:
                t._lazy = _Failed(reason)
        self._reset()

    def has_work(self) -> bool:
        if self.running:  # its own plan's writes: what it computes is this work
            return False
        return bool(self.graph.assigns) or any(t._value is None for t in self.pending.values())


def run_pending() -> None:
    """Run what this thread's ``mg.lazy()`` block left pending, if anything: called before a
    write that is no op of the lazy graph (``param.value = ...``, a compiled step's run), as the
    pending ops read the parameters in place and must see them as they were recorded."""
    graph = MODE.lazy
    if graph is not None and graph.has_work():
        graph.materialize()


on_before_writes(run_pending)


def _fill(tensors, arrays) -> None:
    for t, array in zip(tensors, arrays):
        t._value, t._held, t._lazy = array, Held(array.nbytes), None


class _Failed:
    """A pending tensor's ``_lazy`` once its graph can no longer compute it: reading the tensor
    raises a GraphError saying why."""

    def __init__(self, reason: str):
        self.reason = reason

    def materialize(self) -> None:
        raise GraphError(self.reason)

    def has_work(self) -> bool:
        return False


@contextlib.contextmanager
def lazy(**compile_options):
    """Record eager ops in the block instead of running them; a value Python needs (``numpy``,
    ``float``, printing) runs everything pending as one plan, compiled with ``mg.compile``'s
    ``compile_options`` (``optimize``, ``memory``...). What is still pending when the block
    ends (values, state updates such as an optimiser step) runs then; if the block raises, it
    is dropped instead."""
    if MODE.lazy is not None:
        raise GraphError("mg.lazy() blocks do not nest")
    if any(type(r).__name__ == "_Tracer" for r in MODE.recorders):
        raise GraphError("mg.lazy() cannot be used inside a traced function (a trace already "
                         "builds one plan)")
    graph = MODE.lazy = LazyGraph(**compile_options)
    try:
        yield graph
    except BaseException as exc:
        graph.drop(f"the mg.lazy() block that recorded this value raised {type(exc).__name__} "
                   f"({exc!s:.200}) before it was computed, so it never was; the block's state "
                   "updates were dropped too")
        raise
    finally:
        MODE.lazy = None
    graph.materialize()  # what is pending reads the state the block left, not a later one
