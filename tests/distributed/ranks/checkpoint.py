"""Rank-0 checkpoints: ``dist.on_root(mg.save, ...)`` writes the file once, in rank 0 only,
and no rank returns before it exists; a failure on the root is raised on every rank. Each
rank reports which ranks ran the function, what it read back, and the errors it saw."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import report

import mgegraph as mg
import mgegraph.distributed as dist

FOLDER = Path(sys.argv[1])
dist.init_process_group(timeout=60)
R = dist.get_rank()
model = mg.nn.Linear(3, 2)
dist.bcast_list_(model.parameters())


def save_slowly(obj, path):
    """mg.save after a pause, leaving a mark of the rank that ran it: a rank returning from
    on_root before the root has written would find no file."""
    (FOLDER / f"ran-on-{dist.get_rank()}").touch()
    time.sleep(1.0)
    mg.save(obj, path)
    return "written"


path = FOLDER / "checkpoint.mge"
result = dist.on_root(save_slowly, model.state_dict(), str(path))
exists_after = path.exists()
loaded = mg.load(str(path))
same = all(np.array_equal(np.asarray(loaded[k]), np.asarray(v))
           for k, v in model.state_dict().items())


def fail():
    raise OSError("disk full")


try:
    dist.on_root(fail)
    error = None
except Exception as exc:  # noqa: BLE001 - the report says what each rank got
    error = f"{type(exc).__name__}: {exc}"
report(R, result=result, exists_after=exists_after, same=same, error=error,
       ran_on=sorted(os.listdir(FOLDER)))
