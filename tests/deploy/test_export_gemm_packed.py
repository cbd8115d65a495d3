"""The C runtime's GEMM of many rows (_kernels/gemm_tile.h through deploy/csrc/kernels/gemm_c.h):
weights packed into panels at export (linear_packed_f32, matmul_packed_f32), other operands
packed per call, op(A) packed where it pays, k blocked. Every element is summed over k in order
from zero by fused multiply-adds, so the bits are a NumPy emulation of that order's, whatever
the threads, the panel width or k's blocks."""
from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import export as E
from mgegraph.deploy import export_c
from mgegraph.deploy import kernels as DK

from .cbuild import (
    SANITIZE,
    assert_refused,
    blob_calls,
    cc,
    fuzz_blob,
    make,
    model_run,
    patched,
    sanitizer_env,
)


def fma_order(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """op(A) op(B) (float32) summed over k in order from zero, each step one fused multiply-add
    (the product exact in float64, the sum rounded there then to float32: a double rounding
    that differs from the FMA's one rounding about once in 2^29 steps; these seeds have none)."""
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for p in range(a.shape[1]):
        c = (a[:, p:p + 1].astype(np.float64) * b[p].astype(np.float64) + c).astype(np.float32)
    return c


def mul_add_order(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The same order by a float32 multiply then an add (x86-64's baseline tile: no FMA)."""
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for p in range(a.shape[1]):
        c = c + a[:, p:p + 1] * b[p]
    return c


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


def weighted_gemm(m, n, k, kind, seed=0):
    """A plan of one GEMM on a weight: ``kind`` "linear" (w (n, k), bias, relu; "linear_nobias"
    without the bias, "linear_relu6" relu6), "matmul"
    (x @ w, w (k, n)), "matmul_tb" (w (n, k) transposed) or "matmul_ta" (x stored (k, m)).
    Returns the plan, its feeds and the expected output by the FMA order."""
    rng = np.random.default_rng(seed)
    g = mg.Graph()
    x0 = rng.standard_normal((k, m) if kind == "matmul_ta" else (m, k), dtype=np.float32)
    x = g.input("x", shape=x0.shape, dtype="float32")
    if kind.startswith("linear"):  # the activation fused into linear's epilogue
        w0 = rng.standard_normal((n, k), dtype=np.float32)
        b0 = rng.standard_normal(n, dtype=np.float32) * (kind != "linear_nobias")
        bias = None if kind == "linear_nobias" else g.param("b", b0)
        act, clip = (F.relu6, 6) if kind == "linear_relu6" else (F.relu, np.inf)
        y = act(F.linear(x, g.param("w", w0), bias))
        want = np.minimum(np.maximum(fma_order(x0, w0.T) + b0, 0), clip).astype(np.float32)
    else:
        tb, ta = kind == "matmul_tb", kind == "matmul_ta"
        w0 = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
        y = F.matmul(x, g.param("w", w0), transpose_a=ta, transpose_b=tb)
        want = fma_order(x0.T if ta else x0, w0.T if tb else w0)
    return mg.compile([y]), {"x": x0}, want


def run(directory, feeds, names, threads=1, env=None):
    done, got = model_run(directory, feeds, names, env=env, options=["--threads", str(threads)])
    assert done.returncode == 0, done.stderr
    return got[0]


SIZES = [(2, 1, 1), (7, 10, 5), (13, 17, 300), (33, 100, 513), (130, 40, 257)]


@pytest.mark.parametrize("kind", ["linear", "matmul", "matmul_tb", "matmul_ta"])
@pytest.mark.parametrize("m,n,k", SIZES)
def test_packed_weights_give_the_fma_order_bitwise_on_any_threads(tmp_path, kind, m, n, k):
    cc()
    plan, feeds, want = weighted_gemm(m, n, k, kind)
    exported = export_c(plan, tmp_path / "out")
    assert exported.kernels[0] in ("linear_packed_f32", "matmul_packed_f32"), exported.kernels
    make(exported.directory)
    for threads in (1, 2, 3):
        got = run(exported.directory, feeds, exported.input_names, threads)
        assert np.array_equal(bits(got), bits(want)), (threads, np.abs(got - want).max())
    np.testing.assert_allclose(got, plan.run(feeds)[0], rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("kind", ["linear_nobias", "linear_relu6"])
def test_linears_epilogue_runs_on_each_tile_after_its_last_k_block(tmp_path, kind):
    cc()
    plan, feeds, want = weighted_gemm(13, 17, 300, kind, seed=5)
    assert plan.instructions[0].ints[3:5] == ((0, 1) if kind == "linear_nobias" else (1, 2))
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory)
    got = run(exported.directory, feeds, exported.input_names, threads=2)
    assert np.array_equal(bits(got), bits(want))


@pytest.mark.parametrize("panel", [8, 32, 64])
def test_a_blob_packed_for_another_cpu_gives_the_same_bits(tmp_path, monkeypatch, panel):
    # panels of 8 (the baseline tile's), 32 and 64 (AVX-512's) read by this CPU's tile whose
    # width divides them: each element's sum is the same FMAs in the same order
    cc()
    plan, feeds, want = weighted_gemm(19, 70, 260, "matmul")
    monkeypatch.setattr(DK, "gemm_panel", lambda: panel)
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory)
    got = run(exported.directory, feeds, exported.input_names, threads=2)
    if _has_fma():
        assert np.array_equal(bits(got), bits(want))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _has_fma() -> bool:
    from mgegraph._kernels import conv  # lazy: compiled kernels (which tiles this CPU runs)
    return conv.blocked_isas()[-1] != "base"


def test_gemms_of_fed_operands_pack_per_call_bitwise(tmp_path):
    # neither operand a weight: op(B) packed on each call, at this CPU's panel width
    cc()
    rng = np.random.default_rng(7)
    g = mg.Graph()
    a0 = rng.standard_normal((300, 37), dtype=np.float32)   # stored (k, m): op(A) = a0^T
    b0 = rng.standard_normal((45, 300), dtype=np.float32)   # stored (n, k): op(B) = b0^T
    a, b = (g.input(name, shape=v.shape, dtype="float32") for name, v in (("a", a0), ("b", b0)))
    first = F.matmul(a, b, transpose_a=True, transpose_b=True)
    d0 = rng.standard_normal((45, 29), dtype=np.float32)
    plan = mg.compile([first, F.matmul(first, g.input("d", shape=d0.shape, dtype="float32"))])
    feeds = {"a": a0, "b": b0, "d": d0}
    exported = export_c(plan, tmp_path / "out")
    assert "matmul_packed_f32" not in exported.kernels
    make(exported.directory)
    first = fma_order(a0.T, b0.T)
    for threads in (1, 2):
        done, got = model_run(exported.directory, feeds, exported.input_names,
                              options=["--threads", str(threads)])
        assert done.returncode == 0, done.stderr
        assert np.array_equal(bits(got[0]), bits(first))
        assert np.array_equal(bits(got[1]), bits(fma_order(first, d0)))


def test_the_portable_build_sums_in_the_same_order(tmp_path):
    # -DMGR_GEMM_PORTABLE: the baseline 4 x 8 tile alone, which on x86-64 multiplies and adds
    cc()
    plan, feeds, _ = weighted_gemm(13, 17, 300, "matmul")
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags="-O2 -DMGR_GEMM_PORTABLE")
    got = run(exported.directory, feeds, exported.input_names, threads=2)
    w = plan.values[plan.instructions[0].inputs[1]]
    assert np.array_equal(bits(got), bits(mul_add_order(feeds["x"], np.asarray(w))))


def test_a_single_row_keeps_the_gemv_on_the_weight_where_it_lies(tmp_path):
    cc()
    plan, feeds, _ = weighted_gemm(1, 300, 200, "matmul")
    exported = export_c(plan, tmp_path / "out")
    assert exported.kernels == ("matmul_f32",)
    make(exported.directory)
    got = run(exported.directory, feeds, exported.input_names)
    np.testing.assert_allclose(got, plan.run(feeds)[0], rtol=1e-5, atol=1e-4)


def test_a_weight_is_packed_once_and_stored_only_as_panels(tmp_path):
    rng = np.random.default_rng(2)
    g = mg.Graph()
    x = g.input("x", shape=(8, 64), dtype="float32")
    w = g.param("w", rng.standard_normal((64, 64), dtype=np.float32))
    plan = mg.compile([(x @ w) @ w])
    blob = E._tables(plan, ("x",), ("y",))[0]
    weights = [t for t in blob.tensors if t.kind == E.KIND_WEIGHT]
    panel = DK.gemm_panel()
    assert [t.shape for t in weights] == [(64 // panel, 64, panel)]
    assert {blob.kernels[c.kernel] for c in blob.calls} == {"matmul_packed_f32"}


def test_gemm_panels_is_the_c_layout():
    opb = np.arange(3 * 10, dtype=np.float32).reshape(3, 10)
    panels = E.gemm_panels(opb, 8)
    assert panels.shape == (2, 3, 8)
    assert np.array_equal(panels[1, 2, :2], opb[2, 8:]) and not panels[1, :, 2:].any()
    assert np.array_equal(panels[0], opb[:, :8])


def _instructions(blob: bytes) -> int:
    """Where the blob's first instruction record starts (header field 9)."""
    return struct.unpack_from("<q", blob, 8 * 9)[0]


def _corruptions(blob: bytes) -> dict:
    (_, ints_at, _), = [c for c in blob_calls(blob) if c[0].endswith("packed_f32")]
    ndim = 1
    panel_at = ints_at + 8 * (9 + 3 * ndim)
    return {
        "panel width": (patched(blob, panel_at, 12), "panel width"),
        "panel too wide": (patched(blob, panel_at, 128), "panel width"),
        "columns past the panels": (patched(blob, ints_at + 8, 1 << 12), "reach past"),
        "k past the panels": (patched(blob, ints_at + 16, 1 << 12), "reach past"),
        "transposed panels": (patched(blob, ints_at + 32, 1), "transpose_b must be 0"),
        "batches of b": (patched(blob, ints_at + 8 * (9 + 2 * ndim), 5), "no batches of b"),
        "block size": (patched(blob, _instructions(blob) + 32, 3), "matmul_packed_f32"),
    }


def test_corrupt_packed_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan, feeds, _ = weighted_gemm(7, 10, 5, "matmul")
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    got = assert_refused(exported.directory, _corruptions(blob), feeds, exported.input_names)
    assert np.allclose(got[0], plan.run(feeds)[0], rtol=1e-5, atol=1e-5)


def test_an_older_build_refuses_a_packed_blob_by_name(tmp_path):
    # a runtime built without the packed kernels (a single row's export) loads no packed blob
    cc()
    old = export_c(weighted_gemm(1, 10, 5, "matmul")[0], tmp_path / "old")
    new = export_c(weighted_gemm(7, 10, 5, "matmul")[0], tmp_path / "new")
    make(old.directory)
    shutil.copyfile(new.directory / "model.mgr", old.directory / "model.mgr")
    feeds = {"x": np.ones((7, 5), np.float32)}
    done, _ = model_run(old.directory, feeds, old.input_names)
    assert done.returncode == 1 and "matmul_packed_f32" in done.stderr, done.stderr
    assert "not in this build" in done.stderr


def test_the_sanitizers_see_no_fault_in_odd_sizes(tmp_path):
    cc()
    for kind, (m, n, k) in [("linear", (13, 17, 300)), ("matmul_ta", (130, 40, 257))]:
        plan, feeds, want = weighted_gemm(m, n, k, kind)
        exported = export_c(plan, tmp_path / kind)
        make(exported.directory, cflags=SANITIZE.replace("-O1", "-O2"))  # GCC fuses at -O2
        got = run(exported.directory, feeds, exported.input_names, threads=3,
                  env=sanitizer_env())
        assert np.array_equal(bits(got), bits(want))


def test_mutated_packed_blobs_never_crash_the_loader(tmp_path):
    cc()
    plan, _, _ = weighted_gemm(7, 10, 5, "linear")
    fuzz_blob(export_c(plan, tmp_path / "out").directory, seeds=[3, 4], count=300)


def test_the_packed_gemm_builds_for_aarch64_with_the_same_bits(tmp_path):
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    plan, feeds, want = weighted_gemm(33, 100, 513, "linear")
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cross, "-O2 -static")
    done, got = model_run(exported.directory, feeds, exported.input_names, runner=[qemu],
                          options=["--threads", "2"])
    assert done.returncode == 0, done.stderr
    assert np.array_equal(bits(got[0]), bits(want))  # aarch64's baseline tile has the FMA
