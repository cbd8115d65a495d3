"""RMS norm's parameter block, read by _kernels/rms_norm.pyx and by csrc_cuda/rms_norm.cu."""
from __future__ import annotations

import math

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from .layout import one_thread, pack

# The struct's fields, in the kernels' order (rms_norm.pyx exports its own RMS_NORM_FIELDS)
FIELDS = {"RMS_NORM_FIELDS": ("rows", "cols", "threads")}


def _lower(threads):
    def lower(node) -> Launch:
        x = node.inputs[0]
        cols = math.prod(node.attr["normalized_shape"])
        ints = pack(FIELDS["RMS_NORM_FIELDS"], rows=x.size // cols if cols else 0, cols=cols,
                    threads=threads(node))
        return Launch(ints, (float(node.attr["eps"]),))
    return lower


def implement(table, threads=one_thread) -> None:
    """Register rms_norm on ``table``; ``threads(node)`` fills the block's threads field."""
    table.implement("rms_norm", kernel="rms_norm", dtypes=FLOAT_DTYPES, lower=_lower(threads))
