"""``trace``: one decorator turns an eager function of tensors into a compiled plan.

>>> @mg.jit.trace
... def train_step(x, y):
...     with gm:
...         loss = F.cross_entropy(model(x), y)
...         gm.backward(loss)
...     opt.step().clear_grad()
...     return loss

The first call with given input shapes and dtypes runs the function eagerly while a recorder
builds a graph of every op it runs (forward, ``gm.backward``'s gradient ops, the optimiser's
updates as assigns to the shared parameters); the graph is compiled with ``mg.compile`` and the
options given to ``trace``. Later calls with the same shapes, dtypes and non-tensor arguments
run that plan: no Python of the function runs, so its control flow is the one of the recording
call (a warning names the line where it read a value that could change).

Design: every call returns what the plan computes, the recording call included: the eager run
that records lands no state (its assigns are dropped, its optimiser steps uncounted), and the
plan then runs once. A pass may change the arithmetic (a linear layer becomes a packed
convolution, batch norm folds into a convolution), so the eager bits could differ from the
plan's in the last place; this way one function on one input gives the same bits every call.

A traced function called while another trace records, or while a GradManager records, runs
its Python (its ops join theirs), as ``jax.jit`` inlines into an enclosing trace: running its
plan would hand them an opaque value (a constant in the outer plan, no gradient on the tape).

Threads: a plan's run holds its lock, and the run of a recorded training step holds its
optimisers' locks from ``prepare_step`` (the step's scalars) to the end of the run, so calls
from several threads are steps one after another. The first call of a key records under the
traced function's lock (a second thread waits for that plan).

The cache: ``traced.plans`` maps each key (the tensor arguments' shapes and dtypes and which
of them are the same tensor or attached to a GradManager, tensors inside tuples, lists and
dicts included, and the other arguments' types and values) to its recordings, one per train/eval mode of the modules the
function called (``model.eval()`` after training records again rather than rerun the training
form) and per presence of the parameters' grads (a backward adds to the grad a parameter has
when the call starts: a plan input); ``traced.clear_cache()`` empties it, ``traced.plan`` is
the plan of the latest call.

``trace(symbolic_shape=True)`` records dimension 0 of the tensor arguments as names (or the
dimensions a dict names): the key then holds the names, not the sizes, and the plan is a
SymbolicPlan that specialises itself for each size a call brings (eager/symbolic_shape.py).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import warnings
import weakref

import numpy as np

from ..compiler import compile
from ..ir.errors import TraceError, user_location
from ..ir.graph import Graph
from .dispatch import MODE, Recorder, recording
from .grad_manager import is_attached
from .lazy import run_pending
from .mode import hidden
from .symbolic_shape import (
    NamedShapeTensor,
    check_spec,
    name_dims,
    named_shape,
    needing_numbers,
)
from .tensor import Tensor, wrap
from .trace_args import (
    as_tensors,
    flatten,
    named_arguments,
    plan_key,
    unflatten,
    unhashable,
    view_of,
)
from .trace_dump import write_dump


class TraceWarning(UserWarning):
    """A traced function read a value that can change between calls (its branch is fixed)."""


@contextlib.contextmanager
def exclude_from_trace():
    """Ops in the block run eagerly and are not recorded by the traces on this thread: their
    results enter the plan as constants of the recording call (MegEngine's, whose trace reruns
    the Python of every call, runs the block on each; a plan here does not run Python).

    >>> with exclude_from_trace():
    ...     stats.append(float(loss))   # read once, when recording
    """
    with hidden({r for r in MODE.recorders if r.replays}):
        yield


class _Tracer(Recorder):
    """Builds the graph of what one eager call does: every Tensor it touches gets a Var."""

    replays = True

    def __init__(self, capture_as_const: bool, axes: dict, bindings: dict):
        self.graph = Graph()
        self.vars: dict[int, object] = {}    # tensor id -> its Var in the graph
        self.varying: set[int] = set()        # ids of tensors that can differ between calls
        # the tensors whose .grad a run may set: parameters, and the tensor arguments a
        # GradManager has attached (``arguments``: id -> argument name; each call's own)
        self.parameters: dict[int, Tensor] = {}
        self.arguments: dict[int, str] = {}
        self.grads_before: dict[int, object] = {}  # parameter id -> its .grad when first read
        self.grad_feeds: dict[str, object] = {}  # input name -> whose grad it is (_holder)
        self.optimizers: list = []
        self.step_counts: list[int] = []  # each optimiser's step count before the recording
        self.capture_as_const = capture_as_const
        self.warned: set[str] = set()
        self.modules: dict[int, tuple] = {}  # id -> (module, its training flag when called)
        # symbolic_shape: each argument's named axes, the names' sizes in this call, and the
        # tensors made NamedShapeTensors for the recording (put back when it ends)
        self.axes, self.bindings = axes, bindings
        self.named: list[weakref.ref] = []
        # the update depth at which an eager assign would land at once (none inside an
        # enclosing optimiser step or module call, which defer it to their end)
        self.landing_depth = None if MODE.update_depth else MODE.update_depth + 1
        self.constant_updates: list[str] = []  # capture_as_const: the state it cannot update

    def var_of(self, t: Tensor):
        v = self.vars.get(t.id)
        if v is not None:
            return v
        if hasattr(t, "bind_to") and not self.capture_as_const:
            v = self.graph.bind(t)  # shared: the plan reads and updates the Parameter's array
            self.varying.add(t.id)
            self.parameters[t.id] = t
            self.grads_before[t.id] = t.grad
        elif (owner := self._grad_owner(t)) is not None:
            v = self._grad_input(owner, t)
        else:  # a tensor made outside the call (or a frozen parameter): its value now
            v = self.graph.const(t._array())
        self.vars[t.id] = v
        return v

    def _grad_owner(self, t: Tensor):
        """The parameter whose ``.grad`` from before the call ``t`` is (a backward adds to it),
        or None."""
        return next((self.parameters[i] for i, g in self.grads_before.items() if g is t), None)

    def _grad_input(self, p: Tensor, grad: Tensor):
        # each call feeds the grad the parameter has then: as a constant, the plan would add
        # every later gradient to the one of the recording call
        name = f"{getattr(p, 'name', None) or 'param'}.grad"  # (no argument's name has a dot)
        while name in self.graph.inputs:
            name += "_"
        self.grad_feeds[name] = self.holder(p)
        self.varying.add(grad.id)
        return self.graph.input(name, grad.shape, grad.dtype)

    def holder(self, p: Tensor):
        """How a plan finds ``p``, whose grad it sets: the parameter itself, or the name of
        the argument it was (each call sets its own argument's)."""
        return self.arguments.get(p.id, p)

    def input(self, name: str, t: Tensor) -> None:
        shape = named_shape(t.type.shape, self.axes.get(name))
        self.vars[t.id] = self.graph.input(name, shape, t.dtype)
        self.varying.add(t.id)
        if is_attached(t):  # a backward may set its grad: the run sets the argument's
            self.parameters[t.id], self.arguments[t.id] = t, name
            self.grads_before[t.id] = t.grad
        if type(t) is NamedShapeTensor:
            self.named.append(weakref.ref(t))

    def record_node(self, node) -> None:
        ins = [self.var_of(v) for v in node.inputs]
        made = self.graph.add_node(node.op, ins, dict(node.attrs), location=node.location)
        varying = any(v.id in self.varying for v in node.inputs)
        for t, v in zip(node.outputs, made.outputs):
            self._made(t, v, varying)

    def detached(self, new, old) -> None:
        # the same value: as a constant, later calls would get the recording call's
        self._made(new, self.var_of(old), old.id in self.varying)

    def _made(self, t: Tensor, var, varying: bool) -> None:
        self.vars[t.id] = var
        if varying:
            self.varying.add(t.id)
        if var.type.symbolic and type(t) is Tensor:  # its Python shape names dims now
            t.__class__ = NamedShapeTensor
            self.named.append(weakref.ref(t))

    @contextlib.contextmanager
    def named_shapes(self):
        """The block sees the recorded tensors' shapes with names and runs eager ops with
        the numbers; after it, those tensors are plain again."""
        if not self.bindings:
            yield
            return
        before, MODE.symbolic_trace = MODE.symbolic_trace, self
        try:
            yield
        finally:
            MODE.symbolic_trace = before
            for ref in self.named:
                t = ref()
                if t is not None and type(t) is NamedShapeTensor:
                    t.__class__ = Tensor

    def assigned(self, target, value) -> None:
        if self.capture_as_const:
            self._update_of_a_constant(target, value)
            return
        var = self.var_of(target)
        if var.node.op.name != "param":  # updated before in this call: the state's own Var
            var = self.graph.bind(target)
        # eager writes land in order, so a later update of the same state (a module called
        # twice) is the one that stays: it replaces the earlier assign
        earlier = next((n for n in self.graph.assigns if n.inputs[0] is var), None)
        if earlier is not None:
            self.graph.assigns.remove(earlier)
            self.graph.nodes.remove(earlier)
        self.graph.assign(var, self.var_of(value))
        if MODE.update_depth == self.landing_depth:  # eager writes it at once: later ops read
            self.vars[target.id] = self.var_of(value)  # the new value, and so does the plan

    def _update_of_a_constant(self, target, value) -> None:
        """capture_as_const made ``target`` a constant: the plan cannot update it (MegEngine's
        trace runs such a call too, and its dump refuses it; so does ``dump`` here)."""
        update = f"{target!r:.60} (at {user_location()})"
        self.constant_updates.append(update)
        warnings.warn(f"trace(capture_as_const=True): the function updates {update}, which is "
                      "captured as a constant: its plan leaves it as it is, and dump refuses "
                      "the function (call the module's eval() before tracing it for inference)",
                      TraceWarning, stacklevel=4)
        if MODE.update_depth == self.landing_depth:  # the ops after it read the new value
            self.vars[target.id] = self.var_of(value)

    def overwriting(self, target) -> None:
        # eager assigns wait for the plan's run (_no_state_lands): only a write from Python,
        # which a plan cannot replay, lands during a recording
        raise TraceError(f"trace: the traced function writes {target!r:.60} from Python (at "
                         f"{user_location()}); its plan would not: set it outside the function, "
                         "or compute the new value with ops and let an optimiser or an assign "
                         "write it")

    def read(self, t) -> None:
        if t.id not in self.varying:
            return
        where = user_location()
        if where not in self.warned:
            self.warned.add(where)
            warnings.warn(f"trace: the traced function reads a tensor's value at {where}; "
                          "the plan keeps the Python branch this call took, whatever the value "
                          "is in later calls", TraceWarning, stacklevel=3)

    def stepped(self, optimizer) -> None:
        if optimizer not in self.optimizers:
            self.optimizers.append(optimizer)
            self.step_counts.append(optimizer.step_count - 1)  # (told after its step)

    def undo_state(self) -> None:
        """Put back the step counters of the optimisers the recording stepped and the grads of
        the parameters it read: the recording lands no state, the plan's run makes it."""
        for optimizer, count in zip(self.optimizers, self.step_counts):
            optimizer.undo_step(count, optimizer.scalars.value.copy())
        for i, p in self.parameters.items():
            p.grad = self.grads_before[i]

    def module_called(self, module) -> None:
        self.modules.setdefault(id(module), (module, module.training))


class TracedPlan:
    """One recorded call: its plan, which arguments feed which input, and the Python-side
    state a run brings along (optimisers' step counters and scalars, parameters' grads)."""

    def __init__(self, plan, structure, n_results, grads, tracer: _Tracer):
        self.plan, self.structure = plan, structure
        self.feeds = [] if plan is None else _feed_names(plan)
        self.n_results, self.grads = n_results, grads
        self.optimizers = list(tracer.optimizers)
        self.modules = list(tracer.modules.values())  # (module, training) when it was called
        self.grad_feeds = tracer.grad_feeds
        self.attached = sorted(tracer.arguments.values())  # (the key holds them too)
        self.constant_updates = tracer.constant_updates  # (dump refuses a plan that drops any)
        # a grad the run adds to (or makes) needs the grad it started from: its type or None
        self.grads = [(holder, index) for holder, index, _ in grads]
        self.grad_types = [(holder, before) for holder, index, before in grads
                           if index is not None]

    def fits(self, arguments: dict) -> bool:
        """Whether every module the recording called is in the same train/eval mode now, and
        every tensor whose grad it made has a grad (of the same type) or none, as then."""
        return (all(m.training == training for m, training in self.modules)
                and all(_type(_holder(p, arguments).grad) == t for p, t in self.grad_types))

    def run(self, arguments: dict):
        if self.plan is None:
            return unflatten(self.structure, [])
        with contextlib.ExitStack() as held:
            # prepare_step's scalars are the optimiser's, read by the run: no other step may
            # come between (a consistent order of locks: no two runs wait for each other)
            for opt in sorted(self.optimizers, key=id):
                held.enter_context(opt.lock)
            tensors = [wrap(o) for o in self._run_plan(arguments)]
            for p, index in self.grads:
                _holder(p, arguments).grad = None if index is None else tensors[index]
        return unflatten(self.structure, tensors[:self.n_results])

    def _run_plan(self, arguments: dict) -> list:
        saved = [(opt, opt.step_count, opt.scalars.value.copy()) for opt in self.optimizers]
        for opt in self.optimizers:
            opt.prepare_step()
        try:
            return self.plan.run({name: _array(arguments[name]) if name in arguments
                                  else _holder(self.grad_feeds[name], arguments).grad._array()
                                  for name in self.feeds})
        except BaseException:  # a step that did not run is not counted
            for opt, count, scalars in saved:
                opt.undo_step(count, scalars)
            raise


def _check_no_grad_of_a_view(function, views: dict) -> None:
    """A TraceError when the recording's function gave a grad to its view of an argument (it
    attached the argument itself): the caller's tensor would get none."""
    for view in views.values():
        if view.grad is not None:
            raise TraceError(f"trace: {_function_name(function)} attached a tensor argument "
                             f"{view.type} to a GradManager during the call, so its gradient "
                             "would not reach the caller's tensor: attach it before calling "
                             "the traced function (the plan then sets its .grad)")


def _feed_names(plan) -> list[str]:
    """The input names of a Plan or of a SymbolicPlan (a symbolic-shape recording's)."""
    return list(plan.feeds) if hasattr(plan, "feeds") else list(plan.input_types)


def _holder(holder, arguments: dict) -> Tensor:
    """The tensor whose grad a plan sets (``_Tracer.holder``) in the call of ``arguments``."""
    return arguments[holder] if isinstance(holder, str) else holder


def _array(value) -> np.ndarray:
    return value._array() if isinstance(value, Tensor) else np.asarray(value)


def _type(grad):
    return None if grad is None else grad.type


class Traced:
    """A function traced into plans, one per input signature (``trace`` makes it)."""

    def __init__(self, function, symbolic=True, capture_as_const=False, symbolic_shape=False,
                 profiling=False, **compile_options):
        self.function = function
        self.symbolic, self.capture_as_const = symbolic, capture_as_const
        self.symbolic_shape = check_spec(symbolic_shape)
        self.compile_options = compile_options
        self.profiling, self._profile = profiling, None  # the latest call's mg.profile()
        self.signature = inspect.signature(function)
        self.plans: dict[tuple, list[TracedPlan]] = {}
        self._latest: TracedPlan | None = None
        self._recording = threading.RLock()  # one recording per traced function at a time
        functools.update_wrapper(self, function)

    @property
    def plan(self):
        """The Plan of the latest call (``memory_report()``, ``passes_report()``, ``to_dot``...);
        with ``symbolic_shape``, its SymbolicPlan (``.latest``: the plan that call ran)."""
        if self._latest is None:
            raise TraceError(f"trace: {_function_name(self.function)} has not been called yet, so "
                             "it has no plan")
        return self._latest.plan

    def __get__(self, instance, owner=None):
        """``@trace`` on a method: the instance is an argument like any other (its identity
        selects the plan)."""
        if instance is None:
            return self
        return functools.partial(self, instance)

    def dump(self, file, *, arg_names=None, output_names=None, optimize_for_inference=True,
             **megengine_options):
        """Write the latest call's plan as mgegraph's model file (``mg.load`` runs it) to
        ``file``, a path or a binary file object: MegEngine's ``trace.dump``, which needs
        ``capture_as_const=True``. ``arg_names`` names the inputs (the tensor arguments, in
        order; ``arg_0``, ``arg_1``... by default), ``output_names`` the outputs (a dict
        result's keys by default). Returns a ``DumpInfo``. eager/trace_dump.py says which of
        MegEngine's other options mean nothing here.

        >>> predict(x); predict.dump("model.mgm", arg_names=["data"])
        """
        return write_dump(self, file, arg_names, output_names, optimize_for_inference,
                          megengine_options)

    def clear_cache(self) -> None:
        """Forget every plan: the next call records again."""
        self.plans.clear()
        self._latest = None

    def __call__(self, *args, **kwargs):
        if MODE.recorders:  # an enclosing trace or tape sees its ops
            return self.function(*args, **kwargs)
        if not self.profiling:
            return self._call(args, kwargs)
        from ..tools.profiler import profile  # lazy: the profiler sits above eager mode

        with profile() as self._profile:
            return self._call(args, kwargs)

    def _call(self, args, kwargs):
        if not self.symbolic:
            return self.function(*args, **kwargs)
        if MODE.lazy is not None:  # its plan writes and reads state as the block left it
            with _outside_lazy():
                return self._call(args, kwargs)
        if self.capture_as_const and not all(isinstance(a, (Tensor, np.ndarray)) for a in args):
            # dump names the positional arguments as the model's inputs (MegEngine's rule)
            raise TraceError("Only support tensor type args when capture_as_const is enabled")
        bound = self.signature.bind(*args, **kwargs)
        arguments = named_arguments(bound)
        axes, bindings = name_dims(self.symbolic_shape, arguments)
        key = plan_key(arguments, axes)
        traced = self._recorded(key, arguments)
        if traced is None:  # new shapes, or a module switched between train() and eval()
            with self._recording:
                traced = (self._recorded(key, arguments)
                          or self._record(bound, key, axes, bindings))
        self._latest = traced
        return traced.run(arguments)

    def get_profile(self) -> dict:
        """With ``trace(profiling=True)``: the latest call as a Chrome trace (``mg.profile``'s),
        under MegEngine's key ``"profiler"``: the plan run (a recording call's too), or with
        ``symbolic=False`` the plans the eager call ran (eager ops are not timed)."""
        if self._profile is None:
            raise TraceError(f"trace: {_function_name(self.function)} was not traced with "
                             "profiling=True, or has not been called yet")
        return {"profiler": self._profile.chrome_trace()}

    def _recorded(self, key, arguments: dict) -> TracedPlan | None:
        try:
            recorded = self.plans.get(key, ())
        except TypeError:
            raise TraceError(f"trace: {_function_name(self.function)}'s arguments that are not "
                             "tensors select the plan, so they must be hashable: "
                             f"{unhashable(key)} is not (a tuple instead of a list, a "
                             "frozenset instead of a set)") from None
        return next((t for t in recorded if t.fits(arguments)), None)

    def _record(self, bound, key, axes: dict, bindings: dict) -> TracedPlan:
        tracer = _Tracer(self.capture_as_const, axes, bindings)
        views: dict[int, Tensor] = {}  # a named shape's tensor -> the view the function gets

        def view(t: Tensor) -> Tensor:
            if hasattr(t, "bind_to"):
                return t
            if is_attached(t):  # the function gets t itself, whose .grad a GradManager sets
                if bindings and type(t) is Tensor:  # (plain again when the recording ends)
                    t.__class__ = NamedShapeTensor
                return t
            if id(t) not in views:  # (f(x, x): one view, so one input, as without names)
                # the function gets a tensor of its own: a write into it (x[i] = v) makes it a
                # new value inside the function, never the caller's, which the plan then reads
                views[id(t)] = view_of(t, named=bool(bindings))
            return views[id(t)]

        bound.arguments.update({k: as_tensors(v, view) for k, v in bound.arguments.items()})
        for name, value in named_arguments(bound).items():
            if isinstance(value, Tensor):
                tracer.input(name, value)
        try:
            who = f"trace(symbolic_shape=...): {_function_name(self.function)}"
            with recording(tracer), _no_state_lands(), tracer.named_shapes(), \
                    needing_numbers(who, bindings, axes):
                result = self.function(*bound.args, **bound.kwargs)
            _check_no_grad_of_a_view(self.function, views)
            leaves: list = []
            structure = flatten(result, leaves)
            outputs = [tracer.var_of(t) for t in leaves]
            grads = []  # a run sets the grads the recording changed, and only those
            for i, p in tracer.parameters.items():
                if p.grad is tracer.grads_before[i]:
                    continue
                grads.append((tracer.holder(p), None if p.grad is None else len(outputs),
                              _type(tracer.grads_before[i])))
                if p.grad is not None:
                    outputs.append(tracer.var_of(p.grad))
        finally:
            tracer.undo_state()
        if not outputs and tracer.graph.assigns:  # a step that returns nothing: some output
            outputs.append(min((n.inputs[0] for n in tracer.graph.assigns),  # is needed
                               key=lambda v: v.type.nbytes))
        # a function that returns no tensor and updates nothing has nothing to run again
        plan = compile(outputs, **self.compile_options) if outputs else None
        traced = TracedPlan(plan, structure, len(leaves), grads, tracer)
        self.plans.setdefault(key, []).append(traced)
        return traced


def _function_name(function) -> str:
    """How errors name the traced function; a ``functools.partial`` has no ``__qualname__``."""
    return getattr(function, "__qualname__", None) or repr(function)


@contextlib.contextmanager
def _no_state_lands():
    """Eager assigns made in the block never land (the plan's run that follows makes them)."""
    mode = MODE
    mode.update_depth += 1  # assigns wait in mode.pending, as inside an optimiser step
    start = len(mode.pending)
    try:
        yield
    finally:
        del mode.pending[start:]
        mode.update_depth -= 1


@contextlib.contextmanager
def _outside_lazy():
    """Run the block eagerly inside a ``mg.lazy()`` block: what is pending runs first, so it
    reads the state of before the block's writes."""
    run_pending()
    lazy, MODE.lazy = MODE.lazy, None
    try:
        yield
    finally:
        MODE.lazy = lazy


def trace(function=None, *, symbolic: bool = True, capture_as_const: bool = False,
          symbolic_shape=False, optimize=1, memory=None, remat=None, device: str = "cpu",
          check_numerics: bool = False, opt_level: int | None = None, imperative: bool = False,
          without_host: bool = False, graph_opt_config=None, profiling: bool = False):
    """Trace ``function`` into a plan per input signature: ``@trace`` or
    ``@trace(symbolic=True, capture_as_const=False, optimize=..., memory=..., remat=...)``
    (the planner options are ``mg.compile``'s). ``capture_as_const=True`` bakes the
    parameters' current values into the plan as constants (an inference plan with frozen
    weights; the function may then not update them; ``dump`` needs it). ``symbolic=False``
    runs the function eagerly on every call (for debugging a traced function without changing
    its code).

    ``symbolic_shape=True`` records dimension 0 of every tensor argument as a name
    (``batch``), so one recording serves every batch size: its plan is a SymbolicPlan that
    specialises itself per size. ``symbolic_shape={"x": {0: "batch", 1: "seq"}}`` names the
    dimensions given. The function's Python then sees the names in ``x.shape``; where it
    needs a number it raises ``SymbolicShapeError`` (eager/symbolic_shape.py says more).

    MegEngine's options: ``opt_level`` is ``optimize`` (its levels 0-2 are the planner's);
    ``imperative`` (run the recorded ops one by one instead of a compiled graph),
    ``without_host`` (run the Python on the first call only: here always so) and
    ``graph_opt_config`` (its JIT fusion switches; the planner's ``fuse`` pass decides here)
    are accepted and change nothing, for the reasons in the parentheses. ``profiling=True``
    profiles each call's plan run (``get_profile()``: the latest one's).

    >>> @mg.jit.trace(symbolic_shape=True)
    ... def predict(x):
    ...     return model(x.reshape(x.shape[0], -1))
    """
    del imperative, without_host, graph_opt_config  # accepted: see the docstring
    options = {"optimize": optimize if opt_level is None else opt_level, "memory": memory,
               "remat": remat, "device": device, "check_numerics": check_numerics}
    symbolic_shape = check_spec(symbolic_shape)

    def decorate(fn):
        return Traced(fn, symbolic=symbolic, capture_as_const=capture_as_const,
                      symbolic_shape=symbolic_shape, profiling=profiling, **options)

    return decorate if function is None else decorate(function)
