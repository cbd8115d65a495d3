"""The parameter blocks of matmul, linear and addmm, read by _kernels/linalg.pyx and
csrc_cuda/gemm.cu, and the check that a GEMM fits 32-bit BLAS dimensions.

How a product runs on the device (threads, the CPU's gather tiles, a single row's split of k,
the workspace those take) is the device's choice: ``implement`` takes it as ``gemm``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..backend import Launch
from ..ops.matmul import EPILOGUE_ACTIVATIONS, matmul_dims
from ..ops.registry import FLOAT_DTYPES, NUMERIC_DTYPES
from .layout import broadcast_strides, collapse, contiguous_strides, pack

# The structs' fields, in the kernels' order (linalg.pyx exports its own *_FIELDS). matmul's
# fixed fields are followed by its batch shape and the batch strides of a and b.
FIELDS = {
    "MATMUL_FIELDS": ("m", "n", "k", "transpose_a", "transpose_b", "threads", "tiles",
                      "gemv_split", "ndim"),
    "LINEAR_FIELDS": ("m", "n", "k", "has_bias", "activation", "threads", "tiles"),
    "ADDMM_FIELDS": ("m", "n", "k", "transpose_a", "transpose_b", "has_scale", "threads",
                     "tiles", "gemv_split"),
}
BLAS_INT_MAX = 2**31 - 1  # SciPy's BLAS takes 32-bit dimensions
# the ``activation`` field of linear's and conv2d's blocks: the kernels' codes for the attribute,
# its position in EPILOGUE_ACTIVATIONS (none 0, relu 1, relu6 2: _kernels/activation.h's ACT_*,
# csrc_cuda/scalar.cuh's MG_ACT_*)
ACTIVATION_CODES = {name: code for code, name in enumerate(EPILOGUE_ACTIVATIONS)}


def activation_code(attrs) -> int:
    """The kernels' code of an op's ``activation`` attribute."""
    return ACTIVATION_CODES[attrs["activation"]]


def check_blas_dims(dtype, *dims) -> None:
    """A ValueError when a GEMM of a float ``dtype`` (which goes to BLAS; integer ones run the
    kernels' own loop) has a dimension past BLAS's 32-bit ints."""
    if dtype in FLOAT_DTYPES and max(dims, default=0) > BLAS_INT_MAX:
        raise ValueError(f"a GEMM dimension of {max(dims)} exceeds BLAS's 32-bit limit")


@dataclass(frozen=True)
class Gemm:
    """How a device runs one product: the block's threads, tiles and gemv_split fields, the
    workspace bytes they need, and the way's name for reports (``Launch.path``; empty where
    the device has one way)."""

    threads: int = 1
    tiles: bool = False
    gemv_split: bool = False
    workspace: int = 0
    path: str = ""


def plain_gemm(dtype, m: int, n: int, k: int, transpose_b: bool,
               transpose_a: bool = False) -> Gemm:
    """A device that reads none of the CPU's choices (CUDA drops those fields: gemm.py)."""
    return Gemm()


def _matmul_launches(node, gemms) -> tuple[Launch, ...]:
    a, b = node.inputs
    a_batch, b_batch, batch, m, n, k = matmul_dims(a.type, b.type, node.attr)
    ta = node.attr["transpose_a"] and a.ndim >= 2
    tb = node.attr["transpose_b"] and b.ndim >= 2
    sa = [s * m * k for s in broadcast_strides(a_batch, batch)]
    sb = [s * k * n for s in broadcast_strides(b_batch, batch)]
    if batch and not ta and a_batch == batch and not any(sb):
        # Every batch shares one B and A's batches are contiguous rows: one tall GEMM.
        m, batch, sa, sb = m * math.prod(batch), (), [], []
    out = [s * m * n for s in contiguous_strides(batch)]
    shape, (_, sa, sb) = collapse(batch, [out, sa, sb])
    check_blas_dims(a.dtype, m, n, k)
    launches = []
    for run in gemms(a.dtype, m, n, k, tb, ta):
        head = pack(FIELDS["MATMUL_FIELDS"], m=m, n=n, k=k, transpose_a=ta, transpose_b=tb,
                    threads=run.threads, tiles=run.tiles, gemv_split=run.gemv_split,
                    ndim=len(shape))
        launches.append(Launch((*head, *shape, *sa, *sb), workspace=run.workspace,
                               path=run.path))
    return tuple(launches)


def _linear_launches(node, gemms) -> tuple[Launch, ...]:
    x, w = node.inputs[:2]
    m, (n, k) = math.prod(x.shape[:-1]), w.shape
    check_blas_dims(x.dtype, m, n, k)
    return tuple(Launch(pack(FIELDS["LINEAR_FIELDS"], m=m, n=n, k=k,
                             has_bias=len(node.inputs) == 3,
                             activation=activation_code(node.attr), threads=run.threads,
                             tiles=run.tiles), workspace=run.workspace, path=run.path)
                 for run in gemms(x.dtype, m, n, k, True))  # the weight is B^T


def _addmm_launches(node, gemms) -> tuple[Launch, ...]:
    c, a, b = node.inputs[:3]
    _, _, _, m, n, k = matmul_dims(a.type, b.type, node.attr)
    check_blas_dims(c.dtype, m, n, k)
    ta, tb = node.attr["transpose_a"], node.attr["transpose_b"]
    return tuple(Launch(pack(FIELDS["ADDMM_FIELDS"], m=m, n=n, k=k,
                             transpose_a=ta, transpose_b=tb,
                             has_scale=len(node.inputs) == 4, threads=run.threads,
                             tiles=run.tiles, gemv_split=run.gemv_split),
                        (float(node.attr["alpha"]),), run.workspace, run.path)
                 for run in gemms(c.dtype, m, n, k, tb, ta))


LAUNCHES = {"matmul": _matmul_launches, "linear": _linear_launches, "addmm": _addmm_launches}


def implement(table, gemm=plain_gemm, gemms=None) -> None:
    """Register matmul, linear and addmm on ``table``; ``gemm(dtype, m, n, k, transpose_b,
    transpose_a)`` says how the device runs each product (a ``Gemm``), ``gemms`` (the same
    arguments) every way it can (a tuple of them; ``OpImpl.candidates``), where it has several."""
    for op, launches in LAUNCHES.items():
        def lower(node, launches=launches):
            return launches(node, lambda *dims: (gemm(*dims),))[0]
        ways = None if gemms is None else functools.partial(launches, gemms=gemms)
        table.implement(op, kernel=op, dtypes=NUMERIC_DTYPES if op == "matmul" else FLOAT_DTYPES,
                        lower=lower, candidates=ways)
