"""Matrix products: matmul (NumPy semantics, batched with broadcasting) and linear.

NOTE: ``linear`` is one op, not matmul + add, so that the GEMM and its bias share one kernel;
epilogue fusion (activations after the GEMM) extends this op rather than matching a pattern.
Its bias is an optional third input: ``linear(x, w)`` or ``linear(x, w, b)``.
"""
from __future__ import annotations

import math

from ..ir.types import TensorType, broadcast_shapes, is_float
from .autocast import gemm_operands
from .builder import apply, promote
from .movement_api import expand_dims, reshape, squeeze
from .reduce import sum as reduce_sum
from .registry import (
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    OpDef,
    register,
    require_dtypes,
    same_shape,
)


def same_dtype(types, what="input"):
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise TypeError(f"{what} dtypes differ ({', '.join(str(t.dtype) for t in types)}); "
                        "mgegraph.functional promotes them, the op itself does not")


# -- matmul ---------------------------------------------------------------------------------------
def _operand(t: TensorType, transpose: bool, left: bool):
    """(batch shape, rows, cols) of op(t) as a matrix; a 1-D operand is a row on the left and
    a column on the right (NumPy), and transposing it changes nothing."""
    if t.ndim == 1:
        return (), *((1, t.shape[0]) if left else (t.shape[0], 1))
    rows, cols = t.shape[-2:]
    return t.shape[:-2], *((cols, rows) if transpose else (rows, cols))


