"""The functions of sequence models: RMS norm, SwiGLU, rotary position
embeddings (ONNX's RotaryEmbedding), and MegEngine's indexing helpers (``indexing_one_hot``,
``scatter``), re-exported by ``mgegraph.functional`` and ``functional.nn``.

Design: two of these are ops. The embedding lookup (``embedding``: take along axis 0, run by
take's kernels) because PyTorch's ``padding_idx`` is a rule about the gradient alone (the
padding row gets none), which no composition of differentiable ops can say. RMS norm
(``rms_norm``, kernels _kernels/rms_norm.pyx and csrc_cuda/rms_norm.cu; its gradient is made of
other ops) for speed: on (32, 512, 768) float32, a compiled plan each, medians of
benchmarks/test_rms_norm.py on a shared 2-core Intel Xeon, the kernel took 36 ms, the same
composed of square, mean, rsqrt and muls 72 ms (two passes over x and a square written out)
and layer_norm's kernel 85 ms. The others are compositions: a few elementwise ops and
movement, which the planner fuses and whose gradients the ops already have.

>>> y = F.rms_norm(x, x.shape[-1:], weight=gamma)
"""
from __future__ import annotations

import operator

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.graph import Var
from ..ir.types import HALF_DTYPES, INT_DTYPES, TensorType, is_float
from . import elementwise as ew
from . import movement_api as movement
from . import reduce
from .autocast import high_precision
from .builder import apply, cast_to, graph_of
from .movement import axis_index
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, register, require_dtypes

__all__ = ["embedding", "indexing_one_hot", "rms_norm", "rotary_embedding", "scatter", "swiglu"]


def _refuse(op: str, values, reason: str):
    raise OpError(op, tuple(v.type for v in values), reason, user_location())


def _lift(value, graph, dtype=None) -> Var:
    if isinstance(value, (np.ndarray, list, tuple, int, float)):
        return graph.const(np.asarray(value, dtype=dtype))
    return graph.lift(value)


def _axis(op: str, x: Var, axis) -> int:
    try:
        return axis_index(axis, x.ndim)
    except (TypeError, ValueError) as exc:
        _refuse(op, (x,), str(exc))


def _float_var(op: str, inp) -> Var:
    x = high_precision(graph_of(inp).lift(inp))
    if not is_float(x.dtype):
        _refuse(op, (x,), f"needs a floating-point input, got {x.dtype}")
    return x


# -- RMS norm --------------------------------------------------------------------------------
def _normalized_shape(x: Var, normalized_shape) -> tuple[int, ...]:
    try:
        shape = (operator.index(normalized_shape),) \
            if not hasattr(normalized_shape, "__iter__") else \
            tuple(operator.index(d) for d in normalized_shape)
    except TypeError:
        _refuse("rms_norm", (x,), f"normalized_shape must be ints, got {normalized_shape!r}")
    if not shape or len(shape) > x.ndim or tuple(x.shape[x.ndim - len(shape):]) != shape:
        _refuse("rms_norm", (x,), f"normalized_shape {shape} does not match the trailing dims "
                f"of {tuple(x.shape)}")
    return shape


def _rms_infer(in_types, attrs):
    x, weight = in_types
    require_dtypes("rms_norm", x, FLOAT_DTYPES)
    shape = tuple(attrs["normalized_shape"])
    if not shape or x.ndim < len(shape) or tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ValueError(f"normalized_shape {shape} does not match the trailing dims of "
                         f"{tuple(x.shape)}")
    if weight.dtype != x.dtype or tuple(weight.shape) != shape:
        raise ValueError(f"weight must be {x.dtype} of shape {shape}, got {weight}")
    return (x,)


def _rms_grad(node, out_grads):
    # y = x r w with r = (mean(x^2) + eps)^-1/2 over the row: dx = r (g w - xhat mean(g w xhat)),
    # dw = the sum of g xhat over the rows; ops all, so grad of grad needs no rule of its own
    (x, w), (g,) = node.inputs, out_grads
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    eps = x.graph.const(np.asarray(node.attr["eps"], x.dtype))
    r = ew.rsqrt(ew.add(reduce.mean(ew.square(x), axes, keepdims=True), eps))
    xhat, gw = ew.mul(x, r), ew.mul(g, w)
    dx = ew.mul(r, ew.sub(gw, ew.mul(xhat, reduce.mean(ew.mul(gw, xhat), axes, keepdims=True))))
    rows = tuple(range(x.ndim - w.ndim))
    dw = ew.mul(g, xhat)
    return dx, reduce.sum(dw, rows) if rows else dw


