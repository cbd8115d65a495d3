"""The C runtime's pooling gradients, its select (max pooling's indices) and its int8 and uint8
poolings against the Python executor: one source (_kernels/pool.h, pool_int.h), so the same bits
on 1-3 threads, for every window shape the row passes take and the clamped windows around them,
with ties of -0.0 and 0.0, NaN and infinities; and each kernel on the threads its bytes pay for,
the executor's rule."""
from __future__ import annotations

import functools
import operator

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.deploy import export_c
from mgegraph.ir.quant import per_tensor

from .cbuild import SANITIZE, assert_refused, blob_calls, cc, make, patched
from .test_export_gemv_threads import parts_per_instruction, profiled_library
from .test_export_pool_ew import POOLS, runs_of, same_bits, tied_values

GRADIENTS = ("max_pool2d_backward_f32", "avg_pool2d_backward_f32")


def _gradients_plan(shape):
    # each pooling's gradient with its own dy (a sum of y * dy): every mode, overlapping and
    # tiling windows, padding, ceil mode, dilation, adaptive windows
    g = mg.Graph()
    x = g.input("x", shape, "float32")
    ys = [pool(x) for pool in POOLS.values()]
    dys = [g.input(f"dy{i}", y.shape, "float32") for i, y in enumerate(ys)]
    loss = functools.reduce(operator.add, [F.sum(y * dy) for y, dy in zip(ys, dys)])
    return mg.compile(mg.grad(loss, [x]))


def _gradient_feeds(plan, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, slot in plan.feeds.items():
        shape = plan.slots[slot].type.shape
        feeds[name] = tied_values(shape, seed) if name == "x" else rng.choice(
            np.array([-0.0, 0.0, 1.5, -2.25, 3.0], np.float32), size=shape)
    return feeds


@pytest.mark.parametrize("shape", [(1, 3, 13, 17), (2, 4, 256, 260)], ids=["odd", "threaded"])
def test_pooling_gradients_are_bitwise_on_any_thread_count(tmp_path, shape):
    # dy holds ties and signed zeros: overlapping windows add in pool.h's order, tiling ones
    # store (a -0.0 share stays -0.0); x holds ties, NaN and infinities (the first maximum wins)
    cc()
    plan = _gradients_plan(shape)
    assert set(GRADIENTS) <= {i.kernel for i in plan.instructions}
    feeds = _gradient_feeds(plan, seed=shape[1])
    (want,) = plan.run(feeds)
    for threads, (got,) in runs_of(tmp_path, plan, feeds).items():
        assert same_bits(got, want), threads


def _indices_plan(shape):
    # max_pool2d's indices: max_pool2d_select over each cell's index (pool.h's first hit)
    g = mg.Graph()
    x = g.input("x", shape, "float32")
    outs = [F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)[1],
            F.max_pool2d(x, 2, return_indices=True)[1],
            F.max_pool2d(x, 3, stride=2, ceil_mode=True, return_indices=True)[1],
            F.max_pool2d(x, 3, stride=1, padding=2, dilation=2, return_indices=True)[1]]
    return mg.compile(outs)


def test_max_pooling_indices_are_the_executors(tmp_path):
    cc()
    plan = _indices_plan((2, 5, 23, 26))
    assert "max_pool2d_select_f32" in {i.kernel for i in plan.instructions}
    feeds = {"x": tied_values((2, 5, 23, 26), seed=4)}
    want = plan.run(feeds)
    for threads, got in runs_of(tmp_path, plan, feeds, (1, 3)).items():
        for w, c in zip(want, got):
            assert np.array_equal(c, w), threads


