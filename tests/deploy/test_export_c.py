"""mg.deploy.export_c: a plan exported as C, built with cc, run by model_run; outputs compared
with the Python executor's; corrupt blobs refused with a message, never a crash (under ASan)."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.cli import main as cli_main
from mgegraph.deploy import ExportError, export_c
from mgegraph.deploy import blob as B
from mgegraph.deploy.kernels import CSRC
from mgegraph.ops.builder import apply

from .cbuild import SANITIZE, assert_refused, cc, fuzz_blob, make, model_run, sanitizer_env


def readme_mlp(batch=128):
    """The README's MLP: a GEMM through the BLAS (10 columns), a fused add + relu, softmax."""
    g = mg.Graph()
    x = g.input("x", shape=(batch, 784), dtype="float32")
    w = g.param("w", np.random.default_rng(0).standard_normal((784, 10), dtype=np.float32))
    b = g.param("b", np.zeros(10, np.float32))
    return mg.compile([F.softmax(F.relu(x @ w + b), axis=-1)])


def tiles_mlp():
    """Two GEMMs whose operands are fed (so no pass packs them), wide enough for the package's
    tile GEMM on AVX-512: the C GEMM has the tiles' arithmetic, so the bits agree."""
    rng = np.random.default_rng(0)
    g = mg.Graph()
    x = g.input("x", shape=(33, 784), dtype="float32")
    w1 = g.input("w1", shape=(784, 256), dtype="float32")
    wt = g.input("wt", shape=(100, 256), dtype="float32")
    b1 = g.param("b1", rng.standard_normal(256, dtype=np.float32))
    h = F.maximum(F.relu(x @ w1 + b1) * 0.5 - 0.25, -F.abs(b1) / 3.0)
    y = F.log_softmax(F.matmul(h, wt, transpose_b=True), axis=-1)
    feeds = {"x": rng.standard_normal((33, 784), dtype=np.float32),
             "w1": rng.standard_normal((784, 256), dtype=np.float32) * 0.05,
             "wt": rng.standard_normal((100, 256), dtype=np.float32) * 0.1}
    return mg.compile([y]), feeds


def on_tiles(plan) -> bool:
    return all(ins.choice is not None and ins.choice.path.startswith("tiles")
               for ins in plan.instructions if ins.op in ("matmul", "linear"))


def exported_outputs(tmp_path, plan, feeds):
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory)
    done, outputs = model_run(exported.directory, feeds, exported.input_names)
    assert done.returncode == 0, done.stderr
    return outputs


def test_the_tile_gemm_mlp_is_bitwise_the_python_executors(tmp_path):
    cc()
    plan, feeds = tiles_mlp()
    want = plan.run(feeds)
    got = exported_outputs(tmp_path, plan, feeds)
    assert len(got) == 1 and got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
    if on_tiles(plan):
        assert np.array_equal(got[0].view(np.uint32), want[0].view(np.uint32))
    else:  # no AVX-512 tiles here: the Python plan's GEMMs went to the BLAS
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_inputs_given_by_pointer_give_the_same_outputs(tmp_path):
    cc()
    plan, feeds = tiles_mlp()
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    copied = model_run(exported.directory, feeds, exported.input_names, env=sanitizer_env())[1]
    done, pointed = model_run(exported.directory, feeds, exported.input_names,
                              env=sanitizer_env(), options=["--by-pointer", "--runs", "3"])
    assert done.returncode == 0 and "median of 3 runs" in done.stdout, done.stderr
    assert np.array_equal(copied[0], pointed[0])


