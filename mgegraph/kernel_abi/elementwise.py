"""The elementwise ops' parameter blocks: the table's ops (kernel families unary, binary,
compare, by the entry's kind), where, cast and assign, read by _kernels/elementwise.pyx and by
the kernels mgegraph/cuda/render.py renders over csrc_cuda/elementwise.cuh.

The ints are ``[opcode, ndim, shape, strides per input, threads]`` (``layout.elementwise_params``),
the op code an op's index in the table (``OPCODES``; the CPU build renders its switch from the
same table and is checked to agree), and a unary op's floats its parameters in the entry's
order.
"""
from __future__ import annotations

from ..backend import Launch
from ..ir.types import HALF_DTYPES, dtype_code
from ..ops import elementwise_table as TABLE
from ..ops.registry import MOVED_DTYPES, NUMERIC_DTYPES
from .layout import elementwise_params, one_thread

OPCODES = {op.name: code for code, op in enumerate(TABLE.OPS)}


def _lower_unary(entry, threads):
    code = OPCODES[entry.name]

    def lower(node) -> Launch:
        (x,) = node.inputs
        floats = tuple(float(node.attr[a]) for a in entry.params)
        return Launch(elementwise_params(code, x.shape, [x.shape], threads=threads(node)),
                      floats)
    return lower


def _lower_broadcast(code: int, threads):
    def lower(node) -> Launch:
        return Launch(elementwise_params(code, node.outputs[0].shape,
                                         [v.shape for v in node.inputs],
                                         threads=threads(node)))
    return lower


def _lower_cast(threads):
    def lower(node) -> Launch:
        (x,) = node.inputs
        return Launch(elementwise_params(dtype_code(node.outputs[0].dtype), x.shape, [x.shape],
                                         threads=threads(node)))
    return lower


def _lower_assign(threads):
    # Graph.assign's nodes are copies into their param, run after every other instruction
    def lower(node) -> Launch:
        target = node.inputs[0]
        return Launch(elementwise_params(OPCODES["copy"], target.shape, [target.shape],
                                         threads=threads(node)))
    return lower


def implement(table, threads=one_thread) -> None:
    """Register the elementwise ops on ``table``; ``threads(node)`` fills the threads field."""
    for entry in TABLE.OPS:
        lower = _lower_unary(entry, threads) if entry.kind == "unary" else \
            _lower_broadcast(OPCODES[entry.name], threads)
        table.implement(entry.name, kernel=entry.kind, dtypes=entry.dtypes, lower=lower)
    # where's kernel is picked by its branches' dtype (input 1), not the bool condition's
    table.implement("where", kernel="where", dtypes=MOVED_DTYPES,
                    lower=_lower_broadcast(0, threads), dispatch_input=1)
    table.implement("cast", kernel="cast", dtypes=MOVED_DTYPES,
                    lower=_lower_cast(threads))
    table.implement("assign", kernel="unary", dtypes=NUMERIC_DTYPES + HALF_DTYPES,
                    lower=_lower_assign(threads))
