"""Attention's parameter block, read by _kernels/attention.pyx and csrc_cuda/attention.cu, and
the workspaces of its CPU kernels.

q (batch, hq, lq, e), k and v (batch, hkv, lk, e / ev); the mask, when there is one, is read
at ``b * mask_b + h * mask_h + i * mask_i + j * mask_j`` (its element strides, 0 along an
axis it broadcasts). ``bq`` x ``bk`` is the CPU's tile (query rows x keys), which the CUDA
kernel (a thread per query row) does not read; ``threads`` is the CPU's too.
"""
from __future__ import annotations

import numpy as np

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from .layout import broadcast_strides, one_thread, pack

BOOL = np.dtype(np.bool_)
# The struct's fields and the mask's codes, in the kernels' order (attention.pyx exports its own)
FIELDS = {"ATTENTION_FIELDS": ("batch", "hq", "hkv", "lq", "lk", "e", "ev", "causal", "mask",
                               "mask_b", "mask_h", "mask_i", "mask_j", "bq", "bk", "threads")}
MASKS = {"ATTENTION_MASKS": {"none": 0, "bool": 1, "add": 2}}
# The CPU's tile: 64 query rows x 64 keys, (64, 64) GEMMs of the head sizes of common models
# (64, 128), whose scratch (16 KiB of float32) stays in a core's L1/L2 with the rows it reads
TILE = (64, 64)


def mask_kind(node) -> str:
    if len(node.inputs) == 3 or (node.op.name == "attention_backward" and len(node.inputs) == 6):
        return "none"
    return "bool" if node.inputs[3].dtype == BOOL else "add"


def block(node, tile=TILE, threads: int = 1) -> tuple[int, ...]:
    """The ints of ``node``'s (an attention or attention_backward) parameter block."""
    q, k, v = node.inputs[:3]
    b, hq, lq, e = q.shape
    kind = mask_kind(node)
    strides = (0, 0, 0, 0)
    if kind != "none":
        strides = broadcast_strides(node.inputs[3].shape, (b, hq, lq, k.shape[2]))
    return pack(FIELDS["ATTENTION_FIELDS"], batch=b, hq=hq, hkv=k.shape[1], lq=lq, lk=k.shape[2],
                e=e, ev=v.shape[3], causal=node.attr["is_causal"],
                mask=MASKS["ATTENTION_MASKS"][kind], mask_b=strides[0], mask_h=strides[1],
                mask_i=strides[2], mask_j=strides[3], bq=tile[0], bk=tile[1], threads=threads)


def workspace_bytes(node, tile=TILE, threads: int = 1) -> int:
    """The CPU kernels' scratch: per thread a (bq, bk) score tile and a row max and sum
    (forward), or two (bq, bk) tiles (backward) after D, one per query row; none grows with
    the product of the lengths."""
    bq, bk = tile
    item = node.inputs[0].dtype.itemsize
    if node.op.name == "attention":
        return threads * (bq * bk + 2 * bq) * item
    b, hq, lq, _ = node.inputs[0].shape
    return (b * hq * lq + threads * 2 * bq * bk) * item


def _lower(threads, with_workspace: bool):
    def lower(node) -> Launch:
        t = threads(node)
        return Launch(block(node, threads=t), (float(node.attr["scale"]),),
                      workspace_bytes(node, threads=t) if with_workspace else 0)
    return lower


def implement(table, threads=one_thread, with_workspace: bool = True) -> None:
    """Register attention and its backward on ``table``; ``threads(node)`` fills the block's
    threads field, ``with_workspace`` says whether the device's kernels use the tiles'
    scratch (the CPU's) or none (CUDA's, a thread per row)."""
    for op in ("attention", "attention_backward"):
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=_lower(threads, with_workspace))
