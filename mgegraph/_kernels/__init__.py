"""Compiled CPU kernels. Each module exposes KERNELS: {name: C function address}."""
import importlib
import os

from . import blas_select  # loads no OpenMP runtime (checked: no libgomp mapped after it)


def _wait_policy() -> str | None:
    """How idle OpenMP threads wait: None for libgomp's default (spin ~300k rounds, about a
    millisecond, then sleep) or "PASSIVE" (sleep at once).

    NOTE: every parallel kernel runs on the one libgomp pool: MKL's GEMMs too (its GNU threading
    layer), and OpenBLAS's GEMMs are split among that pool's threads, one single-threaded call
    each (linalg.pyx), where OpenBLAS has its per-thread call. A sleeping thread must be woken
    for each parallel kernel, which costs tens of microseconds, much more while another process
    holds the core: at 2 threads on the 2-core AMD EPYC with MKL, resnet-infer 1x224 took 29-30
    ms sleeping and 24-27 ms spinning, and mlp-train 10.7-14.6 against 8.6-9.9 (scratch A/B,
    medians of 30 runs, 2 rounds). Where OpenBLAS would start its own pthread pool beside ours
    (no per-thread call), idle libgomp threads spinning beside it made mlp-train 2.4x slower
    (24 ms against 10): there they sleep."""
    if blas_select.expected_name() == "mkl" or blas_select.openblas_addresses():
        return None
    return "PASSIVE"


# read when libgomp loads, i.e. at the imports below; a policy or spin count the user set wins
if ("OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ
        and (_policy := _wait_policy()) is not None):
    os.environ["OMP_WAIT_POLICY"] = _policy
# whether idle threads sleep at once (so that waking one costs tens of microseconds) rather than
# spin about a millisecond after each parallel kernel: the lowerings size parallel work by it
THREADS_SLEEP = (os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
                 or os.environ.get("GOMP_SPINCOUNT", "").strip() == "0")

from . import conv, elementwise, fused, linalg, movement, nn, norm, pool, reduce, resize, vision


def _widest_fused_build():
    """The fused kernel built for the widest vectors this CPU runs (the same results)."""
    for isa in ("avx512", "avx2"):
        if fused.cpu_has(isa):
            try:
                return importlib.import_module(  # lazy: only the build this CPU runs
                    f"{__name__}.fused_{isa}")
            except ImportError:  # not built on this platform
                continue
    return fused


fused = _widest_fused_build()  # noqa: F811
KERNEL_MODULES = (elementwise, reduce, nn, norm, linalg, conv, pool, movement, fused, vision,
                  resize)
# deformable sampling and correlation (deform.pyx)
from . import deform

KERNEL_MODULES += (deform,)
# sort, topk and the scans cumsum, cumprod (sorting.pyx)
from . import sorting

KERNEL_MODULES += (sorting,)
# RMS norm (rms_norm.pyx)
from . import rms_norm

KERNEL_MODULES += (rms_norm,)
# scaled dot-product attention and its backward (attention.pyx)
from . import attention

KERNEL_MODULES += (attention,)
# random draws: uniform, gamma, poisson (rng.pyx)
from . import rng

KERNEL_MODULES += (rng,)
# MegEngine's matinv and sliding windows (matinv.pyx, sliding_window.pyx)
from . import matinv, sliding_window

KERNEL_MODULES += (matinv, sliding_window)
# convolutions with unshared weights or region-restricted taps (local_conv.pyx)
from . import local_conv

KERNEL_MODULES += (local_conv,)
# quantize and dequantize (quantize.pyx)
from . import quantize

KERNEL_MODULES += (quantize,)
# quantization-aware training's fake_quant (fake_quant.pyx)
from . import fake_quant

KERNEL_MODULES += (fake_quant,)
# the int8 compute ops: quantized conv2d, linear and add (quantized.pyx)
from . import quantized

KERNEL_MODULES += (quantized,)
# the int8 GEMM kernels and quantized_pack_weight (qgemm.pyx; quantized.pyx's fast paths)
from . import qgemm

KERNEL_MODULES += (qgemm,)
# the collectives over MPI, called through the loaded library's addresses (collective.pyx)
from . import collective

KERNEL_MODULES += (collective,)
