"""The float32 bilinear path of the resize kernel (_kernels/resize_bilinear.h): both orders
(columns first when upsampling rows, rows first when downsampling them), the vector bodies and
their tails on odd widths, the streamed stores of large outputs, both align_corners modes, against
PyTorch's float32 F.interpolate and the kernel's float64 sums, at one and two threads (the same
bits), and what the general path still takes (3-D, float64)."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.kernel_abi import resize as abi

RNG = np.random.default_rng(11)
# (input shape, output size): rows up and columns up, rows down and columns up, both down,
# widths that leave a tail after 8 and 16 lanes, one output row, a 1-wide input row
CASES = [((2, 3, 5, 7), (11, 13)), ((1, 2, 17, 9), (6, 29)), ((3, 1, 23, 31), (10, 12)),
         ((1, 4, 8, 8), (16, 16)), ((2, 2, 9, 3), (1, 5)), ((1, 3, 6, 1), (11, 4)),
         ((1, 2, 40, 37), (40, 37)), ((8, 3, 24, 24), (12, 12))]


def compiled(shape, size, align, threads=None, monkeypatch=None):
    if threads is not None:
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
    g = mg.Graph()
    x = g.input("x", shape, np.float32)
    plan = mg.compile([F.vision.interpolate(x, size=size, mode="bilinear", align_corners=align)])
    if monkeypatch is not None:
        monkeypatch.undo()
    return plan


def torch_bilinear(x, size, align):
    torch = pytest.importorskip("torch")
    return torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode="bilinear",
                                           align_corners=align).numpy()


def float64_bilinear(x, size, align):
    g = mg.Graph()
    v = g.input("x", x.shape, np.float64)
    (y,) = mg.compile([F.vision.interpolate(v, size=size, mode="bilinear",
                                            align_corners=align)]).run({"x": x.astype(np.float64)})
    return y


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize(("shape", "size"), CASES)
def test_matches_torch_and_the_float64_sums(shape, size, align):
    x = RNG.standard_normal(shape).astype(np.float32)
    (got,) = compiled(shape, size, align).run({"x": x})
    assert got.dtype == np.float32 and got.shape == shape[:2] + size
    # PyTorch takes its source coordinates in float32 (1e-5 off on these sizes); the float64
    # sums take them in double, so the float path stands within a few float roundings of them
    np.testing.assert_allclose(got, torch_bilinear(x, size, align), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got, float64_bilinear(x, size, align), rtol=2e-6, atol=1e-6)


def test_an_unscaled_resize_is_the_input():
    x = RNG.standard_normal((2, 3, 13, 21)).astype(np.float32)
    (got,) = compiled(x.shape, (13, 21), False).run({"x": x})
    np.testing.assert_array_equal(got, x)


@pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
@pytest.mark.parametrize(("shape", "size"), [((3, 5, 19, 11), (38, 29)),
                                             ((4, 3, 50, 41), (17, 23))])
def test_one_and_two_threads_give_the_same_bits(shape, size, monkeypatch):
    # a thread's first row fills both of its slots: a split between two rows sharing a source
    # row must not change a bit
    x = RNG.standard_normal(shape).astype(np.float32)
    outs = []
    for threads in (1, 2):
        plan = compiled(shape, size, False, threads, monkeypatch)
        with threadpool_limits(limits=threads):
            outs.append(plan.run({"x": x})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
@pytest.mark.parametrize("threads", [1, 2])
def test_large_outputs_stored_past_the_caches_are_the_same(threads, monkeypatch):
    # 1x40x128x128 -> 256x256: 10 MiB of output, over 4 MiB a thread at 1 and 2 threads,
    # past resize_bilinear.h's MG_BILINEAR_STREAM_BYTES, widths a multiple of 8
    shape, size = (1, 40, 128, 128), (256, 256)
    x = RNG.standard_normal(shape).astype(np.float32)
    plan = compiled(shape, size, False, threads, monkeypatch)
    with threadpool_limits(limits=threads):
        (got,) = plan.run({"x": x})
    small = compiled((1, 1, 128, 128), size, False).run({"x": x[:, 7:8]})[0]
    np.testing.assert_array_equal(got[:, 7:8], small)  # the plain stores' bits
    np.testing.assert_allclose(got, torch_bilinear(x, size, False), rtol=2e-5, atol=2e-5)


def test_nan_and_inf_reach_only_the_outputs_that_read_them():
    x = np.zeros((1, 1, 6, 6), np.float32)
    x[0, 0, 2, 3] = np.nan
    x[0, 0, 5, 0] = np.inf
    (got,) = compiled(x.shape, (12, 12), False).run({"x": x})
    want = torch_bilinear(x, (12, 12), False)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isfinite(want)], want[np.isfinite(want)])


def test_only_the_float32_linear_forward_gets_the_rows_workspace():
    x = np.zeros((1, 2, 8, 10), np.float32)
    attrs = {"mode": "linear", "antialias": False}
    stride = abi.BILINEAR_SLOT_FLOATS
    assert abi.bilinear_workspace(x, attrs, (1, 4, 30), 2) == 4 * 2 * 2 * 2 * stride + 16 * 34
    assert abi.bilinear_workspace(x, {**attrs, "mode": "cubic"}, (1, 4, 30), 2) == 0
    assert abi.bilinear_workspace(x, {**attrs, "antialias": True}, (1, 4, 30), 2) == 0
    assert abi.bilinear_workspace(x.astype(np.float64), attrs, (1, 4, 30), 2) == 0


def test_three_axes_and_float64_keep_the_general_path():
    x = RNG.standard_normal((1, 2, 3, 4, 5))
    g = mg.Graph()
    v = g.input("x", x.shape, np.float32)
    (got,) = mg.compile([F.vision.interpolate(v, size=(5, 7, 9), mode="trilinear")]).run(
        {"x": x.astype(np.float32)})
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.interpolate(torch.from_numpy(x.astype(np.float32)),
                                           size=(5, 7, 9), mode="trilinear").numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
