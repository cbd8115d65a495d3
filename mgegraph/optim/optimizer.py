"""Optimisers whose updates are graph nodes, so a training step is one plan.

Design: an optimiser keeps its state (momentum, moments) in Buffers and its per-step scalars
(learning rate, bias corrections) in one small shared array that ``prepare_step`` rewrites in
Python before each run. The plan reads them like any param, so a schedule changes the learning
rate without recompiling, and the update nodes assign new values in place at the end of the run.
Those scalars are shared by every run of the optimiser's steps, so a step holds ``lock`` from
``prepare_step`` to the end of its run (an eager step here, a traced one in eager/trace.py):
steps from several threads come one after another, each with its own scalars.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from .. import functional as F
from ..compiler import compile
from ..eager.dispatch import EAGER, MODE, updates
from ..ir.errors import GraphError
from ..ir.graph import Graph
from ..nn.module import Buffer, Parameter
from ..weight_writes import written


class ParamTypeError(GraphError, TypeError):
    """An optimiser was given something other than trainable Parameters."""


def check_number(owner: str, what: str, value, low: float = 0.0, high: float | None = None,
                 open_high: bool = False) -> float:
    """``value`` as a float, refused (a GraphError naming ``owner`` and ``what``) unless it is a
    finite real number in [low, high] (or [low, high) with ``open_high``)."""
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise GraphError(f"{owner}: {what} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < low or (high is not None and (
            number > high or (open_high and number == high))):
        bound = "" if high is None else f" and {'<' if open_high else '<='} {high}"
        raise GraphError(f"{owner}: {what} must be a finite number >= {low}{bound}, "
                         f"got {value!r}")
    return number


class Optimizer:
    def __init__(self, params, lr: float, scalars: tuple[str, ...]):
        self.params: list[Parameter] = list(params)
        if not self.params:
            raise GraphError(f"{type(self).__name__} got no parameters")
        if any(not isinstance(p, Parameter) or not p.trainable for p in self.params):
            raise ParamTypeError(f"{type(self).__name__} takes trainable nn.Parameters, got "
                                 f"{[type(p).__name__ for p in self.params]}")
        self.lr = lr
        self.step_count = 0
        self._scalar_names = scalars
        self.scalars = Buffer(np.zeros(len(scalars), np.float32))
        self.scalars.name = f"{type(self).__name__.lower()}.scalars"
        self.state: dict[int, dict[str, Parameter]] = {}
        self.lock = threading.RLock()  # held by a step from prepare_step to its run's end

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value) -> None:
        # a NaN, inf or negative rate would silently ruin every weight at the next step
        self._lr = check_number(type(self).__name__, "lr", value)

    def _state(self, p: Parameter, key: str) -> Parameter:
        slots = self.state.setdefault(id(p), {})
        if key not in slots:
            slots[key] = Buffer(np.zeros_like(p.value))
            slots[key].name = f"{p.name or 'param'}.{key}"
        return slots[key]

    def _scalar(self, graph, key: str):
        return F.subscript(graph.bind(self.scalars), self._scalar_names.index(key))

    def build(self, graph, grads: dict[int, object]) -> None:
        """Add the update of each parameter in ``grads`` (id(param) -> grad Var) to ``graph``
        (the eager graph runs it at once)."""
        for p in self.params:
            if id(p) in grads:
                w = graph.bind(p)
                new = self._update(graph, p, w, grads[id(p)])
                # a half-precision weight's update meets the float32 scalars (the rate), so it
                # is computed in float32 and rounded to the weight's type once
                graph.assign(w, new if new.dtype == w.dtype else F.astype(new, w.dtype))

    def step(self) -> Optimizer:
        """Eager mode: update every parameter that has a ``.grad`` (set by a GradManager's
        backward) with the same update rule, hence the same numbers, as a compiled training
        step. Returns the optimiser: ``opt.step().clear_grad()``.

        The update runs as one small plan per set of gradient shapes, compiled on first use:
        fused and in place, as in a training step's plan. Under a trace, a lazy block or a
        GradManager's recording it runs op by op instead, so that they see its ops."""
        with self.lock:
            self._step([p for p in self.params if p.grad is not None])
        for recorder in MODE.recorders:
            recorder.stepped(self)
        return self

    def _step(self, with_grad) -> None:
        saved = (self.step_count, self.scalars.value.copy())
        self.prepare_step()
        try:
            if MODE.recorders or MODE.lazy is not None:
                with updates():  # every update reads the state of before the step
                    self.build(EAGER, {id(p): p.grad for p in with_grad})
            elif with_grad:
                self._update_plan(with_grad).run(
                    {f"grad{i}": p.grad._array() for i, p in enumerate(with_grad)})
        except BaseException:
            self.undo_step(*saved)
            raise

    def _update_plan(self, with_grad):
        """The plan of the update of the parameters in ``with_grad`` from gradients fed as
        ``grad0, grad1, ...``, made once per such list and gradient types."""
        key = tuple((id(p), p.grad.type) for p in with_grad)
        plans = self.__dict__.setdefault("_update_plans", {})
        plan = plans.get(key)
        if plan is None:
            g = Graph()
            self.build(g, {id(p): g.input(f"grad{i}", p.grad.shape, p.grad.dtype)
                           for i, p in enumerate(with_grad)})
            # a plan needs an output: the step's scalars (a few bytes)
            plan = plans[key] = compile([g.bind(self.scalars)])
        return plan

    def clear_grad(self) -> Optimizer:
        """Forget every parameter's ``.grad`` (the next backward starts from zero)."""
        for p in self.params:
            p.grad = None
        return self

    def prepare_step(self) -> None:
        """Advance the step counter and write this step's scalars (read by the next run)."""
        self.step_count += 1
        values = self._scalar_values()
        self.scalars.value[:] = [values[k] for k in self._scalar_names]
        written(self.scalars.value)

    def undo_step(self, step_count: int, scalars) -> None:
        """Put back the counter and scalars ``prepare_step`` replaced (the run failed)."""
        self.step_count = step_count
        self.scalars.value[:] = scalars
        written(self.scalars.value)

    def _scalar_values(self) -> dict[str, float]:
        return {"lr": self.lr}

    def _update(self, graph, p, w, g):
        raise NotImplementedError


