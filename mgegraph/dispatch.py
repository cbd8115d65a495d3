"""The dispatcher: one table from (op, device, dtype) to a kernel, filled at import time."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ops
from ._kernels import KERNEL_MODULES
from .ir.errors import DispatchError
from .ir.types import short_name


@dataclass(frozen=True)
class Kernel:
    name: str
    address: int  # C function pointer, see _kernels/abi.pxd


def _cpu_kernels() -> dict[str, int]:
    table: dict[str, int] = {}
    for module in KERNEL_MODULES:
        clash = table.keys() & module.KERNELS.keys()
        if clash:
            raise ImportError(f"kernel names defined twice: {sorted(clash)}")
        table.update(module.KERNELS)
    return table


def _build_table() -> dict[tuple[str, str, str], Kernel]:
    cpu = _cpu_kernels()
    table = {}
    for opdef in ops.all_ops().values():
        if opdef.kernel is None:
            continue
        for dtype in opdef.dtypes:
            name = f"{opdef.kernel}_{short_name(dtype)}"
            if name not in cpu:
                raise ImportError(f"op {opdef.name!r} names CPU kernel {name!r}, which no kernel "
                                  "module defines")
            table[(opdef.name, "cpu", str(dtype))] = Kernel(name, cpu[name])
    return table


TABLE = _build_table()


_DTYPE_NAMES: dict = {}  # dtype -> str(np.dtype(dtype)), slow to make and asked for per node


def lookup(op: str, device: str, dtype) -> Kernel:
    """The kernel for (op, device, dtype); a miss names all three and lists what exists."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(np.dtype(dtype))
    key = (op, device, name)
    try:
        return TABLE[key]
    except KeyError:
        have = sorted(f"{d}/{t}" for o, d, t in TABLE if o == op)
        raise DispatchError(f"no kernel for op {op!r} on device {device!r} with dtype "
                            f"{key[2]}; {op!r} has: {', '.join(have) or 'no kernels at all'}"
                            ) from None
