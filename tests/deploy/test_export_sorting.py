"""The C runtime's sort, topk, argsort, cumsum, cumprod and the gradients a training plan adds
around them (cumprod_backward, slice_backward, scatter_add), bitwise against the Python
executor: the sorting model-file test's plan, then each op on ties, NaN, -0.0, odd lengths and
several axes, in every numeric dtype; and their parameter blocks refused when corrupt."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import export_c
from mgegraph.ops.builder import apply

from .cbuild import SANITIZE, assert_refused, blob_calls, cc, fuzz_blob, make, model_run, patched
from .test_export_small_ints import assert_bitwise, exported_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
import test_sorting_model_file as sorting_file  # noqa: E402  the model-file test's plan


def awkward(shape, dtype, seed=0) -> np.ndarray:
    """Values with ties, and for floats NaN, both zeros and infinities, at odd places."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        flat = x.reshape(-1)
        flat[::7] = 0.5  # ties
        flat[3::11] = np.nan
        flat[5::13] = -0.0
        flat[6::13] = 0.0
        flat[9::17] = -np.inf
        return x
    info = np.iinfo(dtype)
    x = rng.integers(-5, 6, shape).astype(dtype)  # many ties
    x.reshape(-1)[::9] = info.max
    x.reshape(-1)[4::9] = info.min
    return x


@pytest.mark.parametrize("threads", [1, 2])
def test_the_sorting_model_files_plan_is_bitwise(tmp_path, threads):
    cc()
    plan = sorting_file.sorting_plan()
    kernels = {i.kernel for i in plan.instructions}
    assert {"sort_f32", "topk_f32", "cumsum_f32", "cumprod_f32", "cumprod_backward_f32",
            "slice_backward_f32", "scatter_add_f32"} <= kernels, kernels
    x = awkward((3, 11), np.float32)
    x[1, 4] = 0.0
    feeds = {"x": x}
    assert_bitwise(exported_run(tmp_path, plan, feeds, threads), plan.run(feeds))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64],
                         ids=lambda d: np.dtype(d).name)
def test_sorts_and_topk_give_the_same_indices_on_ties_and_nan(tmp_path, dtype):
    # lengths across the insertion runs (16) and their merges, several axes, both orders
    cc()
    g = mg.Graph()
    x = g.input("x", (3, 70, 5), dtype)
    outs = []
    for axis in (-1, 1, 0):
        for descending in (False, True):
            outs += list(F.sort(x, descending=descending, dim=axis))
    outs += list(F.topk(x[:, :33, 0], 9)) + list(F.topk(x[:, :17, 1], 17, descending=True))
    outs += [F.argsort(x[0, :, :1].reshape(1, 70)), F.argsort(x[:, :1, 2], descending=True)]
    plan = mg.compile(outs)
    feeds = {"x": awkward((3, 70, 5), dtype, seed=1)}
    assert_bitwise(exported_run(tmp_path, plan, feeds), plan.run(feeds))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64],
                         ids=lambda d: np.dtype(d).name)
def test_scans_and_their_gradient_sum_in_the_same_order(tmp_path, dtype):
    cc()
    g = mg.Graph()
    x, dy = g.input("x", (4, 9, 3), dtype), g.input("dy", (4, 9, 3), dtype)
    outs = []
    for axis in (0, 1, 2):
        for exclusive in (False, True):
            for reverse in (False, True):
                flags = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
                outs += [apply(op, (x,), **flags) for op in ("cumsum", "cumprod")]
                outs.append(apply("cumprod_backward", (x, dy), **flags))
    plan = mg.compile(outs)
    assert {i.kernel.rsplit("_", 1)[0] for i in plan.instructions} == {
        "cumsum", "cumprod", "cumprod_backward"}
    feeds = {"x": awkward((4, 9, 3), dtype, seed=2), "dy": awkward((4, 9, 3), dtype, seed=3)}
    if np.dtype(dtype).kind == "f":
        feeds["x"][1, 4, :] = 0.0  # the gradient through a zero, without division
    with np.errstate(all="ignore"):
        want = plan.run(feeds)
    assert_bitwise(exported_run(tmp_path, plan, feeds), want)


