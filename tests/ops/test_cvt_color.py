"""F.vision.cvt_color: uint8 frames by MegEngine's (OpenCV's) fixed-point luma, float images by
its float weights, channel swaps and repeats; in a plan, eagerly and through the model file."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph.ir.errors import OpError

RNG = np.random.default_rng(3)


def _gray_u8(rgb):
    r, g, b = (rgb[..., c:c + 1].astype(np.int64) for c in range(3))
    return ((r * 4899 + g * 9617 + b * 1868 + (1 << 13)) >> 14).astype(np.uint8)


def _gray_float(rgb):
    r, g, b = (rgb[..., c:c + 1] for c in range(3))
    t = rgb.dtype.type
    return (r * t(0.299) + g * t(0.587)) + b * t(0.114)


def _run(mode, image):
    g = mg.Graph()
    x = g.input("x", image.shape, image.dtype)
    (out,) = mg.compile([F.vision.cvt_color(x, mode=mode)]).run({"x": image})
    return out


@pytest.mark.parametrize("mode,flip", [("RGB2GRAY", False), ("BGR2GRAY", True)])
def test_uint8_gray_is_the_fixed_point_formula(mode, flip):
    frame = RNG.integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
    frame[0, 0, 0] = (255, 255, 255)
    frame[0, 0, 1] = (0, 0, 0)
    want = _gray_u8(frame[..., ::-1] if flip else frame)
    got = _run(mode, frame)
    assert got.dtype == np.uint8 and got.shape == (2, 5, 7, 1)
    np.testing.assert_array_equal(got, want)
    assert got[0, 0, 0, 0] == 255 and got[0, 0, 1, 0] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_gray_is_the_float_weights(dtype):
    image = RNG.random((1, 4, 6, 3)).astype(dtype)
    got = _run("RGB2GRAY", image)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, _gray_float(image), rtol=1e-6 if dtype == np.float32 else 0)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_swaps_and_repeats(dtype):
    image = (RNG.random((2, 3, 4, 3)) * 255).astype(dtype)
    np.testing.assert_array_equal(_run("RGB2BGR", image), image[..., ::-1])
    np.testing.assert_array_equal(_run("BGR2RGB", image), image[..., ::-1])
    gray = image[..., :1].copy()
    np.testing.assert_array_equal(_run("GRAY2RGB", gray), np.repeat(gray, 3, axis=3))


def test_eager_matches_the_plan():
    frame = RNG.integers(0, 256, (1, 6, 5, 3), dtype=np.uint8)
    eager = F.vision.cvt_color(mg.tensor(frame), mode="RGB2GRAY").numpy()
    np.testing.assert_array_equal(eager, _run("RGB2GRAY", frame))


def test_a_gray_model_file_takes_the_frame(tmp_path):
    g = mg.Graph()
    x = g.input("frame", (1, 8, 8, 3), np.uint8)
    gray = F.vision.cvt_color(x, mode="BGR2GRAY").astype(np.float32) / 255.0
    plan = mg.compile([gray])
    mg.save(plan, tmp_path / "gray.mgm")
    frame = RNG.integers(0, 256, (1, 8, 8, 3), dtype=np.uint8)
    (got,) = runtime.load(tmp_path / "gray.mgm").run({"frame": frame})
    (want,) = plan.run({"frame": frame})
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("shape,dtype,mode,words", [
    ((1, 4, 4, 3), np.uint8, "RGB2HSV", "mode must be one of"),
    ((1, 4, 4, 1), np.uint8, "RGB2GRAY", "3 channel(s)"),
    ((4, 4, 3), np.uint8, "RGB2GRAY", "NHWC"),
    ((1, 4, 4, 3), np.int32, "RGB2GRAY", "uint8, float32 or float64"),
])
def test_bad_input_is_an_op_error(shape, dtype, mode, words):
    g = mg.Graph()
    x = g.input("x", shape, dtype)
    with pytest.raises(OpError, match="cvt_color") as info:
        F.vision.cvt_color(x, mode=mode)
    assert words in str(info.value)
