"""The C runtime's transposed convolution (conv2d_backward_data_f32) the way the plan chose it:
on the tiles (the executor's "blocked" row tiles and "gather" tiles, which sum each output in the
same order) and by Winograd, bitwise the Python executor's on 1 to 3 threads (stride 1 with
padding, dilation, groups, output padding, channels no multiple of a tile, the bias the
epilogue pass folds in); on the GEMM path (every stride above 1) within float32 rounding. The
path codes the C runtime reads are conv.pyx's; corrupt blocks of each way are refused, and
mutated ones never crash, under the sanitizers."""
from __future__ import annotations

import re

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.deploy import conv_prepack, export_c
from mgegraph.deploy.kernels import CSRC
from mgegraph.kernel_abi.conv import FIELDS

from .cbuild import SANITIZE, assert_refused, blob_calls, cc, fuzz_blob, make, model_run, patched

KERNEL = "conv2d_backward_data_f32"
# name -> (the path the plan takes, whether a test forces it (else the rules choose it), x's
# shape, the weight's (in, out / groups, kh, kw), the options, a bias)
CASES = {
    "row tiles 5x5": ("blocked", False, (2, 16, 16, 17), (16, 12, 5, 5), dict(padding=2), True),
    "winograd": ("winograd", False, (1, 40, 13, 11), (40, 20, 3, 3), dict(padding=1), True),
    "gather, a tiny plane": ("gather", False, (3, 24, 2, 2), (24, 10, 3, 3), dict(padding=1),
                             True),
    "gather grouped dilated": ("gather", True, (2, 10, 9, 8), (10, 3, 3, 3),
                               dict(padding=(1, 2), dilation=(2, 1), groups=2), True),
    "row tiles grouped, output padding": ("blocked", True, (1, 12, 11, 10), (12, 5, 3, 3),
                                          dict(padding=1, dilation=2, groups=3,
                                               output_padding=1), True),
    "row tiles, an image a thread": ("blocked", True, (4, 7, 6, 9), (7, 9, 2, 3),
                                     dict(padding=(0, 1)), False),
    "winograd unpadded rows": ("winograd", True, (2, 9, 7, 12), (9, 13, 3, 3),
                               dict(padding=(0, 2)), False),
    # the GEMM and col2im (or, for a 1x1, the GEMM alone): within rounding
    "im2col at stride 2": ("im2col", False, (2, 9, 7, 12), (9, 13, 3, 3),
                           dict(stride=2, padding=1, output_padding=1), True),
    "im2col at stride (2, 3), grouped": ("im2col", False, (1, 8, 5, 6), (8, 3, 2, 4),
                                         dict(stride=(2, 3), groups=2), False),
    "direct 1x1": ("direct", False, (2, 12, 5, 7), (12, 9, 1, 1), {}, True),
}
GEMM_PATHS = ("im2col", "direct")


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def data_paths(plan) -> list:
    return [ins.choice.path.split(",")[0] for ins in plan.instructions
            if ins.op == "conv2d_backward_data"]


def transposed_plan(case, monkeypatch, seed=0):
    """The case's plan (the data gradient forced onto its path where the case says, a path the
    executor offers for it: a measured choice may take it) and its feeds."""
    path, forced, x_shape, w_shape, options, bias = CASES[case]
    if forced:
        rules = lowering._conv_path

        def chosen(op, *args, **kwargs):
            if op != "conv2d_backward_data":
                return rules(op, *args, **kwargs)
            kernel, stride, padding, dilation = args[1:5]
            cg = args[5][0]
            offered = lowering.applicable_paths(op, "float32", kernel, stride, padding,
                                                dilation, options.get("groups", 1), cg, 0)
            assert path in offered, offered
            return path
        monkeypatch.setattr(lowering, "_conv_path", chosen)
    rng = np.random.default_rng(seed)
    g = mg.Graph()
    w = g.param("w", rng.standard_normal(w_shape, dtype=np.float32))
    b = g.param("b", rng.standard_normal(w_shape[1] * options.get("groups", 1),
                                         dtype=np.float32)) if bias else None
    plan = mg.compile([F.conv_transpose2d(g.input("x", x_shape, "float32"), w, b, **options)])
    assert data_paths(plan) == [path]  # the rules' choice, should it change, fails here
    return plan, {"x": rng.standard_normal(x_shape, dtype=np.float32)}


def run(exported, feeds, threads, env=None):
    done, (got,) = model_run(exported.directory, feeds, exported.input_names, env=env,
                             options=["--threads", str(threads)])
    assert done.returncode == 0, done.stderr
    return got


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_transposed_convolution_runs_the_executors_way(tmp_path, monkeypatch, case):
    cc()
    plan, feeds = transposed_plan(case, monkeypatch)
    exported = export_c(plan, tmp_path)
    make(exported.directory)
    (want,) = plan.run(feeds)
    for threads in (1, 2, 3):
        got = run(exported, feeds, threads)
        if CASES[case][0] in GEMM_PATHS:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        else:
            assert np.array_equal(_bits(got), _bits(want)), threads


def test_the_c_runtime_reads_conv_pyx_path_codes():
    found = {}
    for header in ("conv_gather_c.h", "conv_wino_c.h"):
        text = (CSRC / "kernels" / header).read_text()
        found.update(re.findall(r"#define MGR_(\w+)_PATH (\d+)", text))
    assert {k: int(v) for k, v in found.items()} == {
        "BLOCKED": K.CONV_PATHS["blocked"], "GATHER": K.CONV_PATHS["gather"],
        "WINO": K.CONV_PATHS["winograd"]}
    assert conv_prepack.WINOGRAD_PATH == K.CONV_PATHS["winograd"]


@pytest.mark.parametrize("case", ["row tiles grouped, output padding", "winograd",
                                  "im2col at stride 2"])
def test_corrupt_blocks_of_each_way_are_refused_under_the_sanitizers(tmp_path, monkeypatch,
                                                                     case):
    cc()
    plan, feeds = transposed_plan(case, monkeypatch, seed=1)
    exported = export_c(plan, tmp_path)
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    ((_, at, _),) = [c for c in blob_calls(blob) if c[0] == KERNEL]
    field = {f: at + 8 * FIELDS.index(f) for f in FIELDS}
    cases = {
        "dx taller": (patched(blob, field["h"], 99), "past dx's bytes"),
        "dy wider": (patched(blob, field["ow"], 99), "past dy's bytes"),
        "a larger kernel": (patched(blob, field["kw"], 9), "past w's bytes"),
        "packed filters": (patched(blob, field["packed"], 8), "takes no packed weights"),
        "groups that do not divide": (patched(blob, field["groups"], 7), "groups must divide"),
        "a negative padding": (patched(blob, field["pw"], -1), "negative"),
    }
    (got,) = assert_refused(exported.directory, cases, feeds, exported.input_names)
    (want,) = plan.run(feeds)  # (-O1 forms no FMAs: within rounding)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("case", ["gather grouped dilated", "winograd unpadded rows",
                                  "im2col at stride (2, 3), grouped"])
def test_mutated_blocks_of_each_way_never_crash(tmp_path, monkeypatch, case):
    # a path, stride or padding changed, a kernel shrunk: each runs one of the ways or the
    # double sums, inside the buffers the block's checks bound
    cc()
    plan, _ = transposed_plan(case, monkeypatch, seed=2)
    exported = export_c(plan, tmp_path)
    fuzz_blob(exported.directory, seeds=[31, 32], count=300)