class SGD(Optimizer):
    """SGD with momentum, Nesterov momentum and L2 weight decay (PyTorch's update rule)."""

    def __init__(self, params, lr: float, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0):
        momentum = check_number("SGD", "momentum", momentum)
        weight_decay = check_number("SGD", "weight_decay", weight_decay)
        if nesterov and momentum <= 0:
            raise GraphError("SGD: nesterov needs momentum > 0")
        super().__init__(params, lr, ("lr",))
        self.momentum, self.nesterov, self.weight_decay = momentum, nesterov, weight_decay

    def _update(self, graph, p, w, g):
        if self.weight_decay:
            g = g + w * self.weight_decay
        if self.momentum:
            buf = graph.bind(self._state(p, "momentum"))
            new_buf = buf * self.momentum + g
            graph.assign(buf, new_buf)
            g = g + new_buf * self.momentum if self.nesterov else new_buf
        return w - g * self._scalar(graph, "lr")


class Adam(Optimizer):
    """Adam (Kingma and Ba), with PyTorch's arithmetic; ``decoupled=True`` is AdamW."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled: bool = False):
        name = "AdamW" if decoupled else "Adam"
        try:
            b1, b2 = betas
        except (TypeError, ValueError):
            raise GraphError(f"{name}: betas must be a pair of numbers, got {betas!r}") from None
        betas = (check_number(name, "betas[0]", b1, 0.0, 1.0, open_high=True),
                 check_number(name, "betas[1]", b2, 0.0, 1.0, open_high=True))
        eps = check_number(name, "eps", eps)
        weight_decay = check_number(name, "weight_decay", weight_decay)
        super().__init__(params, lr, ("lr", "step_size", "inv_sqrt_bc2", "decay"))
        self.betas, self.eps = tuple(betas), eps
        self.weight_decay, self.decoupled = weight_decay, decoupled

    def _scalar_values(self):
        b1, b2 = self.betas
        t = self.step_count
        return {"lr": self.lr, "step_size": self.lr / (1 - b1 ** t),
                "inv_sqrt_bc2": 1 / math.sqrt(1 - b2 ** t),
                "decay": 1 - self.lr * self.weight_decay}

    def _update(self, graph, p, w, g):
        b1, b2 = self.betas
        if self.weight_decay and self.decoupled:
            w = w * self._scalar(graph, "decay")
        elif self.weight_decay:
            g = g + w * self.weight_decay
        m, v = graph.bind(self._state(p, "exp_avg")), graph.bind(self._state(p, "exp_avg_sq"))
        new_m = m * b1 + g * (1 - b1)
        new_v = v * b2 + g * g * (1 - b2)
        graph.assign(m, new_m)
        graph.assign(v, new_v)
        denom = F.sqrt(new_v) * self._scalar(graph, "inv_sqrt_bc2") + self.eps
        return w - new_m / denom * self._scalar(graph, "step_size")


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter), default decay 1e-2."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        super().__init__(params, lr, betas, eps, weight_decay, decoupled=True)
