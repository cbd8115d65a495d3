"""Helpers of the hand-written kernels' tests (test_kernels_*.py): NVRTC compiles of one
csrc_cuda/ source, a node's CPU result (its CPU kernel, run through the CPU backend's launcher),
and the host emulation of the node's CUDA launches.

Design: the hand-written kernels share tiles through shared memory, wait at barriers and combine
through warp shuffles, which host_emu.h (one thread after another) cannot run. fiber_emu.h runs
each thread of a block as a fiber that yields at __syncthreads and at every shuffle, so these
kernels run on the host with the launch geometry their steps choose; what the emulation cannot
show is timing: races between threads that a barrier does not order, and speed.
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
from mgegraph.backend import get_backend
from mgegraph.cuda.abi import decode
from mgegraph.cuda.nvrtc import _read

FIBER_EMU = Path(__file__).with_name("fiber_emu.h")
# sm_80 through its PTX (NVRTC's front end, where warnings come from), sm_90 to SASS (ptxas too,
# whose register and spill report the GEMM tests read): the device's own arch is compiled by
# the runtime; a SASS build per arch here would triple the tests' compile time
ARCHS = ("compute_80", "sm_90")


def nvrtc_compile(source: str, arch: str, extra=()) -> tuple[int, str, object]:
    """(NVRTC result code, log, program) of compiling csrc_cuda/``source`` alone with the
    product's options, ``-std=c++17 -I csrc_cuda`` and the architecture."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra is not installed")
    from mgegraph.cuda import CSRC
    text = (CSRC / source).read_bytes()
    _, prog = nvrtc.nvrtcCreateProgram(text, source.encode(), 0, [], [])
    opts = [b"-std=c++17", b"-I", str(CSRC.resolve()).encode(),
            f"--gpu-architecture={arch}".encode(), *extra]
    result = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    log = _read(nvrtc, prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
    return int(result), log.strip("\x00 \n"), prog


def ptx_of(prog) -> str:
    from cuda.bindings import nvrtc
    return _read(nvrtc, prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)


def ptxas_spills(compiled, arch: str) -> list[tuple[str, str]] | None:
    """Check an ``nvrtc_compile(..., ["--ptxas-options=-v"])`` result: it compiled without
    warnings; then (spill stores, spill loads) ptxas reported per entry, or None for a PTX-only
    architecture (no ptxas run, no report)."""
    result, log, _ = compiled
    assert result == 0, log
    assert "warning" not in log.lower(), log
    if not arch.startswith("sm_"):
        return None
    return re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)


def has_cubin(prog) -> bool:
    from cuda.bindings import nvrtc
    return nvrtc.nvrtcGetCUBINSize(prog)[1] > 0


def node_of(op: str, arrays, **attrs):
    """A node of ``op`` over graph inputs shaped like ``arrays``."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return g.add_node(op, xs, attrs)


def empty_outputs(node) -> list[np.ndarray]:
    return [np.zeros(v.shape, v.dtype) for v in node.outputs]


def poisoned(shape, dtype) -> np.ndarray:
    """An array of 0xFF bytes (NaN, -1, an invalid bool): a kernel that leaves an element of
    its output (or reads its workspace) unwritten shows, as arena memory would hold garbage."""
    return np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, 0xFF, np.uint8).view(
        dtype).reshape(shape)


def cpu_result(node, arrays) -> list[np.ndarray]:
    """The node's outputs by its CPU kernel."""
    cpu = get_backend("cpu")
    launch = cpu.impl(node.op.name).lower(node)
    kernel = cpu.kernel(node.op.name, cpu.impl(node.op.name).dispatch_dtype(node))
    outs = empty_outputs(node)
    bufs = [np.ascontiguousarray(a) for a in arrays] + outs
    if launch.workspace:
        bufs.append(np.zeros(launch.workspace, np.uint8))
    status = cpu.launcher(kernel, launch, len(arrays), False)(tuple(bufs))
    assert status == 0, f"CPU kernel status {status}"
    return outs


def cuda_launch(family, node):
    """(Launch, steps) of the node on the CUDA backend's family module (no device needed)."""
    from mgegraph.backend import KernelTable, kernel_name
    table = KernelTable("cuda")
    family.implement(table)
    impl = table.impl(node.op.name)
    launch = impl.lower(node)
    kernel = family.KERNELS[kernel_name(impl.kernel, impl.dispatch_dtype(node))]
    types = tuple(v.type for v in node.inputs + node.outputs)
    return launch, kernel, kernel.steps(launch, types)


