"""A whole training step as one plan, a predictor that shares the weights, and a data loader."""
from __future__ import annotations

import contextlib
import sys
import time

import numpy as np

from . import functional as F
from .autodiff import backward
from .compiler import compile
from .eager.lazy import run_pending
from .eager.symbolic_shape import check_spec, name_dims, named_shape, needing_numbers
from .ir.dims import Dim
from .ir.errors import FeedError, GraphError
from .ir.graph import Graph
from .ir.types import is_float


def _inputs(graph: Graph, arrays, dynamic, what: str) -> list:
    """The graph's inputs ``input0, input1...`` of the examples' shapes and dtypes, with the
    dimensions ``dynamic`` names (``{"input0": {0: "batch"}}``; True: dimension 0 of every
    input, equal sizes sharing a name, eager/symbolic_shape.py's rule) as names."""
    examples = {f"input{i}": np.asarray(a) for i, a in enumerate(arrays)}
    axes, _ = name_dims(check_spec(dynamic, what), examples, what)
    return [graph.input(name, named_shape(a.shape, axes.get(name)), a.dtype)
            for name, a in examples.items()]


def _named_axes(inputs) -> dict:
    """{input name: {axis: name}} of the graph inputs ``inputs`` (for messages)."""
    named = {}
    for var in inputs:
        axes = {i: str(d) for i, d in enumerate(var.shape) if isinstance(d, Dim)}
        if axes:
            named[var.node.attr["name"]] = axes
    return named


class TrainStep:
    """``loss = step(x, y)`` runs forward, backward and the optimiser update as one plan."""

    def __init__(self, plan, optimizer, metric_names, first_check=None,
                 running=contextlib.nullcontext):
        self.plan, self.optimizer, self.metric_names = plan, optimizer, metric_names
        # run on the first call's batch (the ranks of a data-parallel step agree), then dropped
        self._first_check = first_check
        self._running = running  # a context around each run (a data-parallel step's progress)

    def __call__(self, *batch):
        feeds = {f"input{i}": np.asarray(a) for i, a in enumerate(batch)}
        if self._first_check is not None:
            self._first_check(list(feeds.values()))
            self._first_check = None
        opt = self.optimizer
        # what mg.lazy() left pending may read the scalars prepare_step writes from Python
        # (the run's own weight writes wait for it in the executor: before_writes)
        run_pending()
        with opt.lock:  # the scalars prepare_step writes are the ones this run reads
            saved = (opt.step_count, opt.scalars.value.copy())
            opt.prepare_step()
            try:
                with self._running():
                    loss, *metrics = self.plan.run(feeds)
            except BaseException:  # a step that did not run is not counted (Adam's bias)
                opt.undo_step(*saved)
                raise
        if not self.metric_names:
            return float(loss)
        return float(loss), {k: float(v) for k, v in zip(self.metric_names, metrics)}


def accuracy(output, target):
    """Fraction of rows whose argmax equals the integer target."""
    hits = F.equal(F.argmax(output, axis=1), F.astype(target, "int64"))
    return F.mean(F.astype(hits, "float32"))


METRICS = {"accuracy": accuracy}


