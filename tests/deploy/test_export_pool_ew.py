"""The C runtime's vectorised loops against the Python executor, bitwise: the float pooling's row
kernels (every window shape the literal loops take and the clamped windows around them, ties of
-0.0 and 0.0, NaN and infinities), split over threads, under the sanitizers too."""
from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import export_c

from .cbuild import SANITIZE, blob_calls, cc, make, model_run

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


@pytest.mark.parametrize("shape", [(2, 9, 16, 20), (1, 3, 13, 17), (2, 4, 256, 260)],
                         ids=["even", "odd", "threaded"])  # (2 MiB moved: split among threads)
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


# -- 1x1 convolutions on panels of their cells ------------------------------------------------
@pytest.mark.parametrize("batch, cin, size, cout, stride", [
    (1, 64, 20, 24, 2), (2, 12, 9, 40, (2, 3)), (1, 512, 24, 16, 2), (3, 16, 7, 8, 1),
], ids=["resnet-like", "uneven-strides", "several-chunks", "stride-1"])
def test_pointwise_convolutions_on_panels_are_the_strided_walks_bits(tmp_path, batch, cin, size,
                                                                     cout, stride):
    # the panels' path against the same export built to walk the planes (-DMGR_NO_PANELS):
    # the same tile over the same cells, so bitwise; and the executor's within float32 rounding
    cc()
    rng = np.random.default_rng(cin)
    g = mg.Graph()
    x = g.input("x", (batch, cin, size, size), "float32")
    w = g.param("w", rng.standard_normal((cout, cin, 1, 1), dtype=np.float32))
    b = g.param("b", rng.standard_normal(cout, dtype=np.float32))
    plan = mg.compile([F.relu(F.conv2d(x, w, b, stride=stride))], freeze=True)
    feeds = {"x": rng.standard_normal((batch, cin, size, size), dtype=np.float32)}
    panels = runs_of(tmp_path / "panels", plan, feeds)
    blob = (tmp_path / "panels" / "out" / "model.mgr").read_bytes()
    (conv,) = [at for name, at, _ in blob_calls(blob) if name == "conv2d_f32"]
    kh, packed = struct.unpack_from("<q", blob, conv + 8 * 7)[0], \
        struct.unpack_from("<q", blob, conv + 8 * 22)[0]  # kernel_abi/conv.py's FIELDS
    assert kh == 1 and packed > 0  # the export packed its weights: the panels' path runs
    (walk,) = runs_of(tmp_path / "walk", plan, feeds, (1,), "-O3 -DMGR_NO_PANELS").values()
    for got in panels.values():
        assert got[0].tobytes() == walk[0].tobytes()
    np.testing.assert_allclose(walk[0], plan.run(feeds)[0], rtol=1e-5, atol=1e-4)


def test_pointwise_convolutions_run_clean_under_the_sanitizers(tmp_path):
    cc()
    rng = np.random.default_rng(3)
    g = mg.Graph()
    x = g.input("x", (2, 40, 9, 11), "float32")
    w = g.param("w", rng.standard_normal((24, 40, 1, 1), dtype=np.float32))
    plan = mg.compile([F.conv2d(x, w, stride=2)], freeze=True)
    feeds = {"x": rng.standard_normal((2, 40, 9, 11), dtype=np.float32)}
    want = plan.run(feeds)[0]
    for got in runs_of(tmp_path, plan, feeds, (1, 2), SANITIZE).values():
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-4)


# -- the generated elementwise loops ----------------------------------------------------------
def _elementwise_plan(shape):
    # broadcasts along each axis, a transposed read (dims that do not merge), the vectorisable
    # math (exp, tanh, log, erf) and selects (relu, the clamps), over an innermost loop long
    # enough to be cut into chunks among threads
    rng = np.random.default_rng(9)
    g = mg.Graph()
    x, t = g.input("x", shape, "float32"), g.input("t", shape[:2] + shape[:1:-1], "float32")
    channel = g.param("c", rng.standard_normal((1, shape[1], 1, 1), dtype=np.float32))
    row = g.param("r", rng.standard_normal(shape[-1:], dtype=np.float32))
    outs = [F.relu(x * channel + row), F.sigmoid(x) * F.tanh(x + 1.0),
            F.exp(F.minimum(x, 80.0)) - F.log(F.abs(x) + 1e-3),
            F.erf(x) + F.transpose(t, (0, 1, 3, 2)), F.clip(x * 3.0, -1.0, 6.0)]
    return mg.compile(outs, optimize=["fuse"]), {
        "x": tied_values(shape, 7, nans=10) * rng.standard_normal(shape, dtype=np.float32),
        "t": rng.standard_normal(shape[:2] + shape[:1:-1], dtype=np.float32)}


@pytest.mark.parametrize("shape", [(2, 3, 8, 9001), (2, 5, 7, 9)], ids=["long-rows", "short"])
def test_generated_loops_are_bitwise_on_any_thread_count(tmp_path, shape):
    cc()
    plan, feeds = _elementwise_plan(shape)
    assert all(i.kernel.startswith("fused_") or i.kernel.startswith(("binary", "unary"))
               for i in plan.instructions if i.op not in ("transpose",)), \
        [i.kernel for i in plan.instructions]
    with np.errstate(all="ignore"):
        want = plan.run(feeds)
    for threads, got in runs_of(tmp_path, plan, feeds).items():
        for k, (w, c) in enumerate(zip(want, got)):
            assert same_bits(c, w), (k, threads)
    source = (tmp_path / "out" / "model_kernels.c").read_text()
    assert (", 1, fused_" in source) == (shape[-1] > 9000)  # some loops split among threads


def test_generated_loops_run_clean_under_the_sanitizers(tmp_path):
    cc()
    plan, feeds = _elementwise_plan((1, 2, 3, 8500))
    with np.errstate(all="ignore"):
        want = plan.run(feeds)
    for threads, got in runs_of(tmp_path, plan, feeds, (1, 2), SANITIZE).items():
        for k, (w, c) in enumerate(zip(want, got)):
            assert same_bits(c, w), (k, threads)


def test_poolings_and_generated_loops_agree_on_aarch64(tmp_path):
    # the same sources cross-built, their loops vectorised for NEON, under qemu-user
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    for name, (plan, feeds) in {
            "pool": (_pool_plan((1, 9, 11, 12)), {"x": tied_values((1, 9, 11, 12), 4)}),
            "ew": _elementwise_plan((1, 2, 3, 8500))}.items():
        exported = export_c(plan, tmp_path / name)
        make(exported.directory, compiler=cross, cflags="-O3 -static")
        done, arm = model_run(exported.directory, feeds, exported.input_names, runner=[qemu],
                              options=["--threads", "2"])
        assert done.returncode == 0, done.stderr
        with np.errstate(all="ignore"):
            want = plan.run(feeds)
        for k, (w, c) in enumerate(zip(want, arm)):
            assert same_bits(c, w), (name, k)
