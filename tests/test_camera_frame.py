"""A worked example: a camera frame arrives as uint8[batch, H, W, 3]; the graph moves it to
NCHW, casts it to float32, normalises each channel by its mean and standard deviation (as
``F.vision.normalize`` would: ``(x.astype(float32) - mean) / std`` with constants), then runs a
convolution and a linear layer. Saved as a model file and loaded by ``mgegraph.runtime``, it
gives outputs bitwise equal to the compiled graph's on a uint8 frame. Two trained models do
their preprocessing inside: one on float32 after the cast, one its geometry (a warp and a
resize) on the uint8 frame itself, as MegEngine's CV operators take it, then
``F.vision.normalize``."""
from __future__ import annotations

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime

MEAN = np.array([123.675, 116.28, 103.53], np.float32).reshape(1, 3, 1, 1)
STD = np.array([58.395, 57.12, 57.375], np.float32).reshape(1, 3, 1, 1)
H, W = 9, 7


def camera_graph(batch: int):
    rng = np.random.default_rng(7)
    g = mg.Graph()
    frame = g.input("frame", (batch, H, W, 3), dtype=np.uint8)
    x = frame.transpose((0, 3, 1, 2))  # NHWC -> NCHW, still uint8
    x = (x.astype(np.float32) - g.const(MEAN)) / g.const(STD)
    w = g.param("conv.weight", rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.2)
    b = g.param("conv.bias", rng.standard_normal(4).astype(np.float32))
    x = F.relu(F.conv2d(x, w, b, stride=2, padding=1))
    x = F.flatten(x, 1)
    fc_w = g.param("fc.weight", rng.standard_normal((5, x.shape[1])).astype(np.float32) * 0.1)
    fc_b = g.param("fc.bias", np.zeros(5, np.float32))
    return g, F.linear(x, fc_w, fc_b)


def reference(frame: np.ndarray) -> np.ndarray:
    """The normalisation step in NumPy, to check the cast and the channel broadcast."""
    return (frame.transpose(0, 3, 1, 2).astype(np.float32) - MEAN) / STD


def test_a_uint8_frame_through_the_saved_model_is_bitwise_the_compiled_graphs(tmp_path):
    _, logits = camera_graph(batch=2)
    plan = mg.compile([logits])
    mg.save(plan, tmp_path / "camera.mgm")
    predictor = runtime.load(tmp_path / "camera.mgm")
    assert predictor.input_dtypes == (np.dtype(np.uint8),)
    assert predictor.input_shapes == ((2, H, W, 3),)
    frame = np.random.default_rng(0).integers(0, 256, (2, H, W, 3), dtype=np.uint8)
    frame[0, 0, 0] = (0, 255, 128)  # the range's ends
    (got,) = predictor.run({"frame": frame})
    (want,) = plan.run({"frame": frame})
    assert got.dtype == np.float32 and got.shape == (2, 5)
    assert got.tobytes() == want.tobytes()
    assert np.isfinite(got).all()


def test_the_normalised_frame_is_numpys():
    g = mg.Graph()
    frame = g.input("frame", (1, H, W, 3), dtype=np.uint8)
    x = (frame.transpose((0, 3, 1, 2)).astype(np.float32) - g.const(MEAN)) / g.const(STD)
    data = np.random.default_rng(2).integers(0, 256, (1, H, W, 3), dtype=np.uint8)
    for optimize in (0, 2):
        (got,) = mg.compile([x], optimize=optimize).run({"frame": data})
        np.testing.assert_allclose(got, reference(data), rtol=1e-6, atol=1e-6)


class FrameClassifier(mg.nn.Module):
    """Takes the camera's uint8[batch, H, W, 3] frame and does its own preprocessing: colour
    order, conversion, per-channel normalisation and a bilinear resize, then a small CNN."""

    def __init__(self):
        super().__init__()
        self.conv = mg.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = mg.nn.Linear(4 * 8 * 8, 2)

    def forward(self, frame):
        rgb = F.vision.cvt_color(frame, mode="BGR2RGB")
        x = (rgb.transpose((0, 3, 1, 2)).astype(np.float32) - MEAN) / STD
        x = F.vision.interpolate(x, size=(16, 16), mode="bilinear")
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(F.flatten(x, 1))


def test_a_frame_model_trains_and_its_file_gives_the_trained_bits(tmp_path):
    rng = np.random.default_rng(5)
    frames = rng.integers(0, 256, (16, H * 3, W * 3, 3), dtype=np.uint8)
    labels = (frames[..., 2].mean(axis=(1, 2)) > frames[..., 0].mean(axis=(1, 2)))
    labels = labels.astype(np.int32)  # which of red (BGR's last) and blue dominates
    model = FrameClassifier()
    opt = mg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(frames, labels))
    losses = [float(step(frames, labels)) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0], losses
    model.eval()
    predict = mg.compile_module(model, example_inputs=(frames,))
    want = predict(frames)
    mg.save(predict, tmp_path / "frames.mgm")
    (got,) = runtime.load(tmp_path / "frames.mgm").run([frames])
    assert got.tobytes() == want.tobytes()


CROP = np.array([[1.1, 0.1, 2.0], [-0.1, 1.1, 1.0]], np.float32)  # a fixed affine crop


class WarpedFrameClassifier(mg.nn.Module):
    """Does its geometry on the camera's uint8 frame (a fixed affine crop, then a bilinear
    resize, both giving uint8), then ``F.vision.normalize`` to float32 NCHW, then a small CNN."""

    def __init__(self):
        super().__init__()
        self.conv = mg.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = mg.nn.Linear(4 * 8 * 8, 2)

    def forward(self, frame):
        mat = np.ascontiguousarray(np.broadcast_to(CROP, (frame.shape[0], 2, 3)))
        crop = F.vision.warp_affine(frame, mat, (H * 2, W * 2), border_mode="reflect")
        small = F.vision.interpolate(crop.transpose((0, 3, 1, 2)), size=(16, 16))
        x = F.vision.normalize(small, MEAN.ravel(), STD.ravel(), format="NCHW")
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(F.flatten(x, 1))


def test_a_model_warping_and_resizing_the_uint8_frame_trains_and_deploys_bitwise(tmp_path):
    rng = np.random.default_rng(6)
    frames = rng.integers(0, 256, (16, H * 3, W * 3, 3), dtype=np.uint8)
    labels = (frames[..., 2].mean(axis=(1, 2)) > frames[..., 0].mean(axis=(1, 2)))
    labels = labels.astype(np.int32)
    model = WarpedFrameClassifier()
    opt = mg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(frames, labels))
    losses = [float(step(frames, labels)) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0], losses
    model.eval()
    predict = mg.compile_module(model, example_inputs=(frames,))
    kernels = {ins.kernel for ins in predict.plan.instructions}
    assert {"sample_u8", "resize_u8"} <= kernels, kernels  # the geometry ran on uint8
    want = predict(frames)
    mg.save(predict, tmp_path / "warped.mgm")
    (got,) = runtime.load(tmp_path / "warped.mgm").run([frames])
    assert got.tobytes() == want.tobytes()