def matmul_dims(a, b, attrs):
    """(a's batch shape, b's, the broadcast batch shape, m, n, k) of matmul(a, b): op(a) is
    (m, k) and op(b) (k, n); a ValueError when they do not fit."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("operands must have at least 1 dimension (use mul for scalars)")
    a_batch, m, k = _operand(a, attrs["transpose_a"], left=True)
    b_batch, kb, n = _operand(b, attrs["transpose_b"], left=False)
    if not same_shape((k,), (kb,), "matmul's contracted dimensions"):
        raise ValueError(f"contracted dimensions differ: {k} (inp1) and {kb} (inp2)")
    try:
        batch = broadcast_shapes(a_batch, b_batch)
    except ValueError:
        raise ValueError(f"batch dimensions {a_batch} and {b_batch} do not broadcast") from None
    return a_batch, b_batch, batch, m, n, k


def _matmul_infer(in_types, attrs):
    a, b = in_types
    same_dtype(in_types)
    require_dtypes("matmul", a, NUMERIC_DTYPES)
    _, _, batch, m, n, _ = matmul_dims(a, b, attrs)
    shape = batch + ((m,) if a.ndim >= 2 else ()) + ((n,) if b.ndim >= 2 else ())
    return (TensorType(shape, a.dtype),)


def _matmul_grad(node, out_grads):
    """dA = G op(B)^T and dB = op(A)^T G, each as one matmul whose transpose flags absorb the
    transposes, so no operand is copied; broadcast batch dims are summed by the walker."""
    a, b = node.inputs
    g = out_grads[0]
    if not is_float(a.dtype):
        return None, None
    ta = node.attr["transpose_a"] and a.ndim >= 2
    tb = node.attr["transpose_b"] and b.ndim >= 2
    # A 1-D operand is the row (left) or column (right) that the forward used; its missing
    # output dimension goes back into g, so one rule covers every case.
    a2 = a if a.ndim >= 2 else expand_dims(a, 0)
    b2 = b if b.ndim >= 2 else expand_dims(b, 1)
    if b.ndim == 1:
        g = expand_dims(g, -1)
    if a.ndim == 1:
        g = expand_dims(g, -2)
    da = matmul(b2, g, transpose_a=tb, transpose_b=True) if ta else \
        matmul(g, b2, transpose_b=not tb)
    if b2.ndim == 2 and a2.ndim > 2 and not ta:
        # B is one matrix shared by every batch: fold the batch into A's rows, one GEMM for dB
        # instead of a product per batch and a sum (the forward lowering does the same).
        rows = math.prod(a2.shape[:-1])
        a2, g = reshape(a2, (rows, a2.shape[-1])), reshape(g, (rows, g.shape[-1]))
    db = matmul(g, a2, transpose_a=True, transpose_b=ta) if tb else \
        matmul(a2, g, transpose_a=not ta)
    return (squeeze(da, -2) if a.ndim == 1 else da), (squeeze(db, -1) if b.ndim == 1 else db)


register(OpDef("matmul", "matmul", _matmul_infer,
               attrs={"transpose_a": False, "transpose_b": False}, grad=_matmul_grad,
               flops=lambda node: _gemm_flops(
                   node, _operand(node.inputs[0].type, node.attr["transpose_a"], left=True)[2])))


def rows_by_weight(node) -> tuple[int, int, int] | None:
    """(rows, k, n) when ``node`` multiplies the rows of its first input, (rows, k) with every
    leading dim folded into rows, by its second, a 2-D weight, into (rows, n): any linear, and
    a matmul whose op(x) is not transposed and has 2+ dims; None for other nodes.

    >>> rows_by_weight(F.matmul(x, w).node)   # x: (2, 6, 50), w: (50, 70)
    (12, 50, 70)
    """
    x, w = node.inputs[:2]
    if node.op.name == "linear":
        n, k = w.shape
    elif (node.op.name == "matmul" and not node.attr["transpose_a"] and w.ndim == 2
          and x.ndim >= 2):
        k, n = w.shape[::-1] if node.attr["transpose_b"] else w.shape
    else:
        return None
    return math.prod(x.shape[:-1]), k, n


def _gemm_flops(node, k: int) -> float:
    """2k multiply-adds per output element of a product over an inner dimension ``k``."""
    return 2.0 * k * node.outputs[0].size


# -- linear ---------------------------------------------------------------------------------------
# what linear and conv2d can apply to their output; relu6 is clip(x, 0, 6), MobileNet's
EPILOGUE_ACTIVATIONS = ("none", "relu", "relu6")


def check_activation(attrs) -> None:
    if attrs["activation"] not in EPILOGUE_ACTIVATIONS:
        raise ValueError(f"activation must be one of {EPILOGUE_ACTIVATIONS}, "
                         f"got {attrs['activation']!r}")


def through_activation(node, g):
    """The gradient at the GEMM's output, before a fused epilogue activation: relu's (its
    output y > 0 exactly where its input was), or relu6's from its output too, g where
    0 < y < 6 (PyTorch's relu6 and hardtanh; clip's own rule also passes g at exactly 0 and 6,
    which y cannot tell apart from the clipped side)."""
    y, activation = node.outputs[0], node.attr["activation"]
    if activation == "relu":
        return apply("relu_backward", (y, g))
    if activation == "relu6":
        _, six, zero = promote(y, 6.0, 0.0)
        return apply("where", (apply("less", (y, six)), apply("relu_backward", (y, g)), zero))
    return g


def _linear_infer(in_types, attrs):
    check_activation(attrs)
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (inp, weight) or (inp, weight, bias), got {len(in_types)} inputs")
    x, w, *bias = in_types
    same_dtype(in_types)
    require_dtypes("linear", x, FLOAT_DTYPES)
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D (out_features, in_features), got {w.ndim}-D")
    if x.ndim == 0 or not same_shape(x.shape[-1:], w.shape[1:], "linear's in_features"):
        raise ValueError(f"input's last dimension must equal in_features={w.shape[1]}, "
                         f"got shape {x.shape}")
    if bias and not same_shape(bias[0].shape, (w.shape[0],), "linear's bias"):
        raise ValueError(f"bias must have shape ({w.shape[0]},), got {bias[0].shape}")
    return (TensorType(x.shape[:-1] + (w.shape[0],), x.dtype),)


def _linear_grad(node, out_grads):
    """dx = g W; dW = g^T x with every leading dim folded into the rows of one GEMM;
    db = g summed over all but its last axis."""
    x, w = node.inputs[:2]
    g = through_activation(node, out_grads[0])
    g2, x2 = g, x
    if x.ndim != 2:
        rows = math.prod(x.shape[:-1])
        g2, x2 = reshape(g, (rows, w.shape[0])), reshape(x, (rows, w.shape[1]))
    dx, dw = matmul(g, w), matmul(g2, x2, transpose_a=True)
    if len(node.inputs) == 2:
        return dx, dw
    return dx, dw, reduce_sum(g, axis=tuple(range(g.ndim - 1))) if g.ndim > 1 else g


register(OpDef("linear", "matmul", _linear_infer, attrs={"activation": "none"},
               grad=_linear_grad,
               flops=lambda node: _gemm_flops(node, node.inputs[1].shape[1])))


# -- addmm ----------------------------------------------------------------------------------------
def _addmm_infer(in_types, attrs):
    if len(in_types) not in (3, 4):
        raise ValueError(f"takes (c, a, b) or (c, a, b, scale), got {len(in_types)} inputs")
    c, a, b, *scale = in_types
    same_dtype(in_types)
    require_dtypes("addmm", c, FLOAT_DTYPES)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"a and b must be matrices, got {a.ndim}-D and {b.ndim}-D")
    _, _, _, m, n, _ = matmul_dims(a, b, attrs)
    if not same_shape(c.shape, (m, n), "addmm's c"):
        raise ValueError(f"c must have the product's shape ({m}, {n}), got {c.shape}")
    if scale and scale[0].size != 1:
        raise ValueError(f"scale must hold one value, got shape {scale[0].shape}")
    return (c,)


# c + alpha * scale * op(a) @ op(b): what a matmul whose one use is ``c +/- s * it`` becomes
# (planner/passes/accumulate.py), so that the GEMM adds its product into c in place (BLAS's
# beta = 1), as SGD's update ``w - lr * (g.T @ x)`` does, instead of writing the product out
# and reading it back. Made by that pass only: it has no gradient. NOTE: with alpha * scale 0
# (a learning rate of 0) the BLAS skips the product, as BLAS defines, so a non-finite product
# leaves c as it was where c - 0 * inf would be NaN.
register(OpDef("addmm", "matmul", _addmm_infer,
               attrs={"transpose_a": False, "transpose_b": False, "alpha": 1.0}, inplace=True,
               flops=lambda node: _gemm_flops(
                   node, _operand(node.inputs[1].type, node.attr["transpose_a"], left=True)[2])))


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------

__all__ = ["linear", "matmul"]


def matmul(inp1, inp2, transpose_a=False, transpose_b=False):
    """Matrix product with NumPy's rules: 1-D operands are promoted to a row (left) or a
    column (right) and that dimension is removed again; leading batch dimensions broadcast.
    ``transpose_a`` / ``transpose_b`` transpose the last two dims of an operand of 2+ dims.

    >>> y = F.matmul(x, w, transpose_b=True)   # x: (b, m, k), w: (n, k) -> (b, m, n)
    """
    a, b = gemm_operands(inp1, inp2)
    return apply("matmul", (a, b), transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def linear(inp, weight, bias=None):
    """``inp @ weight.T + bias`` in one op; weight is (out_features, in_features).

    >>> y = F.linear(x, w, b)   # x: (batch, 784), w: (10, 784), b: (10,) -> (batch, 10)
    """
    return apply("linear", tuple(gemm_operands(inp, weight, bias)))
