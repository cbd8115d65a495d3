"""CPU lowerings of the elementwise ops: the parameter blocks of _kernels/elementwise.pyx for the
table's ops (kernel families unary, binary, compare, by the entry's kind), where, cast and assign.

Every table op runs on the kernel of its kind, with its op code (the compiled module's OPCODES,
rendered from the same table) and, for unary ops, its parameters as floats in the entry's order.
"""
from __future__ import annotations

from ...backend import Launch
from ...ir.types import dtype_code
from ...ops import elementwise_table as TABLE
from ...ops.registry import ALL_DTYPES, NUMERIC_DTYPES
from .. import elementwise as K
from .layout import elementwise_params
from .threads import node_threads


def check_build(module, extra=()) -> None:
    """ImportError unless ``module`` was built from this table: its op codes are the table's
    order (setup.py renders both from elementwise_table.py; a stale build would run another op
    than the one a node names)."""
    want = {op.name: code for code, op in enumerate(TABLE.OPS)}
    have = {name: code for name, code in module.OPCODES.items() if name not in extra}
    if have != want:
        raise ImportError(f"{module.__name__} was built from another elementwise table; rebuild "
                          "the kernels (pip install -e . or python setup.py build_ext --inplace)")


def _lower_unary(entry):
    code = K.OPCODES[entry.name]

    def lower(node) -> Launch:
        (x,) = node.inputs
        floats = tuple(float(node.attr[a]) for a in entry.params)
        return Launch(elementwise_params(code, x.shape, [x.shape], threads=node_threads(node)),
                      floats)
    return lower


def _lower_broadcast(code: int):
    def lower(node) -> Launch:
        return Launch(elementwise_params(code, node.outputs[0].shape,
                                         [v.shape for v in node.inputs],
                                         threads=node_threads(node)))
    return lower


def _lower_cast(node) -> Launch:
    (x,) = node.inputs
    return Launch(elementwise_params(dtype_code(node.outputs[0].dtype), x.shape, [x.shape],
                                     threads=node_threads(node)))


def _lower_assign(node) -> Launch:
    # Graph.assign's nodes are copies into their param, run after every other instruction
    target = node.inputs[0]
    return Launch(elementwise_params(K.OPCODES["copy"], target.shape, [target.shape],
                                     threads=node_threads(node)))


def implement(table) -> None:
    check_build(K)
    for entry in TABLE.OPS:
        lower = _lower_unary(entry) if entry.kind == "unary" else \
            _lower_broadcast(K.OPCODES[entry.name])
        table.implement(entry.name, kernel=entry.kind, dtypes=entry.dtypes, lower=lower)
    # where's kernel is picked by its branches' dtype (input 1), not the bool condition's
    table.implement("where", kernel="where", dtypes=ALL_DTYPES, lower=_lower_broadcast(0),
                    dispatch_input=1)
    table.implement("cast", kernel="cast", dtypes=ALL_DTYPES, lower=_lower_cast)
    table.implement("assign", kernel="unary", dtypes=NUMERIC_DTYPES, lower=_lower_assign)
