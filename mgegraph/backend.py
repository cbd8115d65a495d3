"""The backend seam: how a device runs the ops the registry defines.

An ``OpDef`` (mgegraph.ops) says what an op means; a backend says how one device runs it: for
each op, a kernel family, the dtypes it implements and the lowering of a node to the kernel's
parameter block (``Launch``); whether a fused elementwise group fits its fused kernel; the
alignment of its arena; and the executable that allocates a plan's memory and runs it.

Backends are registered by name with a factory that is called on first use, so importing the op
layer, the IR or the planner never loads a compiled module:

>>> import mgegraph as mg
>>> mg.devices()
['cpu']

A backend for a new device implements ``Backend`` (see the NumPy reference backend in
tests/backends/reference.py) and calls ``register_backend("name", factory)``.
"""
from __future__ import annotations

import importlib
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .ir.errors import DispatchError, GraphError
from .ir.types import short_name
from .ops import get_op


@dataclass(frozen=True)
class Launch:
    """How one node calls its kernel: integer and float parameters, and workspace bytes;
    ``path`` names the way a kernel of several ways takes (its parameters say which; "winograd,
    2 threads"), for the reports and the measured choice (``compile(tune=...)``)."""

    ints: tuple[int, ...] = ()
    floats: tuple[float, ...] = ()
    workspace: int = 0
    path: str = ""


@dataclass(frozen=True)
class Kernel:
    """One compiled kernel of a backend: its name and whatever the executable calls it by (a C
    function address on the CPU, a Python function in the reference backend)."""

    name: str
    entry: object


@dataclass(frozen=True)
class OpImpl:
    """How a backend runs one op: kernel family ``kernel`` (kernel ``f"{kernel}_{dtype}"``),
    the ``dtypes`` it implements, ``lower`` (Node -> Launch: the way the backend's rules
    choose), which input's dtype picks the kernel (``dispatch_input``; -1: the first
    output's), and ``candidates`` (Node -> tuple of Launches, each of a different ``path``:
    every way the kernel computes the node, the rules' one among them), which
    ``compile(tune="measure")`` times; None: one way only."""

    kernel: str
    dtypes: tuple[np.dtype, ...]
    lower: Callable
    dispatch_input: int = 0
    candidates: Callable | None = None

    def dispatch_dtype(self, node) -> np.dtype:
        if self.dispatch_input >= 0 and node.inputs:
            return node.inputs[self.dispatch_input].dtype
        return node.outputs[0].dtype


@dataclass(frozen=True)
class FusionLimits:
    """What one fused elementwise kernel of a backend can hold; the fusion pass splits a group
    that would exceed them."""

    max_inputs: int
    max_outputs: int
    max_registers: int
    max_dims: int


class HeldPlan:
    """``plan = HeldPlan()`` in an executable's class: ``self.plan = p`` keeps ``p`` weakly.
    The plan owns its executable (``plan.executable()`` caches it), so a strong reference back
    would be a cycle that keeps the arena alive until the cycle collector runs; a dropped plan
    must free its memory at once."""

    def __set_name__(self, owner, name: str) -> None:
        self.key = f"_{name}_ref"

    def __set__(self, executable, plan) -> None:
        executable.__dict__[self.key] = weakref.ref(plan)

    def __get__(self, executable, owner=None):
        if executable is None:
            return self
        plan = executable.__dict__[self.key]()
        if plan is None:
            raise GraphError("this executable's plan was freed: keep a reference to the plan "
                             "while its executable (plan.executable()) is used")
        return plan


class Executable(Protocol):
    """A plan made runnable on one device: it owns the plan's memory (the arena, persistent
    buffers) and runs the instructions. It holds its plan weakly (``plan = HeldPlan()``).

    Profiling: an executable that can time each instruction asks ``profiling()`` once per run
    and, when a profile is active, times the run and hands it to ``record_run``; one that
    cannot (``timed`` False) runs as usual and the profiles do not see its runs."""

    timed: bool       # whether its runs are timed per instruction while a profile is active
    writes_out: bool  # whether run(feeds, out=...) writes the outputs into the caller's arrays

    def run(self, feeds: dict) -> list[np.ndarray]: ...


