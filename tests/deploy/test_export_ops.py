"""The C runtime's kernels op by op against the Python executor: every elementwise op of the
table (fused and unfused, float32 and float64, on the values where implementations part ways),
the poolings, grouped and depthwise convolutions, and ResNet-18's plan."""
from __future__ import annotations

import itertools
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import ExportError, export_c
from mgegraph.deploy.sizes import main as sizes_main
from mgegraph.deploy.sizes import measure
from mgegraph.ops.fused import FUSABLE_OPS

from .cbuild import (
    SANITIZE,
    assert_refused,
    blob_calls,
    cc,
    fuzz_blob,
    make,
    model_run,
    patched,
    run_on_random_floats,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
import test_epilogue_model_file as epilogue_file  # noqa: E402  the model-file tests' models
import test_model_file as model_file  # noqa: E402
import test_pool_model_file as pool_file  # noqa: E402
import test_symbolic_model_file as symbolic_file  # noqa: E402
from models import mobilenet_v2, resnet18  # noqa: E402  the benchmarks' models

# unary ops' parameters and the float ops, as the Python executor's paths are checked
from test_elementwise_paths import (  # noqa: E402
    FLOAT_BINARY,
    FLOAT_UNARY,
    PARAMS,
    same_bits,
)


def special_values(dtype) -> np.ndarray:
    """Where exp clamps and flushes, tanh and erf change formula, the clamps bite; signed zeros,
    infinities, NaN, the smallest subnormal, the largest float; and a spread of ordinary ones."""
    info = np.finfo(dtype)
    values = [0.0, np.inf, np.nan, info.smallest_subnormal, info.tiny, info.max, 1.0,
              88.72283935546875, 89.0, -87.3, -104.0, 709.78, 710.0, -745.0,
              7.90531110763549805, 0.3, 0.0004, 0.5, 1.5, 2.5, 3.0, 6.0, 1e-30, 20.0]
    values += list(np.random.default_rng(0).uniform(-4, 4, 24))
    with np.errstate(over="ignore"):
        return np.array(values + [-v for v in values], dtype)


def node(g, name, inputs):
    (out,) = g.add_node(name, tuple(inputs), PARAMS.get(name, {})).outputs
    return out


def run_both(tmp_path, plan, feeds):
    """(the Python plan's outputs, the exported C runtime's)."""
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory)
    done, got = model_run(exported.directory, feeds, exported.input_names)
    assert done.returncode == 0, done.stderr
    with np.errstate(all="ignore"):
        return plan.run(feeds), got


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_unary_table_op_is_bitwise(tmp_path, dtype, fused):
    cc()
    x = special_values(dtype)
    g = mg.Graph()
    xv = g.input("x", x.shape, x.dtype)
    names = [n for n in FLOAT_UNARY if n in FUSABLE_OPS or not fused]
    # fused: the op and a negation reading it (exact) make a group; unfused: the op alone
    outs = [node(g, "neg", [node(g, n, [xv])]) if fused else node(g, n, [xv]) for n in names]
    plan = mg.compile(outs, optimize=["fuse"] if fused else 0)
    kernels = {i.kernel.split("_")[0] for i in plan.instructions}
    assert kernels == ({"fused"} if fused else {"unary"}), kernels
    want, got = run_both(tmp_path, plan, {"x": x})
    for name, w, c in zip(names, want, got):
        assert same_bits(c, w), name


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_binary_table_op_is_bitwise(tmp_path, dtype, fused):
    cc()
    v = special_values(dtype)[::3]
    x, y = (np.ascontiguousarray(a) for a in np.array(list(itertools.product(v, v)), dtype).T)
    g = mg.Graph()
    xv, yv = g.input("x", x.shape, x.dtype), g.input("y", y.shape, y.dtype)
    names = [n for n in FLOAT_BINARY if n in FUSABLE_OPS or not fused]
    outs = [node(g, "neg", [node(g, n, [xv, yv])]) if fused else node(g, n, [xv, yv])
            for n in names]
    plan = mg.compile(outs, optimize=["fuse"] if fused else 0)
    want, got = run_both(tmp_path, plan, {"x": x, "y": y})
    for name, w, c in zip(names, want, got):
        assert same_bits(c, w), name


