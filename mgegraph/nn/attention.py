"""MegEngine's multi-head attention layer, ``MultiHeadAttention`` (``module.MultiHeadAttn`` in
MegEngine's documentation: one class under both names), over
``functional.nn.multi_head_attention`` and so over the tiled attention op.

Design: MegEngine keeps every projection in one parameter, ``io_weight_bias`` of shape (1,
n): the query's, key's, value's and output's weights (each (in, out), ``Y = X @ W + B``), then
the four biases, so a MegEngine checkpoint loads by name and shape. PyTorch's
``nn.MultiheadAttention`` with ``batch_first=True`` computes the same with ``in_proj_weight``
(3E, E) as ``X @ W^T``: ``pack_torch_weights`` writes such weights in MegEngine's layout. The
dropouts stay as given (MegEngine's ``reset_parameters`` sets both to 0, a limit of its cuDNN
kernel, not a meaning).

>>> attn = nn.MultiHeadAttention(64, 8)
>>> out, _ = attn(x, x, x, is_causal=True)  # x (N, L, 64)
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from . import init
from .layers import _fraction, _size
from .module import Buffer, Module, Parameter


def _layout(embed_dim: int, kdim: int, vdim: int, bias: bool) -> list[tuple[int, int]]:
    """The (in, out) blocks of io_weight_bias: four weights, then four biases as (1, out)."""
    weights = [(embed_dim, embed_dim), (kdim, embed_dim), (vdim, embed_dim),
               (embed_dim, embed_dim)]
    return weights + ([(1, embed_dim)] * 4 if bias else [])


def pack_torch_weights(in_proj_weight, out_proj_weight, in_proj_bias=None, out_proj_bias=None,
                       q_proj_weight=None, k_proj_weight=None, v_proj_weight=None):
    """PyTorch ``nn.MultiheadAttention``'s arrays as MegEngine's ``io_weight_bias`` (1, n):
    the transposed weights (``X @ W^T`` -> ``X @ W``), then the biases.

    >>> attn.io_weight_bias.value = pack_torch_weights(*torch_weights)
    """
    if in_proj_weight is not None:
        q_proj_weight, k_proj_weight, v_proj_weight = np.split(np.asarray(in_proj_weight), 3)
    parts = [np.asarray(w).T for w in (q_proj_weight, k_proj_weight, v_proj_weight,
                                       out_proj_weight)]
    if in_proj_bias is not None:
        parts += [*np.split(np.asarray(in_proj_bias), 3), np.asarray(out_proj_bias)]
    return np.concatenate([p.reshape(-1) for p in parts])[None].astype(np.float32)


class MultiHeadAttention(Module):
    """MegEngine's ``MultiHeadAttention(embed_dim, num_heads, attn_dropout, out_dropout, bias,
    add_bias_kv, add_zero_attn, reslink, kdim, vdim)``; ``forward(query, key, value,
    key_padding_mask, attn_mask, need_weights, average_attn_weights, is_causal,
    maybe_cudnn_style_mask)`` returns ``(out, weights or None)`` as
    ``F.nn.multi_head_attention`` does, batch first: query (N, L, E)."""

    def __init__(self, embed_dim, num_heads, attn_dropout=0.0, out_dropout=0.0, bias=True,
                 add_bias_kv=False, add_zero_attn=False, reslink=False, kdim=None, vdim=None):
        owner = "MultiHeadAttention"
        self.embed_dim = _size(owner, "embed_dim", embed_dim)
        self.num_heads = _size(owner, "num_heads", num_heads)
        if self.embed_dim % self.num_heads:
            raise GraphError(f"{owner}: embed_dim {embed_dim} must be divisible by num_heads "
                             f"{num_heads}")
        self.kdim = _size(owner, "kdim", embed_dim if kdim is None else kdim)
        self.vdim = _size(owner, "vdim", embed_dim if vdim is None else vdim)
        self.head_dim = self.embed_dim // self.num_heads
        self.attn_dropout = _fraction(owner, "attn_dropout", attn_dropout)
        self.out_dropout = _fraction(owner, "out_dropout", out_dropout)
        self.bias, self.add_bias_kv = bool(bias), bool(add_bias_kv)
        self.add_zero_attn, self.reslink = bool(add_zero_attn), bool(reslink)
        self.io_weight_bias = Parameter(self._initial_weights())
        self.bias_k = Parameter(self._row(self.kdim)) if self.add_bias_kv else None
        self.bias_v = Parameter(self._row(self.vdim)) if self.add_bias_kv else None
        self.steps = Buffer(np.zeros((), np.int64))  # a new dropout mask every training step

    def _initial_weights(self) -> np.ndarray:
        # each projection Xavier-uniform over its own (in, out), the biases 0 (PyTorch's)
        blocks = [init.xavier_uniform((i, o)) if i > 1 else np.zeros((i, o))
                  for i, o in _layout(self.embed_dim, self.kdim, self.vdim, self.bias)]
        return np.concatenate([b.reshape(-1) for b in blocks])[None].astype(np.float32)

    @staticmethod
    def _row(size: int) -> np.ndarray:
        return init.xavier_normal((1, 1, size)).astype(np.float32)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None,
                need_weights=False, average_attn_weights=False, is_causal=False,
                maybe_cudnn_style_mask=False):
        g = query.graph
        step = None
        if self.training and (self.attn_dropout or self.out_dropout):
            step = g.bind(self.steps)
            g.assign(step, step + 1)
        bias_k = None if self.bias_k is None else g.bind(self.bias_k)
        bias_v = None if self.bias_v is None else g.bind(self.bias_v)
        return F.nn.multi_head_attention(
            query, key, value, self.embed_dim, self.num_heads, self.attn_dropout,
            self.out_dropout, g.bind(self.io_weight_bias), qproj_size=self.embed_dim,
            kproj_size=self.embed_dim, vproj_size=self.embed_dim, oproj_size=self.embed_dim,
            qbias=self.bias, kbias=self.bias, vbias=self.bias, obias=self.bias, bias_k=bias_k,
            bias_v=bias_v, add_zero_attn=self.add_zero_attn, key_padding_mask=key_padding_mask,
            attn_mask=attn_mask, need_weights=need_weights,
            average_attn_weights=average_attn_weights, is_causal=is_causal,
            maybe_cudnn_style_mask=maybe_cudnn_style_mask, reslink=self.reslink,
            training=self.training, step=step)


MultiHeadAttn = MultiHeadAttention
