"""SyncBatchNorm on each rank's part of a batch (of a different size on each rank) against
BatchNorm on the whole batch: the output, the gradients of the input, weight and bias, and the
running statistics; 2-d and 4-d inputs. Each rank reports the largest differences."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import report

import mgegraph as mg
import mgegraph.distributed as dist
from mgegraph import nn

dist.init_process_group(timeout=120)
R, N = dist.get_rank(), dist.get_world_size()


def parts(shape_of):
    """Every rank's input (rank k has k + 2 samples) and output gradient weights."""
    rng = [np.random.default_rng([k, len(shape_of(1))]) for k in range(N)]
    xs = [(r.standard_normal(shape_of(k + 2)) * 3 + 1.5).astype(np.float32)
          for k, r in enumerate(rng)]
    cs = [r.standard_normal(shape_of(k + 2)).astype(np.float32) for k, r in enumerate(rng)]
    return xs, cs


def run(norm, x, c):
    """Output, input gradient, weight gradient and bias gradient of sum(norm(x) * c)."""
    x = mg.tensor(x)
    gm = mg.autodiff.GradManager().attach([x, norm.weight, norm.bias])
    with gm:
        y = norm(x)
        gm.backward((y * mg.tensor(c)).sum())
    return y.numpy(), x.grad.numpy(), norm.weight.grad, norm.bias.grad


def gap(a, b) -> float:
    a, b = (t.numpy() if isinstance(t, mg.Tensor) else np.asarray(t) for t in (a, b))
    return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))


def compare(shape_of, plain_class):
    xs, cs = parts(shape_of)
    sync, plain = nn.SyncBatchNorm(3, momentum=0.8), plain_class(3, momentum=0.8)
    gaps = {}
    for step in range(2):  # twice: the running statistics move from their start
        y, dx, dw, db = run(sync, xs[R], cs[R])
        whole = run(plain, np.concatenate(xs), np.concatenate(cs))
        start = sum(k + 2 for k in range(R))
        total = [dist.functional.all_reduce_sum(g).numpy() for g in (dw, db)]
        gaps[f"y{step}"] = gap(y, whole[0][start:start + R + 2])
        gaps[f"dx{step}"] = gap(dx, whole[1][start:start + R + 2])
        gaps[f"dw{step}"], gaps[f"db{step}"] = gap(total[0], whole[2]), gap(total[1], whole[3])
        for p in (sync.weight, sync.bias, plain.weight, plain.bias):
            p.grad = None
    gaps["running_mean"] = gap(sync.running_mean.value, plain.running_mean.value)
    gaps["running_var"] = gap(sync.running_var.value, plain.running_var.value)
    sync.eval(), plain.eval()
    gaps["eval"] = gap(sync(mg.tensor(xs[R])).numpy(), plain(mg.tensor(xs[R])).numpy())
    return max(gaps.values()), max(gaps, key=gaps.get)


flat = compare(lambda n: (n, 3), nn.BatchNorm1d)
image = compare(lambda n: (n, 3, 5, 4), nn.BatchNorm2d)
report(R, flat=flat, image=image)