register(OpDef("rms_norm", "nn", _rms_infer, attrs={"normalized_shape": REQUIRED, "eps": REQUIRED},
               grad=_rms_grad, inplace=True, flops_per_element=4))


def rms_norm(inp, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the trailing ``normalized_shape`` dims, as
    PyTorch's ``rms_norm``: ``eps=None`` is the machine epsilon of the computing type; a half
    input is computed in float32 and the result given in its dtype.

    >>> y = F.rms_norm(x, (768,), weight=gamma)
    """
    x = _float_var("rms_norm", inp)
    shape = _normalized_shape(x, normalized_shape)
    out_dtype = x.dtype
    if x.dtype in HALF_DTYPES:
        x = cast_to(x, np.float32)
    eps = float(np.finfo(x.dtype).eps) if eps is None else float(eps)
    if weight is None:
        w = x.graph.const(np.ones(shape, x.dtype))
    else:
        w = _lift(weight, x.graph, out_dtype)
        if tuple(w.shape) != shape:
            _refuse("rms_norm", (x, w), f"weight shape {tuple(w.shape)} must equal "
                    f"normalized_shape {shape}")
        w = w if w.dtype == x.dtype else cast_to(w, x.dtype)
    y = apply("rms_norm", (x, w), normalized_shape=shape, eps=eps)
    return y if y.dtype == out_dtype else cast_to(y, out_dtype)


# -- SwiGLU ----------------------------------------------------------------------------------
def swiglu(x, axis=-1, alpha=1.0):
    """``silu(a) * b`` of the two halves ``a, b`` of ``x`` along ``axis`` (the gate first, as
    in LLaMA's fused projection); ``alpha`` scales the gate inside the sigmoid (ONNX SwiGLU's
    ``a * sigmoid(alpha * a) * b``).

    >>> y = F.swiglu(F.linear(h, w_gate_up))  # (..., 2 * d) -> (..., d)
    """
    x = _float_var("swiglu", x)
    ax = _axis("swiglu", x, axis)
    n = x.shape[ax]
    if not isinstance(n, int) or n % 2:
        _refuse("swiglu", (x,), f"axis {axis} of size {n} does not split into two halves")
    gate, value = movement.split(x, 2, ax)
    return ew.mul(swish(gate, alpha), value)


def swish(x, alpha=1.0):
    """``x * sigmoid(alpha * x)`` (ONNX Swish); ``alpha=1`` is ``silu``."""
    if float(alpha) == 1.0:
        return ew.silu(x)
    return ew.mul(x, ew.sigmoid(ew.mul(x, x.graph.const(np.asarray(alpha, x.dtype)))))


# -- rotary position embeddings --------------------------------------------------------------
def _rotary_layout(x: Var, num_heads: int):
    """``x`` as (B, H, S, D) or (B, S, H, D) and where the heads axis is, from ONNX's two
    input forms: 4-D (B, H, S, D), or 3-D (B, S, H * D) with ``num_heads``."""
    if x.ndim == 4:
        return x, 1
    if x.ndim != 3:
        _refuse("rotary_embedding", (x,), "needs a 4-D (batch, heads, seq, head_size) or 3-D "
                f"(batch, seq, hidden) input, got {x.ndim}-D")
    b, s, hidden = x.shape
    if not num_heads or hidden % num_heads:
        _refuse("rotary_embedding", (x,), f"a 3-D input needs num_heads dividing its hidden size "
                f"{hidden}, got {num_heads!r}")
    return movement.reshape(x, (b, s, num_heads, hidden // num_heads)), 2


def _rotary_tables(x, cos, sin, position_ids, half: int):
    """cos and sin as (B, S, half): read at ``position_ids`` (rows of (P, half) tables), or
    given so."""
    if position_ids is not None:
        ids = _lift(position_ids, x.graph, np.int64)
        if ids.dtype not in INT_DTYPES or ids.ndim != 2:
            _refuse("rotary_embedding", (x, ids), "position_ids must be (batch, seq) int32 or "
                    "int64")
        if cos.ndim != 2 or sin.ndim != 2:
            _refuse("rotary_embedding", (x, cos, sin), "with position_ids, cos and sin must be "
                    "(max_position, rotary_dim / 2) tables")
        cos, sin = movement.take(cos, ids, axis=0), movement.take(sin, ids, axis=0)
    if cos.ndim != 3 or sin.ndim != 3:
        _refuse("rotary_embedding", (x, cos, sin), "without position_ids, cos and sin must be "
                "(batch, seq, rotary_dim / 2)")
    for t in (cos, sin):
        if t.shape[-1] != half:
            _refuse("rotary_embedding", (x, t), f"the last dim of cos and sin must be "
                    f"rotary_dim / 2 = {half}, got {t.shape[-1]}")
    return cos, sin


def rotary_embedding(x, cos, sin, position_ids=None, interleaved=False, rotary_dim=0,
                     num_heads=0):
    """Rotate the first ``rotary_dim`` features of each head (all when 0) by the angles whose
    cosines and sines ``cos``/``sin`` hold: pairs ``(x1, x2)`` become ``(x1 cos - x2 sin,
    x1 sin + x2 cos)``, the pairs being the two halves (``interleaved=False``, GPT-NeoX and
    LLaMA) or neighbours (``interleaved=True``, GPT-J). ``x`` is (B, H, S, D), or (B, S, H * D)
    with ``num_heads``; ``cos``/``sin`` are (B, S, rotary_dim / 2), or (P, rotary_dim / 2)
    tables read at ``position_ids`` (B, S). ONNX's RotaryEmbedding.

    >>> q = F.nn.rotary_embedding(q, cos_table, sin_table, position_ids)
    """
    x = _float_var("rotary_embedding", x)
    cos, sin = _lift(cos, x.graph, x.dtype), _lift(sin, x.graph, x.dtype)
    shape = x.shape
    y, heads_axis = _rotary_layout(x, num_heads)
    d = y.shape[-1]
    rot = rotary_dim or d
    if rot % 2 or rot > d:
        _refuse("rotary_embedding", (x,), f"rotary_dim {rot} must be even and at most the head "
                f"size {d}")
    cos, sin = _rotary_tables(x, cos, sin, position_ids, rot // 2)
    # (B, S, half) -> broadcast over the heads axis
    cos, sin = (movement.expand_dims(t, heads_axis) for t in (cos, sin))
    rotated, kept = (y, None) if rot == d else movement.split(y, [rot], axis=-1)
    if interleaved:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
    else:
        x1, x2 = movement.split(rotated, 2, axis=-1)
    real = ew.sub(ew.mul(x1, cos), ew.mul(x2, sin))
    imag = ew.add(ew.mul(x1, sin), ew.mul(x2, cos))
    if interleaved:
        out = movement.reshape(movement.stack([real, imag], -1), rotated.shape)
    else:
        out = movement.concat([real, imag], -1)
    if kept is not None:
        out = movement.concat([out, kept], -1)
    return movement.reshape(out, shape)


# -- MegEngine's indexing --------------------------------------------------------------------
def indexing_one_hot(src, index, axis=1, keepdims=False):
    """``src``'s element at ``index`` along ``axis``, for each position of the other axes
    (``index`` has ``src``'s shape without ``axis``), as MegEngine's:
    ``out[i, j] = src[i, index[i, j], j]`` for axis 1.

    >>> F.indexing_one_hot(logits, labels, 1)  # (N, C), (N,) -> (N,)
    """
    g = graph_of(src, index)
    src, index = g.lift(src), _lift(index, g, np.int64)
    ax = _axis("indexing_one_hot", src, axis)
    want = tuple(src.shape[:ax]) + tuple(src.shape[ax + 1:])
    if tuple(index.shape) != want:
        _refuse("indexing_one_hot", (src, index), f"index must have the input's shape without "
                f"axis {ax}, {want}, got {tuple(index.shape)}")
    picked = movement.gather(src, ax, movement.expand_dims(index, ax))
    return picked if keepdims else movement.squeeze(picked, ax)


def scatter(inp, axis, index, source):
    """A copy of ``inp`` with ``source``'s elements written where ``index`` says along
    ``axis`` (``out[i][index[i][j]] = source[i][j]`` for axis 1), as MegEngine's ``scatter``
    (which writes into ``inp``; this returns the result). ``index`` has ``source``'s shape, at
    most ``inp``'s on every axis. Where several elements land on one place, that place holds
    their sum (MegEngine leaves the result undefined then).

    >>> out = F.scatter(x, 0, idx, src)
    """
    g = graph_of(inp, source, index)
    inp, source, index = g.lift(inp), g.lift(source), _lift(index, g, np.int64)
    ax = _axis("scatter", inp, axis)
    if not inp.ndim == index.ndim == source.ndim:
        _refuse("scatter", (inp, index, source), "the input, index and source must have the "
                "same number of dims")
    if tuple(index.shape) != tuple(source.shape) or any(
            s > n for d, (s, n) in enumerate(zip(source.shape, inp.shape)) if d != ax):
        _refuse("scatter", (inp, index, source), "index must have source's shape, at most the "
                f"input's {tuple(inp.shape)} on the axes other than {ax}")
    source = source if source.dtype == inp.dtype else cast_to(source, inp.dtype)
    shape = tuple(inp.shape[ax] if d == ax else n for d, n in enumerate(source.shape))
    written = apply("scatter_add", (source, index), axis=ax, shape=shape)
    hits = apply("scatter_add", (movement.ones_like(source), index), axis=ax, shape=shape)
    widths = tuple((0, n - s) for n, s in zip(inp.shape, shape))
    if any(w for _, w in widths):
        written, hits = (movement.pad(v, widths) for v in (written, hits))
    return ew.where(ew.greater(hits, movement.zeros_like(hits)), written, inp)


# -- the embedding lookup --------------------------------------------------------------------
def _embedding_infer(in_types, attrs):
    weight, indices = in_types
    require_dtypes("embedding", indices, INT_DTYPES, "indices")
    if weight.ndim != 2:
        raise ValueError(f"weight must be a (num_embeddings, dim) table, got {weight.ndim}-D")
    pad = attrs["padding_idx"]
    if pad is not None and not (isinstance(pad, int) and 0 <= pad < weight.shape[0]):
        raise ValueError(f"padding_idx must be a row of the {weight.shape[0]}-row weight or "
                         f"None, got {pad!r}")
    return (TensorType(tuple(indices.shape) + (weight.shape[1],), weight.dtype),)


def _embedding_grad(node, out_grads):
    (weight, indices), (g,) = node.inputs, out_grads
    pad = node.attr["padding_idx"]
    if pad is not None:
        keep = ew.not_equal(indices, indices.graph.const(np.asarray(pad, indices.dtype)))
        g = ew.where(movement.expand_dims(keep, -1), g, movement.zeros_like(g))
    return apply("index_add", (g, indices), axis=0, size=weight.shape[0]), None


register(OpDef("embedding", "movement", _embedding_infer,
               attrs={"axis": 0, "padding_idx": REQUIRED}, flops_per_element=0,
               grad=_embedding_grad))


def embedding(inp, weight, padding_idx=None):
    """Rows of the (num_embeddings, dim) ``weight`` picked by integer ``inp`` of any shape
    (shape ``inp.shape + (dim,)``). The row ``padding_idx`` (negative: from the end) reads as
    it is but gets no gradient, as PyTorch's rule.

    >>> h = F.embedding(token_ids, table, padding_idx=0)
    """
    g = graph_of(inp, weight)
    weight, inp = g.lift(weight), _lift(inp, g, np.int64)
    if weight.ndim != 2:
        _refuse("embedding", (inp, weight), f"weight must be a (num_embeddings, dim) table, "
                f"got {weight.ndim}-D")
    if padding_idx is None:  # a plain take, as the graphs before padding_idx had
        return movement.take(weight, inp, axis=0)
    try:
        n, padding_idx = weight.shape[0], operator.index(padding_idx)
    except TypeError:
        _refuse("embedding", (inp, weight), f"padding_idx must be an int, got {padding_idx!r}")
    padding_idx = padding_idx + n if -n <= padding_idx < 0 else padding_idx
    return apply("embedding", (weight, inp), axis=0, padding_idx=padding_idx)
