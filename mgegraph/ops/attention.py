"""Scaled dot-product attention: the ``attention`` op, its backward op, and the public
``scaled_dot_product_attention`` (PyTorch's signature and meaning), re-exported by
``mgegraph.functional`` and ``functional.nn``.

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
lse, with D = rowsum(dout * out). The mask gets no gradient (an additive mask is a constant
of the model in every use we know; differentiating it would need the (Lq, Lk) matrix).
Dropout on the weights needs the weights themselves: ``scaled_dot_product_attention`` with
``dropout_p > 0`` is a composition (matmul, softmax, dropout, matmul) that does build them.

The family lives in: ops/attention.py (meaning), kernel_abi/attention.py (parameter block),
_kernels/attention.pyx and _kernels/lowering/attention.py (CPU), csrc_cuda/attention.cu and
cuda/kernels/attention.py (CUDA), onnx/exporter.py (export), nn/attention.py
(``multi_head_attention``, ``MultiHeadAttn``).

>>> out = F.nn.scaled_dot_product_attention(q, k, v, is_causal=True)
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.errors import GraphError, OpError, user_location
from ..ir.graph import Var
from ..ir.types import HALF_DTYPES, TensorType, is_float
from . import elementwise as ew
from . import movement_api as movement
from .builder import apply_multi, cast_to, graph_of
from .matmul import matmul
from .nn import dropout, softmax
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, named, register, require_dtypes, same_shape

BOOL = np.dtype(np.bool_)
__all__ = ["scaled_dot_product_attention"]

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
    b, hq, lq, e = q.shape
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


def _grad(node, out_grads):
    d_out, d_lse = out_grads
    if d_lse is not None:
        raise GraphError("attention's lse output is the backward's residual and has no "
                         "gradient rule; differentiate the attention output only")
    if d_out is None:
        return (None,) * len(node.inputs)
    out, lse = node.outputs
    grads = apply_multi("attention_backward", (*node.inputs, out, lse, d_out), **node.attr)
    return (*grads, None) if len(node.inputs) == 4 else grads


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


# -- the public function ---------------------------------------------------------------------
def _refuse(values, reason: str):
    raise OpError("scaled_dot_product_attention", tuple(v.type for v in values), reason,
                  user_location())


def _as_4d(x: Var, what: str, values) -> tuple[Var, tuple]:
    """``x`` (..., H, L, E) as (prod(...), H, L, E), and its leading shape."""
    if x.ndim < 2:
        _refuse(values, f"{what} must be at least 2-D (..., L, E), got {tuple(x.shape)}")
    shape = (1,) * max(0, 4 - x.ndim) + tuple(x.shape)
    lead = shape[:-3]
    if named(*lead[1:]):
        _refuse(values, f"{what} {tuple(x.shape)}: only the first batch dim may be named")
    batch = lead[0] if len(lead) == 1 else math.prod(lead)
    return movement.reshape(x, (batch, *shape[-3:])), tuple(x.shape[:-2])


def _mask_4d(mask: Var, lead: tuple, full: tuple, values) -> Var:
    """The mask broadcastable to (..., Hq, Lq, Lk) as a 4-D mask the op reads: its batch dims
    made one, broadcast over them only where they are neither all 1 nor all full."""
    ndim = len(lead) + 2
    if mask.ndim > ndim:
        _refuse(values, f"attn_mask {tuple(mask.shape)} has more dims than the scores")
    shape = (1,) * (ndim - mask.ndim) + tuple(mask.shape)
    batch, want = shape[:-3], tuple(lead[:-1])
    for m, f in zip(shape, (*lead, *full)):
        if m != 1 and m != f and not named(m, f):
            _refuse(values, f"attn_mask {tuple(mask.shape)} does not broadcast to the scores "
                    f"{(*lead, *full)}")
    mask = movement.reshape(mask, shape)
    if batch and any(m == 1 for m in batch) and any(m != 1 for m in batch):
        mask = movement.broadcast_to(mask, (*want, *shape[-3:]))
        batch = want
    nb = 1 if all(m == 1 for m in batch) else math.prod(want)
    return movement.reshape(mask, (nb, *shape[-3:]))


def _default_scale(e) -> float:
    return 1.0 / math.sqrt(e)


def _composed(q, k, v, mask, is_causal: bool, scale: float, dropout_p: float, groups: int):
    """softmax(q k^T scale + mask) dropped out, times v: the weights built whole, for dropout."""
    if groups > 1:
        k, v = movement.repeat(k, groups, axis=1), movement.repeat(v, groups, axis=1)
    s = ew.mul(matmul(q, k, transpose_b=True), q.graph.const(np.asarray(scale, q.dtype)))
    lq, lk = q.shape[2], k.shape[2]
    ninf = q.graph.const(np.asarray(-np.inf, q.dtype))
    if is_causal:
        s = ew.where(q.graph.const(np.tril(np.ones((lq, lk), bool))), s, ninf)
    if mask is not None:
        s = ew.where(mask, s, ninf) if mask.dtype == BOOL else ew.add(s, mask)
    p = softmax(s, axis=-1)
    # rows with no key attended: 0, as the kernel gives (softmax of all -inf is NaN)
    p = ew.where(ew.equal(p, p), p, q.graph.const(np.asarray(0, q.dtype)))
    return matmul(dropout(p, dropout_p, training=True, seed=_dropout_seed()), v)


_SEED = [0]


def _dropout_seed() -> int:
    # each call draws a different mask, as PyTorch's generator does
    _SEED[0] += 1
    return _SEED[0]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(query @ key^T * scale + attn_mask) @ value``, PyTorch's function: query
    (..., Hq, Lq, E), key (..., Hkv, Lk, E), value (..., Hkv, Lk, Ev); ``attn_mask`` bool (True
    attends) or float (added), broadcastable to (..., Hq, Lq, Lk); ``is_causal`` masks key j >
    query i (top-left); ``scale`` defaults to 1/sqrt(E); ``enable_gqa`` lets Hq be a multiple
    of Hkv. A row with no key attended gives 0 (PyTorch: NaN). Computed in tiles, no (Lq, Lk)
    matrix (the ``attention`` op) unless ``dropout_p > 0``: dropout (always applied, as in
    PyTorch, whose callers pass 0 when not training) needs the weights, so that case is a
    composition of matmul, softmax and dropout.

    >>> out = F.nn.scaled_dot_product_attention(q, k, v, is_causal=True)
    """
    g = graph_of(query, key, value, attn_mask)
    q, k, v = (g.lift(t) for t in (query, key, value))
    values = (q, k, v) + ((g.lift(attn_mask),) if attn_mask is not None else ())
    if not all(is_float(t.dtype) for t in (q, k, v)):
        _refuse(values, "query, key and value must be floating-point")
    if not 0.0 <= float(dropout_p) < 1.0:
        _refuse(values, f"dropout_p must be in [0, 1), got {dropout_p}")
    if q.ndim != k.ndim or k.ndim != v.ndim:
        _refuse(values, "query, key and value must have the same number of dims")
    if tuple(q.shape[:-3]) != tuple(k.shape[:-3]) or tuple(k.shape[:-2]) != tuple(v.shape[:-2]):
        _refuse(values, "query, key and value must share their batch dims, and key and value "
                "their heads and length")
    hq, hkv = (q.shape[-3], k.shape[-3]) if q.ndim >= 3 else (1, 1)
    if hq != hkv and not (enable_gqa and hkv and hq % hkv == 0):
        _refuse(values, f"query has {hq} heads and key/value {hkv}: they must be equal, or "
                "with enable_gqa=True a multiple")
    out_dtype = q.dtype
    if out_dtype in HALF_DTYPES:
        q, k, v = (cast_to(t, np.float32) for t in (q, k, v))
    lead = tuple(q.shape[:-2])
    q4, _ = _as_4d(q, "query", values)
    k4, _ = _as_4d(k, "key", values)
    v4, _ = _as_4d(v, "value", values)
    mask = None
    if attn_mask is not None:
        mask = values[3]
        if mask.dtype != BOOL and mask.dtype != q.dtype:
            mask = cast_to(mask, q.dtype)
        mask = _mask_4d(mask, lead if len(lead) else (1,), (q.shape[-2], k.shape[-2]), values)
    scale = _default_scale(q.shape[-1]) if scale is None else float(scale)
    if dropout_p > 0:
        out = _composed(q4, k4, v4, mask, bool(is_causal), scale, float(dropout_p),
                        q4.shape[1] // k4.shape[1])
    else:
        inputs = (q4, k4, v4) + ((mask,) if mask is not None else ())
        out = apply_multi("attention", inputs, scale=scale, is_causal=bool(is_causal))[0]
    out = movement.reshape(out, (*q.shape[:-1], v.shape[-1]))
    return out if out.dtype == out_dtype else cast_to(out, out_dtype)
