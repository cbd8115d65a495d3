"""Eager mode's per-thread state and who watches it: the recorders (a GradManager's tape, a
trace) that see each eager node, assign and read on their thread, and the pending graph of
``mg.lazy()``. The lowest module of ``eager/``: tensors tell it when Python reads a value, and
dispatch asks it whether an op only runs or is also seen."""
from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the annotations: tensor.py imports this module
    from .tensor import Tensor

try:  # the C path counts the threads that record or are lazy (fastpath.busy)
    from . import fastpath
except ImportError:  # without the CPU build (the reference backend's tests)
    fastpath = None


class _Mode(threading.local):
    """What eager ops do on this thread besides running.

    ``recorders`` and ``lazy`` are properties so that the C path (fastpath.pyx) knows, from one
    count of the threads that have either, when it may run an op without asking this thread's
    mode."""

    def __init__(self):
        self._recorders: tuple = ()  # GradManager tapes and traces that see each node
        self._lazy = None            # the pending graph of ``with mg.lazy():``
        self.update_depth = 0        # inside an optimiser step or a module call
        self.pending: list = []      # their assigns, applied when the outermost one ends
        # the trace(symbolic_shape=...) recording here: tensors' shapes name its dimensions
        # (eager/symbolic_shape.py), and eager ops run with its numbers in their attributes
        self.symbolic_trace = None

    @property
    def recorders(self) -> tuple:
        return self._recorders

    @recorders.setter
    def recorders(self, value: tuple) -> None:
        self._change(value, self._lazy)

    @property
    def lazy(self):
        return self._lazy

    @lazy.setter
    def lazy(self, value) -> None:
        self._change(self._recorders, value)

    def _change(self, recorders: tuple, lazy) -> None:
        was = bool(self._recorders) or self._lazy is not None
        self._recorders, self._lazy = recorders, lazy
        now = bool(recorders) or lazy is not None
        if now != was and fastpath is not None:
            fastpath.busy(1 if now else -1)


MODE = _Mode()


class Recorder:
    """What a recorder is told, on the thread it records: each node run (with Tensors as its
    inputs and outputs), each eager assign, each read of a value by Python, each optimiser
    step."""

    # whether it replays what it records (a trace): a value Python reads is then fixed in the
    # replay, so an op whose result's length comes from values must not read them
    replays = False

    def record_node(self, node) -> None:
        pass

    def assigned(self, target, value) -> None:
        pass

    def read(self, t) -> None:
        pass

    def stepped(self, optimizer) -> None:
        pass

    def overwriting(self, target) -> None:
        """``target``'s array is about to be written in place (an assign lands)."""

    def module_called(self, module) -> None:
        """An nn.Module was called (its ``training`` flag decides what its forward does)."""

    def detached(self, new, old) -> None:
        """``new`` is ``old.detach()``: the same value, made without a node."""


def value_read(t: Tensor) -> None:
    """Tell the recorders that Python reads ``t``'s value (a trace warns: its branch is fixed)."""
    for recorder in MODE.recorders:
        recorder.read(t)


def value_detached(new: Tensor, old: Tensor) -> None:
    """Tell the recorders that ``new`` is ``old``'s value with no gradient path (a trace records
    the same value for it, not a constant)."""
    for recorder in MODE.recorders:
        recorder.detached(new, old)


@contextlib.contextmanager
def recording(recorder):
    """Let ``recorder`` see every eager node made on this thread in the block."""
    mode = MODE
    mode.recorders = mode.recorders + (recorder,)
    try:
        yield recorder
    finally:
        mode.recorders = tuple(r for r in mode.recorders if r is not recorder)


@contextlib.contextmanager
def hidden(recorders):
    """Hide each of ``recorders`` for the block (the others keep recording)."""
    mode = MODE
    before = mode.recorders
    mode.recorders = tuple(r for r in before if r not in recorders)
    try:
        yield
    finally:
        mode.recorders = before


@contextlib.contextmanager
def not_recording(recorder=None):
    """Hide ``recorder`` for the block (a GradManager does not tape its own backward pass), or
    every recorder when None (the steps of one op that the recorders see whole)."""
    mode = MODE
    before = mode.recorders
    mode.recorders = tuple(r for r in before if recorder is not None and r is not recorder)
    try:
        yield
    finally:
        mode.recorders = before