def test_the_readme_mlp_matches_within_float_rounding_of_the_blas(tmp_path):
    cc()
    plan = readme_mlp(batch=5)
    feeds = {"x": np.random.default_rng(1).standard_normal((5, 784), dtype=np.float32)}
    (want,), (got,) = plan.run(feeds), exported_outputs(tmp_path, plan, feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def _weighted_mlp(rng):
    g = mg.Graph()
    x = g.input("x", shape=(33, 784), dtype="float32")
    h = F.relu(x @ g.param("w1", rng.standard_normal((784, 256), dtype=np.float32) * 0.05)
               + g.param("b1", rng.standard_normal(256, dtype=np.float32)))
    return x, F.log_softmax(h @ g.param("w2", rng.standard_normal((256, 64), dtype=np.float32)
                                        * 0.1) + g.param("b2", rng.standard_normal(
                                            64, dtype=np.float32)), axis=-1)


def _weighted_strided_conv(rng):
    # a 3x3 stride-2 convolution of 32 to 64 channels: packed on every x86 CPU's tiles
    g = mg.Graph()
    x = g.input("x", shape=(2, 32, 15, 15), dtype="float32")
    w = g.param("w", rng.standard_normal((64, 32, 3, 3), dtype=np.float32) * 0.1)
    return x, F.relu(F.conv2d(x, w, stride=2, padding=1))


@pytest.mark.parametrize("model", [_weighted_mlp, _weighted_strided_conv])
def test_a_plan_on_packed_weights_is_bitwise(tmp_path, model):
    # constant weights: the prepack pass makes each such layer a conv2d_packed, whose packed
    # weights a prologue computes; the export ships what it computed
    cc()
    rng = np.random.default_rng(3)
    x, y = model(rng)
    plan = mg.compile([y])
    if plan.prologue is None:  # the rules of prepack_block: linear layers off AVX-512
        assert model is _weighted_mlp, "the strided convolution is packed on every x86 CPU"
        pytest.skip("this CPU's rules run linear layers on the BLAS, not on packed weights")
    assert "conv2d_f32" in {i.kernel for i in plan.instructions}
    feeds = {"x": rng.standard_normal(x.shape, dtype=np.float32)}
    (want,), (got,) = plan.run(feeds), exported_outputs(tmp_path, plan, feeds)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_packed_3x3_convolution_is_bitwise(tmp_path):
    cc()
    rng = np.random.default_rng(4)
    g = mg.Graph()
    x = g.input("x", shape=(2, 16, 7, 7), dtype="float32")
    w = g.param("w", rng.standard_normal((40, 16, 3, 3), dtype=np.float32) * 0.2)
    y = F.relu(F.conv2d(x, w, g.param("b", rng.standard_normal(40, dtype=np.float32))))
    plan = mg.compile([y])
    if [i.op for i in plan.instructions] != ["conv2d_packed"]:
        pytest.skip(f"the rules chose {plan.instructions[0].op} here, not the packed tiles")
    feeds = {"x": rng.standard_normal((2, 16, 7, 7), dtype=np.float32)}
    (want,), (got,) = plan.run(feeds), exported_outputs(tmp_path, plan, feeds)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_digits_cnn_runs_within_float_rounding(tmp_path):
    # its second convolution runs Winograd through the BLAS in Python: the C loop's sums agree
    # within rounding; the packed first convolution and the max pooling are exact arithmetic
    cc()
    from mgegraph.demo import cnn  # lazy: the demo's model, loaded for this test only

    model = cnn()
    model.eval()
    x = np.random.default_rng(5).standard_normal((5, 1, 8, 8), dtype=np.float32)
    predictor = mg.compile_module(model, [x])
    assert {"conv2d_f32", "pool2d_f32"} <= {i.kernel for i in predictor.plan.instructions}
    (got,) = exported_outputs(tmp_path, predictor.plan, {"input0": x})
    np.testing.assert_allclose(got, predictor(x), rtol=1e-5, atol=1e-5)


def test_max_pooling_is_bitwise_with_nans_and_padding(tmp_path):
    cc()
    g = mg.Graph()
    x = g.input("x", shape=(2, 3, 9, 7), dtype="float32")
    plan = mg.compile([F.max_pool2d(x, 3, stride=2, padding=1) * 1.0,
                       F.max_pool2d(x, 2)])
    feeds = {"x": np.random.default_rng(6).standard_normal((2, 3, 9, 7), dtype=np.float32)}
    feeds["x"][0, 1, 4, 4] = np.nan
    feeds["x"][1, 2, 0, :] = -0.0
    want, got = plan.run(feeds), exported_outputs(tmp_path, plan, feeds)
    for w, c in zip(want, got):
        assert np.array_equal(c.view(np.uint32), w.view(np.uint32))


@pytest.mark.parametrize("n", [10, 96])
def test_linear_with_its_epilogue_matches(tmp_path, n):
    cc()
    rng = np.random.default_rng(n)
    g = mg.Graph()
    x = g.input("x", shape=(40, 50), dtype="float32")
    w = g.input("w", shape=(n, 50), dtype="float32")
    b = g.param("b", rng.standard_normal(n, dtype=np.float32))
    plan = mg.compile([F.relu(F.linear(x, w, b))])
    assert [ins.kernel for ins in plan.instructions] == ["linear_f32"]
    feeds = {"x": rng.standard_normal((40, 50), dtype=np.float32),
             "w": rng.standard_normal((n, 50), dtype=np.float32)}
    (want,), (got,) = plan.run(feeds), exported_outputs(tmp_path, plan, feeds)
    if on_tiles(plan):
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_export_c_from_the_command_line_matches_the_runtime(tmp_path, capsys):
    cc()
    g = mg.Graph()
    x = g.input("x", shape=("batch", 7), dtype="float32")
    y = F.softmax(F.maximum(x * 2.0, x - 1.0), axis=-1)
    mg.save(mg.compile([y]), tmp_path / "m.mgm")
    out = tmp_path / "out"
    assert cli_main(["export-c", str(tmp_path / "m.mgm"), "-o", str(out), "--dim",
                     "batch=3"]) == 0
    assert "make -C" in capsys.readouterr().out
    make(out)
    feeds = {"x": np.random.default_rng(2).standard_normal((3, 7), dtype=np.float32)}
    feeds["x"][1, 2] = np.nan
    done, got = model_run(out, feeds, ["x"])
    assert done.returncode == 0, done.stderr
    (want,) = mg.runtime.load(tmp_path / "m.mgm").run(feeds)
    assert np.array_equal(got[0], want, equal_nan=True)


def test_a_symbolic_plan_needs_its_bindings():
    g = mg.Graph()
    x = g.input("x", shape=("batch", 4), dtype="float32")
    with pytest.raises(ExportError, match="batch.*bindings="):
        export_c(mg.compile([F.softmax(x)]), "/nonexistent/never-written")


def test_ops_the_c_runtime_lacks_are_named(tmp_path):
    g = mg.Graph()
    x = g.input("x", shape=(2, 3, 8, 8), dtype="float32")
    w = g.input("w", shape=(3,), dtype="float32")
    normed = apply("group_norm", (F.relu(x), w, w), groups=3)
    y = F.argmax(normed, axis=1)
    (dx,) = mg.grad(F.sum(normed * normed), [x])
    with pytest.raises(ExportError, match=r"group_norm_backward_f32 \(op group_norm_backward\); "
                                          r"reduce_f32 argmax and argmin .*\(op argmax\)"):
        export_c(mg.compile([y, dx]), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_state_update_persists_across_runs_as_in_python(tmp_path):
    # the model-file test's state update: assign copies into its param after every run, so the
    # weights the blob loaded change from run to run in the C runtime as in the plan
    cc()
    g = mg.Graph()
    w = g.param("w", np.arange(4, dtype=np.float32))
    g.assign(w, w + g.input("x", (4,)))
    plan = mg.compile([w * 2.0])
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory)
    x = np.array([0.5, -1.0, 3.0, 1e-3], np.float32)
    for _ in range(3):
        (want,) = plan.run({"x": x})
    done, (got,) = model_run(exported.directory, {"x": x}, ["x"], options=["--runs", "3"])
    assert done.returncode == 0, done.stderr
    assert got.tobytes() == want.tobytes() and want[1] == 2.0 * (1.0 - 2.0)


def test_a_wrong_input_file_is_refused_by_model_run(tmp_path):
    cc()
    plan = readme_mlp(batch=2)
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory)
    done, _ = model_run(exported.directory, {"x": np.zeros((2, 783), np.float32)}, ["x"])
    assert done.returncode == 1 and "input x wants" in done.stderr


