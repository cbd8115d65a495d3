"""Scaled dot-product attention: the ``attention`` op and its backward op. The public
functions made of it (``scaled_dot_product_attention``, ``multi_head_attention``) are in
ops/attention_api.py.

attention(q, k, v[, mask]) with q (B, Hq, Lq, E), k (B, Hkv, Lk, E), v (B, Hkv, Lk, Ev), Hq a
multiple of Hkv (grouped-query attention: query head h reads key/value head h // (Hq / Hkv),
PyTorch's ``enable_gqa``), gives

    out[b, h, i] = sum_j p[i, j] v[b, h // G, j],   p[i, :] = softmax(s[i, :])
    s[i, j] = scale * q[b, h, i] . k[b, h // G, j] + mask[i, j]       (float mask: added)
    s[i, j] = -inf where a bool mask is False, or j > i when is_causal

and lse[b, h, i] = log sum_j exp(s[i, j]), the residual the backward reads. The causal mask is
PyTorch's, aligned top-left (``tril(ones(Lq, Lk))``: query i sees keys 0..i, whatever Lk). The
mask (4-D) broadcasts each of its axes of size 1. A row whose every key is masked gives 0, not
PyTorch's NaN, and its lse is -inf; its gradients are 0 too.

Design: FlashAttention's tiling. The kernels (_kernels/attention.pyx, csrc_cuda/attention.cu)
walk the keys in blocks with an online softmax (a running max and sum per query row), so no
(Lq, Lk) matrix exists anywhere: the CPU's workspace is a (Bq, Bk) tile per thread, which the
plan declares, so the arena grows linearly with the sequence. The backward
(``attention_backward``) is FlashAttention-2's: it recomputes each tile's probabilities from
lse, with D = rowsum(dout * out). A bool mask has no gradient; an additive one that is not a
constant gets its own, composed (it is an (Lq, Lk) matrix itself, so it needs the scores).
lse has q's dtype: float32, which the half types compute in, or float64 (finite differences).
Dropout on the weights needs the weights themselves: ``scaled_dot_product_attention`` with
``dropout_p > 0`` is a composition (matmul, softmax, dropout, matmul) that does build them.

The family lives in: ops/attention.py (meaning), kernel_abi/attention.py (parameter block),
_kernels/attention.pyx and _kernels/lowering/attention.py (CPU), csrc_cuda/attention.cu and
cuda/kernels/attention.py (CUDA), onnx/exporter.py (export), ops/attention_api.py (the
public functions), nn/attention.py (``MultiHeadAttention``, MegEngine's ``MultiHeadAttn``).

>>> out, lse = apply_multi("attention", (q, k, v), scale=0.125, is_causal=True)
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.errors import GraphError
from ..ir.types import TensorType
from . import elementwise as ew
from . import movement_api as movement
from . import reduce
from .builder import apply_multi
from .matmul import matmul
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, named, register, require_dtypes, same_shape

BOOL = np.dtype(np.bool_)
_ATTRS = {"scale": REQUIRED, "is_causal": False}


# -- the ops ---------------------------------------------------------------------------------
def _check(name: str, q, k, v, mask):
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        require_dtypes(name, t, FLOAT_DTYPES, what)
        if t.ndim != 4:
            raise ValueError(f"{what} must be 4-D (batch, heads, seq, features), got {t.shape}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"query, key and value must share one dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    b, hq, _, e = q.shape
    if not (same_shape(k.shape[:1], (b,), "attention's key batch")
            and same_shape(v.shape[:3], k.shape[:3], "attention's value") and
            same_shape(k.shape[3:], (e,), "attention's key features")):
        raise ValueError(f"key {k.shape} must be (batch, kv_heads, Lk, {e}) and value "
                         f"{v.shape} (batch, kv_heads, Lk, Ev) for query {q.shape}")
    hkv = k.shape[1]
    if named(hq, hkv) or hkv == 0 or hq % hkv:
        raise ValueError(f"the query's {hq} heads must be a multiple of the key's and value's "
                         f"{hkv} (grouped-query attention)")
    if mask is not None:
        _check_mask(q, k, mask)


def _check_mask(q, k, mask):
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if mask.dtype != BOOL and mask.dtype != q.dtype:
        raise TypeError(f"attn_mask must be bool (True attends) or {q.dtype} (added to the "
                        f"scores), got {mask.dtype}")
    if mask.ndim != 4 or any(m != 1 and not same_shape((m,), (f,), "attention's mask")
                             for m, f in zip(mask.shape, full)):
        raise ValueError(f"attn_mask {mask.shape} does not broadcast to the scores {full}")


def _split(name, in_types, residuals: int):
    """(q, k, v, mask or None, the rest) of an attention node's inputs."""
    n = len(in_types) - residuals
    if n not in (3, 4):
        raise ValueError(f"{name} takes query, key, value and an optional mask"
                         + (", then out, lse and the output gradient" if residuals else "")
                         + f"; got {len(in_types)} inputs")
    q, k, v = in_types[:3]
    return q, k, v, (in_types[3] if n == 4 else None), in_types[n:]


