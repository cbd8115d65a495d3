"""The CUDA backend: ``mg.compile(..., device="cuda")`` and ``"cuda:1"``.

The planner, remat and the arena offsets are the CPU's, unchanged: this backend has the CPU's
alignment, reuses the CPU lowerings wherever its kernels read the same parameter layout, and
places a plan's temporaries and workspaces at the planned offsets of one device allocation (the
arena). Inputs, outputs, params and consts live in one second allocation, each at a 256-byte
boundary (``persistent_layout``); shared params (``nn.Parameter``s, optimiser state) stay there
between runs, so a training step keeps its weights on the device.

Runs: the feeds go through pinned host buffers into the device, the instructions launch on one
stream (after the first run, replayed as one CUDA graph: the plan's shapes are static), the
outputs come back through pinned buffers, and ``run`` returns NumPy arrays as on the CPU. A
shared param the host wrote since the last run (``prologue.written``: optimiser scalars,
``Parameter.value = ...``, ``load_state_dict``) is uploaded before the run; the weights a run
updates stay on the device until ``executable.pull()`` (``mgegraph.cuda.fetch``) copies them
back into the host arrays.

Kernels: every family module of ``kernels.FAMILIES``; hand-written ones are csrc_cuda/ files
compiled once per process and architecture, rendered ones (elementwise, fused) go into one
module per plan. Everything is compiled through the disk cache (nvrtc.py).

Eager mode (``mg.tensor``) runs on the CPU only.

>>> plan = mg.compile([y], device="cuda")          # doctest: +SKIP
>>> (out,) = plan.run({"x": x})                    # doctest: +SKIP
"""
from __future__ import annotations

import importlib
import threading

from ..backend import FusionLimits, KernelTable
from ..ir.errors import GraphError
from . import nvrtc
from .driver import Device, device_count, probe
from .errors import DeviceUnavailableError
from .kernels import FAMILIES
from .launches import PERSISTENT_ALIGNMENT
from .runtime import CudaExecutable

# Arena offsets are multiples of the CPU's alignment, so a CUDA plan is placed exactly as the
# CPU plan of the same lowering (and every 16-byte vector access of a kernel is aligned); the
# driver's allocations start at 256-byte boundaries.
ALIGNMENT = 64
# A fused kernel's buffers are its MgArgs' (16): inputs and outputs together; its values are
# registers the compiler allocates, so the register limit is the CPU's (what the fusion pass
# splits at), not a hardware one.
FUSION = FusionLimits(max_inputs=12, max_outputs=4, max_registers=64, max_dims=8)


def family_modules() -> list:
    return [importlib.import_module(  # lazy: a plug-in table (kernels.FAMILIES), in its order
        f"{__package__}.kernels.{name}") for name in FAMILIES]


class CudaBackend(KernelTable):
    """The kernel table of every CUDA family for GPU ``device``; None makes one that can plan
    and render but not run (the tests without a GPU). ``name``: the device name it is
    registered under, when not "cuda" / "cuda:N"."""

    alignment = ALIGNMENT
    fusion = FUSION
    runs_prologue = False  # weight-only instructions stay in the plan (no prologue split)

    def __init__(self, device: int | None = 0, name: str | None = None):
        # the registered name plans carry (plan.executable() finds the backend by it)
        self.name = name or ("cuda" if not device else f"cuda:{device}")
        super().__init__(self.name)
        self.index = device
        entries: dict = {}
        for module in family_modules():
            module.implement(self)
            clash = entries.keys() & module.KERNELS.keys()
            if clash:
                raise ImportError(f"CUDA kernel names defined twice: {sorted(clash)}")
            entries.update(module.KERNELS)
        self.resolve(entries)
        self._device = self._compiler = None
        self._modules: dict[str, object] = {}
        self._lock = threading.Lock()

    def gpu(self):
        """The driver's Device (made on first use). (Not ``device``: KernelTable's ``device``
        is the backend's name.)"""
        if self.index is None:
            raise DeviceUnavailableError("this CUDA backend was made for planning only "
                                         "(device=None)")
        with self._lock:
            if self._device is None:
                self._device = Device(self.index)
            return self._device

    def compiler(self) -> nvrtc.Compiler:
        if self._compiler is None:
            self._compiler = nvrtc.Compiler(self.gpu().arch)
        return self._compiler

    def module(self, source: str, text: str | None = None, extra=()):
        """The loaded module of a csrc_cuda/ file (``text`` None) or of rendered text."""
        compiled = self.compiler().compile_file(source, extra) if text is None else \
            self.compiler().compile(text, source, extra)
        key = nvrtc.key_of(compiled)
        if key not in self._modules:
            self._modules[key] = self.gpu().load(compiled.cubin)
        return self._modules[key]

    def allocate(self, nbytes: int, alignment: int) -> int:
        if alignment > PERSISTENT_ALIGNMENT:
            raise GraphError(f"the CUDA backend aligns allocations to {PERSISTENT_ALIGNMENT} "
                             f"bytes, not {alignment}")
        return self.gpu().alloc(nbytes)

    def executable(self, plan) -> CudaExecutable:
        return CudaExecutable(self, plan)

    def launcher(self, kernel, launch, n_inputs: int, release_gil: bool):
        raise GraphError("eager mode runs on the CPU; compile a graph with device='cuda' to "
                         "run it on the GPU")


def backend(index: int = 0) -> CudaBackend:
    """The factory ``mg.compile(device="cuda:N")`` calls: one clear error when the extra, the
    driver or the GPU is missing, before any planning."""
    reason = probe()
    if reason:
        raise DeviceUnavailableError(f"device 'cuda:{index}' is not available: {reason}")
    count = device_count()
    if index >= count:
        raise DeviceUnavailableError(f"device 'cuda:{index}' asked for; this machine has "
                                     f"{count} CUDA GPU(s): cuda:0..cuda:{count - 1}")
    return CudaBackend(index)
