"""Data-parallel training over MPI, MegEngine's ``megengine.distributed``: process groups, the
launcher, the collectives (``distributed.functional``), the GradManager callback that
all-reduces gradients, and ``bcast_list_`` for the initial weights.

>>> import mgegraph.distributed as dist
>>> dist.init_process_group()            # in each process of `mgegraph launch -n 2 train.py`
>>> dist.bcast_list_(model.parameters())
>>> gm = GradManager().attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])
>>> dist.on_root(mg.save, model.state_dict(), "checkpoint.mge")   # rank 0 writes, all wait

Design: the package sits with eager mode, nn and optim (it works on eager tensors, its
gradients are eager ``Function``s, its callback plugs into the GradManager); MPI itself is
reached only through ``mgegraph.communicator`` (the lowest layer), which loads ``mpi4py`` on
first use, so importing mgegraph, or this package, never needs it.
"""
from ..communicator import CollectiveTimeout, DistributedError
from . import functional
from .group import (
    WORLD,
    Group,
    get_backend,
    get_local_device_id,
    get_rank,
    get_world_size,
    group_barrier,
    init_process_group,
    is_distributed,
    new_group,
)
from .helper import AllreduceCallback, bcast_list_, make_allreduce_cb, on_root, synchronized
from .launcher import launch, launcher
from .planned import AllReduce

__all__ = ["WORLD", "AllReduce", "AllreduceCallback", "CollectiveTimeout", "DistributedError",
           "Group", "bcast_list_", "functional", "get_backend", "get_local_device_id", "get_rank",
           "get_world_size", "group_barrier", "init_process_group", "is_distributed", "launch",
           "launcher", "make_allreduce_cb", "new_group", "on_root", "synchronized"]
