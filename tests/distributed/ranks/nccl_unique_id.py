"""NCCL's unique id shared over MPI (distributed/nccl.py): rank 0 draws it with the real
library, every rank reports what it received; then each rank tries to make the communicator,
which on a machine without a GPU must fail at once with NCCL's own error naming the rank (not
hang), and on one with a GPU per rank succeeds."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import report

import mgegraph.distributed as dist
from mgegraph.distributed import nccl

dist.init_process_group(backend="nccl", timeout=60)
R = dist.get_rank()
uid = nccl.shared_unique_id(dist.WORLD.comm)
try:
    nccl.init_rank(uid, dist.get_world_size(), R, f"rank {R}'s NCCL communicator")
    made = "made"
except nccl.NcclError as exc:
    made = str(exc)
report(R, uid=uid.hex(), backend=dist.get_backend(), made=made)
