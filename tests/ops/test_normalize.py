"""F.vision.normalize: (cast(inp) - mean) / std per channel, a composition the planner compiles
to the cast and one fused loop for the sub and div. Checked bitwise against NumPy (and
torchvision's formula through PyTorch) for NHWC and NCHW, sequences, scalars and tensors,
eagerly, with a gradient through float mean and std, and refused with clear errors."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F

RNG = np.random.default_rng(9)
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


def run(fn, x):
    g = mg.Graph()
    plan = mg.compile([fn(g.input("x", x.shape, x.dtype))])
    return plan, plan.run({"x": x})[0]


def numpy_normalize(x, mean, std, dtype, axis):
    shape = [1] * x.ndim
    shape[axis] = -1
    m = np.asarray(mean, np.float64).astype(dtype).reshape(shape)
    s = np.asarray(std, np.float64).astype(dtype).reshape(shape)
    return (x.astype(dtype) - m) / s


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("format", "shape", "axis"), [("NHWC", (2, 5, 7, 3), 3),
                                                        ("NCHW", (2, 3, 5, 7), 1)])
def test_matches_numpy_bitwise(dtype, format, shape, axis):
    x = RNG.integers(0, 256, shape, dtype=np.uint8)
    _, got = run(lambda v: F.vision.normalize(v, MEAN, STD, format=format, dtype=dtype), x)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, numpy_normalize(x, MEAN, STD, dtype, axis))


def test_sub_and_div_are_one_fused_loop_after_the_cast():
    x = RNG.integers(0, 256, (1, 4, 6, 3), dtype=np.uint8)
    plan, _ = run(lambda v: F.vision.normalize(v, MEAN, STD), x)
    ops = [ins.op for ins in plan.instructions]
    assert ops == ["cast", "fused_elementwise"], ops


def test_matches_torchvision_formula():
    torch = pytest.importorskip("torch")
    x = RNG.integers(0, 256, (2, 3, 4, 5), dtype=np.uint8)
    _, got = run(lambda v: F.vision.normalize(v, MEAN, STD, format="NCHW"), x)
    t = torch.from_numpy(x).float()
    want = (t - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    np.testing.assert_array_equal(got, want.numpy())


def test_scalars_one_entry_sequences_and_float_images():
    x = RNG.standard_normal((2, 4, 4, 3)).astype(np.float64)
    _, got = run(lambda v: F.vision.normalize(v, 0.5, [2.0], dtype="float64"), x)
    np.testing.assert_array_equal(got, (x - 0.5) / 2.0)


def test_tensor_mean_and_std_broadcast_and_take_gradients():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4, 4), np.uint8)
    mean, std = g.input("m", (3,), np.float32), g.input("s", (3,), np.float32)
    y = F.vision.normalize(x, mean, std, format="NCHW")
    dm, ds = mg.grad(F.sum(y), [mean, std])
    xv = RNG.integers(0, 256, (2, 3, 4, 4), dtype=np.uint8)
    mv, sv = np.float32([100, 110, 120]), np.float32([50, 60, 70])
    out, gm, gs = mg.compile([y, dm, ds]).run({"x": xv, "m": mv, "s": sv})
    np.testing.assert_array_equal(out, numpy_normalize(xv, mv, sv, np.float32, 1))
    np.testing.assert_allclose(gm, -32 / sv, rtol=1e-6)
    want_s = -((xv.astype(np.float64) - mv[:, None, None]) / sv[:, None, None] ** 2).sum(
        axis=(0, 2, 3))
    np.testing.assert_allclose(gs, want_s, rtol=1e-5)


def test_eager_frame():
    x = RNG.integers(0, 256, (1, 3, 5, 3), dtype=np.uint8)
    y = F.vision.normalize(mg.tensor(x), MEAN, STD)
    np.testing.assert_array_equal(y.numpy(), numpy_normalize(x, MEAN, STD, np.float32, 3))


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"mean": (1.0, 2.0), "std": 1.0}, "mean must be finite numbers, one or one per channel"),
    ({"mean": 0.0, "std": (1.0, 0.0, 2.0)}, "std must not be 0"),
    ({"mean": float("nan"), "std": 1.0}, "mean must be finite"),
    ({"mean": 0.0, "std": 1.0, "format": "CHWN"}, "format must be"),
    ({"mean": 0.0, "std": 1.0, "dtype": "int32"}, "dtype must be a float dtype"),
])
def test_bad_arguments_are_refused_by_name(kwargs, reason):
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=f"normalize.*{reason}"):
        F.vision.normalize(g.input("x", (1, 4, 4, 3), np.uint8), **kwargs)
