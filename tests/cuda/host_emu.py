"""Run a CUDA kernel on the host: the source compiled as C++ by g++ with csrc_cuda/host_emu.h
(which maps __global__, threadIdx, blockIdx, ... to loops), called through ctypes.

For kernels without shared memory, barriers or warp intrinsics (elementwise, broadcasting,
rendered fused kernels, casts, copies): their results are compared with the CPU backend's in
CI, where there is no GPU. Each distinct source is compiled once per test session (a temp .so).

>>> out = np.zeros(4, np.float32)
>>> run_on_host(SRC, [Step("mg_twice", (1, 1, 1), (4, 1, 1))],
...             [np.arange(4, dtype=np.float32), out], (4,), ())  # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from mgegraph.cuda import CSRC
from mgegraph.cuda.abi import MgArgs, pack
from mgegraph.cuda.kernel import Step

# no FP contraction, as the CPU kernels are built (setup.py), so results can agree bitwise;
# -O1: the arithmetic is IEEE at any level, and the module of every kernel builds in seconds
GXX_FLAGS = ["-std=c++17", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-w"]
_LIBS: dict[str, ctypes.CDLL] = {}
_DIR = Path(tempfile.mkdtemp(prefix="mg_host_emu_"))


def have_compiler() -> bool:
    return shutil.which("g++") is not None


def _source_text(source: str) -> str:
    """A file of csrc_cuda/ by name, or source text."""
    if "\n" not in source and (CSRC / source).is_file():
        return (CSRC / source).read_text()
    return source


def build(source: str) -> ctypes.CDLL:
    """The host build of ``source`` (a csrc_cuda/ file name or text), compiled once."""
    text = _source_text(source)
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    lib = _LIBS.get(key)
    if lib is not None:
        return lib
    cpp, so = _DIR / f"{key}.cpp", _DIR / f"{key}.so"
    cpp.write_text(f'#include "host_emu.h"\n#line 1 "kernel.cu"\n{text}\nMG_EMU_DEFINE_LAUNCH\n')
    done = subprocess.run(["g++", *GXX_FLAGS, "-I", str(CSRC.resolve()), str(cpp), "-o", str(so)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"g++ could not build the host emulation:\n{done.stderr[-4000:]}")
    lib = _LIBS[key] = ctypes.CDLL(str(so))
    lib.mg_emu_launch.argtypes = [ctypes.c_void_p, ctypes.POINTER(MgArgs),
                                  ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint)]
    return lib


def run_on_host(source: str, steps, bufs, ints=(), floats=(), index=0) -> int:
    """Launch each of ``steps`` (mgegraph.cuda.kernel.Step) of ``source`` on the host over the
    NumPy arrays ``bufs`` (inputs, outputs, workspace), which the kernels write in place, as
    instruction ``index``; the status word the kernels left (0: no failure, else
    ``(index + 1) << 8 | code``, mgegraph.cuda.abi.decode)."""
    lib = build(source)
    arrays = [b if isinstance(b, np.ndarray) else np.asarray(b) for b in bufs]
    for a in arrays:
        if not a.flags.c_contiguous:
            raise ValueError("host emulation buffers must be C-contiguous")
    status = np.zeros(1, np.uint64)  # real memory for mg_fail, zeroed as a run zeroes it
    args = pack([a.ctypes.data for a in arrays], ints, floats, status.ctypes.data, index)
    for step in steps:
        if step.shared_bytes:
            raise ValueError(f"{step.entry} uses shared memory: it cannot run on the host")
        kernel = ctypes.cast(getattr(lib, step.entry), ctypes.c_void_p)
        lib.mg_emu_launch(kernel, ctypes.byref(args), (ctypes.c_uint * 3)(*step.grid),
                          (ctypes.c_uint * 3)(*step.block))
    return int(status[0])


def run_plan_on_host(plan, backend, feeds, build_source=None) -> list[np.ndarray]:
    """Run a CUDA plan on the host: its arena and persistent block are NumPy arrays (0xFF
    bytes, as garbage device memory) at the addresses the backend's pure layout functions give
    (mgegraph.cuda.backend), its launches ``plan_calls``' steps over the rendered module, and
    over ``build_source(file)``'s library for each hand-written csrc_cuda/ source (without it,
    a plan that has one is refused). What the GPU executable does, without a GPU: a kernel's
    failure (its status word, 8 bytes after the persistent block) raises its KernelError."""
    from mgegraph.cuda.abi import STATUS_BYTES
    from mgegraph.cuda.launches import (
        persistent_layout,
        plan_calls,
        rendered_source,
        slot_addresses,
    )
    from mgegraph.cuda.runtime import status_error
    calls, texts = plan_calls(plan, backend)
    hand_written = {c.source for c in calls if c.source is not None}
    if hand_written and build_source is None:
        raise ValueError("the plan has hand-written kernels: it cannot run on the host")
    libs = {source: build_source(source) for source in hand_written}
    if texts:
        libs[None] = build(rendered_source(texts))
    offsets, total = persistent_layout(plan)
    arena = _aligned(plan.memory.arena_bytes, 256)
    persistent = _aligned(total + STATUS_BYTES, 256)
    status = persistent[total:].view(np.uint64)
    status[0] = 0
    address = slot_addresses(plan, arena.ctypes.data, persistent.ctypes.data, offsets)

    def view(slot):
        t = plan.slots[slot].type
        start = address[slot] - persistent.ctypes.data
        block = persistent if 0 <= start < persistent.nbytes else arena
        start = address[slot] - block.ctypes.data
        return block[start:start + t.nbytes].view(t.dtype).reshape(t.shape)

    for slot, value in plan.values.items():
        view(slot)[...] = value
    for name, slot in plan.feeds.items():
        view(slot)[...] = feeds[name]
    for call in calls:
        ins, lib = plan.instructions[call.index], libs[call.source]
        args = pack([address[s] for s in call.slots], ins.ints, ins.floats,
                    status.ctypes.data, call.index)
        kernel = ctypes.cast(getattr(lib, call.step.entry), ctypes.c_void_p)
        lib.mg_emu_launch(kernel, ctypes.byref(args), (ctypes.c_uint * 3)(*call.step.grid),
                          (ctypes.c_uint * 3)(*call.step.block))
    error = status_error(plan, int(status[0]))
    if error is not None:
        raise error
    return [view(s).copy() for s in plan.outputs]


def _aligned(nbytes: int, alignment: int) -> np.ndarray:
    raw = np.full(nbytes + alignment, 0xFF, np.uint8)  # poisoned, as on the device
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes]


__all__ = ["Step", "build", "have_compiler", "run_on_host", "run_plan_on_host"]