def rendered_launch(family, node) -> tuple:
    """(Launch, text, steps) of a node whose kernel the family renders per instruction
    (a RenderedKernel: its tables baked into the text), as a plan would render it."""
    from types import SimpleNamespace

    from mgegraph.backend import KernelTable, kernel_name
    from mgegraph.cuda.kernel import RenderedKernel
    table = KernelTable("cuda")
    family.implement(table)
    impl = table.impl(node.op.name)
    launch = impl.lower(node)
    kernel = family.KERNELS[kernel_name(impl.kernel, impl.dispatch_dtype(node))]
    assert isinstance(kernel, RenderedKernel)
    types = tuple(v.type for v in node.inputs + node.outputs)
    return (launch, *kernel.render(SimpleNamespace(ints=launch.ints, floats=launch.floats),
                                   types))


def emulate_rendered(family, node, arrays) -> np.ndarray:
    """Output 0 of the node by its rendered CUDA kernel on the host (host_emu.h alone: such
    kernels use no shared memory); the kernel must not report a failure."""
    from host_emu import have_compiler, run_on_host
    if not have_compiler():
        pytest.skip("no g++ for the host emulation")
    launch, text, steps = rendered_launch(family, node)
    out = poisoned(node.outputs[0].shape, node.outputs[0].dtype)
    word = run_on_host(text, steps, [np.ascontiguousarray(a) for a in arrays] + [out],
                       launch.ints, launch.floats)
    assert word == 0, f"the kernel reported a failure: (instruction, code) {decode(word)}"
    return out


def emulate(family, node, arrays, steps=None, fibers=True, status=False):
    """The node's outputs by its CUDA kernel, emulated on the host with the launch geometry of
    its steps (or of ``steps``, to reach another entry of the kernel): through fiber_emu.h, or
    with ``fibers=False`` through host_emu.h alone (one thread after another), which builds
    only kernels without shared memory, barriers or shuffles. The kernel must not report a
    failure (its status word, mg_fail); with ``status=True``: (outputs, the word), the
    instruction's index being 0."""
    from host_emu import build, have_compiler, run_on_host

    from mgegraph.cuda import CSRC
    if not have_compiler():
        pytest.skip("no g++ for the host emulation")
    launch, kernel, chosen = cuda_launch(family, node)
    steps = chosen if steps is None else steps
    source = (CSRC / kernel.source).read_text()
    if fibers:
        source = FIBER_EMU.read_text() + source
    outs = [poisoned(v.shape, v.dtype) for v in node.outputs]
    bufs = [np.ascontiguousarray(a) for a in arrays] + outs
    if launch.workspace:
        bufs.append(poisoned((launch.workspace,), np.uint8))
    word = run_on_host(source, steps, bufs, launch.ints, launch.floats)
    if fibers:
        failed = ctypes.c_int.in_dll(build(source), "mg_fiber_failed")
        assert failed.value == 0, "a block of the emulation deadlocked at a barrier"
    if status:
        return outs, word
    assert word == 0, f"the kernel reported a failure: (instruction, code) {decode(word)}"
    return outs


def assert_close(got, want, rtol=1e-5, atol=0.0):
    """Equal values (NaN where NaN), within ``rtol`` for floats and exactly for integers."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def assert_close_scaled(got, want, rtol=1e-5):
    """Within ``rtol`` of the largest value: the rounding of a long float32 sum is relative to
    the sums' scale, so a small result of cancelling terms is off by more than its own rtol."""
    want = np.asarray(want)
    atol = rtol * float(np.abs(want).max()) if want.size and want.dtype.kind == "f" else 0.0
    assert_close(got, want, rtol=rtol, atol=atol)


def run_on_device(node, arrays) -> list[np.ndarray]:
    """The node's outputs computed on the CUDA device (an unoptimised plan of that one node);
    skips cleanly, with the reason, where there is no device."""
    from mgegraph import cuda
    try:
        reason = cuda.unavailable_reason()
    except ImportError as e:  # the runtime is not there yet
        reason = f"the CUDA runtime does not load ({e})"
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")
    plan = mg.compile(list(node.outputs), device="cuda", optimize=0)
    return list(plan.run({f"x{i}": a for i, a in enumerate(arrays)}))


def run_plan_emulated(plan, backend, feeds) -> list[np.ndarray]:
    """Run a whole CUDA plan on the host, hand-written kernels included (every csrc_cuda/
    source built with fiber_emu.h): host_emu.run_plan_on_host."""
    from host_emu import build, run_plan_on_host

    from mgegraph.cuda import CSRC
    return run_plan_on_host(plan, backend, feeds, build_source=lambda source: build(
        FIBER_EMU.read_text() + (CSRC / source).read_text()))