def test_a_broadcast_add_unfused_is_bitwise(tmp_path):
    cc()
    rng = np.random.default_rng(1)
    g = mg.Graph()
    a, b = g.input("a", (2, 3, 4), "float32"), g.input("b", (3, 1), "float32")
    plan = mg.compile([a + b, a * b], optimize=0)
    feeds = {"a": rng.standard_normal((2, 3, 4), dtype=np.float32),
             "b": rng.standard_normal((3, 1), dtype=np.float32)}
    want, got = run_both(tmp_path, plan, feeds)
    for w, c in zip(want, got):
        assert same_bits(c, w)


@pytest.mark.parametrize("pool", [
    lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, mode="average"),
    lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, mode="average_count_exclude_padding"),
    lambda x: F.avg_pool2d(x, 2),
    lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
    lambda x: F.adaptive_max_pool2d(x, (4, 3)),
    lambda x: F.adaptive_avg_pool2d(x, 1),
], ids=["avg-include", "avg-exclude", "avg-2x2", "adaptive-avg", "adaptive-max", "global"])
def test_poolings_are_bitwise(tmp_path, pool):
    cc()
    g = mg.Graph()
    x = g.input("x", (2, 3, 9, 7), "float32")
    plan = mg.compile([pool(x)])
    assert {i.kernel for i in plan.instructions} == {"pool2d_f32"}
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 3, 9, 7), dtype=np.float32)}
    feeds["x"][0, 1, 4, 4] = np.nan
    (want,), (got,) = run_both(tmp_path, plan, feeds)
    assert same_bits(got, want)


@pytest.mark.parametrize("groups, cout", [(3, 6), (6, 6), (2, 4)],
                         ids=["grouped", "depthwise", "two-groups"])
