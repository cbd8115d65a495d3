"""The reductions in the C runtime, bitwise against the Python executor: both run reduce.h's
bodies (sum, prod, mean, var, max and min of float32; axes last, first, middle, several, all,
kept; the reduced sizes 1, 7, 129 and 1000, where the pairwise sums split; NaN and infinities;
1 to 3 threads in C; an aarch64 build under qemu), on data whose sums depend on their order, so
that any other order of summation changes bits."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F

from .cbuild import cc, exported_run

FLOAT_OPS = (F.sum, F.mean, F.var, F.max, F.min)


def reductions_plan(shape, axis, keepdims=False):
    """Every float32 reduction of the C runtime over ``axis`` of x, and prod and sum over it of
    p (whose values near 1 keep its products finite)."""
    g = mg.Graph()
    x, p = g.input("x", shape, "float32"), g.input("p", shape, "float32")
    outs = [op(x, axis=axis, keepdims=keepdims) for op in FLOAT_OPS]
    outs += [F.prod(p, axis=axis, keepdims=keepdims), F.sum(p, axis=axis, keepdims=keepdims)]
    plan = mg.compile(outs, optimize=0)
    kernels = [ins.kernel for ins in plan.instructions]
    assert kernels.count("reduce_f32") == len(outs), kernels
    return plan


def reduced_axes(ndim, axis):
    return tuple(range(ndim)) if axis is None else tuple(int(a) % ndim for a in np.atleast_1d(axis))


def blocks(x, axis):
    """x's reduced blocks over ``axis`` as rows: (outputs, reduced elements)."""
    axes = reduced_axes(x.ndim, axis)
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    return moved.reshape(-1, int(np.prod([x.shape[a] for a in axes])))


def from_blocks(rows, shape, axis):
    """The array of ``shape`` whose reduced blocks over ``axis`` are ``rows``."""
    axes = reduced_axes(len(shape), axis)
    kept = [n for d, n in enumerate(shape) if d not in axes]
    moved = rows.reshape(*kept, *[shape[a] for a in axes])
    return np.ascontiguousarray(np.moveaxis(moved, tuple(range(len(kept), len(shape))), axes))


def order_sensitive(shape, axis, seed=0):
    """x: normal values and, in each reduced block, pairs of +1e30 and -1e30 (one element in 16),
    so that a block's sum is the sum of the values added while its partial sum was not huge: it
    depends on the order of the additions. A NaN in one block, infinities in two others. p:
    1 + normal / 64 (finite products)."""
    rng = np.random.default_rng(seed)
    rows = blocks(rng.standard_normal(shape, dtype=np.float32), axis).copy()
    for row in rows:
        spikes = np.flatnonzero(rng.random(row.size) < 1 / 16)
        spikes = rng.permutation(spikes[:spikes.size - spikes.size % 2])
        row[spikes] = np.where(np.arange(spikes.size) % 2, np.float32(-1e30), np.float32(1e30))
    if rows.shape[0] > 3:
        rows[0, -1], rows[1, 0], rows[2, rows.shape[1] // 2] = np.nan, np.inf, -np.inf
    x = from_blocks(rows, shape, axis)
    p = (1 + rng.standard_normal(shape) / 64).astype(np.float32)
    return {"x": x, "p": p}


def naive_sums(x, axis):
    """The sums over ``axis`` taken in C order in double, rounded once: what a kernel summing in
    another order than the executor's pairwise one would give."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.cumsum(blocks(x, axis).astype(np.float64), axis=-1)[:, -1].astype(np.float32)


@pytest.mark.parametrize("shape, axis, keepdims", [
    ((7, 1000), -1, False),               # last: pairwise blocks split
    ((129, 33), 0, False),                # first: the columns walk
    ((5, 129, 7), 1, False),              # middle
    ((3, 7, 1, 129), (1, 3), False),      # several, with a size-1 axis kept
    ((7, 9, 5), None, False),             # all
    ((6, 1, 129), (0, 2), True),          # kept dims; a reduced size of 6 (below a block)
    ((1029, 1), 1, False),                # size 1 reduced; more outputs than a chunk
], ids=["last", "first", "middle", "several", "all", "keepdims", "size1"])
def test_reductions_are_bitwise_the_python_plan(tmp_path, shape, axis, keepdims):
    cc()
    plan = reductions_plan(shape, axis, keepdims)
    feeds = order_sensitive(shape, axis)
    got = exported_run(tmp_path, plan, feeds)
    with np.errstate(all="ignore"):
        want = plan.run(feeds)
    for k, (w, c) in enumerate(zip(want, got)):
        assert c.shape == w.shape and c.view(np.uint32).tobytes() == w.view(np.uint32).tobytes(), k


@pytest.mark.parametrize("axis", [2, 1, (0, 2)], ids=["rows", "columns", "several"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_change_no_bit(tmp_path, axis, threads):
    # 3.6 MB moved: the grain rule wakes 3 threads in C; each splits reduce.h's units
    cc()
    shape = (7, 129, 1000)
    plan = reductions_plan(shape, axis)
    feeds = order_sensitive(shape, axis, seed=1)
    got = exported_run(tmp_path, plan, feeds, threads)
    with np.errstate(all="ignore"):
        want = plan.run(feeds)
    for k, (w, c) in enumerate(zip(want, got)):
        assert c.view(np.uint32).tobytes() == w.view(np.uint32).tobytes(), k


def test_the_data_tells_summation_orders_apart():
    # the feeds above can fail the tests: the executor's pairwise sums along rows differ from
    # sums in C order (the C runtime's before reduce.h; the executor's columns walk keeps it)
    for shape, axis in [((7, 1000), -1), ((7, 129, 1000), 2), ((3, 7, 1, 129), (1, 3))]:
        plan = reductions_plan(shape, axis)
        feeds = order_sensitive(shape, axis, seed=1)
        with np.errstate(all="ignore"):
            got = plan.run(feeds)[0]
        naive = naive_sums(feeds["x"], axis)
        finite = np.isfinite(naive)
        assert (got.reshape(-1)[finite] != naive[finite]).any(), (shape, axis)


def test_an_aarch64_build_agrees(tmp_path):
    # no FP contraction in either build: aarch64's FMA fuses no square into var's sums. A NaN
    # made by arithmetic (var of infinities) is x86's default NaN, negative, or ARM's, positive
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    shape, axis = (5, 129, 7), (0, 1)
    plan = reductions_plan(shape, axis)
    feeds = order_sensitive(shape, axis, seed=2)
    got = exported_run(tmp_path, plan, feeds, compiler=cross, cflags="-O2 -static",
                       runner=[qemu])
    with np.errstate(all="ignore"):
        want = plan.run(feeds)
    for k, (w, c) in enumerate(zip(want, got)):
        nan = np.isnan(w)
        assert (np.isnan(c) == nan).all(), k
        assert c[~nan].view(np.uint32).tobytes() == w[~nan].view(np.uint32).tobytes(), k