class Backend(Protocol):
    """What the compiler needs from a device. ``KernelTable`` gives the optional capabilities
    their "not supported" defaults."""

    name: str
    alignment: int            # bytes every arena offset is a multiple of
    fusion: FusionLimits | None  # None: the backend has no fused elementwise kernel
    # whether its executable runs ``plan.prologue`` (the weight-only instructions an optimised
    # plan splits off, rerun when a weight changes); False: they stay in the plan
    runs_prologue: bool
    # prepack(conv2d or linear node): the block of output channels its kernel reads packed
    # weights in, or None (keep them as they are); None: the backend has no packed kernels
    prepack: Callable | None
    # exact_accumulate(matmul node): whether its addmm of that product rounds as the mul and
    # add it replaces (the accumulate pass at level 1 asks); None: no product does
    exact_accumulate: Callable | None
    # times the candidate Launches of a node (compile(tune=...)); None: the rules decide
    measurer: Measurer | None
    # packed_blocks(conv2d node): the blocks its packed kernel can read the weights in, which a
    # measured choice times against the unpacked ways; None: the rules' prepack decides alone
    packed_blocks: Callable | None
    # deterministic(op, launch): whether that way of the op sums in a fixed order on the
    # backend's own kernels (no BLAS: the same bits on any thread count, and in the plan's C
    # export), which compile(tune="deterministic") prefers; None: no way is known to be
    deterministic: Callable | None

    def impl(self, op: str) -> OpImpl | None:
        """How this backend runs ``op``; None when it does not."""

    def kernel(self, op: str, dtype) -> Kernel:
        """The kernel for (op, dtype); raises DispatchError naming both."""

    def allocate(self, nbytes: int, alignment: int):
        """One block of device memory of ``nbytes`` starting at an ``alignment`` boundary: a
        plan's arena (temporaries and workspaces at their planned offsets)."""

    def executable(self, plan) -> Executable:
        """Allocate ``plan``'s buffers (its arena through ``allocate``) and get ready to run
        it."""

    def launcher(self, kernel: Kernel, launch: Launch, n_inputs: int, release_gil: bool):
        """One call of ``kernel`` outside a plan, for eager mode: a callable taking the tuple
        of arrays (inputs, outputs, then the workspace) and returning the kernel's status."""


class Measurer(Protocol):
    """How a backend times the ways its kernels can run a node, for the measured choice
    (``compile(tune="measure")``, ``mgegraph/tuning.py``)."""

    def machine(self) -> str:
        """What a measurement holds for: the device's model and instruction sets, the threads
        a plan may use and the build of the kernels (a choice stored under another is not
        used)."""

    def time(self, kernel: Kernel, node, launches: tuple[Launch, ...],
             budget: float) -> list[float | None]:
        """Seconds of one call of ``kernel`` with each of ``launches`` on buffers of the
        node's types (None where the kernel refused the launch), within about ``budget``
        seconds in all."""


