"""The C runtime's vectorised loops against the Python executor, bitwise: the float pooling's row
kernels (every window shape the literal loops take and the clamped windows around them, ties of
-0.0 and 0.0, NaN and infinities), split over threads, under the sanitizers too."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import export_c

from .cbuild import SANITIZE, cc, make, model_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
# bitwise but for a NaN's payload: a vector loop may add a cell's NaN before a sum's
from test_elementwise_paths import same_bits  # noqa: E402

# values with many ties (-0.0 beside 0.0: a max keeps the first), infinities and NaNs
TIES = np.array([-0.0, 0.0, 1.0, -1.0, 2.5, np.inf, -np.inf], np.float32)


def tied_values(shape, seed, nans=40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.choice(TIES, size=shape).astype(np.float32)
    x.flat[rng.choice(x.size, nans, replace=False)] = np.nan
    return x


def runs_of(tmp_path, plan, feeds, threads=(1, 2, 3), cflags="-O3"):
    """{threads: the exported plan's outputs through model_run built with ``cflags``}."""
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=cflags)
    got = {}
    for t in threads:
        done, got[t] = model_run(exported.directory, feeds, exported.input_names,
                                 options=["--threads", str(t)])
        assert done.returncode == 0 and "Sanitizer" not in done.stderr, done.stderr
    return got


POOLS = {
    "max 2x2": lambda x: F.max_pool2d(x, 2),
    "max 3x3/2 pad 1": lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
    "max 3x3/2 ceil": lambda x: F.max_pool2d(x, 3, stride=2, ceil_mode=True),
    "max 3x3/1 pad 1": lambda x: F.max_pool2d(x, 3, stride=1, padding=1),
    "max 3x3/3": lambda x: F.max_pool2d(x, 3, stride=3),
    "max 2x3/(1,2)": lambda x: F.max_pool2d(x, (2, 3), stride=(1, 2)),
    "max dilated": lambda x: F.max_pool2d(x, 3, stride=1, padding=2, dilation=2),
    "avg 3x3/2 include": lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, mode="average"),
    "avg 3x3/2 exclude": lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
    "avg 2x2": lambda x: F.avg_pool2d(x, 2),
    "avg 3x3/1 ceil": lambda x: F.avg_pool2d(x, 3, stride=2, ceil_mode=True, mode="average"),
    "adaptive max": lambda x: F.adaptive_max_pool2d(x, (4, 3)),
    "adaptive avg": lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
    "adaptive divides": lambda x: F.adaptive_avg_pool2d(x, (4, 4)),
    "global": lambda x: F.adaptive_avg_pool2d(x, 1),
}


def _pool_plan(shape):
    g = mg.Graph()
    x = g.input("x", shape, "float32")
    plan = mg.compile([pool(x) for pool in POOLS.values()])
    assert {i.kernel for i in plan.instructions} == {"pool2d_f32"}
    return plan


@pytest.mark.parametrize("shape", [(2, 9, 16, 20), (1, 3, 13, 17)], ids=["even", "odd"])
def test_float_poolings_are_bitwise_on_any_thread_count(tmp_path, shape):
    # 18 planes: the global average's 8-plane chains and the planes after them; rows wide
    # enough for the vector loops' bodies and their tails
    cc()
    plan = _pool_plan(shape)
    feeds = {"x": tied_values(shape, seed=len(shape) + shape[1])}
    want = plan.run(feeds)
    for threads, got in runs_of(tmp_path, plan, feeds).items():
        for name, w, c in zip(POOLS, want, got):
            assert same_bits(c, w), (name, threads)


def test_float_poolings_run_clean_under_the_sanitizers(tmp_path):
    cc()
    plan = _pool_plan((1, 9, 11, 12))
    feeds = {"x": tied_values((1, 9, 11, 12), seed=5)}
    want = plan.run(feeds)
    for threads, got in runs_of(tmp_path, plan, feeds, (1, 2), SANITIZE).items():
        for name, w, c in zip(POOLS, want, got):
            assert same_bits(c, w), (name, threads)
