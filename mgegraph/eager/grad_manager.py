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
The walker says when each attached tensor's gradient is final (no node left to walk reads the
tensor), and the manager hands it to the tensor's callbacks then, during the walk, so that
data-parallel training sends it while the earlier layers' gradients are computed; nothing
lands in ``.grad`` before the whole pass has succeeded.
Outside ``with gm:`` nothing is recorded and nothing is held.

Several GradManagers, as MegEngine's (its ``megengine.autodiff``): each records while it is
active, a backward pass's own ops are seen by the managers that began recording before the one
walking its tape (so ``gm.backward(x.grad)`` in an outer ``with gm:`` differentiates a
gradient: higher orders), never by later ones nor by those of its group (``with gm1 | gm2:``).
A GradManager holds its attached tensors weakly: a tensor attached for one step is freed with
its last reference.
"""
from __future__ import annotations

import weakref
from dataclasses import replace

from .. import functional as F
from ..autodiff import backward as walk
from ..ir.errors import GraphError, user_location
from ..ir.types import is_float
from .dispatch import MODE, Recorder
from .mode import hidden
from .tensor import Tensor, snapshot


class AttachError(GraphError, AssertionError):
    """``GradManager.attach`` refused a value (not a tensor, or not floating point). MegEngine
    raises AssertionError there, so a program written for either catches it."""


_MANAGERS: weakref.WeakSet = weakref.WeakSet()  # every live GradManager (for is_attached)


def is_attached(t) -> bool:
    """Whether a GradManager has tensor ``t`` attached (a trace then hands the traced
    function ``t`` itself, so that the manager's backward sets its ``.grad``)."""
    return isinstance(t, Tensor) and any(t.id in gm._attached for gm in list(_MANAGERS))


class GradManager(Recorder):
    def __init__(self):
        _MANAGERS.add(self)
        # tensor id -> (weak reference to it, its callbacks), in the order of attaching
        self._attached: dict[int, tuple[weakref.ref, list]] = {}
        self._tape: list | None = None
        self._tracked: set[int] = set()
        self._group: tuple = (self,)  # the managers of ``with gm1 | gm2:``, while it records
        self._backward_done = False

    # -- what gets gradients --------------------------------------------------------------
    def attach(self, params, callbacks=None) -> GradManager:
        """Compute gradients for ``params`` (a Tensor or an iterable of them: Parameters or any
        float tensor) at ``backward``, into each one's ``.grad``. ``callbacks``: a function or
        a list of functions ``f(param, grad) -> grad`` applied in order to each gradient before
        it is accumulated (where data-parallel training all-reduces; None: no gradient; the
        last may return a future, whose ``get()`` is called once the backward walk is over).
        Each gradient goes through its callbacks as soon as the walk has made it final, in the
        order the walk finishes them, so ``distributed.make_allreduce_cb`` sends a full bucket
        while the walk goes on.
        Attaching a tensor again adds its callbacks to those it has. A tensor attached while
        recording counts from then on (an intermediate value too)."""
        params = [params] if isinstance(params, Tensor) else list(params)
        callbacks = [] if callbacks is None else (
            [callbacks] if callable(callbacks) else list(callbacks))
        for p in params:
            _check_attachable(p)
            if p.id not in self._attached:
                self._attached[p.id] = (weakref.ref(p, self._forgetter(p.id)), [])
            self._attached[p.id][1].extend(callbacks)
            if self._tape is not None:
                self._tracked.add(p.id)
        return self

    def _forgetter(self, key: int):
        manager = weakref.ref(self)  # the callback must not keep the manager alive

        def forget(_):
            if (gm := manager()) is not None:
                gm._attached.pop(key, None)
        return forget

    def attached_tensors(self) -> list[Tensor]:
        """The attached tensors that are alive, in the order they were first attached."""
        return [t for ref, _ in self._attached.values() if (t := ref()) is not None]

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
        self._tape, self._tracked, self._group = None, set(), (self,)

    def __enter__(self) -> GradManager:  # noqa: PYI034
        return self.record()

    def __exit__(self, *exc) -> None:
        self.release()

    def __or__(self, other):
        """``with gm1 | gm2:`` records with both; neither sees the other's backward pass."""
        if isinstance(other, (GradManager, GradManagerGroup)):
            return GradManagerGroup([self]) | other
        return NotImplemented

    __ror__ = __or__

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
        """Accumulate the vector-Jacobian product of ``y`` (a Tensor or a list of them) and
        ``dy`` (of ``y``'s shapes; ones where None, MegEngine's rule, so a non-scalar ``y``
        gives the gradient of its sum) into the ``.grad`` of each attached tensor, and end
        the recording. A tensor that ``y`` does not depend on keeps its ``.grad``; ``y=None``
        only ends the recording. One backward per recording."""
        if self._tape is None:
            raise GraphError(
                "GradManager.backward: " + ("backward was already called for this recording; "
                                            "record the forward again (with gm: ...)"
                                            if self._backward_done else
                                            "nothing was recorded: run the forward pass "
                                            "inside `with gm:`") + f" (at {user_location()})")
        with hidden({self}):
            roots = _roots(y, dy)
        tape, tracked, unseen = self._tape, self._tracked, self._not_seeing_backward()
        wrt = [(p, callbacks) for ref, callbacks in self._attached.values()
               if (p := ref()) is not None]
        self.release()  # as in MegEngine, backward ends the recording
        self._backward_done = True
        roots = [(y, seed) for y, seed in roots if y.id in tracked]
        if not roots:  # y depends on no attached tensor: every .grad stays as it is
            return
        with hidden(unseen):
            done = _handed_over(tape, roots, wrt, self._accumulated)
        for p, g in done:
            if g is not None:
                p.grad = g

    def _not_seeing_backward(self) -> set:
        """The tapes that must not record this manager's backward pass: itself, its group and
        those that began recording after it (traces see every op)."""
        recorders = MODE.recorders
        later = recorders[recorders.index(self) + 1:] if self in recorders else ()
        return {r for r in later + self._group if not r.replays}

    def _accumulated(self, p: Tensor, g: Tensor | None) -> Tensor | None:
        """``p``'s new ``.grad``: ``g`` (through its callbacks) added to the one it has (None:
        a callback returned None, so nothing lands)."""
        if g is None:
            return None
        if not isinstance(g, Tensor) or g.type != p.type:
            got = g.type if isinstance(g, Tensor) else type(g).__name__
            raise GraphError(f"GradManager.backward: the gradient of {p!r:.60} is {got}, but "
                             f"it is {p.type} now (its value was set to another shape or "
                             "dtype after the forward pass, or a callback returned another; "
                             f"no gradient was applied; at {user_location()})")
        return g if p.grad is None else p.grad + g


def _handed_over(tape, roots, wrt, accumulated) -> list:
    """(tensor, its new ``.grad``) for each gradient of the walk, none landed yet: all or none.

    Each gradient goes through its tensor's callbacks as soon as the walk has made it final, in
    the order the walk finishes them, so that a callback may start sending it (data-parallel
    training's buckets) while the walk goes on; a callback's future (``.get()``, MegEngine's
    protocol) is resolved once the walk is over. A callback's ``progress()``, if it has one, is
    called after each node walked. If anything fails, every callback that has a
    ``backward_failed(error, during_walk)`` hook hears of it (the all-reduce callback completes
    the sends under way and tells the other ranks), and no gradient lands."""
    callbacks_of = {p.id: (p, callbacks) for p, callbacks in wrt}
    sent = []

    def hand_over(v, g):
        p, callbacks = callbacks_of[v.id]
        sent.append((p, _through(p, g, callbacks)))

    progress = _hooks(wrt, "progress")
    during_walk = True
    try:
        walk(tape, roots, [p for p, _ in wrt], consume=True, on_final=hand_over,
             after_node=(lambda: [tick() for tick in progress]) if progress else None)
        during_walk = False
        return [(p, accumulated(p, _resolved(g))) for p, g in sent]
    except BaseException as error:
        for hook in _hooks(wrt, "backward_failed"):
            hook(error, during_walk)
        raise


def _hooks(wrt, name: str) -> list:
    """The distinct callbacks' methods ``name``, in the order of attaching: ``progress()``,
    called after each node walked, and ``backward_failed(error, during_walk)``."""
    hooks = {}
    for _, callbacks in wrt:
        for callback in callbacks:
            hook = getattr(callback, name, None)
            if hook is not None:
                hooks.setdefault(id(callback), hook)
    return list(hooks.values())


def _through(p: Tensor, g: Tensor, callbacks):
    """``g`` through ``p``'s callbacks in order (the last one's result may be a future)."""
    for i, callback in enumerate(callbacks):
        g = callback(p, g if i == 0 else _resolved(g))
    return g


def _resolved(g):
    """A gradient, or the one a callback's future (MegEngine's ``Future.get``) stands for."""
    return g.get() if g is not None and not isinstance(g, Tensor) and hasattr(g, "get") else g


class GradManagerGroup:
    """GradManagers that record together (``with gm1 | gm2:``): the backward pass of one is
    seen by none of the others, as MegEngine's groups."""

    def __init__(self, managers):
        self.managers = list(managers)

    def __or__(self, other):
        if isinstance(other, GradManager):
            other = GradManagerGroup([other])
        if not isinstance(other, GradManagerGroup):
            return NotImplemented
        return GradManagerGroup(self.managers + other.managers)

    __ror__ = __or__

    def __enter__(self) -> GradManagerGroup:  # noqa: PYI034
        group = tuple(self.managers)
        for gm in group:
            gm.record()
            gm._group = group
        return self

    def __exit__(self, *exc) -> None:
        for gm in reversed(self.managers):
            gm.release()


def _check_attachable(p) -> None:
    if not isinstance(p, Tensor):
        raise AttachError(f"GradManager.attach: {p!r:.60} is not a Tensor or Parameter "
                          f"(at {user_location()})")
    if not is_float(p.dtype):
        raise AttachError(f"GradManager.attach: a {p.type} tensor has no gradient "
                          "(integer and bool values such as labels are not "
                          f"differentiable; at {user_location()})")


def _roots(y, dy) -> list[tuple[Tensor, Tensor]]:
    """``backward``'s ``y`` and ``dy`` as (value, seed) pairs, checked."""
    ys = [] if y is None else list(y) if isinstance(y, (list, tuple)) else [y]
    dys = [None] * len(ys) if dy is None else list(dy) if isinstance(dy, (list, tuple)) \
        else [dy]
    if len(dys) != len(ys):
        raise GraphError(f"GradManager.backward: {len(ys)} values y and {len(dys)} dy (at "
                         f"{user_location()})")
    return [(v, _seed(v, d)) for v, d in zip(ys, dys)]


def _seed(y, dy) -> Tensor:
    if not isinstance(y, Tensor):
        raise GraphError(f"GradManager.backward: y must be a Tensor, got "
                         f"{type(y).__name__} (at {user_location()})")
    if not is_float(y.dtype):
        raise GraphError(f"GradManager.backward: y must be floating point, got {y.type} "
                         f"(at {user_location()})")
    if dy is None:
        return F.ones_like(y)
    dy = dy if isinstance(dy, Tensor) else Tensor(dy, y.dtype)
    if dy.shape != y.shape:
        raise GraphError(f"GradManager.backward: dy {dy.type} must have y's shape "
                         f"{y.shape} (at {user_location()})")
    return F.astype(dy, y.dtype)