class KernelTable:
    """The common part of a backend: its ``OpImpl`` per op and the kernels they resolve to,
    keyed by (op, dtype). ``resolve`` maps kernel names to entries and fails at once (not at
    the first run) when an op names a kernel the backend lacks."""

    # the optional capabilities of ``Backend``, off until a backend says otherwise
    fusion: FusionLimits | None = None
    runs_prologue = False
    prepack: Callable | None = None
    exact_accumulate: Callable | None = None
    measurer: Measurer | None = None
    packed_blocks: Callable | None = None
    deterministic: Callable | None = None

    def __init__(self, device: str):
        self.device = device
        self.impls: dict[str, OpImpl] = {}
        self.table: dict[tuple[str, str], Kernel] = {}
        self.entries: dict[str, object] = {}

    def implement(self, op: str, kernel: str, dtypes, lower: Callable,
                  dispatch_input: int = 0, candidates: Callable | None = None) -> None:
        get_op(op)  # a typo in a backend's table fails here, naming the op
        if op in self.impls:
            raise GraphError(f"op {op!r} is implemented twice on {self.device!r}")
        self.impls[op] = OpImpl(kernel, tuple(np.dtype(d) for d in dtypes), lower,
                                dispatch_input, candidates)

    def resolve(self, entries: dict[str, object]) -> None:
        self.entries = dict(entries)
        for op, impl in self.impls.items():
            for dtype in impl.dtypes:
                name = kernel_name(impl.kernel, dtype)
                if name not in entries:
                    raise ImportError(f"op {op!r} names {self.device} kernel {name!r}, which the "
                                      "backend does not define")
                self.table[(op, dtype.name)] = Kernel(name, entries[name])

    def impl(self, op: str) -> OpImpl | None:
        return self.impls.get(op)

    def kernel_by_name(self, name: str) -> object:
        """The entry of the kernel a plan's instruction names."""
        try:
            return self.entries[name]
        except KeyError:
            raise DispatchError(f"the {self.device} backend has no kernel {name!r}") from None

    def kernel(self, op: str, dtype) -> Kernel:
        name = np.dtype(dtype).name
        try:
            return self.table[(op, name)]
        except KeyError:
            have = sorted(f"{self.device}/{t}" for o, t in self.table if o == op)
            raise DispatchError(f"no kernel for op {op!r} on device {self.device!r} with dtype "
                                f"{name}; {op!r} has: {', '.join(have) or 'no kernels at all'}"
                                ) from None


# what the compiler reads of a backend, beyond the methods (KernelTable defaults the optional ones)
CAPABILITIES = ("name", "alignment", "fusion", "runs_prologue", "prepack", "exact_accumulate",
                "measurer", "packed_blocks", "deterministic")


def check_backend(backend) -> None:
    """A GraphError naming the capabilities of ``Backend`` that ``backend`` does not declare
    (the compiler reads each; a backend built on ``KernelTable`` has them all)."""
    missing = [c for c in CAPABILITIES if not hasattr(backend, c)]
    if missing:
        raise GraphError(f"backend {type(backend).__name__} does not declare "
                         f"{', '.join(missing)} (mgegraph.backend.Backend; KernelTable gives the "
                         "optional ones their defaults)")


def kernel_name(family: str, dtype) -> str:
    """The name of ``family``'s kernel for ``dtype``: ``kernel_name("unary", "float32")`` is
    ``"unary_f32"``; every backend's kernels are named so."""
    return f"{family}_{short_name(np.dtype(dtype))}"

# device name -> factory, or "module:attribute" of one, imported on first use. The built-in
# backends (layer 6, above this module) are registered by the package's facade as such strings:
# importing the layers below them never loads a compiled module, and a device is loaded when
# first asked for.
_FACTORIES: dict[str, Callable[[], Backend] | str] = {}
# kinds with a backend per device: the factory takes the index ("cuda:1" -> factory(1))
_PER_DEVICE: set[str] = set()
# kinds mg.devices() lists only when their probe (called then) says they can run here; asking
# for one that cannot is the factory's clear error (the missing extra, driver or GPU)
_PROBES: dict[str, str | Callable[[], bool]] = {}
_BACKENDS: dict[str, Backend] = {}
# makes each backend once when threads ask for it at the same time (re-entrant: a factory may
# ask for another backend)
_LOCK = threading.RLock()


# Functions that copy a device's newer value of host arrays back into them (a CUDA training
# step keeps its weights on the device): state_dict() and save() call them before reading.
_HOST_SYNC: list[Callable] = []


def on_host_read(sync: Callable) -> None:
    """Register ``sync(arrays)``, called before the host reads weights a device may hold newer
    values of (``Module.state_dict``, ``mg.save``)."""
    if sync not in _HOST_SYNC:
        _HOST_SYNC.append(sync)


def sync_to_host(arrays) -> None:
    """Bring every device's newer value of ``arrays`` home (see ``on_host_read``)."""
    arrays = list(arrays)
    for sync in _HOST_SYNC:
        sync(arrays)


