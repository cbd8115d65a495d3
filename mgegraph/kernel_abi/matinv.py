"""matinv's parameter block, read by _kernels/matinv.pyx and by csrc_cuda/matinv.cu: the
matrices and their order; no floats. The workspace is a pivot row (int64) per column of
each matrix (the inverse itself is built in the output).

    matinv:  bufs a, y, workspace
"""
from __future__ import annotations

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from .layout import one_thread, pack

# The struct's fields, in the kernels' order (matinv.pyx exports its own MATINV_FIELDS)
FIELDS = {"MATINV_FIELDS": ("batch", "n", "threads")}


def _lower(threads):
    def lower(node) -> Launch:
        a = node.inputs[0]
        n = a.shape[-1]
        batch = a.size // (n * n) if n else 0
        return Launch(pack(FIELDS["MATINV_FIELDS"], batch=batch, n=n, threads=threads(node)),
                      workspace=8 * batch * n)
    return lower


def implement(table, threads=one_thread) -> None:
    """Register matinv on ``table``; ``threads(node)`` fills the block's threads field."""
    table.implement("matinv", kernel="matinv", dtypes=FLOAT_DTYPES, lower=_lower(threads))
