"""Winograd's 16 GEMMs in the C runtime on conv_tile.h's row tiles (conv_wino_c.h), U packed at
export as those tiles read it (conv2d_winograd_packed_f32): bitwise the Python executor's
Winograd on AVX2 plans (the same transforms, tiles and order of sums) on 1, 2 and 3 threads,
over many blocks and over one block split by output channels; blobs of the unpacked U from
before still run, bitwise; an older runtime refuses the new kernel by name; corrupt blocks are
refused under the sanitizers and mutated blobs never crash; a plan's baseline tile runs too;
the threads share the blocks without a race (ThreadSanitizer)."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as conv_lowering
from mgegraph.deploy import conv_prepack, export_c
from mgegraph.kernel_abi.conv import FIELDS

from .cbuild import SANITIZE, assert_refused, blob_calls, cc, fuzz_blob, make, model_run, patched

KERNEL = conv_prepack.WINOGRAD_KERNEL
# (input shape, output channels): one block of 25 tiles (split by output channels on 2 and 3
# threads; 44 channels, not a whole number of packed blocks), and 450 tiles in several blocks
# of whole 24-tile panels, the last one partial (36 channels)
LAYERS = {"one block": ((1, 32, 9, 9), 44), "blocks": ((2, 32, 30, 29), 36)}


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def layer(shape, cout, seed=0):
    """A Winograd 3x3 (bias, relu) then another (no bias, clip): its plan and feeds."""
    rng = np.random.default_rng(seed)
    g = mg.Graph()
    x = g.input("x", shape=shape, dtype="float32")
    w1 = rng.standard_normal((cout, shape[1], 3, 3), dtype=np.float32) * 0.2
    w2 = rng.standard_normal((cout, cout, 3, 3), dtype=np.float32) * 0.2
    h = F.relu(F.conv2d(x, g.param("w1", w1), g.param("b1", rng.standard_normal(
        cout, dtype=np.float32)), padding=1))
    y = F.clip(F.conv2d(h, g.param("w2", w2), padding=1), 0, 6)
    plan = mg.compile([y])
    ways = [ins.choice.path for ins in plan.instructions if ins.kernel == "conv2d_f32"]
    if not all(way.startswith("winograd") for way in ways):
        pytest.skip(f"the rules chose {ways} here, not Winograd")
    return plan, {"x": rng.standard_normal(shape, dtype=np.float32)}


def plan_isas(plan) -> set:
    return {ins.ints[FIELDS.index("isa")] for ins in plan.instructions
            if ins.kernel == "conv2d_f32"}


def run(directory, plan, feeds, threads=1, cflags="-O2"):
    """The plan exported to ``directory``, built and run: (the export, its output)."""
    exported = export_c(plan, directory)
    make(exported.directory, cflags=cflags)
    done, (got,) = model_run(exported.directory, feeds, exported.input_names,
                             options=["--threads", str(threads)])
    assert done.returncode == 0, done.stderr
    return exported, got


def assert_executors_agree(plan, got, want):
    """Bitwise on AVX2 plans (the executor's 16 GEMMs on the same row tiles); else (the
    executor's gather tile or the BLAS) within float32 rounding."""
    if plan_isas(plan) == {1}:
        assert np.array_equal(_bits(got), _bits(want))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_u_is_packed_as_the_row_tiles_read_it():
    w = np.random.default_rng(1).standard_normal((13, 5, 3, 3), dtype=np.float32)
    u, packed = conv_prepack.winograd_filters(w), conv_prepack.winograd_packed(w)
    assert packed.shape == (16, 2, 5, 8) and packed.dtype == np.float32
    for o in range(16):
        for c in range(5):
            want = u[:, o, c] if o < 13 else np.zeros(16, np.float32)
            assert np.array_equal(packed[:, o // 8, c, o % 8], want)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("case", sorted(LAYERS))
def test_the_row_tiles_give_the_python_executors_winograd(tmp_path, case, threads):
    cc()
    plan, feeds = layer(*LAYERS[case])
    exported, got = run(tmp_path, plan, feeds, threads)
    blob = (exported.directory / "model.mgr").read_bytes()
    assert [name for name, _, _ in blob_calls(blob)].count(KERNEL) == 2
    (want,) = plan.run(feeds)
    assert_executors_agree(plan, got, want)


def test_an_older_blob_of_unpacked_u_runs_bitwise(tmp_path, monkeypatch):
    # conv2d_winograd_f32 with U (16, cout, cin), as the export wrote it before the packing:
    # the runtime packs it on each call, then runs the same tiles
    cc()
    plan, feeds = layer(*LAYERS["blocks"], seed=2)
    _, new = run(tmp_path / "new", plan, feeds, threads=2)

    def unpacked(kernel, ints, w):
        f = dict(zip(FIELDS, ints))
        if kernel != "conv2d_f32" or not f["path"] == conv_prepack.WINOGRAD_PATH:
            return None
        return "conv2d_winograd_f32", tuple(ints), conv_prepack.winograd_filters(w)
    monkeypatch.setattr(conv_prepack, "prepared", unpacked)
    exported, old = run(tmp_path / "old", plan, feeds, threads=2)
    assert "conv2d_winograd_f32" in exported.kernels and KERNEL not in exported.kernels
    assert np.array_equal(_bits(old), _bits(new))


def test_a_runtime_without_the_packed_kernel_refuses_the_blob_by_name(tmp_path):
    cc()
    plan, feeds = layer(*LAYERS["one block"], seed=3)
    exported = export_c(plan, tmp_path)
    table = exported.directory / "model_kernels.c"
    entry = f'{{"{KERNEL}", mgr_{KERNEL}, mgr_{KERNEL}_check}},'
    n = len(exported.kernels)
    text = table.read_text()
    assert entry in text and f"mgr_n_kernels = {n};" in text
    table.write_text(text.replace(entry, "").replace(f"mgr_n_kernels = {n};",
                                                      f"mgr_n_kernels = {n - 1};"))
    make(exported.directory)
    done, _ = model_run(exported.directory, feeds, exported.input_names)
    assert done.returncode == 1
    assert f"({KERNEL}) is not in this build's table" in done.stderr, done.stderr


def test_corrupt_packed_u_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan, feeds = layer(*LAYERS["one block"], seed=4)
    exported = export_c(plan, tmp_path)
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    first, second = [ints for name, ints, _ in blob_calls(blob) if name == KERNEL]
    at = {f: 8 * FIELDS.index(f) for f in FIELDS}
    cases = {
        # 44 channels are 6 blocks of 8: 49 need 7
        "U of more output channels": (patched(blob, second + at["cout"], 49),
                                      "(cout rounded up to 8) * cin of U reach past"),
        "U of more inputs": (patched(blob, first + at["cin"], 40), "past"),
        "U packed by 16": (patched(blob, first + at["packed"], 16), "packed by 8 output"),
        "U not packed": (patched(blob, first + at["packed"], 0), "packed by 8 output"),
        "a 5x5 on U": (patched(patched(blob, first + at["kh"], 5), first + at["kw"], 5),
                       "Winograd's filters take a 3x3 kernel"),
        "U dilated": (patched(blob, second + at["dw"], 2), "Winograd's filters take"),
        "U grouped": (patched(blob, first + at["groups"], 2), "one group"),
        "an activation past relu6": (patched(blob, first + at["activation"], 99),
                                     "out of its range"),
    }
    (got,) = assert_refused(exported.directory, cases, feeds, exported.input_names)
    (want,) = plan.run(feeds)  # (-O1 forms no FMAs: within rounding)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_mutated_blobs_of_packed_u_never_crash(tmp_path):
    cc()
    plan, _ = layer(*LAYERS["one block"], seed=5)
    exported = export_c(plan, tmp_path / "out")
    fuzz_blob(exported.directory, seeds=[21, 22], count=300)


def test_a_baseline_plan_runs_the_baseline_row_tile(tmp_path, monkeypatch):
    # the plan lowered for isa 0 (its workspace sized for it, as a CPU without AVX2 lowers it):
    # the baseline row tile (a multiply and an add on x86-64) in C, the BLAS in the executor:
    # within float32 rounding; 1 and 2 threads the same bits
    cc()
    monkeypatch.setattr(conv_lowering, "_isa", lambda: K.blocked_isas()[0])
    plan, feeds = layer(*LAYERS["blocks"], seed=6)
    isa = FIELDS.index("isa")
    assert {ins.ints[isa] for ins in plan.instructions if ins.kernel == "conv2d_f32"} == {0}
    _, got = run(tmp_path / "two", plan, feeds, 2)
    _, one = run(tmp_path / "one", plan, feeds, 1)
    assert np.array_equal(_bits(got), _bits(one))
    (want,) = plan.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_threads_taking_blocks_from_the_counter_race_nowhere(tmp_path):
    # the parts take whole blocks from one atomic counter: under ThreadSanitizer, 3 threads give
    # the bits of 1 and no report
    cc()
    plan, feeds = layer(*LAYERS["blocks"], seed=7)
    exported = export_c(plan, tmp_path)
    make(exported.directory, cflags="-O1 -g -fsanitize=thread")
    outputs = []
    for threads in (1, 3):
        done, (got,) = model_run(exported.directory, feeds, exported.input_names,
                                 options=["--threads", str(threads)])
        assert done.returncode == 0 and "ThreadSanitizer" not in done.stderr, done.stderr
        outputs.append(_bits(got))
    assert np.array_equal(*outputs)
