"""CPU lowerings of the elementwise ops: the shared parameter blocks (mgegraph/kernel_abi/
elementwise.py) with the CPU's threads, once _kernels/elementwise.pyx is checked to number the
ops as the table does."""
from __future__ import annotations

from ...kernel_abi import elementwise as abi
from .. import elementwise as K
from .threads import node_threads


def check_build(module, extra=()) -> None:
    """ImportError unless ``module`` was built from this table: its op codes are the table's
    order (setup.py renders both from elementwise_table.py; a stale build would run another op
    than the one a node names)."""
    have = {name: code for name, code in module.OPCODES.items() if name not in extra}
    if have != abi.OPCODES:
        raise ImportError(f"{module.__name__} was built from another elementwise table; rebuild "
                          "the kernels (pip install -e . or python setup.py build_ext --inplace)")


def implement(table) -> None:
    check_build(K)
    abi.implement(table, threads=node_threads)
