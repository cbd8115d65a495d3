"""Group norm's parameter block (and its backward's), read by _kernels/norm.pyx and by
csrc_cuda/group_norm.cu."""
from __future__ import annotations

import math

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from .layout import one_thread, pack
from .matmul import ACTIVATION_CODES

# The struct's fields, in the kernels' order (norm.pyx exports its own GROUP_NORM_FIELDS);
# activation: the forward's epilogue (kernel_abi.matmul.ACTIVATION_CODES), 0 in the backward
FIELDS = {"GROUP_NORM_FIELDS": ("batch", "channels", "inner", "groups", "activation", "threads")}


def _lower(threads, backward: bool):
    def lower(node) -> Launch:
        x = node.inputs[0]
        ints = pack(FIELDS["GROUP_NORM_FIELDS"], batch=x.shape[0], channels=x.shape[1],
                    inner=math.prod(x.shape[2:]), groups=node.attr["groups"],
                    threads=threads(node),
                    activation=ACTIVATION_CODES[node.attr.get("activation", "none")])
        # the backward's per (sample, channel) sums for dweight and dbias, in double
        workspace = 2 * 8 * x.shape[0] * x.shape[1] if backward else 0
        return Launch(ints, (float(node.attr["eps"]),), workspace=workspace)
    return lower


def implement(table, threads=one_thread) -> None:
    """Register group_norm and its backward on ``table``; ``threads(node)`` fills the block's
    threads field."""
    for op, backward in (("group_norm", False), ("group_norm_backward", True)):
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=_lower(threads, backward))
