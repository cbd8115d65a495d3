"""The optimiser base: parameter groups, per-step scalars and state, as graph nodes.

Design: an optimiser keeps its state (momentum, moments) in Buffers and every number of its
update that a group names (learning rate, momentum, betas, bias corrections) in one small
shared array, ``scalars``, that ``prepare_step`` rewrites in Python before each run from
``param_groups``. The plan reads it like any param, so a schedule or a user editing
``opt.param_groups[i]["lr"]`` changes the update without recompiling, and the update nodes
assign new values in place at the end of the run. The array holds ``len(SCALARS)`` values per
group, groups in order: a group added later makes a longer array, and the shorter ones of
plans built before stay written (their groups keep their places). Those scalars are shared by
every run of the optimiser's steps, so a step holds ``lock`` from ``prepare_step`` to the end
of its run (an eager step here, a traced one in eager/trace.py): steps from several threads
come one after another, each with its own scalars.

Only what a group's values decide about the graph's shape (is there a momentum buffer, a
weight-decay term) is fixed when a group's update is first built; changing it later is refused
at the next step, since plans built before would silently keep the old update.
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

__all__ = ["Optimizer", "ParamTypeError", "check_number", "required"]


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


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()  # a default every group must give (MegEngine's optimizer.required)


class Optimizer:
    """MegEngine's optimiser base: ``params`` is an iterable of Parameters or of dicts
    (parameter groups: ``{"params": [...], "lr": 0.1, ...}``, the other keys defaulting to the
    optimiser's arguments). Subclasses name their per-group numbers in ``SCALARS`` and write
    ``_scalar_values(group)`` and ``_update``.

    >>> opt = SGD([{"params": net.head.parameters(), "lr": 0.1},
    ...            {"params": net.body.parameters()}], lr=0.01, momentum=0.9)
    """

    SCALARS: tuple[str, ...] = ("lr",)  # per group, read by the plan at run time
    COUNTS_STEPS = False  # whether the update reads the step count (state_dict's "step")

    def __init__(self, params, defaults: dict):
        self._defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.step_count = 0
        self.state: dict[int, dict[str, Parameter]] = {}
        self.scalars = self._new_scalars(0)
        self._earlier_scalars: list[Parameter] = []  # shorter arrays that built plans read
        self._built: dict[int, tuple] = {}  # group index -> its structure when first built
        self.lock = threading.RLock()  # held by a step from prepare_step to its run's end
        for group in _as_groups(params, type(self).__name__):
            self.add_param_group(group)

    # -- parameter groups ------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """Add a group (a dict with ``"params"``; missing numbers take the defaults)."""
        name = type(self).__name__
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise GraphError(f"{name}: a parameter group is a dict with a 'params' entry, got "
                             f"{type(param_group).__name__}")
        group = dict(param_group)
        group["params"] = _trainable(group["params"], name)
        for key, default in self._defaults.items():
            if default is required and key not in group:
                raise GraphError(f"{name}: parameter group {len(self.param_groups)} gives no "
                                 f"{key!r}, which has no default")
            group.setdefault(key, default)
        taken = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in taken for p in group["params"]):
            raise GraphError(f"{name}: a parameter appears in more than one parameter group")
        self._check_group(group, len(self.param_groups))
        self.param_groups.append(group)
        for p in group["params"]:
            for key in self._states(group):
                self._state(p, key)
        self._grow_scalars()

    def _grow_scalars(self) -> None:
        old = self.scalars
        self.scalars = self._new_scalars(len(self.param_groups))
        self.scalars.value[:old.value.size] = old.value
        if old.value.size:
            self._earlier_scalars.append(old)
        self.__dict__.pop("_update_plans", None)  # built over the old array

    def _new_scalars(self, groups: int) -> Parameter:
        scalars = Buffer(np.zeros(groups * len(self.SCALARS), np.float32))
        scalars.name = f"{type(self).__name__.lower()}.scalars"
        return scalars

    @property
    def params(self) -> list[Parameter]:
        """Every parameter, group by group."""
        return [p for group in self.param_groups for p in group["params"]]

    @property
    def lr(self) -> float:
        """The first group's learning rate; setting it sets every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value) -> None:
        # a NaN, inf or negative rate would silently ruin every weight at the next step
        value = check_number(type(self).__name__, "lr", value)
        for group in self.param_groups:
            group["lr"] = value

    def _check_group(self, group: dict, index: int) -> None:
        """Refuse a group whose numbers the update cannot use (a GraphError naming it)."""
        check_number(self._owner(index), "lr", group["lr"])

    def _owner(self, index: int) -> str:
        return f"{type(self).__name__} param_groups[{index}]"

    def _structure(self, group: dict) -> dict:
        """What the group's values decide about the update's graph (fixed once built)."""
        return {}

    def _states(self, group: dict) -> tuple[str, ...]:
        """The names of the Buffers (of the parameter's shape) the group's update keeps."""
        return ()

    # -- state -----------------------------------------------------------------------------
    def _state(self, p: Parameter, key: str) -> Parameter:
        slots = self.state.setdefault(id(p), {})
        if key not in slots:
            slots[key] = Buffer(np.zeros_like(p.value))
            slots[key].name = f"{p.name or 'param'}.{key}"
        return slots[key]

    def _scalar(self, graph, index: int, key: str):
        return F.subscript(graph.bind(self.scalars),
                           index * len(self.SCALARS) + self.SCALARS.index(key))

    # -- building the update ---------------------------------------------------------------
    def build(self, graph, grads: dict[int, object]) -> None:
        """Add the update of each parameter in ``grads`` (id(param) -> grad Var) to ``graph``
        (the eager graph runs it at once)."""
        for index, group in enumerate(self.param_groups):
            self._built.setdefault(index, self._structure(group))
            for p in group["params"]:
                if id(p) in grads:
                    self._assign_update(graph, index, p, grads[id(p)])

    def _assign_update(self, graph, index: int, p: Parameter, grad) -> None:
        w = graph.bind(p)
        new = self._update(graph, index, p, w, grad)
        assign_rounded(graph, w, new)

    def _update(self, graph, index: int, p, w, g):
        raise NotImplementedError

    # -- stepping --------------------------------------------------------------------------
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

    def zero_grad(self) -> Optimizer:
        """MegEngine's older spelling: every ``.grad`` that exists becomes zeros of its type
        (``clear_grad`` forgets them instead, which a backward treats the same)."""
        for p in self.params:
            if p.grad is not None:
                p.grad = F.zeros_like(p.grad)
        return self

    def prepare_step(self) -> None:
        """Advance the step counter and write this step's scalars (read by the next run)."""
        for index, group in enumerate(self.param_groups):
            self._check_group(group, index)
            self._check_structure(group, index)
        self.step_count += 1
        values = [v for group in self.param_groups for v in self._ordered(group)]
        self._write_scalars(np.asarray(values, np.float32))

    def _ordered(self, group: dict) -> list[float]:
        values = self._scalar_values(group)
        return [values[k] for k in self.SCALARS]

    def _check_structure(self, group: dict, index: int) -> None:
        built = self._built.get(index)
        if built is not None and built != self._structure(group):
            raise GraphError(f"{self._owner(index)}: its values changed what the update "
                             f"computes ({built} when it was built, {self._structure(group)} "
                             "now; plans built before would keep the old update): make a new "
                             "optimiser")

    def _write_scalars(self, values: np.ndarray) -> None:
        for scalars in (*self._earlier_scalars, self.scalars):
            scalars.value[:] = values[:scalars.value.size]
            written(scalars.value)

    def undo_step(self, step_count: int, scalars) -> None:
        """Put back the counter and scalars ``prepare_step`` replaced (the run failed)."""
        self.step_count = step_count
        self._write_scalars(np.asarray(scalars, np.float32))

    def _scalar_values(self, group: dict) -> dict[str, float]:
        return {"lr": group["lr"]}

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """MegEngine's layout: ``{"param_groups": [group without its params, with "params"
        the parameters' indices], "state": {index: {name: array}}}``; an optimiser whose update
        reads the step count keeps it as each parameter's ``"step"``. Loaded into a fresh
        optimiser of the same parameters, training goes on exactly as it would have."""
        groups, state, index = [], {}, 0
        for group in self.param_groups:
            ids = list(range(index, index + len(group["params"])))
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
            for i, p in zip(ids, group["params"]):
                state[i] = {k: buf.value.copy() for k, buf in self.state.get(id(p), {}).items()}
                if self.COUNTS_STEPS:
                    state[i]["step"] = np.array(self.step_count, np.float32)
            index += len(ids)
        return {"param_groups": groups, "state": state}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` gave: every group's numbers, every state array (copied
        into this optimiser's Buffers, which plans built before keep reading) and the step
        count. A checkpoint of other groups or shapes is refused, naming what differs."""
        name = type(self).__name__
        saved_groups = _checked_groups(state, len(self.param_groups), name)
        for index, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            _check_same_group(group, saved, index, name)
            for p, key in zip(group["params"], saved["params"]):
                self._load_param_state(p, _param_state(state, key, name))
        step_counts = {int(s["step"]) for s in state["state"].values() if "step" in s}
        for group, saved in zip(self.param_groups, saved_groups):
            group.update({k: v for k, v in saved.items() if k != "params"})
        if step_counts:
            self.step_count = max(step_counts)

    def _load_param_state(self, p: Parameter, saved: dict) -> None:
        for key, buf in self.state.get(id(p), {}).items():
            if key not in saved:
                raise GraphError(f"{type(self).__name__}.load_state_dict: the state of "
                                 f"{p!r} has no {key!r}")
            value = np.asarray(saved[key].numpy() if hasattr(saved[key], "numpy")
                               else saved[key])
            if value.shape != buf.shape:
                raise GraphError(f"{type(self).__name__}.load_state_dict: {key!r} of {p!r} "
                                 f"is {value.dtype}{list(value.shape)}, the parameter's state "
                                 f"is {buf.dtype}{list(buf.shape)}")
            buf.value = value.astype(buf.dtype, copy=False)


def _as_groups(params, name: str) -> list[dict]:
    if isinstance(params, (Parameter, dict)):
        params = [params]
    try:
        items = list(params)
    except TypeError:
        raise ParamTypeError(f"{name} takes Parameters or parameter groups (dicts), got "
                             f"{type(params).__name__}") from None
    if not items:
        raise GraphError(f"{name} got no parameters")
    if all(isinstance(item, dict) for item in items):
        return items
    if any(isinstance(item, dict) for item in items):
        raise ParamTypeError(f"{name}: give either Parameters or parameter groups, not both")
    return [{"params": items}]


def _trainable(params, name: str) -> list[Parameter]:
    if isinstance(params, (set, frozenset)):
        raise ParamTypeError(f"{name}: a set's order changes between runs: give a list")
    params = [params] if isinstance(params, Parameter) else list(params)
    if any(not isinstance(p, Parameter) or not p.trainable for p in params):
        raise ParamTypeError(f"{name} takes trainable nn.Parameters, got "
                             f"{[type(p).__name__ for p in params]}")
    return params


def _checked_groups(state, count: int, name: str) -> list[dict]:
    if not isinstance(state, dict) or not {"param_groups", "state"} <= set(state):
        raise GraphError(f"{name}.load_state_dict takes what state_dict() gave (a dict of "
                         f"'param_groups' and 'state'), got {type(state).__name__}")
    groups = state["param_groups"]
    if len(groups) != count:
        raise GraphError(f"{name}.load_state_dict: the checkpoint has {len(groups)} parameter "
                         f"groups, this optimiser {count}")
    return groups


def _check_same_group(group: dict, saved: dict, index: int, name: str) -> None:
    if len(saved["params"]) != len(group["params"]):
        raise GraphError(f"{name}.load_state_dict: parameter group {index} has "
                         f"{len(saved['params'])} parameters in the checkpoint, "
                         f"{len(group['params'])} here")
    if set(saved) != set(group):
        raise GraphError(f"{name}.load_state_dict: parameter group {index} has the keys "
                         f"{sorted(saved)} in the checkpoint, {sorted(group)} here")


def _param_state(state: dict, key, name: str) -> dict:
    try:
        return state["state"][key]
    except KeyError:
        raise GraphError(f"{name}.load_state_dict: the checkpoint has no state for "
                         f"parameter {key}") from None


def assign_rounded(graph, target, value) -> None:
    """Assign ``value`` to a weight or optimiser state: a half-precision one's update meets the
    float32 scalars (the rate, the betas), so it is computed in float32 and rounded to the
    target's type once."""
    graph.assign(target, value if value.dtype == target.dtype else F.astype(value, target.dtype))