def compile_train_step(model, loss_fn, optimizer, example_batch, metrics=(),
                       memory=None, optimize=1, remat=None, device="cpu",
                       check_numerics=False, dynamic=False, tune=None,
                       all_reduce=None) -> TrainStep:
    """Compile ``loss_fn(model(x), y)``, its gradients and ``optimizer``'s update into one plan.

    ``example_batch`` gives the shapes and dtypes of every batch, except the dimensions
    ``dynamic`` names: True names dimension 0 of every input ``batch`` (inputs of another
    first size ``batch1``...), a dict names chosen ones (``{"input0": {0: "batch"},
    "input1": {0: "batch"}}``). The step's plan is then a SymbolicPlan: a batch of a new size
    (the last, short one of ``DataLoader(drop_last=False)``) runs a plan specialised for it,
    updating the same weights and optimiser state. Off by default: a fixed step's ``plan`` is
    the Plan itself (``instructions``, ``memory_report()``). ``metrics`` names extra
    outputs computed in the same plan (``"accuracy"``); ``memory``, ``optimize``, ``remat``
    (sublinear memory: "sqrt", "auto" or a byte budget), ``device`` (one of
    ``mg.devices()``), ``check_numerics`` (a NumericsError at the first NaN/inf any
    instruction writes, before it reaches the weights) and ``tune`` (the measured choice of
    the kernels' ways: "measure", "cached", "rules") are passed to ``mg.compile``. The
    model's parameters are updated in place, so ``model.state_dict()`` and plans from
    ``compile_module`` see the trained weights.

    ``all_reduce`` (a ``mgegraph.distributed.AllReduce``; needs ``dist.init_process_group``)
    makes it a data-parallel step: every gradient is averaged (or summed) over the group's
    ranks inside the plan, in buckets whose reductions overlap the rest of the backward pass,
    before the update; the first step refuses ranks whose batches or gradients differ.

    >>> step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x, y))
    >>> loss = step(x, y)
    """
    model.train()
    g = Graph()
    what = "compile_train_step(dynamic=...)"
    *xs, y = _inputs(g, example_batch, dynamic, what)
    with needing_numbers(what, g.dim_names, _named_axes(xs + [y])):
        out = model(*xs)
        loss = loss_fn(out, y)
        if loss.size != 1 or not is_float(loss.dtype):
            raise ValueError(f"loss_fn must return a floating-point scalar, got {loss.type}")
        params = optimizer.params
        wrt = [g.bind(p) for p in params]
        found = backward(g.nodes, [(loss, F.ones_like(loss))], wrt)
        # as an eager step skips a parameter without .grad, one that no gradient reaches (a
        # frozen batch norm's weight) is not updated: no weight decay, no momentum
        grads = {id(p): found[v.id] for p, v in zip(params, wrt) if v.id in found}
        if all_reduce is not None:
            grads = all_reduce.reduced(grads)
        optimizer.build(g, grads)
        extra = [METRICS[m](out, y) for m in metrics]
    plan = compile([F.reshape(loss, ())] + extra, device=device, memory=memory,
                   optimize=optimize, remat=remat, check_numerics=check_numerics, tune=tune)
    first_check, running = None, contextlib.nullcontext
    if all_reduce is not None:
        running = all_reduce.running
        grad_types = [(tuple(v.shape), str(v.dtype)) for v in grads.values()]

        def first_check(batch):
            all_reduce.check([(a.shape, str(a.dtype)) for a in batch] + grad_types)
    return TrainStep(plan, optimizer, tuple(metrics), first_check, running)


class Predictor:
    def __init__(self, plan):
        self.plan = plan

    def __call__(self, *inputs):
        outs = self.plan.run({f"input{i}": np.asarray(a) for i, a in enumerate(inputs)})
        return outs[0] if len(outs) == 1 else outs


