"""GradManager: MegEngine's reverse-mode autodiff for eager code.

>>> gm = GradManager().attach(model.parameters())
>>> with gm:
...     loss = F.cross_entropy(model(x), y)
...     gm.backward(loss)          # param.grad += d loss / d param
>>> opt.step().clear_grad()

Design: inside ``with gm:`` the eager dispatcher shows the GradManager every node it runs; the
tape keeps the nodes that depend on an attached tensor (and with them the values their
gradient rules read). ``backward`` walks the tape with the ops' own gradient rules
(``autodiff.backward``, the walker graphs use), which run as eager ops, then frees the tape.
Outside ``with gm:`` nothing is recorded and nothing is held.
"""
from __future__ import annotations

from dataclasses import replace

from .. import functional as F
from ..autodiff import backward as walk
from ..ir.errors import GraphError, user_location
from ..ir.types import is_float
from .dispatch import MODE, Recorder, not_recording
from .tensor import Tensor, snapshot


class GradManager(Recorder):
    def __init__(self):
        self._attached: dict[int, tuple[Tensor, tuple]] = {}  # tensor id -> (tensor, callbacks)
        self._tape: list | None = None
        self._tracked: set[int] = set()
        self._backward_done = False

    # -- what gets gradients --------------------------------------------------------------
    def attach(self, params, callbacks=None) -> GradManager:
        """Compute gradients for ``params`` (a Tensor or an iterable of them: Parameters or any
        float tensor) at ``backward``, into each one's ``.grad``. ``callbacks``: a function or
        a list of functions ``f(param, grad) -> grad`` applied in order to each gradient before
        it is accumulated (where data-parallel training all-reduces)."""
        params = [params] if isinstance(params, Tensor) else list(params)
        callbacks = () if callbacks is None else (
            (callbacks,) if callable(callbacks) else tuple(callbacks))
        for p in params:
            if not isinstance(p, Tensor):
                raise GraphError(f"GradManager.attach: {p!r:.60} is not a Tensor or Parameter")
            if not is_float(p.dtype):
                raise GraphError(f"GradManager.attach: a {p.type} tensor has no gradient "
                                 "(integer and bool values such as labels are not "
                                 f"differentiable; at {user_location()})")
            _, before = self._attached.get(p.id, (p, ()))
            self._attached[p.id] = (p, before + callbacks)
            if self._tape is not None:
                self._tracked.add(p.id)
        return self

    def attached_tensors(self) -> list[Tensor]:
        return [p for p, _ in self._attached.values()]

    def detach(self, params=None) -> GradManager:
        """Stop computing gradients for ``params`` (all when None)."""
        if params is None:
            self._attached.clear()
        else:
            for p in [params] if isinstance(params, Tensor) else params:
                self._attached.pop(p.id, None)
        return self

    # -- recording ------------------------------------------------------------------------
    def record(self) -> GradManager:
        """Start recording (``with gm:`` calls it)."""
        if self._tape is not None:
            raise GraphError("GradManager.record: already recording")
        self._tape, self._tracked = [], set(self._attached)
        self._backward_done = False
        MODE.recorders = MODE.recorders + (self,)
        return self

    def release(self) -> None:
        """Stop recording and free the tape (the end of ``with gm:``)."""
        MODE.recorders = tuple(r for r in MODE.recorders if r is not self)
        self._tape, self._tracked = None, set()

    def __enter__(self) -> GradManager:  # noqa: PYI034
        return self.record()

    def __exit__(self, *exc) -> None:
        self.release()

    # what the eager dispatcher tells every recorder
    def record_node(self, node) -> None:
        tracked = self._tracked
        for v in node.inputs:
            if v.id in tracked:
                self._tape.append(node)
                tracked.update(out.id for out in node.outputs)
                return

    def overwriting(self, target) -> None:
        # the gradient rules of taped nodes must see what those nodes read (as a plan's, whose
        # assigns land after its backward pass): they get a copy of it under the same id
        snapshots = {}

        def kept(v):
            if v is not target and v._base is not target:
                return v
            if v.id not in snapshots:
                snapshots[v.id] = snapshot(v)
            return snapshots[v.id]

        for i, node in enumerate(self._tape or ()):
            if any(v is target or v._base is target for v in node.inputs):
                self._tape[i] = replace(node, inputs=tuple(kept(v) for v in node.inputs))

    # -- backward -------------------------------------------------------------------------
    def backward(self, y=None, dy=None) -> None:
        """Accumulate d ``y`` / d each attached tensor into its ``.grad`` (a Tensor; a tensor
        that ``y`` does not depend on keeps its ``.grad``) and free the tape. ``y`` is a float
        scalar unless ``dy`` (of ``y``'s shape) gives the vector of the vector-Jacobian
        product. One backward per recording."""
        if self._tape is None:
            raise GraphError(
                "GradManager.backward: " + ("backward was already called for this recording; "
                                            "record the forward again (with gm: ...)"
                                            if self._backward_done else
                                            "nothing was recorded: run the forward pass "
                                            "inside `with gm:`") + f" (at {user_location()})")
        if not isinstance(y, Tensor):
            raise GraphError(f"GradManager.backward: y must be a Tensor, got "
                             f"{type(y).__name__} (at {user_location()})")
        if not is_float(y.dtype):
            raise GraphError(f"GradManager.backward: y must be floating point, got {y.type} "
                             f"(at {user_location()})")
        if dy is None and y.size != 1:
            raise GraphError(f"GradManager.backward: y is {y.type}, not a scalar; pass dy= of "
                             f"its shape for a vector-Jacobian product (at {user_location()})")
        if dy is not None:
            dy = dy if isinstance(dy, Tensor) else Tensor(dy, y.dtype)
            if dy.shape != y.shape:
                raise GraphError(f"GradManager.backward: dy {dy.type} must have y's shape "
                                 f"{y.shape} (at {user_location()})")
            dy = F.astype(dy, y.dtype)
        if y.id not in self._tracked:
            raise GraphError("GradManager.backward: y does not depend on any tensor attached "
                             "to this GradManager; attach the parameters (gm.attach(...)) "
                             f"before the forward pass (at {user_location()})")
        tape, wrt = self._tape, self.attached_tensors()
        self.release()  # as in MegEngine, backward ends the recording
        self._backward_done = True
        with not_recording(self):
            seed = F.ones_like(y) if dy is None else dy
            grads = walk(tape, y, wrt, seed, consume=True)
            # every gradient is made (and checked) before any lands: all or none
            done = [(p, self._accumulated(p, g)) for p in wrt
                    if (g := grads.get(p.id)) is not None]
        for p, g in done:
            p.grad = g

    def _accumulated(self, p: Tensor, g: Tensor) -> Tensor:
        """``p``'s new ``.grad``: ``g`` through its callbacks, added to the one it has."""
        for callback in self._attached[p.id][1]:
            g = callback(p, g)
        if not isinstance(g, Tensor) or g.type != p.type:
            got = g.type if isinstance(g, Tensor) else type(g).__name__
            raise GraphError(f"GradManager.backward: the gradient of {p!r:.60} is {got}, but "
                             f"it is {p.type} now (its value was set to another shape or "
                             "dtype after the forward pass, or a callback returned another; "
                             f"no gradient was applied; at {user_location()})")
        return g if p.grad is None else p.grad + g
