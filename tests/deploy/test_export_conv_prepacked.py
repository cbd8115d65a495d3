"""Convolution filters prepared at export (mgegraph/deploy/conv_prepack.py): Winograd's U = G g
G^T in the blob (conv2d_winograd_packed_f32; test_export_wino_tile.py has its tiles) and the
gather tiles' packed blocks (conv2d_f32 on packed weights) give bitwise what the C runtime gave
when it transformed or packed them on each call, on 1, 2 and 3 threads (an older runtime refuses
the new kernel by name: test_export_wino_tile.py); corrupt blocks are refused and mutated blobs
never crash under the sanitizers; aarch64 agrees under qemu."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import conv_prepack, export_c
from mgegraph.kernel_abi.conv import FIELDS

from .cbuild import SANITIZE, assert_refused, blob_calls, cc, fuzz_blob, make, model_run, patched


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def run(directory, plan, feeds, threads=1, cflags="-O2", compiler=None, runner=()):
    """The plan exported to ``directory``, built and run: (the export, its outputs)."""
    exported = export_c(plan, directory)
    make(exported.directory, compiler=compiler, cflags=cflags)
    done, outputs = model_run(exported.directory, feeds, exported.input_names, runner=runner,
                              options=["--threads", str(threads)])
    assert done.returncode == 0, done.stderr
    return exported, outputs


def per_call(monkeypatch, directory, plan, feeds, threads=1):
    """The outputs of the export that keeps the plan's filters (transformed or packed by the
    runtime on each call, as before)."""
    with monkeypatch.context() as patch:
        patch.setattr(conv_prepack, "prepared", lambda *args: None)
        exported, outputs = run(directory, plan, feeds, threads)
    assert conv_prepack.WINOGRAD_KERNEL not in exported.kernels
    return outputs


def conv_net(rng, batch=2, size=13):
    """Winograd 3x3s (odd planes, 40 and 44 channels: partial tiles of rows and columns), a
    gather 3x3/2 and a 1x1/2 skip on filters the plan keeps unpacked, a relu6 epilogue."""
    g = mg.Graph()
    x = g.input("x", shape=(batch, 32, size, size), dtype="float32")

    def conv(h, cout, k, stride, name, bias=True):
        w = rng.standard_normal((cout, h.shape[1], k, k), dtype=np.float32) * 0.2
        b = g.param(name + "b", rng.standard_normal(cout, dtype=np.float32)) if bias else None
        return F.conv2d(h, g.param(name, w), b, stride=stride, padding=k // 2)

    h = F.relu(conv(x, 40, 3, 1, "a"))
    h = F.clip(conv(h, 44, 3, 1, "b", bias=False), 0, 6)
    y = F.relu(conv(h, 40, 3, 2, "c") + conv(h, 40, 1, 2, "skip"))
    feeds = {"x": rng.standard_normal((batch, 32, size, size), dtype=np.float32)}
    return mg.compile([y]), feeds


def paths(plan):
    return [ins.choice.path if ins.choice else ins.kernel for ins in plan.instructions
            if ins.kernel == "conv2d_f32"]


def winograds(plan) -> int:
    return sum(p.startswith("winograd") for p in paths(plan))


def winograd_export(directory, seed, size):
    """conv_net's plan (batch 1), its feeds and its export; the test skips where the rules
    chose no Winograd."""
    plan, feeds = conv_net(np.random.default_rng(seed), batch=1, size=size)
    exported = export_c(plan, directory)
    if conv_prepack.WINOGRAD_KERNEL not in exported.kernels:
        pytest.skip(f"the rules chose {paths(plan)} here, not Winograd")
    return plan, feeds, exported


def packed_field(blob: bytes, at: int) -> int:
    """The ``packed`` field of the Conv block whose ints start at byte ``at``."""
    return int(np.frombuffer(blob, "<i8", len(FIELDS), at)[FIELDS.index("packed")])


def test_winograd_filters_are_the_runtimes_transform():
    # G g G^T by hand on one filter, and the float32 rounding of each step: (a + b + c) / 2
    g = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3) / 7
    G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    want = G @ g[0, 0].astype(np.float64) @ G.T
    u = conv_prepack.winograd_filters(g)
    assert u.shape == (16, 1, 1) and u.dtype == np.float32
    np.testing.assert_allclose(u[:, 0, 0], want.ravel(), rtol=1e-6)
    assert conv_prepack.block_for(40) == 48 and conv_prepack.block_for(128) == 64
    assert conv_prepack.block_for(24) == 32 and conv_prepack.block_for(8) == 16


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_prepared_filters_give_the_bits_of_the_per_call_ways(tmp_path, monkeypatch, threads):
    cc()
    plan, feeds = conv_net(np.random.default_rng(1))
    if winograds(plan) < 2:
        pytest.skip(f"the rules chose {paths(plan)} here, not Winograd")
    exported, (got,) = run(tmp_path / "new", plan, feeds, threads)
    blob = (exported.directory / "model.mgr").read_bytes()
    names = [name for name, _, _ in blob_calls(blob)]
    assert names.count(conv_prepack.WINOGRAD_KERNEL) == 2
    packed = [blob_calls(blob)[k][1] for k, n in enumerate(names) if n == "conv2d_f32"]
    assert packed and all(packed_field(blob, at) for at in packed)
    (before,) = per_call(monkeypatch, tmp_path / "old", plan, feeds, threads)
    assert np.array_equal(_bits(got), _bits(before))
    (want,) = plan.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_a_filter_a_state_update_writes_is_not_prepared(tmp_path):
    # the plan copies a new value into its filters after each run, which the next run reads:
    # the blob keeps them as they are (the plan's conv2d_f32, unpacked), transformed per call
    cc()
    rng = np.random.default_rng(2)
    g = mg.Graph()
    x = g.input("x", shape=(1, 32, 9, 9), dtype="float32")
    w = g.param("w", rng.standard_normal((16, 32, 3, 3), dtype=np.float32) * 0.2)
    y = F.conv2d(x, w, padding=1)
    g.assign(w, w * 0.5)
    plan = mg.compile([y])
    if winograds(plan) != 1:
        pytest.skip(f"the rules chose {paths(plan)} here, not Winograd")
    feeds = {"x": rng.standard_normal((1, 32, 9, 9), dtype=np.float32)}
    exported = export_c(plan, tmp_path)
    blob = (exported.directory / "model.mgr").read_bytes()
    (at,) = [ints for name, ints, _ in blob_calls(blob) if name.startswith("conv2d")]
    assert conv_prepack.WINOGRAD_KERNEL not in exported.kernels
    assert packed_field(blob, at) == 0
    make(exported.directory)
    done, (first,) = model_run(exported.directory, feeds, exported.input_names)
    assert done.returncode == 0, done.stderr
    (want,) = plan.run(feeds)
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_corrupt_prepared_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan, feeds, exported = winograd_export(tmp_path, 4, 9)
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    calls = blob_calls(blob)
    wino = next(ints for name, ints, _ in calls if name == conv_prepack.WINOGRAD_KERNEL)
    gather = next(ints for name, ints, _ in calls if name == "conv2d_f32")
    at = {f: 8 * FIELDS.index(f) for f in FIELDS}
    cases = {
        "U of more channels": (patched(blob, wino + at["cout"], 4096), "of U reach past"),
        "U of more inputs": (patched(blob, wino + at["cin"], 64), "past"),
        "a 5x5 on U": (patched(patched(blob, wino + at["kh"], 5), wino + at["kw"], 5),
                       "Winograd's filters take a 3x3 kernel"),
        "U at stride 2": (patched(blob, wino + at["sh"], 2), "Winograd's filters take"),
        "U packed by 16": (patched(blob, wino + at["packed"], 16), "packed by 8 output"),
        "U grouped": (patched(blob, wino + at["groups"], 2), "one group"),
        "blocks past the packed filters": (patched(blob, gather + at["packed"], 4096),
                                           "the weights reach past w's bytes"),
        "a negative field": (patched(blob, wino + at["oh"], -1), "negative"),
    }
    (got,) = assert_refused(exported.directory, cases, feeds, exported.input_names)
    (want,) = plan.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_mutated_blobs_of_prepared_filters_never_crash(tmp_path):
    cc()
    _, _, exported = winograd_export(tmp_path / "out", 5, 6)
    fuzz_blob(exported.directory, seeds=[11, 12], count=300)


def test_prepared_filters_build_for_aarch64_and_agree_with_x86(tmp_path):
    # U's GEMMs and the packed blocks on the baseline tile (8 channels, contracted to FMAs on
    # aarch64), Winograd's transforms on its 4-wide vectors: the x86 AVX2 build's bits
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    cc()
    plan, feeds = conv_net(np.random.default_rng(6), batch=1, size=9)
    _, (native,) = run(tmp_path / "x86", plan, feeds, threads=2)
    _, (arm,) = run(tmp_path / "arm", plan, feeds, threads=2, compiler=cross,
                    cflags="-O2 -static", runner=[qemu])
    assert np.array_equal(_bits(arm), _bits(native))
