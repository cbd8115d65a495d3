"""``dist.launcher`` from a script run with plain python: the decorated function runs in the
processes it starts (this file run again under another name, so the block below stays quiet
there), and the call returns their results in rank order."""
from __future__ import annotations

import json

import numpy as np

import mgegraph as mg
import mgegraph.distributed as dist


@dist.launcher(n_gpus=2, timeout=120)
def worker(scale):
    total = dist.functional.all_reduce_sum(mg.tensor(np.array([dist.get_rank() + 1.0])))
    return {"rank": dist.get_rank(), "size": dist.get_world_size(),
            "value": float(total.item()) * scale}


if __name__ == "__main__":
    print("RESULTS " + json.dumps(worker(10)), flush=True)
