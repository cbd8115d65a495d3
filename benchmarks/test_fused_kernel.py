"""fusion-chain (shared/BENCHMARKS.md) on the fused kernel: relu(x*a+b)*c - tanh(x)/(1+exp(-x)).

Compares the kernel on 1 and 2 threads with NumPy eager and with the bandwidth limit: the bytes
the chain must move (4 inputs read, 1 output written: 80 MiB) at the copy bandwidth np.copyto
reaches on a 64 MiB buffer (which moves 128 MiB: 64 read, 64 written). The "plain stores" rows
turn the kernel's streaming off (lowering.fused.streams picks it for these 80 MiB), to show
what non-temporal stores give in the same run. The "one loop" rows time fused_chain_loop.c, the
chain as a single C loop with the kernel's math (the same bits, checked), built with the system
C compiler: what the blocked evaluator costs against code generated for this one expression.
The "generated body" rows run the loop a plan compiles for the chain (_kernels/fused_jit.py)
through the kernel's driver: the blocks, threads and streaming stores stay the evaluator's.
"""
import ctypes
import functools
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mgegraph._kernels import fused as K
from mgegraph._kernels import fused_jit
from mgegraph._kernels.lowering.fused import encode, kernel_name
from mgegraph.ops.fused_program import Program

N = 4_194_304
MIB = 1 << 20
CHAIN_BYTES = 5 * N * 4
COPY_BYTES = 64 * MIB
MEDIANS = {}
GROUP = f"fusion-chain kernel ({N} float32 per input)"


def _chain():
    code = [("load", 0, 0), ("load", 1, 1), ("mul", 2, 0, 1), ("load", 3, 2), ("add", 4, 2, 3),
            ("relu", 5, 4), ("load", 6, 3), ("mul", 7, 5, 6), ("tanh", 8, 0), ("neg", 9, 0),
            ("exp", 10, 9), ("const", 11, 0), ("add", 12, 11, 10), ("div", 13, 8, 12),
            ("sub", 14, 7, 13), ("store", 0, 14)]
    return Program([(N,)] * 4, (N,), np.float32, code, [1.0])


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(N, dtype=np.float32) for _ in range(4)]


def _numpy_eager(x, a, b, c):
    return np.maximum(x * a + b, 0) * c - np.tanh(x) / (1 + np.exp(-x))


def _fused(threads, stream=None, generated=False):
    program, inputs = _chain(), _inputs()
    ints, floats, ws = encode(program, threads=threads, stream=stream, body=generated)
    out = np.empty(N, np.float32)
    arrays = inputs + [out, np.empty(ws, np.uint8)]
    name = kernel_name(np.float32)
    if generated:  # the loop a plan compiles for this program (fused_jit.py)
        name = fused_jit.kernel_for(name, ints)
        if name is None:
            pytest.skip(f"no generated body: {fused_jit.unavailable()}")
    np.testing.assert_allclose(  # the kernel computes the chain (checked once, untimed)
        (K.call_kernel(name, arrays, ints, floats), out)[1], _numpy_eager(*inputs),
        rtol=1e-5, atol=1e-5)
    return lambda: K.call_kernel(name, arrays, ints, floats)


@functools.cache
def _loop_library():
    """fused_chain_loop.c built into a temporary shared library; skips without a compiler."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}) to build fused_chain_loop.c")
    out = Path(tempfile.mkdtemp(prefix="mgegraph_bench_")) / "fused_chain_loop.so"
    src = Path(__file__).with_name("fused_chain_loop.c")
    # the flags of the fused build this CPU runs (no contraction: the kernel's bits)
    args = [*fused_jit.compile_flags(), "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(out)]
    built = subprocess.run([cc, *args], check=False, capture_output=True, text=True)
    if built.returncode:
        pytest.skip(f"fused_chain_loop.c did not build: {built.stderr[-300:]}")
    return ctypes.CDLL(str(out))


def _one_loop(threads):
    lib, inputs = _loop_library(), _inputs()
    out = np.empty(N, np.float32)
    ptrs = [a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for a in inputs + [out]]

    def call():
        lib.fusion_chain(*ptrs, ctypes.c_long(N), ctypes.c_int(threads))

    call()
    want = np.empty(N, np.float32)  # the kernel's result, which the loop must give bit for bit
    ints, floats, ws = encode(_chain(), threads=threads)
    K.call_kernel(kernel_name(np.float32), inputs + [want, np.empty(ws, np.uint8)], ints, floats)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    return call


def _copy():
    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    return lambda: np.copyto(dst, src)


IMPLS = {
    "numpy eager": lambda: functools.partial(_numpy_eager, *_inputs()),
    "fused 1 thread": lambda: _fused(1),
    "fused 2 threads": lambda: _fused(2),
    "fused 1 thread, plain stores": lambda: _fused(1, stream=False),
    "fused 2 threads, plain stores": lambda: _fused(2, stream=False),
    "generated body, 1 thread": lambda: _fused(1, generated=True),
    "generated body, 2 threads": lambda: _fused(2, generated=True),
    "one loop (C), 1 thread": lambda: _one_loop(1),
    "one loop (C), 2 threads": lambda: _one_loop(2),
    "np.copyto 64 MiB": _copy,
}


@pytest.mark.parametrize("impl", list(IMPLS))
def test_fusion_chain_kernel(benchmark, impl):
    benchmark.group = GROUP
    benchmark(IMPLS[impl]())
    if benchmark.stats is not None:
        MEDIANS[impl] = benchmark.stats.stats.median


def test_fusion_chain_kernel_summary(capsys):
    if len(MEDIANS) < len(IMPLS):
        pytest.skip("run with the benchmarks enabled, all implementations")
    copy = MEDIANS["np.copyto 64 MiB"]
    limit = copy / (2 * COPY_BYTES) * CHAIN_BYTES
    lines = [(f"{GROUP}: bandwidth limit {limit * 1e3:.2f} ms "
              f"({2 * COPY_BYTES / copy / 1e9:.1f} GB/s copied, 80 MiB to move)")]
    for impl in [name for name in IMPLS if name != "np.copyto 64 MiB"]:
        t = MEDIANS[impl]
        lines.append(f"  {impl:29s} median {t * 1e3:8.2f} ms  x{t / MEDIANS['numpy eager']:.3f}"
                     f" of numpy  x{t / limit:.2f} of the limit")
    with capsys.disabled():  # the terminal summary is the conftest's; this adds the limit
        print("\n" + "\n".join(lines))
