"""CPU lowerings of matmul, linear and addmm: the parameter blocks of _kernels/linalg.pyx, and the
check that a GEMM fits BLAS's 32-bit dimensions."""
from __future__ import annotations

import math

import numpy as np

from ...backend import Launch
from ...ops.matmul import matmul_dims
from ...ops.registry import FLOAT_DTYPES, NUMERIC_DTYPES
from .. import linalg as K
from .. import parallel
from .layout import broadcast_strides, collapse, contiguous_strides, pack

BLAS_INT_MAX = 2**31 - 1  # SciPy's BLAS takes 32-bit dimensions


def check_blas_dims(dtype, *dims) -> None:
    """A ValueError when a GEMM of a float ``dtype`` (which goes to BLAS; integer ones run the
    kernels' own loop) has a dimension past BLAS's 32-bit ints."""
    if dtype in FLOAT_DTYPES and max(dims, default=0) > BLAS_INT_MAX:
        raise ValueError(f"a GEMM dimension of {max(dims)} exceeds BLAS's 32-bit limit")


# FLOPs one thread of a GEMM should have for a second to pay for the fork/join (~10 us asleep,
# a few awake): 2 MFLOP is ~20 us of this machine's single-core sgemm
GRAIN_FLOPS = 2_000_000


def gemm_threads(dtype, m, n, k) -> int:
    """The column blocks a float GEMM is planned in (linalg.pyx's Threads); 1 for integers. A
    single row is a gemv, which reads its (k, n) matrix once: its bytes decide, as for the
    other bandwidth-bound kernels."""
    if dtype not in FLOAT_DTYPES:
        return 1
    if m == 1:
        return parallel.threads_for(n * k * np.dtype(dtype).itemsize)
    return parallel.threads_for(2 * m * n * k, GRAIN_FLOPS)


def _matmul_lower(node) -> Launch:
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
    head = pack(K.MATMUL_FIELDS, m=m, n=n, k=k, transpose_a=ta, transpose_b=tb,
                threads=gemm_threads(a.dtype, m, n, k), ndim=len(shape))
    return Launch((*head, *shape, *sa, *sb))


def _linear_lower(node) -> Launch:
    x, w = node.inputs[:2]
    m, (n, k) = math.prod(x.shape[:-1]), w.shape
    check_blas_dims(x.dtype, m, n, k)
    return Launch(pack(K.LINEAR_FIELDS, m=m, n=n, k=k, has_bias=len(node.inputs) == 3,
                       relu=node.attr["activation"] == "relu",
                       threads=gemm_threads(x.dtype, m, n, k)))


def _addmm_lower(node) -> Launch:
    c, a, b = node.inputs[:3]
    _, _, _, m, n, k = matmul_dims(a.type, b.type, node.attr)
    check_blas_dims(c.dtype, m, n, k)
    ints = pack(K.ADDMM_FIELDS, m=m, n=n, k=k, transpose_a=node.attr["transpose_a"],
                transpose_b=node.attr["transpose_b"], has_scale=len(node.inputs) == 4,
                threads=gemm_threads(c.dtype, m, n, k))
    return Launch(ints, (float(node.attr["alpha"]),))


def implement(table) -> None:
    table.implement("matmul", kernel="matmul", dtypes=NUMERIC_DTYPES, lower=_matmul_lower)
    table.implement("linear", kernel="linear", dtypes=FLOAT_DTYPES, lower=_linear_lower)
    table.implement("addmm", kernel="addmm", dtypes=FLOAT_DTYPES, lower=_addmm_lower)
