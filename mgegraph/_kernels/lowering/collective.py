"""CPU lowering of the collectives (ops/collective.py): the parameter block of
_kernels/collective.pyx, with the MPI entry points and handles of the op's group found in the
loaded MPI library now (``communicator.mpi_abi``), once per plan."""
from __future__ import annotations

import numpy as np

from ...backend import Launch
from ...communicator import WAIT_SPIN, DistributedError, by_key, mpi_abi
from ...kernel_abi.layout import pack
from ...ops.collective import REDUCED_DTYPES, bucket_layout
from .. import collective as K
from .built import check_built

FIELDS = {"COLLECTIVE_FIELDS": ("iallreduce", "test", "comm", "datatype", "op", "count",
                                "timeout_ns", "itemsize", "is_float", "members", "iallgather",
                                "ranks", "deterministic", "spin_ns")}
_INT_MAX = 2**31 - 1  # MPI's counts are C ints


def _values(node) -> list:
    """The values the node reduces (a wait's request aside)."""
    return list(node.inputs[1:] if node.op.name == "all_reduce_wait" else node.inputs)


def _lower(node) -> Launch:
    attrs = node.attr
    values = _values(node)
    dtype = values[0].dtype
    try:
        comm = by_key(attrs["group"])
        abi = mpi_abi(comm, dtype)
    except DistributedError as exc:
        raise ValueError(str(exc)) from None
    count = bucket_layout([v.type for v in values])[1] // dtype.itemsize
    if count > _INT_MAX:
        raise ValueError(f"{count} elements in one all-reduce: MPI counts are C ints (at most "
                         f"{_INT_MAX}); set a smaller bucket size")
    is_float = np.issubdtype(dtype, np.floating)
    if not is_float and attrs["scale"] != 1.0:
        raise ValueError(f"an all-reduce of {dtype} cannot be scaled by {attrs['scale']} (a "
                         "mean of integers): reduce a float, or sum")
    ints = pack(FIELDS["COLLECTIVE_FIELDS"],
                iallreduce=abi.iallreduce if abi else 0, test=abi.test if abi else 0,
                comm=abi.comm if abi else 0, datatype=abi.datatype if abi else 0,
                op=abi.op if abi else 0, count=count, timeout_ns=int(comm.timeout * 1e9),
                itemsize=dtype.itemsize, is_float=is_float, members=len(values),
                iallgather=abi.iallgather if abi else 0, ranks=comm.size,
                deterministic=bool(attrs.get("deterministic", False)),
                spin_ns=int(WAIT_SPIN * 1e9))
    return Launch(ints, (float(attrs["scale"]),))


def implement(table) -> None:
    check_built(K, **FIELDS)
    table.implement("all_reduce", kernel="all_reduce", dtypes=REDUCED_DTYPES, lower=_lower)
    table.implement("all_reduce_start", kernel="all_reduce_start", dtypes=REDUCED_DTYPES,
                    lower=_lower)
    table.implement("all_reduce_wait", kernel="all_reduce_wait", dtypes=REDUCED_DTYPES,
                    lower=_lower, dispatch_input=1)