def test_grouped_and_depthwise_convolutions_match(tmp_path, groups, cout):
    cc()
    rng = np.random.default_rng(groups)
    g = mg.Graph()
    x = g.input("x", (2, 6, 9, 8), "float32")
    w = g.param("w", rng.standard_normal((cout, 6 // groups, 3, 3), dtype=np.float32))
    b = g.param("b", rng.standard_normal(cout, dtype=np.float32))
    plan = mg.compile([F.relu(F.conv2d(x, w, b, stride=(1, 2), padding=1, groups=groups))])
    feeds = {"x": rng.standard_normal((2, 6, 9, 8), dtype=np.float32)}
    (want,), (got,) = run_both(tmp_path, plan, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [
    {}, {"stride": 2, "padding": 1}, {"stride": 2, "output_padding": 1, "groups": 2},
    {"dilation": 2, "padding": 2},
], ids=["plain", "strided", "grouped-output-padding", "dilated"])
def test_a_transposed_convolution_matches(tmp_path, options):
    # conv2d_backward_data_f32: the data gradient's gather loop, within float32 rounding of the
    # Python executor's GEMM and col2im
    cc()
    rng = np.random.default_rng(27)
    g = mg.Graph()
    x = g.input("x", (2, 4, 5, 6), "float32")
    w = g.param("w", rng.standard_normal((4, 3, 3, 3), dtype=np.float32))
    plan = mg.compile([F.conv_transpose2d(x, w, **options)])
    assert "conv2d_backward_data_f32" in {i.kernel for i in plan.instructions}
    (want,), (got,) = run_both(tmp_path, plan, {"x": rng.standard_normal((2, 4, 5, 6),
                                                                          dtype=np.float32)})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_corrupt_transposed_convolution_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    g = mg.Graph()
    x = g.input("x", (1, 4, 5, 5), "float32")
    w = g.param("w", np.linspace(-1, 1, 4 * 2 * 9, dtype=np.float32).reshape(4, 2, 3, 3))
    plan = mg.compile([F.conv_transpose2d(x, w, stride=2, padding=1, groups=2)])
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    at = dict(_calls(blob))["conv2d_backward_data_f32"]
    cin, h, groups, sh, packed = 1, 2, 15, 9, 22  # kernel_abi/conv.py's FIELDS
    cases = {
        "groups": (patched(blob, at + 8 * groups, 3), "groups must divide"),
        "channels": (patched(blob, at + 8 * cin, 8), "reaches past"),
        "height": (patched(blob, at + 8 * h, 1 << 40), "reach past"),
        "stride": (patched(blob, at + 8 * sh, 0), "must be positive"),
        "packed": (patched(blob, at + 8 * packed, 4), "no packed weights"),
    }
    feeds = {"x": np.ones((1, 4, 5, 5), np.float32)}
    got = assert_refused(exported.directory, cases, feeds, ["x"])
    np.testing.assert_allclose(got[0], plan.run(feeds)[0], rtol=1e-5, atol=1e-5)
    fuzz_blob(exported.directory, seeds=[4], count=500)


def test_a_convolution_whose_gemm_python_transposes_runs_the_same(tmp_path):
    # the block's `transposed` (im2col's GEMM giving y^T, a layout of the Python executor's with
    # MKL) changes nothing the C loops compute
    cc()
    g = mg.Graph()
    x = g.input("x", (1, 3, 6, 6), "float32")
    w = g.param("w", np.linspace(-1, 1, 5 * 3 * 9, dtype=np.float32).reshape(5, 3, 3, 3))
    plan = mg.compile([F.conv2d(x, w, padding=1)])
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory)
    feeds = {"x": np.random.default_rng(28).standard_normal((1, 3, 6, 6), dtype=np.float32)}
    _, (plain,) = model_run(exported.directory, feeds, ["x"])
    blob = (exported.directory / "model.mgr").read_bytes()
    at = dict(_calls(blob))["conv2d_f32"] + 8 * 21  # kernel_abi/conv.py's FIELDS: transposed
    (exported.directory / "model.mgr").write_bytes(patched(blob, at, 1))
    done, (flagged,) = model_run(exported.directory, feeds, ["x"])
    assert done.returncode == 0, done.stderr
    assert np.array_equal(flagged, plain)


@pytest.mark.parametrize("make_model, size", [(resnet18, 224), (mobilenet_v2, 96)],
                         ids=["resnet18-224", "mobilenet_v2-96"])
def test_a_whole_network_matches_the_python_plan(tmp_path, make_model, size):
    # float32 at batch 1; the Python plan's convolutions run Winograd, the BLAS and the
    # depthwise planes where the C loops sum in the tiles' order: float32 rounding apart
    cc()
    mg.nn.init.manual_seed(0)
    model = make_model().eval()
    x = np.random.default_rng(7).standard_normal((1, 3, size, size), dtype=np.float32)
    predictor = mg.compile_module(model, [x])
    (want,), (got,) = run_both(tmp_path, predictor.plan, {"input0": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# -- the new parameter blocks: refused when corrupt, never run ------------------------------
def _calls(blob: bytes):
    """(kernel name, offset of its first int in the blob) of every instruction."""
    return [(name, ints) for name, ints, _ in blob_calls(blob)]


def test_corrupt_pool_and_grouped_conv_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    g = mg.Graph()
    x = g.input("x", (1, 4, 6, 6), "float32")
    w = g.param("w", np.ones((4, 2, 3, 3), np.float32))
    y = F.conv2d(x, w, padding=1, groups=2)
    plan = mg.compile([F.avg_pool2d(y, 2, mode="average"), F.adaptive_avg_pool2d(y, (2, 3))])
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    calls = _calls(blob)
    pools = [at for name, at in calls if name == "pool2d_f32"]
    conv = next(at for name, at in calls if name == "conv2d_f32")
    mode, h, oh, sh = 0, 2, 4, 8  # kernel_abi/pool.py's FIELDS
    cin, groups, packed = 1, 15, 22  # kernel_abi/conv.py's FIELDS
    adaptive = next(at for at in pools if struct.unpack_from("<q", blob, at)[0] == 4)
    cases = {
        "pool mode": (patched(blob, pools[0] + 8 * mode, 5), "a mode past"),
        "pool stride": (patched(blob, pools[0] + 8 * sh, 0), "positive strides"),
        "adaptive size": (patched(blob, adaptive + 8 * oh, 7), "adaptive windows"),
        "adaptive huge": (patched(blob, adaptive + 8 * h, 1 << 61), "reaches past"),
        "groups": (patched(blob, conv + 8 * groups, 3), "groups must divide"),
        "no groups": (patched(blob, conv + 8 * groups, 0), "groups must divide"),
        "packed groups": (patched(blob, conv + 8 * packed, 8), "packed weights of one group"),
        "channels": (patched(blob, conv + 8 * cin, 8), "reaches past"),
    }
    feeds = {"x": np.ones((1, 4, 6, 6), np.float32)}
    got = assert_refused(exported.directory, cases, feeds, ["x"])
    for w, c in zip(plan.run(feeds), got):
        assert same_bits(c, w)


def test_the_size_report_builds_a_stripped_library_and_names_each_part(tmp_path, capsys):
    cc()
    g = mg.Graph()
    x = g.input("x", (1, 3, 12, 12), "float32")
    w = g.param("w", np.ones((8, 3, 3, 3), np.float32))
    fc = g.param("fc", np.ones((10, 8), np.float32))
    y = F.linear(F.flatten(F.adaptive_avg_pool2d(F.relu(F.conv2d(x, w)), 1), 1), fc)
    exported = export_c(mg.compile([y]), tmp_path / "out")
    sizes = measure(exported.directory, cflags="-Os")
    parts = dict(sizes.parts)
    assert {"mgr_runtime.c", "mgr_threads.c", "model_kernels.c", "kernels/conv2d_f32.c",
            "kernels/pool2d_f32.c", "kernels/linear_f32.c"} == parts.keys()
    assert all(size > 0 for size in parts.values())
    # the symbols' bytes are inside the library; the whole far under the 300 KB target
    assert sum(parts.values()) < sizes.library < 300_000
    assert sizes_main([str(exported.directory), "--cflags=-Os"]) == 0
    assert f"| the library, stripped | {sizes.library:,} |" in capsys.readouterr().out
    assert not (exported.directory / "libmgr_model.so").exists()  # built aside


@pytest.mark.parametrize("sanitizer", ["", "-O1 -g -fsanitize=thread"], ids=["O2", "tsan"])
def test_more_threads_give_the_same_bits(tmp_path, sanitizer):
    # the convolutions split their output planes among the threads, the GEMM its row tiles
    cc()
    rng = np.random.default_rng(8)
    g = mg.Graph()
    x, a = g.input("x", (2, 5, 9, 9), "float32"), g.input("a", (37, 70), "float32")
    w = g.param("w", rng.standard_normal((12, 5, 3, 3), dtype=np.float32))
    dw = g.param("dw", rng.standard_normal((12, 1, 3, 3), dtype=np.float32))
    fc = g.param("fc", rng.standard_normal((90, 70), dtype=np.float32))
    y = F.conv2d(F.relu(F.conv2d(x, w, padding=1)), dw, stride=2, groups=12)
    plan = mg.compile([y, F.linear(a, fc)])
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=sanitizer or "-O2")
    feeds = {"x": rng.standard_normal((2, 5, 9, 9), dtype=np.float32),
             "a": rng.standard_normal((37, 70), dtype=np.float32)}
    runs = {}
    for threads in (1, 3):
        done, runs[threads] = model_run(exported.directory, feeds, exported.input_names,
                                        options=["--threads", str(threads)])
        assert done.returncode == 0 and "Sanitizer" not in done.stderr, done.stderr
    for one, three in zip(runs[1], runs[3]):
        assert one.tobytes() == three.tobytes()


def test_slices_transposes_broadcasts_and_concatenations_are_bitwise(tmp_path):
    cc()
    rng = np.random.default_rng(9)
    g = mg.Graph()
    x, v = g.input("x", (4, 6, 5), "float32"), g.input("v", (4, 1, 5), "float32")
    outs = [x[1:3, ::2] * 2.0, x[::-1, 2:, ::-2] * 2.0, F.transpose(x, (2, 0, 1)) * 2.0,
            F.broadcast_to(v, (4, 3, 5)) * 2.0, F.concat([x, v, x[:, :2]], axis=1) * 2.0]
    plan = mg.compile(outs, optimize=0)
    assert {"strided_f32", "concat_f32"} <= {i.kernel for i in plan.instructions}
    feeds = {"x": rng.standard_normal((4, 6, 5), dtype=np.float32),
             "v": rng.standard_normal((4, 1, 5), dtype=np.float32)}
    want, got = run_both(tmp_path, plan, feeds)
    for w, c in zip(want, got):
        assert same_bits(c, w)


def test_corrupt_strided_and_concat_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    g = mg.Graph()
    x = g.input("x", (4, 6), "float32")
    plan = mg.compile([x[1:3, ::-2] * 2.0, F.concat([x, x], axis=0) * 2.0], optimize=0)
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    calls = dict(_calls(blob))
    strided, concat = calls["strided_f32"], calls["concat_f32"]
    ndim = struct.unpack_from("<q", blob, strided)[0]
    cases = {
        "strided ndim": (patched(blob, strided, 9), "ndim"),
        "strided offset": (patched(blob, strided + 8 * (1 + 2 * ndim), 23), "reaches past x"),
        "strided stride": (patched(blob, strided + 8 * (1 + ndim), 1 << 62), "reach"),
        "strided shape": (patched(blob, strided + 8, 1 << 40), "reaches past y"),
        "concat count": (patched(blob, concat, 3), "wants count inputs"),
        "concat rows": (patched(blob, concat + 16, 1 << 20), "reach past its bytes"),
        "concat outer": (patched(blob, concat + 8, 9), "reach past"),
    }
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(4, 6)}
    got = assert_refused(exported.directory, cases, feeds, ["x"])
    for w, c in zip(plan.run(feeds), got):
        assert same_bits(c, w)


@pytest.mark.parametrize("axis", [1, (0, 2), None], ids=["one", "two", "all"])
def test_reductions_match(tmp_path, axis):
    cc()
    g = mg.Graph()
    x = g.input("x", (3, 7, 5), "float32")
    outs = [F.sum(x, axis=axis), F.mean(x, axis=axis), F.var(x, axis=axis),
            F.max(x, axis=axis), F.min(x, axis=axis), F.prod(x * 0.5 + 1.0, axis=axis)]
    plan = mg.compile(outs)
    assert "reduce_f32" in {i.kernel for i in plan.instructions}
    feeds = {"x": np.random.default_rng(10).standard_normal((3, 7, 5), dtype=np.float32)}
    feeds["x"][1, 2, 3] = np.nan if axis == 1 else feeds["x"][1, 2, 3]
    want, got = run_both(tmp_path, plan, feeds)
    for k, (w, c) in enumerate(zip(want, got)):  # one source (reduce.h): the same bits
        assert c.view(np.uint32).tobytes() == w.view(np.uint32).tobytes(), k


def test_corrupt_reduce_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    g = mg.Graph()
    x = g.input("x", (3, 7, 5), "float32")
    plan = mg.compile([F.sum(x, axis=1)])
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    at = dict(_calls(blob))["reduce_f32"]
    kept = struct.unpack_from("<q", blob, at + 8)[0]  # op, kept_ndim, kept shape, strides, ndr
    cases = {
        "op": (patched(blob, at, 6), "runs sum"),
        "kept dims": (patched(blob, at + 8, 9), "kept dims"),
        "kept shape": (patched(blob, at + 16, 1 << 40), "reach past"),
        "kept stride": (patched(blob, at + 16 + 8 * kept, 1 << 30), "reach past x"),
        "reduced dims": (patched(blob, at + 16 + 16 * kept, 3), "reduced dims"),
        "reduced stride": (patched(blob, at + 32 + 16 * kept, -5), "negative"),
    }
    feeds = {"x": np.ones((3, 7, 5), np.float32)}
    (got,) = assert_refused(exported.directory, cases, feeds, ["x"])
    np.testing.assert_array_equal(got, np.full((3, 5), 7, np.float32))


def test_an_index_reduction_is_refused_by_name(tmp_path):
    g = mg.Graph()
    x = g.input("x", (3, 7), "float32")
    with pytest.raises(ExportError, match=r"reduce_f32 argmax and argmin .*\(op argmax\)"):
        export_c(mg.compile([F.argmax(x, axis=1)]), tmp_path / "out")


@pytest.mark.parametrize("make_plan", [
    model_file.mlp_plan, model_file.small_cnn_plan, epilogue_file.mobilenet_head,
    lambda: epilogue_file.mobilenet_head(False), symbolic_file.digits_plan,
    symbolic_file.mlp_plan,
], ids=["mlp", "cnn-batch-norm", "mobilenet-head", "mobilenet-head-unfused", "digits",
        "symbolic-mlp"])
def test_the_model_file_tests_float_models_match(tmp_path, make_plan):
    # the float32 models tests/io saves (its quantized ones: test_export_int8.py; its small
    # integers: test_export_small_ints.py; sorting: test_export_sorting.py; what the C runtime
    # still lacks: test_the_model_files_lacking_kernels_are_refused_by_name)
    cc()
    plan = make_plan()
    bindings = {name: 3 for name in getattr(plan, "names", ())} or None
    exported = export_c(plan, tmp_path / "out", bindings=bindings)
    feeds, got = run_on_random_floats(exported)
    for w, c in zip(exported.plan.run(feeds), got):
        np.testing.assert_allclose(c, w, rtol=1e-5, atol=1e-5)


def _gradients_plan(pool, x_shape=(2, 3, 9, 8)):
    g = mg.Graph()
    x = g.input("x", x_shape)
    y = pool(x)
    (dx,) = mg.grad(F.sum(y * y), [x])
    return mg.compile([y, dx])


@pytest.mark.parametrize("make_plan", [
    pool_file.pooling_plan, lambda: pool_file.pooling_plan(padding=1, ceil_mode=True),
    lambda: pool_file.pooling_plan(dilation=2),
    lambda: _gradients_plan(lambda x: F.avg_pool2d(x, 2) - F.max_pool2d(x, 2)),
    lambda: _gradients_plan(lambda x: F.adaptive_avg_pool2d(x, (3, 4))),
    lambda: _gradients_plan(lambda x: F.adaptive_max_pool2d(x, (4, 3))),
], ids=["overlapping", "padded-ceil", "dilated", "tiling", "adaptive-avg", "adaptive-max"])
def test_the_pooling_gradients_are_bitwise(tmp_path, make_plan):
    # the pooling model-file test's plan and its neighbours: overlapping windows add in
    # pool.pyx's order; tiling ones store (a -0.0 share stays -0.0); NaN and ties in the input
    cc()
    plan = make_plan()
    assert {"max_pool2d_backward_f32", "avg_pool2d_backward_f32"} & {
        i.kernel for i in plan.instructions}
    x = np.random.default_rng(25).standard_normal(plan.slots[plan.feeds["x"]].type.shape,
                                                  dtype=np.float32)
    x[0, 0, 1, :3] = 0.5  # ties
    x[1, 2, 4, 4] = np.nan
    x[0, 1, 0, 0] = -0.0
    want, got = run_both(tmp_path, plan, {"x": x})
    for w, c in zip(want, got):
        assert same_bits(c, w)


def test_corrupt_pooling_gradient_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan = pool_file.pooling_plan(padding=1)
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    calls = dict(_calls(blob))
    mode, planes, oh, sh = 0, 1, 4, 8  # kernel_abi/pool.py's FIELDS
    cases = {}
    for kernel in ("max_pool2d_backward_f32", "avg_pool2d_backward_f32"):
        at = calls[kernel]
        cases.update({
            f"{kernel} mode": (patched(blob, at + 8 * mode, 9), "a mode past"),
            f"{kernel} planes": (patched(blob, at + 8 * planes, 7), "reaches past"),
            f"{kernel} oh": (patched(blob, at + 8 * oh, 1 << 40), "reaches past"),
            f"{kernel} stride": (patched(blob, at + 8 * sh, 0), "positive strides"),
        })
    feeds = {"x": np.random.default_rng(26).standard_normal((2, 3, 9, 8), dtype=np.float32)}
    got = assert_refused(exported.directory, cases, feeds, ["x"])
    for w, c in zip(plan.run(feeds), got):
        assert same_bits(c, w)
    fuzz_blob(exported.directory, seeds=[3], count=500)
