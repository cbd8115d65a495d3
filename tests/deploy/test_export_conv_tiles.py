"""conv2d_f32 in the C runtime on the package's gather tiles (csrc/kernels/conv_gather_c.h) and
by Winograd (conv_wino_c.h): bitwise the Python executor where it runs the same tiles (packed
weights, the gather path), within float32 rounding where it runs Winograd or the BLAS; on 1 and
2 threads, with odd sizes, strides, padding, dilation and groups; the loop it keeps for what the
tiles do not run. And a single row's GEMM on gemv_row.h's loops, bitwise."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import export_c

from .cbuild import SANITIZE, cc, fuzz_blob, make, model_run, sanitizer_env


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def run_c(tmp_path, plan, feeds, threads=1, cflags="-O2", env=None, runner=(), compiler=None):
    exported = export_c(plan, tmp_path)
    make(exported.directory, compiler=compiler, cflags=cflags)
    done, outputs = model_run(exported.directory, feeds, exported.input_names, runner=runner,
                              env=env, options=["--threads", str(threads)])
    assert done.returncode == 0, done.stderr
    return outputs


def conv_plan(x_shape, w_shape, weights_fed, rng, bias=True, **attrs):
    """A conv2d (+ bias, relu) plan; the weights a param (the prepack pass may pack them) or an
    input (no pass packs them: the plan's own way runs)."""
    g = mg.Graph()
    x = g.input("x", shape=x_shape, dtype="float32")
    w_value = rng.standard_normal(w_shape, dtype=np.float32) * 0.3
    w = g.input("w", shape=w_shape, dtype="float32") if weights_fed else g.param("w", w_value)
    b = g.param("b", rng.standard_normal(w_shape[0], dtype=np.float32)) if bias else None
    y = F.relu(F.conv2d(x, w, b, **attrs))
    feeds = {"x": rng.standard_normal(x_shape, dtype=np.float32)}
    if weights_fed:
        feeds["w"] = w_value
    return mg.compile([y]), feeds


def paths(plan):
    return [ins.choice.path if ins.choice else ins.op for ins in plan.instructions
            if ins.kernel == "conv2d_f32"]


# packed weights (the prepack pass: strided convolutions of 32+ channels on every x86 CPU):
# the Python executor runs the gather tiles, and the C runtime the same tiles
PACKED = {
    "stem 7x7/2": ((2, 3, 23, 21), (64, 3, 7, 7), dict(stride=2, padding=3)),
    "3x3/2 odd": ((3, 24, 13, 11), (40, 24, 3, 3), dict(stride=2, padding=1)),
    "3x3/2 unpadded": ((1, 32, 9, 9), (48, 32, 3, 3), dict(stride=2)),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(PACKED))
def test_packed_convolutions_are_bitwise_the_python_executors(tmp_path, case, threads):
    cc()
    x_shape, w_shape, attrs = PACKED[case]
    plan, feeds = conv_plan(x_shape, w_shape, False, np.random.default_rng(1), **attrs)
    if not any(p.startswith("gather packed") for p in paths(plan)):
        pytest.skip(f"the rules chose {paths(plan)} here, not the packed tiles")
    (want,), (got,) = plan.run(feeds), run_c(tmp_path, plan, feeds, threads)
    assert np.array_equal(_bits(got), _bits(want))


# weights fed as an input at stride 2 on few channels: the Python executor's gather path, on
# weights it packs per call as the C runtime does: the same tiles, the same bits
GATHER = {
    "3x3/2": ((2, 3, 17, 15), (16, 3, 3, 3), dict(stride=2, padding=1)),
    "5x5/2 dilated": ((1, 4, 19, 20), (24, 4, 5, 5), dict(stride=2, padding=3, dilation=2)),
    "3x3/(2,1) no bias": ((2, 5, 11, 9), (8, 5, 3, 3), dict(stride=(2, 1), padding=(0, 2))),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(GATHER))
def test_the_gather_path_is_bitwise_the_python_executors(tmp_path, case, threads):
    cc()
    x_shape, w_shape, attrs = GATHER[case]
    plan, feeds = conv_plan(x_shape, w_shape, True, np.random.default_rng(2),
                            bias="no bias" not in case, **attrs)
    if paths(plan) != [p for p in paths(plan) if p.startswith("gather")] or not paths(plan):
        pytest.skip(f"the rules chose {paths(plan)} here, not the gather tiles")
    (want,), (got,) = plan.run(feeds), run_c(tmp_path, plan, feeds, threads)
    assert np.array_equal(_bits(got), _bits(want))


def reference(x, w, b, stride, padding, dilation, groups):
    """conv2d + bias + relu in float64 with NumPy."""
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, cout, oh, ow))
    og = cout // groups
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            patch = xp[:, :, rows, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for g in range(groups):
                y[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og, :, i, j])
    return np.maximum(y + b.reshape(1, -1, 1, 1), 0)


