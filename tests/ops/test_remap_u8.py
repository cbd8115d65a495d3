"""remap, warp_affine and warp_perspective on uint8 images (a camera's frame, as MegEngine's
CV operators take it): float32 points, the sampler's sum in double rounded to nearest with ties
to even and saturated to [0, 255]. Checked bitwise against NumPy references (nearest: an exact
copy), against the float64 kernel's sums rounded, over every border mode, with one and two
threads, eagerly, through the model file, and refused where it has no meaning."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(5)
BORDERS = ["replicate", "reflect", "reflect_101", "wrap", "constant"]


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def round_u8(v):
    """The stated rule: nearest, ties to even (np.rint), saturated to [0, 255]."""
    return np.clip(np.rint(v), 0, 255).astype(np.uint8)


def frame(shape):
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def points(n, oh, ow, h, w, spill=2.0):
    """(n, oh, ow, 2) float32 (x, y) points, some up to ``spill`` pixels outside the image."""
    xs = RNG.uniform(-spill, w - 1 + spill, (n, oh, ow))
    ys = RNG.uniform(-spill, h - 1 + spill, (n, oh, ow))
    return np.stack([xs, ys], -1).astype(np.float32)


def remap_reference(x, xy, interp):
    """NumPy remap with the replicate border: nearest reads the rounded point (an exact copy);
    linear sums each row's two taps, then the rows, in double (the sampler's order)."""
    return np.stack([_remap_one(img.astype(np.float64), p.astype(np.float64), interp)
                     for img, p in zip(x, xy)])


def _remap_one(img, p, interp):
    h, w = img.shape[1:]

    def read(r, q):  # (C, OH, OW): the pixels at rows r and columns q, edges replicated
        return img[:, np.clip(r, 0, h - 1), np.clip(q, 0, w - 1)]

    px, py = p[..., 0], p[..., 1]
    if interp == "nearest":
        return read(np.rint(py).astype(int), np.rint(px).astype(int))
    x0, y0 = np.floor(px), np.floor(py)
    wx, wy = (x0 + 1 - px, px - x0), (y0 + 1 - py, py - y0)
    x0, y0 = x0.astype(int), y0.astype(int)
    rows = [wx[0] * read(y0 + i, x0) + wx[1] * read(y0 + i, x0 + 1) for i in (0, 1)]
    return wy[0] * rows[0] + wy[1] * rows[1]


@pytest.mark.parametrize("interp", ["nearest", "linear"])
@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (1, 1, 1, 5), (1, 2, 16, 3)])
def test_replicate_remap_is_bitwise_the_numpy_reference(interp, shape):
    x = frame(shape)
    xy = points(shape[0], 5, 6, *shape[2:])
    got = run(lambda a, b: F.vision.remap(a, b, interp_mode=interp), x, xy)
    assert got.dtype == np.uint8
    want = remap_reference(x, xy, interp)
    np.testing.assert_array_equal(got, want.astype(np.uint8) if interp == "nearest"
                                  else round_u8(want))


@pytest.mark.parametrize("border", BORDERS)
@pytest.mark.parametrize("interp", ["nearest", "linear"])
def test_every_border_is_the_float64_sum_rounded(border, interp):
    x = frame((2, 3, 6, 5))
    xy = points(2, 4, 7, 6, 5, spill=9.0)
    fn = (lambda a, b: F.vision.remap(a, b, border_mode=border, scalar=77.25,
                                      interp_mode=interp))
    got = run(fn, x, xy)
    np.testing.assert_array_equal(got, round_u8(run(fn, x.astype(np.float64),
                                                    xy.astype(np.float64))))


@pytest.mark.parametrize(("scalar", "want"), [(300.0, 255), (-5.0, 0), (6.5, 6), (7.5, 8)])
def test_the_constant_border_value_is_rounded_and_saturated(scalar, want):
    x = frame((1, 1, 3, 3))
    xy = np.full((1, 2, 2, 2), -50.0, np.float32)
    got = run(lambda a, b: F.vision.remap(a, b, border_mode="constant", scalar=scalar), x, xy)
    np.testing.assert_array_equal(got, np.full((1, 1, 2, 2), want, np.uint8))


def test_a_point_that_is_not_finite_gives_0_outside_the_constant_border():
    x = np.full((1, 1, 3, 3), 200, np.uint8)
    xy = np.array([[[[np.nan, 1.0], [1.0, np.inf]], [[1.0, 1.0], [1.0, 1.0]]]], np.float32)
    got = run(lambda a, b: F.vision.remap(a, b), x, xy)
    np.testing.assert_array_equal(got[0, 0], [[0, 0], [200, 200]])


def float_points_warp(fn, x):
    """The warp on float32 copies of the image: the same float32 points and double sums."""
    return run(fn, x.astype(np.float32))


@pytest.mark.parametrize("interp", ["nearest", "linear"])
def test_warp_affine_takes_and_gives_uint8_nhwc(interp):
    x = frame((2, 9, 11, 3))
    mat = np.array([[[0.8, 0.2, 1.5], [-0.3, 1.1, 0.25]], [[1.3, 0.0, -2], [0.1, 0.7, 3]]],
                   np.float32)

    def fn(v):
        return F.vision.warp_affine(v, mat, (7, 13), border_mode="reflect", interp_mode=interp)

    got = run(fn, x)
    assert got.dtype == np.uint8 and got.shape == (2, 7, 13, 3)
    want = float_points_warp(fn, x)  # float32 outputs: rounding them may move a tie by 1
    if interp == "nearest":
        np.testing.assert_array_equal(got, want.astype(np.uint8))
    else:
        assert np.abs(got - np.rint(want)).max() <= 1
        assert np.mean(got == np.clip(np.rint(want), 0, 255)) > 0.99


def test_warp_perspective_on_uint8_nchw_with_mat_idx_and_eagerly():
    x = frame((2, 3, 8, 8))
    mat = np.array([[[1.1, 0.1, -1], [0.05, 0.9, 2], [0.01, 0.002, 1]]] * 3, np.float32)
    idx = np.array([1, 0, 1], np.int32)
    got = F.vision.warp_perspective(mg.tensor(x), mat, (6, 5), mat_idx=idx,
                                    interp_mode="nearest")
    assert got.dtype == np.uint8 and got.shape == (3, 3, 6, 5)
    want = F.vision.warp_perspective(mg.tensor(x.astype(np.float32)), mat, (6, 5), mat_idx=idx,
                                     interp_mode="nearest")
    np.testing.assert_array_equal(got.numpy(), want.numpy().astype(np.uint8))


def test_uint8_remap_refuses_a_float64_map_and_other_small_ints():
    g = mg.Graph()
    x = g.input("x", (1, 1, 4, 4), np.uint8)
    with pytest.raises(mg.OpError, match="remap.*float32 points.*float64"):
        apply("remap", (x, g.input("m", (1, 2, 2, 2), np.float64)),
                             border_mode="replicate", scalar=0.0, interp_mode="linear")
    grid = g.input("grid", (1, 2, 2, 2), np.float32)
    with pytest.raises(mg.OpError, match="remap.*int8"):
        apply("remap", (g.input("y", (1, 1, 4, 4), np.int8), grid), border_mode="replicate",
              scalar=0.0, interp_mode="linear")
    with pytest.raises(mg.OpError, match="grid_sample.*uint8"):
        apply("grid_sample", (x, grid), mode="bilinear", padding_mode="zeros",
              align_corners=False)


def test_uint8_remap_has_no_gradient():
    g = mg.Graph()
    m = g.input("m", (1, 2, 2, 2), np.float32)
    x = g.const(frame((1, 1, 4, 4)))
    y = F.vision.remap(x, m).astype(np.float32)
    (dm,) = mg.grad(F.sum(y) + F.sum(m), [m])  # only the direct path carries a gradient
    np.testing.assert_array_equal(mg.compile([dm]).run({"m": np.ones((1, 2, 2, 2), np.float32)})[0],
                                  np.ones((1, 2, 2, 2), np.float32))


@pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
def test_one_and_two_threads_give_the_same_bits(monkeypatch):
    x = frame((3, 4, 21, 17))
    x.flags.writeable = False
    xy = points(3, 19, 23, 21, 17)
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        g = mg.Graph()
        plan = mg.compile([F.vision.remap(g.input("x", x.shape, x.dtype),
                                          g.input("m", xy.shape, xy.dtype))])
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            outs.append(plan.run({"x": x, "m": xy})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_uint8_warp_round_trips_through_the_model_file(tmp_path):
    g = mg.Graph()
    mat = np.array([[[0.9, 0.1, 0.5], [-0.1, 1.2, 0.0]]], np.float32)
    y = F.vision.warp_affine(g.input("x", (1, 10, 12, 3), np.uint8), mat, (8, 8))
    plan = mg.compile([y])
    mg.save(plan, tmp_path / "m.mgm")
    loaded = mg.runtime.load(tmp_path / "m.mgm")
    x = frame((1, 10, 12, 3))
    np.testing.assert_array_equal(plan.run({"x": x})[0], loaded.run({"x": x})[0])
