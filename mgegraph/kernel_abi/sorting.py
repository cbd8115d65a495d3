"""The parameter blocks of sort/topk (the Order struct) and of the scans cumsum, cumprod and
cumprod_backward (the Scan struct), read by _kernels/sorting.pyx and csrc_cuda/sorting.cu.

Sort and topk read the input as ``rows`` rows of ``length`` values and write the first ``k`` of
each sorted row (sort: k = length). Their ``threads`` field is how many rows are sorted at once,
each by a thread in its own slot of the workspace (two int32 index arrays of ``length``): the
CPU's planned threads, or on CUDA a thread per row up to a workspace budget (the device passes
``sorters(node)``). A scan reads its input as (outer, length, inner) and runs along the middle
axis; its threads field is the CPU's alone.
"""
from __future__ import annotations

import math

from ..backend import Launch
from ..ops.registry import NUMERIC_DTYPES
from ..ops.sorting import scan_axis
from .layout import one_thread, pack

# The structs' fields, in the kernels' order (sorting.pyx exports its own)
FIELDS = {"ORDER_FIELDS": ("rows", "length", "k", "descending", "threads"),
          "SCAN_FIELDS": ("outer", "length", "inner", "exclusive", "reverse", "threads")}
INDEX_BYTES = 4  # the workspace's indices are int32, as the op's


def order_rows(node) -> int:
    """The rows a sort or topk node orders (every axis but the last)."""
    return math.prod(node.inputs[0].shape[:-1])


def slot_bytes(node) -> int:
    """The workspace one sorting thread needs: two index arrays of a row's length."""
    return 2 * node.inputs[0].shape[-1] * INDEX_BYTES


def _order_lower(sorters):
    def lower(node) -> Launch:
        x, (values, _) = node.inputs[0], node.outputs
        at_once = sorters(node)
        ints = pack(FIELDS["ORDER_FIELDS"], rows=order_rows(node), length=x.shape[-1],
                    k=values.shape[-1], descending=node.attr["descending"], threads=at_once)
        return Launch(ints, workspace=at_once * slot_bytes(node))
    return lower


def _scan_lower(threads):
    def lower(node) -> Launch:
        shape, axis = node.inputs[0].shape, scan_axis(node)
        return Launch(pack(FIELDS["SCAN_FIELDS"], outer=math.prod(shape[:axis]),
                           length=shape[axis], inner=math.prod(shape[axis + 1:]),
                           exclusive=node.attr["exclusive"], reverse=node.attr["reverse"],
                           threads=threads(node)))
    return lower


def implement(table, threads=one_thread, sorters=None) -> None:
    """Register sort, topk and the scans on ``table``; ``threads(node)`` fills the threads
    fields, ``sorters(node)`` (default: ``threads``) sort's and topk's."""
    for op in ("sort", "topk"):
        table.implement(op, kernel=op, dtypes=NUMERIC_DTYPES,
                        lower=_order_lower(sorters or threads))
    for op in ("cumsum", "cumprod", "cumprod_backward"):
        table.implement(op, kernel=op, dtypes=NUMERIC_DTYPES, lower=_scan_lower(threads))