# the other ways of the Python plan (Winograd, im2col and batched GEMMs through the BLAS, the
# depthwise planes, the pointwise tiles): the C runtime's tiles (or its loop, for depthwise)
# agree within float32 rounding, and with NumPy's float64
ROUNDED = {
    "winograd 3x3": ((2, 32, 10, 9), (32, 32, 3, 3), dict(padding=1), 1),
    "1x1/2 skip": ((2, 64, 9, 9), (128, 64, 1, 1), dict(stride=2), 1),
    "1x1 pointwise": ((1, 16, 7, 6), (24, 16, 1, 1), {}, 1),
    "grouped 3x3": ((2, 32, 9, 8), (32, 8, 3, 3), dict(padding=1, dilation=(1, 2)), 4),
    "depthwise 3x3/2": ((2, 12, 9, 10), (12, 1, 3, 3), dict(stride=2, padding=1), 12),
    "9x9 (81 taps)": ((1, 3, 12, 12), (8, 3, 9, 9), dict(padding=4), 1),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(ROUNDED))
def test_other_ways_agree_within_float_rounding(tmp_path, case, threads):
    cc()
    x_shape, w_shape, attrs, groups = ROUNDED[case]
    rng = np.random.default_rng(3)
    g = mg.Graph()
    x = g.input("x", shape=x_shape, dtype="float32")
    w = rng.standard_normal(w_shape, dtype=np.float32) * 0.3
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    y = F.relu(F.conv2d(x, g.param("w", w), g.param("b", b), groups=groups, **attrs))
    plan = mg.compile([y])
    feeds = {"x": rng.standard_normal(x_shape, dtype=np.float32)}
    (want,), (got,) = plan.run(feeds), run_c(tmp_path, plan, feeds, threads)
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    full = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1))
    full.update({k: (v, v) if isinstance(v, int) else v for k, v in attrs.items()})
    exact = reference(feeds["x"], w, b, groups=groups, **full)
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-5 * scale)


