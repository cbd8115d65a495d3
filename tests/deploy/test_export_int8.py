"""The C runtime's int8 kernels against the Python executor, bitwise (the integers are exact by
design): the int8 digits CNN and MLP as ``mg.quantization.quantize`` and the int8 benchmark make
them, every instruction-set variant (the widest and the portable build, 1 and 2 threads, aarch64
under qemu), the op-level kernels (quantize and dequantize per tensor and per channel, the
convolution on weights packed per call and once, grouped and depthwise, int8 and uint8, int32
results, the add, the poolings), and each new parameter block refused when corrupt."""
from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.quantization as Q
from mgegraph.deploy import export_c
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.ops.fake_quant import fake_quant
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_add, quantized_conv2d, quantized_linear

from .cbuild import (
    SANITIZE,
    assert_refused,
    blob_calls,
    cc,
    fuzz_blob,
    make,
    model_run,
    patched,
)

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS.parent / "benchmarks"))
sys.path[:0] = [str(TESTS / "io"), str(TESTS)]
import test_fake_quant_model_file as fake_quant_file  # noqa: E402  the model-file tests' models
import test_quantized_model_file as quantized_file  # noqa: E402
import test_quantized_pack_model_file as packed_file  # noqa: E402
from qat_digits import DigitsCNN  # noqa: E402  the digits CNN with its stubs


def int8_digits(batch=6, qconfig=Q.calibration_qconfig, seed=21):
    """The digits CNN through quantize_qat (calibrated on random images) and quantize: int8
    convolutions and linear layer on packed weights, int8 max pooling, (de)quantize."""
    mg.random.seed(0)
    net = DigitsCNN().eval()
    x = np.random.default_rng(seed).standard_normal((batch, 1, 8, 8), dtype=np.float32)
    Q.quantize_qat(net, qconfig=qconfig)
    Q.enable_observer(net)
    net(mg.tensor(x))
    Q.quantize(net)
    plan = mg.compile_module(net, (x,)).plan
    return plan, {name: x for name in plan.feeds}


def int8_mlp(batch=5, sizes=(784, 96, 64, 10)):
    """benchmarks/int8_workloads.py's MLP, smaller: int8 input, per-channel int8 weights, uint8
    ReLU outputs, int32 logits dequantized; linear layers on weights packed once."""
    rng = np.random.default_rng(22)
    g = mg.Graph()
    x = g.input("x", (batch, sizes[0]), "float32")
    h = quantize(x, 0.03, 0, "int8")
    for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        w_scales = rng.uniform(0.002, 0.004, n_out)
        w = g.param(f"w{k}", rng.integers(-127, 128, (n_out, n_in)).astype(np.int8),
                    quant=per_channel(w_scales, None, 0))
        b = g.param(f"b{k}", rng.integers(-2000, 2000, n_out).astype(np.int32))
        if k == len(sizes) - 2:
            h = dequantize(quantized_linear(h, w, b, out_dtype="int32"))
        else:
            h = quantized_linear(h, w, b, out_dtype="uint8", out_scale=0.05, relu=True)
    feeds = {"x": rng.standard_normal((batch, sizes[0]), dtype=np.float32)}
    return mg.compile([h]), feeds


def int8_ops(optimize=None):
    """Every int8 kernel of the C runtime at once: per-channel quantize, convolutions of uint8 and
    int8 inputs (grouped, depthwise with a weight zero point, an int32 result), the add with a
    broadcast, the poolings, the linear layer, dequantize of each storage type."""
    rng = np.random.default_rng(23)
    g = mg.Graph()
    x = g.input("x", (2, 4, 7, 6), "float32")
    d = g.input("d", (9,), "float64")
    xq = quantize(x, 0.03, 120, "uint8")
    w = g.param("w", rng.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8),
                quant=per_channel(rng.uniform(0.005, 0.02, 8), None, 0))
    bias = g.param("b", rng.integers(-900, 900, 8).astype(np.int32))
    y = quantized_conv2d(xq, w, bias, padding=1, out_scale=0.1, out_zero_point=-3,
                         out_dtype="int8", relu=True)
    dw = g.param("dw", rng.integers(0, 256, (8, 1, 3, 3)).astype(np.uint8),
                 quant=per_tensor(0.01, 130))
    y2 = quantized_conv2d(y, dw, None, stride=2, padding=1, groups=8, out_scale=0.08,
                          out_zero_point=5, out_dtype="int8")
    gw = g.param("gw", rng.integers(-128, 128, (6, 4, 2, 2)).astype(np.int8),
                 quant=per_tensor(0.02, 3))
    y3 = quantized_conv2d(y2, gw, None, groups=2, dilation=1, out_dtype="int32")
    z = quantized_add(y, quantized_conv2d(y, dw, None, padding=1, groups=8, out_scale=0.05),
                      out_scale=0.2, out_zero_point=7, out_dtype="uint8")
    half = quantize(F.sum(x, axis=1, keepdims=True), 0.3, -2, "int8")
    broadcast = quantized_add(y, half, out_scale=0.15, out_dtype="int8")
    fc = g.param("fc", rng.integers(-128, 128, (5, 8 * 3 * 3)).astype(np.int8),
                 quant=per_channel(rng.uniform(0.01, 0.02, 5), None, 0))
    pooled = F.max_pool2d(y, 2, 2)
    logits = quantized_linear(pooled.reshape(2, 8 * 3 * 3), fc, None, out_dtype="int32")
    per_ch = quantize(x, np.linspace(0.02, 0.05, 4), np.arange(4) * 20, "uint8", axis=1)
    outs = [dequantize(y3), dequantize(z), dequantize(quantized_add(z, y, out_scale=0.3)),
            dequantize(broadcast), dequantize(logits),
            F.avg_pool2d(z, 3, 2, padding=1), F.avg_pool2d(y, 2, 2, padding=1, mode="average"),
            F.adaptive_avg_pool2d(z, (3, 2)), F.adaptive_max_pool2d(y, (2, 4)),
            dequantize(per_ch), quantize(d, 0.5, 0, "int32"),
            dequantize(quantize(d, 0.25, 3, "int8"), "float64"), fake_quant(x, 0.125, 3.0, -8, 7)]
    options = {} if optimize is None else {"optimize": optimize}
    feeds = {"x": rng.standard_normal((2, 4, 7, 6), dtype=np.float32) * 2,
             "d": np.array([0.25, 0.75, -0.75, 1.25, -1e12, 1e12, 3.5, -2.5, 0.0])}
    return mg.compile(outs, **options), feeds


