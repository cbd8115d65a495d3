"""The CPU lowerings: for each op, its kernel family, the dtypes the kernels implement, and the
function that lays out a node's parameter block (``Launch``) as the kernel module reads it.

One module per kernel module; each has ``implement(table)``, which registers its ops.
"""
from __future__ import annotations

import importlib

FAMILIES = ("elementwise", "reduce", "nn", "matmul", "conv", "pool", "movement", "fused")


def implement_all(table) -> None:
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{family}":
                raise
            continue
        module.implement(table)
    _implement_legacy(table)


def _implement_legacy(table) -> None:
    # NOTE: transitional, while ops still carry CPU fields; removed once every family moved.
    from ...ops import all_ops
    for op in all_ops().values():
        if getattr(op, "kernel", None) is not None and op.name not in table.impls:
            table.implement(op.name, op.kernel, op.dtypes, op.lower, op.dispatch_input)