def _check_attrs(attrs):
    if not isinstance(attrs["is_causal"], bool):
        raise TypeError(f"is_causal must be a bool, got {attrs['is_causal']!r}")
    if not math.isfinite(float(attrs["scale"])):
        raise ValueError(f"scale must be finite, got {attrs['scale']!r}")


def _infer(in_types, attrs):
    q, k, v, mask, _ = _split("attention", in_types, 0)
    _check_attrs(attrs)
    _check("attention", q, k, v, mask)
    b, hq, lq, _ = q.shape
    return TensorType((b, hq, lq, v.shape[3]), q.dtype), TensorType((b, hq, lq), q.dtype)


def _backward_infer(in_types, attrs):
    q, k, v, mask, (out, lse, dout) = _split("attention_backward", in_types, 3)
    _check_attrs(attrs)
    _check("attention_backward", q, k, v, mask)
    want_out, want_lse = _infer((q, k, v) + ((mask,) if mask else ()), attrs)
    for t, want, what in ((out, want_out, "out"), (lse, want_lse, "lse"),
                          (dout, want_out, "the output gradient")):
        if t.dtype != want.dtype or not same_shape(t.shape, want.shape, f"attention's {what}"):
            raise ValueError(f"{what} must be {want}, got {t}")
    return q, k, v


def _from_constants(var, depth: int = 8) -> bool:
    """Whether ``var`` is computed from constants alone (a mask reshaped and cast by the public
    function): then it has no gradient. An eager tensor keeps no node: it may have one."""
    node = var.node
    if node is None or depth == 0:
        return False
    if node.op.name == "const":
        return True
    return node.op.category != "source" and all(_from_constants(v, depth - 1)
                                                 for v in node.inputs)


def _mask_grad(node, d_out):
    """The gradient of an additive mask: the scores' gradient p (dp - D), summed by the walker
    to the mask's shape. Composed, so it builds the (Lq, Lk) matrices: only for a float mask
    not made of constants (a bool mask has none); a compiled graph that never uses it drops it
    (dce), eager mode computes it."""
    q, k, v, mask = node.inputs
    out, lse = node.outputs
    if mask.dtype == BOOL or _from_constants(mask):
        return None
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = movement.repeat(k, groups, axis=1), movement.repeat(v, groups, axis=1)
    g = q.graph
    ninf, zero = (g.const(np.asarray(x, q.dtype)) for x in (-np.inf, 0))
    s = ew.add(ew.mul(matmul(q, k, transpose_b=True),
                      g.const(np.asarray(node.attr["scale"], q.dtype))), mask)
    if node.attr["is_causal"]:
        s = ew.where(g.const(np.tril(np.ones((q.shape[2], k.shape[2]), bool))), s, ninf)
    p = ew.where(ew.equal(s, ninf), zero, ew.exp(ew.sub(s, movement.expand_dims(lse, -1))))
    d = reduce.sum(ew.mul(d_out, out), -1, keepdims=True)
    return ew.mul(p, ew.sub(matmul(d_out, v, transpose_b=True), d))


def _grad(node, out_grads):
    d_out, d_lse = out_grads
    if d_lse is not None:
        raise GraphError("attention's lse output is the backward's residual and has no "
                         "gradient rule; differentiate the attention output only")
    if d_out is None:
        return (None,) * len(node.inputs)
    out, lse = node.outputs
    grads = apply_multi("attention_backward", (*node.inputs, out, lse, d_out), **node.attr)
    return (*grads, _mask_grad(node, d_out)) if len(node.inputs) == 4 else grads


def _flops(backward: bool):
    # two GEMMs per (query, key) pair, halved under a causal mask; the backward recomputes the
    # scores once per pass (two) and makes three more products
    def flops(node) -> float:
        q, k, v = node.inputs[:3]
        b, hq, lq, e = q.shape
        if named(b, lq, k.shape[2]):
            return 0.0
        pairs = b * hq * lq * k.shape[2] * (0.5 if node.attr["is_causal"] else 1.0)
        per_pair = 2 * (e + v.shape[3]) * (2.5 if backward else 1.0) + 5
        return pairs * per_pair
    return flops


register(OpDef("attention", "nn", _infer, attrs=_ATTRS, grad=_grad, flops=_flops(False)))
register(OpDef("attention_backward", "nn", _backward_infer, attrs=_ATTRS, flops=_flops(True)))