def test_a_resnet_block_agrees_and_gives_the_same_bits_on_any_thread_count(tmp_path):
    # the stem packed, Winograd, a 1x1/2 skip: the mix ResNet-18's layers take
    cc()
    rng = np.random.default_rng(4)
    g = mg.Graph()
    x = g.input("x", shape=(2, 3, 32, 32), dtype="float32")

    def conv(h, cout, k, stride, name):
        w = rng.standard_normal((cout, h.shape[1], k, k), dtype=np.float32) * (2 / k / k /
                                                                              h.shape[1]) ** 0.5
        return F.conv2d(h, g.param(name, w), stride=stride, padding=k // 2)

    h = F.relu(conv(x, 64, 7, 2, "stem"))
    y = F.relu(conv(F.relu(conv(h, 64, 3, 1, "a")), 64, 3, 1, "b") + h)
    y = F.relu(conv(y, 128, 3, 2, "c") + conv(y, 128, 1, 2, "skip"))
    plan = mg.compile([y])
    feeds = {"x": rng.standard_normal((2, 3, 32, 32), dtype=np.float32)}
    (want,) = plan.run(feeds)
    one = run_c(tmp_path / "t1", plan, feeds, threads=1)[0]
    two = run_c(tmp_path / "t2", plan, feeds, threads=2)[0]
    three = run_c(tmp_path / "t3", plan, feeds, threads=3)[0]
    assert np.array_equal(_bits(one), _bits(two)) and np.array_equal(_bits(one), _bits(three))
    np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("case", ["3x3/2 odd", "winograd 3x3 odd"])
def test_the_tiles_run_clean_under_the_sanitizers(tmp_path, case):
    # padded copies, per-call packing, tiles past the last cell, slots per part, Winograd's
    # blocks and the GEMM tile's reads past V: no access out of bounds on odd sizes, on 1 and 2
    # threads
    cc()
    x_shape, w_shape, attrs = PACKED["3x3/2 odd"] if case == "3x3/2 odd" else \
        ((3, 32, 9, 7), (24, 32, 3, 3), dict(padding=1))
    plan, feeds = conv_plan(x_shape, w_shape, case == "3x3/2 odd", np.random.default_rng(5),
                            **attrs)
    if case.startswith("winograd") and paths(plan) != ["winograd, 1 thread"]:
        pytest.skip(f"the rules chose {paths(plan)} here, not Winograd")
    (want,) = plan.run(feeds)
    for threads in (1, 2):
        (got,) = run_c(tmp_path / str(threads), plan, feeds, threads,
                       cflags=SANITIZE, env=sanitizer_env())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_mutated_blobs_of_tiled_convolutions_never_crash(tmp_path):
    # the tiles trust the geometry the loader checked, and check the rest themselves (every
    # window inside the padded planes, sizes without overflow): mutated blocks of a packed, a
    # padded gather and a Winograd convolution run under the sanitizers, or are refused
    cc()
    rng = np.random.default_rng(8)
    g = mg.Graph()
    x = g.input("x", shape=(1, 32, 5, 5), dtype="float32")
    packed = F.conv2d(x, g.param("wp", rng.standard_normal((32, 32, 3, 3), dtype=np.float32)),
                      stride=2, padding=1)
    wino = F.conv2d(x, g.param("ww", rng.standard_normal((32, 32, 3, 3), dtype=np.float32)),
                    padding=1)
    gather = F.conv2d(x[:, :3], g.input("w", shape=(8, 3, 3, 3), dtype="float32"), stride=2,
                      padding=2, dilation=2)
    plan = mg.compile([packed, wino, gather])
    exported = export_c(plan, tmp_path / "out")
    fuzz_blob(exported.directory, seeds=[3], count=600)


def test_the_packed_convolution_builds_for_aarch64_and_agrees_with_x86(tmp_path):
    # aarch64's baseline tile has the FMA (the file is contracted), so its bits are the x86 FMA
    # tiles' (AVX2 or AVX-512): the portable tile checked against the vector ones
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    cc()
    x_shape, w_shape, attrs = PACKED["stem 7x7/2"]
    plan, feeds = conv_plan(x_shape, w_shape, False, np.random.default_rng(6), **attrs)
    native = run_c(tmp_path / "x86", plan, feeds, threads=2)[0]
    arm = run_c(tmp_path / "arm", plan, feeds, threads=2, compiler=cross,
                cflags="-O2 -static", runner=[qemu])[0]
    assert np.array_equal(_bits(arm), _bits(native))


# -- a single row: gemv_row.h's loops, as the Python executor runs a float32 row -------------
@pytest.mark.parametrize("threads", [1, 2])
def test_a_single_row_is_bitwise_the_python_executors_gemv(tmp_path, threads):
    # B stored (k, n) (x @ w: the rows form) and (n, k) (transpose_b: the dots form); more
    # columns than one thread's block, an odd k, a last layer of ten columns
    cc()
    rng = np.random.default_rng(7)
    g = mg.Graph()
    x = g.input("x", shape=(1, 781), dtype="float32")
    w1 = g.param("w1", rng.standard_normal((781, 600), dtype=np.float32) * 0.05)
    w2 = g.param("w2", rng.standard_normal((10, 600), dtype=np.float32) * 0.05)
    h = F.relu(x @ w1 + g.param("b1", rng.standard_normal(600, dtype=np.float32)))
    plan = mg.compile([F.matmul(h, w2, transpose_b=True)])
    feeds = {"x": rng.standard_normal((1, 781), dtype=np.float32)}
    (want,), (got,) = plan.run(feeds), run_c(tmp_path, plan, feeds, threads)
    assert np.array_equal(_bits(got), _bits(want))


def _on_baseline_tiles(plan):
    """The plan with its convolutions' isa field 0: the baseline tiles (a multiply and an add on
    x86-64), in the Python executor and the C runtime alike."""
    from mgegraph.kernel_abi.conv import FIELDS  # lazy: the block's layout, for this test

    def baseline(ins):
        if ins.kernel != "conv2d_f32":
            return ins
        ints = list(ins.ints)
        ints[FIELDS.index("isa")] = 0
        return dataclasses.replace(ins, ints=tuple(ints))
    return dataclasses.replace(plan, instructions=tuple(map(baseline, plan.instructions)))


@pytest.mark.parametrize("threads", [1, 2])
def test_the_baseline_tiles_are_bitwise_the_python_executors(tmp_path, threads):
    # the portable tile (4 x 8, SSE on x86-64) in both executors: the gather path on weights
    # packed per call, padded and strided, bitwise
    cc()
    x_shape, w_shape, attrs = GATHER["5x5/2 dilated"]
    plan, feeds = conv_plan(x_shape, w_shape, True, np.random.default_rng(9), **attrs)
    if not paths(plan) or not all(p.startswith("gather") for p in paths(plan)):
        pytest.skip(f"the rules chose {paths(plan)} here, not the gather tiles")
    plan = _on_baseline_tiles(plan)
    (want,), (got,) = plan.run(feeds), run_c(tmp_path, plan, feeds, threads)
    assert np.array_equal(_bits(got), _bits(want))
