"""resize on uint8 images (F.vision.interpolate on a camera's frame): sums in double as the
float kernels, rounded to nearest with ties to even and saturated to [0, 255]. Checked bitwise
against a NumPy reference of that rule, against PyTorch's uint8 F.interpolate (its fixed-point
weights: within 1 for bilinear, and for bicubic on smooth images), with one and two threads,
through the model file and against gradients, which uint8 images do not have."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(11)


def run(fn, x):
    g = mg.Graph()
    (out,) = mg.compile([fn(g.input("x", x.shape, x.dtype))]).run({"x": x})
    return out


def frame(shape, smooth=False):
    """Noise (every byte value, the cubic overshoot clipped) or a smooth image (a camera's)."""
    if not smooth:
        return RNG.integers(0, 256, shape, dtype=np.uint8)
    walk = np.cumsum(RNG.integers(-3, 4, shape), axis=-1) + 128
    return np.clip(walk, 0, 255).astype(np.uint8)


def round_u8(v):
    """The stated rule: nearest, ties to even (np.rint), saturated to [0, 255]."""
    return np.clip(np.rint(v), 0, 255).astype(np.uint8)


def taps(n_in, n_out):
    """Half-pixel linear taps of one axis as the kernel computes them: (o + 0.5) * in / out
    - 0.5, the edge read for taps outside."""
    x = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    i0 = np.floor(x)
    r = x - i0
    i0 = i0.astype(np.int64)
    return np.clip(i0, 0, n_in - 1), np.clip(i0 + 1, 0, n_in - 1), 1 - r, r


def bilinear_reference(x, size):
    """Bilinear half-pixel resize of (N, C, H, W) in float64, the kernel's products and order
    of sums (rows' weight times column weight times the pixel, four terms left to right)."""
    (r0, r1, wr0, wr1), (c0, c1, wc0, wc1) = taps(x.shape[2], size[0]), taps(x.shape[3], size[1])
    a, b = x[:, :, r0].astype(np.float64), x[:, :, r1].astype(np.float64)
    wa, wb = wr0[:, None], wr1[:, None]
    acc = wa * wc0 * a[..., c0] + wa * wc1 * a[..., c1]
    acc = acc + wb * wc0 * b[..., c0]
    return acc + wb * wc1 * b[..., c1]


@pytest.mark.parametrize(("shape", "size"), [((2, 3, 5, 7), (11, 13)), ((1, 3, 40, 50), (23, 77)),
                                             ((1, 1, 2, 3), (4, 6)), ((1, 2, 9, 9), (3, 3))])
def test_bilinear_is_bitwise_the_reference_rule(shape, size):
    x = frame(shape)
    got = run(lambda v: F.vision.interpolate(v, size=size, mode="bilinear"), x)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, round_u8(bilinear_reference(x, size)))


def test_ties_round_to_even():
    # 2x upscale, half-pixel: weights 1/4 and 3/4, so (a + 3b) / 4 is exact, ties included
    x = np.array([[[[0, 2, 1, 3, 5]]]], np.uint8)
    got = run(lambda v: F.vision.interpolate(v, size=(1, 10), mode="bilinear"), x)
    exact = bilinear_reference(x, (1, 10))
    assert np.any(exact % 1 == 0.5)
    np.testing.assert_array_equal(got, round_u8(exact))
    # 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 3.5 -> 4, 4.5 -> 4
    np.testing.assert_array_equal(got[0, 0, 0, [1, 2, 6, 7, 8]], [0, 2, 2, 4, 4])


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "linear", "trilinear"])
def test_every_mode_is_the_float64_sum_rounded(mode):
    # the uint8 kernel sums exactly as the float64 one: rounding the latter is the rule
    shape = {"linear": (2, 3, 9), "trilinear": (1, 2, 3, 4, 5)}.get(mode, (2, 3, 6, 9))
    size = {"linear": 14, "trilinear": (5, 7, 2)}.get(mode, (13, 4))
    x = frame(shape)
    fn = (lambda v: F.vision.interpolate(v, size=size, mode=mode))
    got = run(fn, x)
    np.testing.assert_array_equal(got, round_u8(run(fn, x.astype(np.float64))))


def test_nearest_is_an_exact_copy():
    x = frame((2, 3, 7, 5))
    got = run(lambda v: F.vision.interpolate(v, scale_factor=3, mode="nearest"), x)
    np.testing.assert_array_equal(got, x.repeat(3, axis=2).repeat(3, axis=3))


def test_cubic_overshoot_saturates_instead_of_wrapping():
    x = np.array([[[[0, 0, 255, 255, 0, 0]]]], np.uint8)
    got = run(lambda v: F.vision.interpolate(v, size=(1, 17), mode="bicubic"), x)
    want = run(lambda v: F.vision.interpolate(v, size=(1, 17), mode="bicubic"),
               x.astype(np.float64))
    assert want.max() > 255 and want.min() < 0
    np.testing.assert_array_equal(got, round_u8(want))


