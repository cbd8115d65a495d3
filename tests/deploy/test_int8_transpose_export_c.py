"""The C runtime's int8 transposed convolution and batched matmul (csrc/kernels/qconv_i8.c, on
the GEMM and qconv.h's col2im the Python kernels run) against the Python executor, bitwise: odd
geometries (strides 1-3, padding, output_padding, dilation, groups), int8 and uint8 inputs,
per-channel weights, int32 results, a shared or batched operand, 1 and 2 threads, on weights
packed per call and packed once (quantized_deconv2d_packed, the batched matmul on
quantized_conv2d_packed, quantized_pack_deconv_weight); and each new parameter block refused
when corrupt, under the sanitizers."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
from mgegraph.deploy import export_c
from mgegraph.ir.quant import QuantParams, per_tensor
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_batch_matmul, quantized_conv_transpose2d
from mgegraph.planner.passes.pipeline import LEVELS

from .cbuild import SANITIZE, assert_refused, blob_calls, cc, exported_run, make, patched

UNPACKED = [p for p in LEVELS[1] if p != "prepack"]  # the kernels that pack per call
PER_ROW = QuantParams((0.01, 0.012, 0.008, 0.015, 0.02), (0, 1, -1, 2, 0), 1)


def _ints(rng, shape, dtype):
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    return rng.integers(lo, hi, shape).astype(dtype)


def int8_transposed_plan(packed=False):
    """Three transposed convolutions and three batched matmuls of the shapes the kernels split
    differently; float32 in, every result out; their weights packed once where ``packed``
    (one transposed weight a param, packed by the plan's own instruction)."""
    rng = np.random.default_rng(38)  # the same weights and feeds, packed or not
    g = mg.Graph()
    x = g.input("x", (2, 6, 5, 4))
    xq = quantize(x, 0.05, 3, "uint8")
    xs = quantize(x, 0.04, -2, "int8")
    outs = [quantized_conv_transpose2d(
        xq, g.const(_ints(rng, (6, 4, 3, 3), "int8"), quant=per_tensor(0.01, 2)),
        g.const(rng.integers(-900, 900, 4).astype(np.int32)), stride=2, padding=1,
        output_padding=1, out_scale=0.3, out_zero_point=-4, relu=True)]
    outs.append(quantized_conv_transpose2d(
        xs, g.const(_ints(rng, (6, 2, 2, 3), "uint8"), quant=per_tensor(0.02, 131)), stride=(3, 2),
        padding=(0, 1), output_padding=(2, 0), dilation=(1, 2), groups=3, out_dtype="int32"))
    outs.append(quantized_conv_transpose2d(
        xs, (g.param("w", _ints(rng, (6, 5, 2, 2), "int8"), share=True, quant=PER_ROW) if packed
             else g.const(_ints(rng, (6, 5, 2, 2), "int8"), quant=PER_ROW)),
        stride=1, out_scale=0.2, out_dtype="uint8", out_zero_point=120))
    outs.append(quantized_conv_transpose2d(
        xs, g.const(_ints(rng, (6, 5, 2, 2), "int8"),
                    quant=QuantParams(tuple(rng.uniform(0.005, 0.02, 5)), (0, 1, -1, 2, 0), 1)),
        stride=1, out_scale=0.2, out_dtype="uint8", out_zero_point=120))
    b = quantize(x.reshape((2, 6, 20)), 0.05, 128, "uint8")
    outs.append(quantized_batch_matmul(
        g.const(_ints(rng, (2, 9, 6), "int8"), quant=per_tensor(0.01, 1)), b,
        g.const(rng.integers(-500, 500, 9).astype(np.int32)), out_scale=0.25, relu=True))
    outs.append(quantized_batch_matmul(
        g.const(_ints(rng, (1, 7, 6), "uint8"),
                quant=QuantParams(tuple(rng.uniform(0.005, 0.02, 7)), tuple(range(125, 132)), 1)),
        b, out_dtype="int32"))
    bs = quantize(x.reshape((2, 6, 20))[:1, :, :5], 0.05, 0, "int8")  # b shared, 5 columns
    outs.append(quantized_batch_matmul(
        g.const(_ints(rng, (2, 3, 6), "int8"), quant=per_tensor(0.02)), bs, out_scale=0.1,
        out_dtype="uint8", out_zero_point=100))
    plan = mg.compile([dequantize(o) if o.dtype != np.int32 else o for o in outs],
                      optimize=1 if packed else UNPACKED)
    return plan, {"x": rng.standard_normal((2, 6, 5, 4)).astype(np.float32)}


@pytest.mark.parametrize("threads, cflags", [(1, "-O2"), (2, "-O2"),
                                             (1, "-O2 -DQG_PORTABLE_ONLY")])
def test_the_transposed_and_batched_int8_kernels_are_bitwise_pythons(tmp_path, threads, cflags):
    # -DQG_PORTABLE_ONLY: the build a non-x86 machine makes (the portable tiles), on this one
    cc()
    plan, feeds = int8_transposed_plan()
    kernels = {ins.kernel for ins in plan.instructions}
    assert {"quantized_conv_transpose2d_u8", "quantized_conv_transpose2d_i8",
            "quantized_batch_matmul_u8", "quantized_batch_matmul_i8"} <= kernels
    got = exported_run(tmp_path, plan, feeds, threads=threads, cflags=cflags)
    for c, want in zip(got, plan.run(feeds), strict=True):
        assert c.dtype == want.dtype
        np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("threads, cflags", [(1, "-O2"), (2, "-O2"),
                                             (1, "-O2 -DQG_PORTABLE_ONLY")])
def test_the_packed_transposed_and_batched_kernels_are_bitwise_pythons(tmp_path, threads,
                                                                       cflags):
    cc()
    plan, feeds = int8_transposed_plan(packed=True)
    kernels = {ins.kernel for ins in plan.instructions}
    assert {"quantized_deconv2d_packed_u8", "quantized_deconv2d_packed_i8",
            "quantized_pack_deconv_weight_i8", "quantized_conv2d_packed_u8"} <= kernels
    assert not {"quantized_conv_transpose2d_i8", "quantized_conv_transpose2d_u8"} & kernels
    unpacked, _ = int8_transposed_plan()
    got = exported_run(tmp_path, plan, feeds, threads=threads, cflags=cflags)
    for c, want, per_call in zip(got, plan.run(feeds), unpacked.run(feeds), strict=True):
        assert c.dtype == want.dtype
        np.testing.assert_array_equal(c, want)
        np.testing.assert_array_equal(want, per_call)


def test_corrupt_packed_transposed_blocks_are_refused(tmp_path):
    cc()
    plan, feeds = int8_transposed_plan(packed=True)
    out = export_c(plan, tmp_path / "out")
    make(out.directory, cflags=SANITIZE)
    blob = (out.directory / "model.mgr").read_bytes()
    calls = blob_calls(blob)
    ct = next(i for k, i, _ in calls if k == "quantized_deconv2d_packed_u8")
    pk, pk_f = next((i, f) for k, i, f in calls if k == "quantized_pack_deconv_weight_i8")
    kernel_w, pad_w, channels, groups = 6, 12, 1, 15   # QCONV_FIELDS
    c_in, taps, zero = 0, 2, 4              # QPACKT_FIELDS
    cases = {
        # a 3x5 kernel padded by 2 across: the same output, 60 rows where the pack holds 36
        "packed kernel": (patched(patched(blob, ct + 8 * kernel_w, 5), ct + 8 * pad_w, 2),
                          "smaller than their layout"),
        "packed channels": (patched(blob, ct + 8 * channels, 12), "reaches past"),
        "packed groups": (patched(blob, ct + 8 * groups, 4), "groups do not divide"),
        "pack c_in": (patched(blob, pk + 8 * c_in, 600), "smaller than c_in"),
        "pack taps": (patched(blob, pk + 8 * taps, 0), "not positive"),
        "pack zero": (patched(blob, pk + 8 * zero, 256), "out of their range"),
        "pack zero point": (patched(blob, pk_f, 0.5, "<d"), "weight zero point"),
    }
    got = assert_refused(out.directory, cases, feeds, out.input_names)
    for c, w in zip(got, plan.run(feeds)):
        assert np.array_equal(c, w)


def test_corrupt_transposed_and_batched_blocks_are_refused(tmp_path):
    cc()
    plan, feeds = int8_transposed_plan()
    out = export_c(plan, tmp_path / "out")
    make(out.directory, cflags=SANITIZE)
    blob = (out.directory / "model.mgr").read_bytes()
    calls = blob_calls(blob)
    ct, ct_f = next((i, f) for k, i, f in calls if k == "quantized_conv_transpose2d_u8")
    bm, bm_f = next((i, f) for k, i, f in calls if k == "quantized_batch_matmul_i8")
    out_h, kernel_h, channels = 7, 5, 1  # kernel_abi/quantized.py's QCONV_FIELDS
    depth, a_batched, b_zero = 2, 4, 8   # and QBMM_FIELDS
    cases = {
        "transposed out_h": (patched(blob, ct + 8 * out_h, 99), "out_h and out_w"),
        "transposed kernel": (patched(blob, ct + 8 * kernel_h, 1 << 25), "past 2^24"),
        "transposed channels": (patched(blob, ct + 8 * channels, 12), "reaches past"),
        "transposed multiplier": (patched(blob, ct_f, float("nan"), "<d"), "multiplier"),
        "bmm depth": (patched(blob, bm + 8 * depth, 40000), "more products"),
        "bmm flag": (patched(blob, bm + 8 * a_batched, 2), "flag or code"),
        "bmm zero": (patched(blob, bm + 8 * b_zero, 300), "b's zero point"),
        "bmm a zero": (patched(blob, bm_f + 8 * 3, 0.5, "<d"), "zero point of a"),
    }
    got = assert_refused(out.directory, cases, feeds, out.input_names)
    for c, w in zip(got, plan.run(feeds)):
        assert np.array_equal(c, w)


def test_every_c_kernel_name_fits_the_blobs_name_field():
    # a longer name would shift every later section of the blob (blob.py pads, never cuts)
    from mgegraph.deploy.blob import NAME_BYTES
    from mgegraph.deploy.kernels import GENERATED, LIBRARY
    assert [k for k in (*LIBRARY, *GENERATED) if len(k.encode()) >= NAME_BYTES] == []
