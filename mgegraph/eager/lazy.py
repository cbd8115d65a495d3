"""``with mg.lazy():`` records eager ops instead of running them; the first value Python needs
runs everything pending as one optimised plan.

>>> with mg.lazy():
...     y = F.relu(x @ w + b) * 2      # nothing runs yet
...     print(float(y.sum()))          # one plan: matmul + fused epilogue + sum

Design: the lazy graph is an ordinary Graph; a pending Tensor has a Var in it and no array.
Materialising one compiles the graph for every pending tensor still alive (the others are
dead code the planner drops) and fills them all; later ops start a new graph in which the
now-computed tensors are read in place (shared params, no copy).
"""
from __future__ import annotations

import contextlib
import weakref

from ..compiler import compile
from ..ir.errors import GraphError
from ..ir.graph import Graph, Node
from .dispatch import MODE, _Made
from .tensor import _IDS, Held, Tensor


class LazyGraph:
    def __init__(self, **compile_options):
        self.compile_options = compile_options
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
                from ..ops.builder import mixing_error
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
        t.graph, t.id, t.node, t.index, t.type = _eager(), next(_IDS), None, 0, v.type
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
        if outputs:
            results = compile(outputs, **self.compile_options).run({})
            for t, array in zip(live, results):
                t._value, t._held, t._lazy = array, Held(array.nbytes), None
        self._reset()

    def has_work(self) -> bool:
        return bool(self.graph.assigns) or any(t._value is None for t in self.pending.values())


def _eager():
    from .dispatch import EAGER
    return EAGER


@contextlib.contextmanager
def lazy(**compile_options):
    """Record eager ops in the block instead of running them; a value Python needs (``numpy``,
    ``float``, printing) runs everything pending as one plan, compiled with ``mg.compile``'s
    ``compile_options`` (``optimize``, ``memory``...). State updates made in the block (an
    optimiser step) run when it ends, if no read ran them before."""
    if MODE.lazy is not None:
        raise GraphError("mg.lazy() blocks do not nest")
    if any(type(r).__name__ == "_Tracer" for r in MODE.recorders):
        raise GraphError("mg.lazy() cannot be used inside a traced function (a trace already "
                         "builds one plan)")
    graph = MODE.lazy = LazyGraph(**compile_options)
    try:
        yield graph
    finally:
        MODE.lazy = None
    if graph.graph.assigns:
        graph.materialize()