def test_corrupt_select_and_gradient_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    g = mg.Graph()
    x = g.input("x", (2, 3, 9, 8), "float32")
    y, where = F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)
    (dx,) = mg.grad(F.sum(y * y), [x])
    plan = mg.compile([dx, where])
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    calls = {name: at for name, at, _ in blob_calls(blob)}
    planes, h, w, sh = 1, 2, 3, 8  # kernel_abi/pool.py's FIELDS
    cases = {}
    for kernel in ("max_pool2d_select_f32", "max_pool2d_backward_f32"):
        at = calls[kernel]
        # no planes, so no bytes reached, but planes of 2^40 cells: past an argmax's int
        huge = patched(patched(patched(blob, at + 8 * planes, 0), at + 8 * h, 1 << 20),
                       at + 8 * w, 1 << 20)
        cases.update({
            f"{kernel} planes": (patched(blob, at + 8 * planes, 7), "reaches past"),
            f"{kernel} stride": (patched(blob, at + 8 * sh, 0), "positive strides"),
            f"{kernel} cells": (huge, "argmax counts"),
        })
    feeds = {"x": tied_values((2, 3, 9, 8), seed=6)}
    got = assert_refused(exported.directory, cases, feeds, ["x"])
    for want, c in zip(plan.run(feeds), got):
        assert same_bits(c, want)


INT_POOLS = {name: POOLS[name] for name in (
    "max 2x2", "max 3x3/2 pad 1", "max 3x3/2 ceil", "max dilated", "avg 3x3/2 include",
    "avg 3x3/2 exclude", "avg 2x2", "avg 3x3/1 ceil", "adaptive max", "adaptive avg",
    "adaptive divides", "global")}


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_integer_poolings_are_bitwise_on_any_thread_count(tmp_path, dtype):
    # rows wide enough for pool_int.h's vector rows (and their tails), the clamped windows
    # around them, 2 MiB moved by the largest: split among the threads
    cc()
    shape = (2, 8, 96, 1400)
    g = mg.Graph()
    q = g.input("q", shape, dtype, per_tensor(0.05, 3 if dtype == "int8" else 130))
    plan = mg.compile([pool(q) for pool in INT_POOLS.values()])
    assert {i.kernel for i in plan.instructions} == {f"pool2d_{dtype[0]}{dtype[-1]}"}
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    x[:, :, ::5] = info.max  # ties, and sums whose quotients round half to even
    feeds = {"q": x}
    want = plan.run(feeds)
    for threads, got in runs_of(tmp_path, plan, feeds).items():
        for name, w, c in zip(INT_POOLS, want, got):
            assert np.array_equal(c, w), (name, threads)


def test_every_pooling_kernel_wakes_threads_by_the_bytes_it_moves(tmp_path):
    # the forward float and integer poolings, the gradients and select: one thread per MiB
    # moved (grain.h), as the executor's lowering plans them, at most the model's threads
    g = mg.Graph()
    x = g.input("x", (2, 16, 128, 128), "float32")
    q = g.input("q", (4, 16, 256, 256), "uint8", per_tensor(0.1, 9))
    small = g.input("s", (2, 8, 16, 16), "float32")
    y = F.max_pool2d(x, 3, stride=2, padding=1)
    (dx,) = mg.grad(F.sum(y * y) + F.sum(F.avg_pool2d(x, 2) * 3.0), [x])
    _, where = F.max_pool2d(x, 2, return_indices=True)
    plan = mg.compile([dx, where, F.avg_pool2d(q, 2), F.max_pool2d(small, 2)], freeze=True)
    kernels = {i.kernel for i in plan.instructions}
    assert {*GRADIENTS, "max_pool2d_select_f32", "pool2d_u8", "pool2d_f32"} <= kernels
    exported = export_c(plan, tmp_path / "c")
    lib = profiled_library(exported.directory)
    rng = np.random.default_rng(3)
    inputs = []
    for name in exported.input_names:
        t = plan.slots[plan.feeds[name]].type
        inputs.append(rng.integers(0, 256, t.shape).astype(np.uint8) if t.dtype == "uint8"
                      else rng.standard_normal(t.shape, dtype=np.float32))
    for threads in (1, 2, 3):
        parts = parts_per_instruction(lib, exported.directory, inputs, threads)
        for ins, got in zip(plan.instructions, parts):
            if "pool2d" not in ins.kernel:
                continue
            moved = sum(plan.slots[s].type.nbytes for s in (*ins.inputs, *ins.outputs))
            assert ins.ints[-1] == parallel.threads_for(moved)  # the executor's plan
            want = max(1, min(threads, moved // parallel.GRAIN_BYTES))
            assert got == want, (ins.kernel, threads, moved, got, want)