def exported(tmp_path, plan, cflags="-O2", compiler=None):
    out = export_c(plan, tmp_path / "out")
    make(out.directory, compiler=compiler, cflags=cflags)
    return out


def assert_bitwise(out, plan, feeds, **options):
    done, got = model_run(out.directory, feeds, out.input_names, **options)
    assert done.returncode == 0, done.stderr
    want = plan.run(feeds)
    assert len(got) == len(want)
    for k, (c, w) in enumerate(zip(got, want)):
        assert c.dtype == w.dtype and c.shape == w.shape, k
        assert np.array_equal(c.view(np.uint8), np.ascontiguousarray(w).view(np.uint8)), k


MODELS = {"digits": int8_digits, "mlp": int8_mlp, "ops": int8_ops,
          "ops-unpacked": lambda: int8_ops(optimize=0)}


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("model", MODELS)
def test_int8_plans_are_bitwise_the_python_executors(tmp_path, model, threads):
    cc()
    plan, feeds = MODELS[model]()
    kernels = {i.kernel for i in plan.instructions}
    assert any(k.startswith("quantized_conv2d") for k in kernels), kernels
    assert_bitwise(exported(tmp_path, plan), plan, feeds, options=("--threads", threads))


def test_the_int8_ops_cover_every_int8_kernel():
    packed = {i.kernel for i in int8_ops()[0].instructions}
    plain = {i.kernel for i in int8_ops(optimize=0)[0].instructions}
    assert {"quantize_f32", "quantize_f64", "dequantize_i8", "dequantize_u8", "dequantize_i32",
            "pool2d_i8", "pool2d_u8", "quantized_add_i8", "quantized_add_u8",
            "quantized_conv2d_i8", "quantized_conv2d_u8", "fake_quant_f32"} <= plain, plain
    assert {"quantized_conv2d_packed_u8", "quantized_conv2d_packed_i8",
            "quantized_pack_weight_i8"} <= packed, packed


@pytest.mark.parametrize("model", ["digits", "ops", "ops-unpacked"])
def test_the_portable_tiles_give_the_same_integers(tmp_path, model):
    # the build a non-x86 machine makes (qgemm.h's QG_PORTABLE_ONLY), on this machine
    cc()
    plan, feeds = MODELS[model]()
    assert_bitwise(exported(tmp_path, plan, cflags="-O2 -DQG_PORTABLE_ONLY"), plan, feeds)


@pytest.mark.parametrize("model", ["digits", "ops-unpacked"])
def test_int8_plans_build_for_aarch64_and_agree(tmp_path, model):
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    plan, feeds = MODELS[model]()
    out = exported(tmp_path, plan, compiler=cross, cflags="-O2 -static")
    assert_bitwise(out, plan, feeds, runner=[qemu])


def test_a_nan_has_no_integer_in_the_c_runtime_either(tmp_path):
    cc()
    g = mg.Graph()
    x = g.input("x", (4,), "float32")
    plan = mg.compile([quantize(x, 0.1, 0, "int8")])
    out = exported(tmp_path, plan)
    done, _ = model_run(out.directory, {"x": np.array([1, np.nan, 2, 3], np.float32)}, ["x"])
    assert done.returncode == 1 and "failed with status 5" in done.stderr, done.stderr


def _feeds(plan, rng) -> dict:
    feeds = {}
    for name, slot in plan.feeds.items():
        t = plan.slots[slot].type
        if np.issubdtype(t.dtype, np.integer):
            info = np.iinfo(t.dtype)
            feeds[name] = rng.integers(info.min, info.max, t.shape, endpoint=True).astype(t.dtype)
        else:
            feeds[name] = (rng.standard_normal(t.shape) * 3).astype(t.dtype)
    return feeds