def test_a_gather_slice_backward_and_scatter_add_are_bitwise(tmp_path):
    cc()
    g = mg.Graph()
    x = g.input("x", (5, 8), "float64")
    index = g.input("i", (5, 3), "int64")
    picked = F.gather(x, 1, index)
    window = x[1:4, ::-3]
    (dx,) = mg.grad(F.sum(picked * picked) + F.sum(window * window), [x])
    plan = mg.compile([dx])
    kernels = {i.kernel for i in plan.instructions}
    assert {"gather_f64", "slice_backward_f64", "scatter_add_f64"} <= kernels, kernels
    feeds = {"x": awkward((5, 8), np.float64, seed=4),
             "i": np.array([[0, 7, 0], [-1, 3, 3], [2, 2, 2], [5, -8, 1], [6, 0, 4]])}
    assert_bitwise(exported_run(tmp_path, plan, feeds), plan.run(feeds))
    feeds["i"][2, 1] = 8  # out of range: the run stops, as in Python
    with pytest.raises(mg.KernelError):
        plan.run(feeds)
    done, _ = model_run(tmp_path / "out", feeds, ["x", "i"])
    assert done.returncode == 1 and "failed with status 1" in done.stderr, done.stderr


# -- the new parameter blocks: refused when corrupt, never run ------------------------------
def test_corrupt_sorting_and_adjoint_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan = sorting_file.sorting_plan()
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    calls = {}
    for name, ints, _ in blob_calls(blob):
        calls.setdefault(name, ints)
    sort, topk, cumsum = calls["sort_f32"], calls["topk_f32"], calls["cumsum_f32"]
    backward, sliced, scatter = (calls["cumprod_backward_f32"], calls["slice_backward_f32"],
                                 calls["scatter_add_f32"])
    # Order: rows, length, k, descending; Scan: outer, length, inner, exclusive, reverse;
    # slice_backward: ndim, shape, strides, offset, size; scatter_add: index64, ndim, shape,
    # y strides, index strides, axis_length, axis_stride, size (kernel_abi's FIELDS)
    ndim = struct.unpack_from("<q", blob, scatter + 8)[0]
    tail = scatter + 8 * (2 + 3 * ndim)
    cases = {
        "sort k": (patched(blob, sort + 16, 12), "0 <= k <= length"),
        "sort rows": (patched(blob, sort, 4), "reaches past x"),
        "sort length": (patched(blob, sort + 8, 1 << 40), "k <= length"),
        "topk descending": (patched(blob, topk + 24, 2), "descending is not 0 or 1"),
        "topk workspace": (patched(patched(blob, topk + 8, 22), topk, 1), "workspace"),
        "cumsum inner": (patched(blob, cumsum + 16, 2), "reaches past a buffer"),
        "cumsum huge": (patched(blob, cumsum, 1 << 62), "no loop"),
        "cumsum reverse": (patched(blob, cumsum + 32, 3), "not 0 or 1"),
        "backward length": (patched(blob, backward + 8, 12), "reaches past a buffer"),
        "slice offset": (patched(blob, sliced + 8 * 3, 10), "reaches past y's size"),
        "slice size": (patched(blob, sliced + 8 * 4, 1 << 20), "past y's bytes"),
        "scatter index64": (patched(blob, scatter, 1), "index64"),
        "scatter axis": (patched(blob, tail, 12), "past the indexed tensor"),
        "scatter stride": (patched(blob, scatter + 8 * (2 + ndim), 1 << 40), "reach"),
        "scatter index stride": (patched(blob, scatter + 8 * (2 + 2 * ndim), 5), "the index"),
    }
    feeds = {"x": awkward((3, 11), np.float32)}
    got = assert_refused(exported.directory, cases, feeds, ["x"])
    assert_bitwise(got, plan.run(feeds))
    fuzz_blob(exported.directory, seeds=[7], count=500)