@pytest.mark.parametrize("smooth", [False, True])
@pytest.mark.parametrize(("mode", "align"), [("bilinear", False), ("bilinear", True),
                                             ("bicubic", False), ("bicubic", True)])
def test_torch_uint8_interpolate_differs_by_its_fixed_point(mode, align, smooth):
    torch = pytest.importorskip("torch")
    x = frame((1, 3, 40, 50), smooth)
    got = run(lambda v: F.vision.interpolate(v, size=(23, 77), mode=mode, align_corners=align),
              x)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), size=(23, 77), mode=mode,
                                           align_corners=align).numpy()
    diff = np.abs(got.astype(int) - want.astype(int))
    # PyTorch weighs in fixed point (within 1); its separable bicubic also clips the first
    # pass to uint8, which noise overshoots (28 apart seen), a smooth image does not
    assert diff.max() <= (1 if mode == "bilinear" or smooth else 40)
    assert diff.mean() < 0.5


def test_eager_interpolate_keeps_uint8():
    x = frame((1, 3, 4, 6))
    y = F.vision.interpolate(mg.tensor(x), size=(8, 12), mode="bilinear")
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y.numpy(), round_u8(bilinear_reference(x, (8, 12))))


@pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
def test_one_and_two_threads_give_the_same_bits(monkeypatch):
    x = frame((3, 5, 19, 21))
    x.flags.writeable = False
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        g = mg.Graph()
        plan = mg.compile([apply("resize", (g.input("x", x.shape, x.dtype),), size=(14, 33),
                                 mode="cubic")])
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            outs.append(plan.run({"x": x})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_uint8_resize_has_no_gradient_and_refuses_other_small_ints():
    g = mg.Graph()
    p = g.input("p", (1, 1, 3, 3), np.float32)
    y = F.vision.interpolate(p.astype(np.uint8), size=(6, 6)).astype(np.float32)
    with pytest.raises(mg.GraphError, match="not differentiable|no gradient|depend"):
        mg.grad(F.sum(y * p[:, :, :1, :1]) + F.sum(y), [y.astype(np.uint8)])
    (dp,) = mg.grad(F.sum(y) + F.sum(p), [p])  # only the float path carries a gradient
    np.testing.assert_array_equal(mg.compile([dp]).run(
        {"p": np.zeros((1, 1, 3, 3), np.float32)})[0], np.ones((1, 1, 3, 3), np.float32))
    for dtype in (np.int8, np.int16):
        with pytest.raises(mg.OpError, match=f"resize.*{np.dtype(dtype).name}"):
            F.vision.interpolate(g.input(f"x{dtype.__name__}", (1, 1, 2, 2), dtype), size=(4, 4))


def test_uint8_resize_round_trips_through_the_model_file(tmp_path):
    g = mg.Graph()
    y = F.vision.interpolate(g.input("x", (1, 3, 5, 7), np.uint8), size=(9, 4), mode="bicubic")
    plan = mg.compile([y])
    mg.save(plan, tmp_path / "m.mgm")
    loaded = mg.runtime.load(tmp_path / "m.mgm")
    x = frame((1, 3, 5, 7))
    np.testing.assert_array_equal(plan.run({"x": x})[0], loaded.run({"x": x})[0])


def test_a_reader_whose_resize_is_float_only_refuses_the_file_by_name(tmp_path, monkeypatch):
    # uint8 adds a dtype and keeps resize's meaning on floats, so its model-file version stays
    # 1: a reader from before uint8 reruns its own rule on load and refuses the node, naming
    # the op and the dtype, instead of running it otherwise
    from dataclasses import replace

    from mgegraph.ops import registry, resize

    g = mg.Graph()
    y = F.vision.interpolate(g.input("x", (1, 3, 5, 7), np.uint8), size=(9, 4))
    mg.save(mg.compile([y]), tmp_path / "m.mgm")

    def float_only(in_types, attrs):
        registry.require_dtypes("resize", in_types[0], registry.FLOAT_DTYPES)
        return resize._resize_infer(in_types, attrs)

    old = replace(registry.get_op("resize"), infer=float_only)
    monkeypatch.setitem(registry._REGISTRY, "resize", old)
    with pytest.raises(mg.ModelFormatError, match="resize.*uint8"):
        mg.runtime.load(tmp_path / "m.mgm")


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiased_uint8_downscale_is_the_float64_one_rounded(mode):
    x = np.random.default_rng(11).integers(0, 256, (1, 3, 17, 23)).astype(np.uint8)
    got = F.vision.interpolate(mg.tensor(x), size=(7, 9), mode=mode, antialias=True).numpy()
    wide = F.vision.interpolate(mg.tensor(x.astype(np.float64)), size=(7, 9), mode=mode,
                                antialias=True).numpy()
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, np.clip(np.round(wide), 0, 255).astype(np.uint8))