def compile_module(model, example_inputs, memory=None, optimize=1, remat=None,
                   device="cpu", check_numerics=False, freeze=False, dynamic=False,
                   warm=(), bounds=None, tune=None) -> Predictor:
    """Compile ``model(*inputs)`` for evaluation, reading the model's current weights;
    ``memory``, ``optimize``, ``remat``, ``device``, ``check_numerics``, ``freeze`` and
    ``tune`` (the measured choice of the kernels' ways: "measure", "cached", "rules") are
    passed to ``mg.compile`` (an inference graph has no backward part, so remat finds nothing
    to recompute).

    ``dynamic`` names dimensions of the inputs ``input0, input1...``, whose sizes then come
    from each call: ``{"input0": {0: "batch"}}``, or True for dimension 0 of every input
    (``batch``; an input of another first size in the examples gets ``batch1``...). The
    predictor's plan is then a SymbolicPlan, specialised on the first call at each size;
    ``warm=[{"batch": 1}]`` and ``bounds={"batch": (1, 256)}`` go to ``mg.compile``.

    Without ``freeze`` the predictor shares the model's weights: it sees every training step,
    ``load_state_dict`` and ``param.value = ...`` (what reads only weights, such as batch-norm
    folding's scaled weights, reruns once after such a write, not on every call). With
    ``freeze=True`` it holds a copy of the weights as they are now, folded into the plan once.

    Call ``model.eval()`` first for inference-form batch norm and dropout.

    >>> predict = mg.compile_module(model, example_inputs=(x,)); logits = predict(x)
    >>> predict = mg.compile_module(model, (x,), dynamic=True); predict(x[:1])  # any batch
    """
    g = Graph()
    what = "compile_module(dynamic=...)"
    xs = _inputs(g, example_inputs, dynamic, what)
    with needing_numbers(what, g.dim_names, _named_axes(xs)):
        out = model(*xs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return Predictor(compile(outs, device=device, memory=memory, optimize=optimize,
                             remat=remat, check_numerics=check_numerics, freeze=freeze,
                             warm=warm, bounds=bounds, tune=tune))


class DataLoader:
    """Batches over NumPy arrays: ``for x, y in DataLoader((X, Y), 64, shuffle=True, seed=0)``.

    A fixed ``seed`` gives the same order every epoch sequence; the epoch number is mixed in so
    epochs differ from each other.
    """

    def __init__(self, arrays, batch_size: int, shuffle: bool = False, drop_last: bool = False,
                 seed: int = 0):
        self.arrays = [np.asarray(a) for a in arrays]
        if not self.arrays or any(a.ndim == 0 for a in self.arrays):
            raise GraphError("DataLoader: arrays must be one or more arrays of at least 1 "
                             f"dimension, got shapes {[a.shape for a in self.arrays]}")
        if len({len(a) for a in self.arrays}) != 1:
            raise GraphError("DataLoader: arrays must have the same length, got lengths "
                             f"{[len(a) for a in self.arrays]}")
        if isinstance(batch_size, (bool, np.bool_)) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise GraphError(f"DataLoader: batch_size must be an int >= 1, got {batch_size!r}")
        batch_size = int(batch_size)
        self.batch_size, self.shuffle, self.drop_last, self.seed = batch_size, shuffle, drop_last, seed
        self.epoch = 0

    def __len__(self):
        n = len(self.arrays[0])
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.arrays[0])
        order = np.arange(n)
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.epoch)).permutation(n)
        self.epoch += 1
        for b in range(len(self)):
            index = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield tuple(np.ascontiguousarray(a[index]) for a in self.arrays)


def fit(step: TrainStep, loader: DataLoader, epochs: int, log=sys.stderr, scheduler=None):
    """Run ``epochs`` over ``loader`` with a one-line progress display: loss, accuracy, steps/s.

    Batches of another size than the compiled batch (the last one without drop_last) are
    skipped, unless the step names its batch (``compile_train_step(dynamic=True)``).
    Returns the mean loss of each epoch.
    """
    want = _batch_size(step.plan)
    history = []
    for epoch in range(epochs):
        start, losses, accs = time.perf_counter(), [], []
        for i, batch in enumerate(loader):
            if not isinstance(want, Dim) and len(batch[0]) != want:
                continue
            result = step(*batch)
            loss, metrics = result if isinstance(result, tuple) else (result, {})
            losses.append(loss)
            if "accuracy" in metrics:
                accs.append(metrics["accuracy"])
            if scheduler is not None:
                scheduler.step()
            rate = len(losses) / (time.perf_counter() - start)
            acc = f" acc {np.mean(accs):.3f}" if accs else ""
            print(f"\repoch {epoch + 1}/{epochs} [{i + 1}/{len(loader)}] loss {np.mean(losses):.4f}"
                  f"{acc} {rate:.0f} steps/s", end="", file=log, flush=True)
        print(file=log)
        if not losses:
            n = len(loader.arrays[0])
            raise FeedError(f"fit: epoch {epoch + 1} ran no step: the step was compiled for "
                            f"batches of {want}, the loader gives {n} samples in batches of "
                            f"{loader.batch_size} (drop_last={loader.drop_last}); every batch "
                            f"smaller than {want} is skipped")
        history.append(float(np.mean(losses)))
    return history


def _batch_size(plan) -> int | Dim:
    """Dimension 0 of a training step's first input: a number, or a name (a SymbolicPlan's)."""
    if hasattr(plan, "input_types"):
        return plan.input_types["input0"].shape[0]
    return plan.slots[plan.feeds["input0"]].type.shape[0]
