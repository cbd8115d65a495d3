"""The inverse of a batch of square matrices: ``matinv`` over (..., n, n), MegEngine's
``F.matinv`` (its ``MatrixInverse``), NumPy's ``np.linalg.inv``.

A singular matrix is an error at run time (a KernelError naming the node), as NumPy's
``LinAlgError`` and MegEngine's "pivot value too small": a matrix is singular here when
elimination meets a pivot column of exact zeros, so no inf is returned for it. A nearly
singular matrix gives large values and a NaN in the input gives NaNs, as NumPy's. (MegEngine
refuses pivots under 1e-7 whatever the matrix's scale, so 1e-4 * I; we do not.)

Design: an op with kernels (_kernels/matinv.pyx, csrc_cuda/matinv.cu, parameter block
kernel_abi/matinv.py): Gauss-Jordan elimination with partial pivoting, one matrix per thread,
working in the output buffer itself (the inverse built in place, columns swapped back at the
end), so the only workspace is the pivot rows. The gradient is -Y^T G Y^T with Y the inverse, two matmuls.
ONNX has no inverse in its default domain: the exporter refuses it.

>>> y = F.matinv(a)     # a: (batch, n, n)
"""
from __future__ import annotations

from ..ir.types import TensorType
from .builder import apply, graph_of
from .registry import FLOAT_DTYPES, OpDef, register, require_dtypes, same_shape

__all__ = ["matinv"]


def _infer(in_types, attrs):
    (a,) = in_types
    require_dtypes("matinv", a, FLOAT_DTYPES)
    if a.ndim < 2:
        raise ValueError(f"input must have at least 2 dims (..., n, n), got shape {a.shape}")
    if not same_shape(a.shape[-1:], a.shape[-2:-1], "matinv's matrices"):
        raise ValueError(f"input must be square matrices (..., n, n), got shape {a.shape}")
    return (TensorType(a.shape, a.dtype),)


def _grad(node, out_grads):
    # d(A^-1) = -A^-1 dA A^-1, so dA = -Y^T G Y^T (Y = A^-1): two matmuls, transposes folded in
    (y,), (g,) = node.outputs, out_grads
    yt_g = apply("matmul", (y, g), transpose_a=True, transpose_b=False)
    return (apply("neg", (apply("matmul", (yt_g, y), transpose_a=False, transpose_b=True),)),)


def _flops(node) -> float:
    n = node.inputs[0].shape[-1]
    return float(node.inputs[0].size * 2 * n)  # Gauss-Jordan: 2 n^3 per matrix


register(OpDef("matinv", "matmul", _infer, grad=_grad, flops=_flops))


def matinv(inp):
    """The inverses of a batch of square matrices (..., n, n); a singular one is a
    KernelError when the node runs.

    >>> F.matinv(mg.tensor([[1.0, 0.0], [1.0, 1.0]])).numpy()
    array([[ 1.,  0.],
           [-1.,  1.]], dtype=float32)
    """
    return apply("matinv", (graph_of(inp).lift(inp),))