def test_model_run_makes_its_output_folder(tmp_path):
    cc()
    exported = export_c(readme_mlp(batch=2), tmp_path / "out")
    make(exported.directory)
    x = np.ones((2, 784), np.float32)
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run([str(exported.directory / "model_run"),
                           str(exported.directory / "model.mgr"), str(tmp_path / "x.npy"),
                           "-o", str(tmp_path / "new")], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert np.load(tmp_path / "new" / "output0.npy").shape == (2, 10)


# -- the blob: what the C loader reads, and what it refuses --------------------------------
def test_the_blob_layout_is_the_c_runtimes():
    source = (CSRC / "mgr_runtime.c").read_text()
    defines = dict(re.findall(r"#define (MGR_\w+) (\S+)", source))
    assert defines["MGR_MAGIC"] == f'"{B.MAGIC.decode()}"'
    assert int(defines["MGR_VERSION"]) == B.VERSION
    for name in ("HEADER_FIELDS", "TENSOR_FIELDS", "INSTR_FIELDS", "NAME_BYTES", "ALIGN"):
        assert int(defines[f"MGR_{name}"]) == getattr(B, name), name
    header = (CSRC / "mgr_runtime.h").read_text()
    codes = dict(re.findall(r"MGR_(\w+) = (\d+)", header))
    for dtype, code in B.DTYPES.items():
        assert int(codes[dtype.name.upper().replace("BOOL", "BOOL")]) == code


def _header_field(blob: bytes, i: int) -> int:
    return struct.unpack_from("<q", blob, 8 * i)[0]


def _set(blob: bytes, at: int, value: int) -> bytes:
    out = bytearray(blob)
    struct.pack_into("<q", out, at, value)
    return bytes(out)


def _corruptions(blob: bytes) -> dict[str, tuple[bytes, str]]:
    """name -> (corrupt blob, what the error must say)."""
    tensors, instr = _header_field(blob, 7), _header_field(blob, 9)
    first_call = instr  # the GEMM: kernel, refs_at, n_refs, ints_at, n_ints, ...
    arena_tensor = next(t for t in range(_header_field(blob, 6))
                        if _header_field(blob[tensors + t * 128:], 0) == B.KIND_ARENA)
    ints_at = _header_field(blob, 13)
    return {
        "truncated": (blob[:len(blob) - 100], "truncated"),
        "short": (blob[:50], "shorter than its header"),
        "magic": (b"X" + blob[1:], "magic"),
        "arena offset": (_set(blob, tensors + arena_tensor * 128 + 16, 1 << 40),
                         "run past the arena"),
        "kernel index": (_set(blob, first_call, 7), "calls kernel 7 of 3"),
        "block size": (_set(blob, first_call + 32, 3), "matmul_packed_f32"),
        "gemm rows": (_set(blob, ints_at, 1 << 20), "reach past"),
        "section": (_set(blob, 8 * 8, 1 << 50), "run past"),
    }


def test_corrupt_blobs_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan = readme_mlp(batch=4)
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    assert_refused(exported.directory, _corruptions(blob), {"x": np.ones((4, 784), np.float32)},
                   ["x"])


def small_model():
    """Every kind of record and kernel in a few hundred bytes of arrays: fed and weight GEMM
    operands, a view, a broadcast fused loop with constants, softmax, a convolution, a max
    pooling, a depthwise convolution, an average and an adaptive pooling, a concatenation, a
    reversed slice and a mean."""
    g = mg.Graph()
    x = g.input("x", shape=(3, 5), dtype="float32")
    w = g.input("w", shape=(5, 6), dtype="float32")
    b = g.param("b", np.linspace(-1, 1, 6, dtype=np.float32))
    h = F.maximum(x @ w + b, 0.5 * b) - 1.0
    image = g.input("image", shape=(1, 2, 5, 5), dtype="float32")
    kernel = g.param("kernel", np.linspace(-1, 1, 3 * 2 * 3 * 3, dtype=np.float32)
                     .reshape(3, 2, 3, 3))
    pooled = F.max_pool2d(F.relu(F.conv2d(image, kernel, padding=1)), 2)
    depthwise = g.param("depthwise", np.linspace(-1, 1, 2 * 3 * 3, dtype=np.float32)
                        .reshape(2, 1, 3, 3))
    grouped = F.conv2d(image, depthwise, groups=2)
    averages = [F.avg_pool2d(grouped, 2, padding=1, mode="average"),
                F.adaptive_avg_pool2d(grouped, (2, 3))]
    moved = [F.concat([pooled, pooled], axis=1), x[::-1, 1:], F.mean(x, axis=0)]
    plan = mg.compile([F.softmax(F.matmul(h, w, transpose_b=True), axis=0), pooled, *averages,
                       *moved])
    assert {"conv2d_f32", "pool2d_f32", "matmul_f32", "concat_f32", "strided_f32",
            "reduce_f32"} <= {
        i.kernel for i in plan.instructions}
    return plan


def fuzz(tmp_path, seeds, count):
    fuzz_blob(export_c(small_model(), tmp_path / "out").directory, seeds, count)


def test_mutated_blobs_never_crash_the_loader(tmp_path):
    cc()
    fuzz(tmp_path, seeds=[1], count=400)  # 50,000 below: pytest -m slow


@pytest.mark.slow
def test_mutated_blobs_never_crash_the_loader_at_length(tmp_path, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("50,000 mutations under the sanitizers (90 s): pytest -m slow")
    cc()
    fuzz(tmp_path, seeds=range(12, 22), count=5000)


# -- aarch64: the same sources, cross-built, under qemu-user ---------------------------------
def test_the_export_builds_for_aarch64_and_agrees_with_x86(tmp_path):
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    cc()
    plan, feeds = tiles_mlp()
    native = exported_outputs(tmp_path / "x86", plan, feeds)
    exported = export_c(plan, tmp_path / "arm")
    make(exported.directory, compiler=cross, cflags="-O2 -static")
    done, arm = model_run(exported.directory, feeds, exported.input_names, runner=[qemu])
    assert done.returncode == 0, done.stderr
    # no vector path differs: the GEMM's fmaf, the loops and glibc's expf and log are the same
    # arithmetic on both, so the bits agree
    assert np.array_equal(arm[0].view(np.uint32), native[0].view(np.uint32))