def register_backend(name: str, factory: Callable[[], Backend] | str, *,
                     per_device: bool = False, probe: Callable[[], bool] | str | None = None,
                     ) -> None:
    """Make ``mg.compile(device=name)`` use ``factory()`` (called once, on first use; a string
    "module:function" names one, imported then). ``per_device``: one backend per device index,
    ``factory(index)`` (``"name:1"``). ``probe``: whether the device can run here, asked by
    ``mg.devices()``.

    >>> mg.register_backend("reference", ReferenceBackend)
    """
    if name in _FACTORIES:
        raise GraphError(f"a backend named {name!r} is registered already")
    _FACTORIES[name] = factory
    if per_device:
        _PER_DEVICE.add(name)
    if probe is not None:
        _PROBES[name] = probe


def unregister_backend(name: str) -> None:
    """Forget a backend registered with ``register_backend`` (tests register temporary ones)."""
    if name == "cpu":
        raise GraphError("the cpu backend cannot be unregistered")
    _FACTORIES.pop(name, None)
    _BACKENDS.pop(name, None)
    _PROBES.pop(name, None)
    _PER_DEVICE.discard(name)


def devices() -> list[str]:
    """The device names ``mg.compile(device=...)`` accepts here ("cuda" only where the cuda
    extra, a driver and a GPU are)."""
    return sorted(name for name in _FACTORIES if _usable(name))


def _usable(name: str) -> bool:
    probe = _PROBES.get(name)
    if probe is None:
        return True
    return bool((_load(probe) if isinstance(probe, str) else probe)())


def _load(spec: str) -> Callable:
    """The function a plug-in string "module:attribute" names, its module imported now."""
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)  # lazy: a plug-in, loaded when asked


def get_backend(device: str) -> Backend:
    """The backend for ``device`` ("cpu"; an index after a colon picks one of several devices
    of a kind, "cuda:1"); an unknown device is a GraphError listing the known ones."""
    if not isinstance(device, str):
        raise GraphError(f"device must be a string such as 'cpu', got {type(device).__name__}")
    kind, _, index = device.partition(":")
    key = kind
    if kind in _PER_DEVICE:
        if index and not index.isdigit():
            raise GraphError(f"device {device!r}: the index after the colon must be a number, "
                             f"as in '{kind}:1'")
        key = f"{kind}:{int(index or 0)}"
    backend = _BACKENDS.get(key)
    if backend is not None:
        return backend
    with _LOCK:
        backend = _BACKENDS.get(key)
        if backend is not None:  # another thread made it while this one waited
            return backend
        factory = _FACTORIES.get(kind)
        if factory is None:
            raise GraphError(f"unknown device {device!r}; known devices: "
                             f"{', '.join(repr(d) for d in devices())}")
        if isinstance(factory, str):
            factory = _load(factory)
        backend = factory(int(index or 0)) if kind in _PER_DEVICE else factory()
        _BACKENDS[key] = backend
        return backend


# -- timed runs: the profiler's seam ----------------------------------------------------------
# The profiler (tools/profiler.py, above every backend) installs the two functions an executable
# needs; until it is imported no profile can be active, and runs are untimed.
_PROFILER: tuple[Callable, Callable] | None = None


def install_profiler(active: Callable[[], tuple], record: Callable) -> None:
    """Make ``profiling()`` ask ``active()`` and ``record_run`` call ``record`` (the profiler
    does, once, when imported)."""
    global _PROFILER
    _PROFILER = (active, record)


def profiling() -> tuple:
    """The profiles recording now (an empty tuple: run untimed); an executable asks once per
    run."""
    return () if _PROFILER is None else _PROFILER[0]()


def record_run(profiles, plan, began: int, ended: int, times: np.ndarray,
               complete: bool) -> None:
    """Hand one timed run of ``plan`` to ``profiles`` (what ``profiling()`` said when it began):
    ``times`` (k, 2) int64, start and duration in CLOCK_MONOTONIC nanoseconds of instructions
    0 .. k - 1 (those that ran, a failing one included); ``complete``: every one succeeded."""
    _PROFILER[1](profiles, plan, began, ended, times, complete)