@pytest.mark.parametrize("make_plan", [
    lambda tmp: quantized_file._plan(), lambda tmp: packed_file._plan()[0],
    lambda tmp: fake_quant_file._saved(tmp, False)[0],
    lambda tmp: fake_quant_file._saved(tmp, True)[0],
], ids=["quantized", "packed-weights", "fake-quant", "fake-quant-tqt"])
def test_the_model_file_tests_quantized_models_are_bitwise(tmp_path, make_plan):
    # the quantized plans tests/io saves (its int8 compute ops: int8_ops covers them); the
    # quantized model's fused group loads, quantizes and stores integers in its generated loop
    cc()
    plan = make_plan(tmp_path)
    assert_bitwise(exported(tmp_path, plan), plan, _feeds(plan, np.random.default_rng(24)))


# -- the new parameter blocks: refused when corrupt, never run -------------------------------
def _first(calls, name):
    return next((ints, floats) for kernel, ints, floats in calls if kernel == name)


def test_corrupt_int8_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan, feeds = int8_ops()
    out = exported(tmp_path, plan, cflags=SANITIZE)
    blob = (out.directory / "model.mgr").read_bytes()
    calls = blob_calls(blob)
    quant, quant_f = _first(calls, "quantize_f32")
    deq, _ = _first(calls, "dequantize_i8")
    conv, conv_f = _first(calls, "quantized_conv2d_packed_u8")
    pack, pack_f = _first(calls, "quantized_pack_weight_i8")
    add, add_f = _first(calls, "quantized_add_u8")
    pool, pool_f = _first(calls, "pool2d_u8")
    fq, _ = _first(calls, "fake_quant_f32")
    # the fields of kernel_abi/quantize.py, quantized.py, quantized_pack.py and pool.py
    channels, code = 1, 3
    height, out_h, groups, out_code, x_zero, low = 2, 7, 15, 17, 18, 20
    k, x_zero_shifted = 1, 3
    ndim, a_zero = 7, 0
    a_stride = add + 8 * (8 + struct.unpack_from("<q", blob, add + 8 * ndim)[0])
    cases = {
        "quantize code": (patched(blob, quant + 8 * code, 7), "storage code"),
        "quantize channels": (patched(blob, quant + 8 * channels, 3), "per channel"),
        "quantize scale": (patched(blob, quant_f, float("nan"), "<d"), "a scale"),
        "quantize zero": (patched(blob, quant_f + 8, 0.5, "<d"), "a zero point"),
        "dequantize float code": (patched(blob, deq + 8 * code, 2), "float code"),
        "conv height": (patched(blob, conv + 8 * height, 1 << 40), "past 2^24"),
        "conv out_h": (patched(blob, conv + 8 * out_h, 5), "out_h and out_w"),
        "conv groups": (patched(blob, conv + 8 * groups, 3), "groups do not divide"),
        "conv out code": (patched(blob, conv + 8 * out_code, 2), "dtype its name"),
        "conv x zero": (patched(blob, conv + 8 * x_zero, 256), "x's zero point"),
        "conv range": (patched(blob, conv + 8 * low, -129), "output's zero point or range"),
        "conv multiplier": (patched(blob, conv_f, float("inf"), "<d"), "multiplier"),
        "pack k": (patched(blob, pack + 8 * k, 1 << 20), "out of their range"),
        "pack zero shift": (patched(blob, pack + 8 * x_zero_shifted, -1), "out of their range"),
        "pack weight zero": (patched(blob, pack_f, 300.0, "<d"), "weight zero point"),
        "add dims": (patched(blob, add + 8 * ndim, 9), "1 to 8 dims"),
        "add zero": (patched(blob, add + 8 * a_zero, 1000), "zero point"),
        "add stride": (patched(blob, a_stride, 1 << 30), "strides reach past"),
        "pool zero": (patched(blob, pool_f, 0.5, "<d"), "zero point"),
        "pool huge": (patched(blob, pool + 8 * 2, 1 << 61), "reaches past"),
        "fake_quant range": (patched(blob, fq + 8 * 3, 100), "not an integer range"),
        "fake_quant channels": (patched(blob, fq + 8 * 1, 5), "per channel"),
    }
    got = assert_refused(out.directory, cases, feeds, out.input_names)
    for c, w in zip(got, plan.run(feeds)):
        assert np.array_equal(c, w)


def test_mutated_int8_blobs_never_crash_the_loader(tmp_path):
    cc()
    # 20,000 below (pytest -m slow)
    fuzz_blob(export_c(int8_ops()[0], tmp_path / "out").directory, seeds=[2], count=400)


@pytest.mark.slow
def test_mutated_int8_blobs_never_crash_the_loader_at_length(tmp_path, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("20,000 mutations under the sanitizers: pytest -m slow")
    cc()
    out = export_c(int8_ops(optimize=0)[0], tmp_path / "out").directory
    fuzz_blob(out, seeds=range(30, 34), count=5000)
