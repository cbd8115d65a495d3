"""A small U-Net, the whole lifecycle: the ops real segmentation models need (transposed
convolution, bilinear upsampling, concatenation, group norm) trained a few steps on a synthetic
segmentation task, its gradients checked against PyTorch with the same weights, then saved,
loaded and run by the runtime, and exported to ONNX and run by ONNX Runtime."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim, runtime

torch = pytest.importorskip("torch")


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1, self.gn1 = nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8)
        self.enc2, self.gn2 = nn.Conv2d(8, 16, 3, padding=1), nn.GroupNorm(4, 16)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.reduce = nn.Conv2d(16, 8, 1)
        self.dec, self.gn3 = nn.Conv2d(16, 8, 3, padding=1), nn.GroupNorm(2, 8)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        skip = F.relu(self.gn1(self.enc1(x)))
        deep = F.relu(self.gn2(self.enc2(F.max_pool2d(skip, 2))))
        smooth = F.vision.interpolate(self.reduce(deep), scale_factor=2, mode="bilinear",
                                      align_corners=False)
        joined = F.concat([skip, self.up(deep) + smooth], axis=1)
        return self.head(F.relu(self.gn3(self.dec(joined))))


class TorchUNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        t = torch.nn
        self.enc1, self.gn1 = t.Conv2d(3, 8, 3, padding=1), t.GroupNorm(4, 8)
        self.enc2, self.gn2 = t.Conv2d(8, 16, 3, padding=1), t.GroupNorm(4, 16)
        self.up = t.ConvTranspose2d(16, 8, 2, stride=2)
        self.reduce = t.Conv2d(16, 8, 1)
        self.dec, self.gn3 = t.Conv2d(16, 8, 3, padding=1), t.GroupNorm(2, 8)
        self.head = t.Conv2d(8, 2, 1)

    def forward(self, x):
        tf = torch.nn.functional
        skip = tf.relu(self.gn1(self.enc1(x)))
        deep = tf.relu(self.gn2(self.enc2(tf.max_pool2d(skip, 2))))
        smooth = tf.interpolate(self.reduce(deep), scale_factor=2, mode="bilinear",
                                align_corners=False)
        joined = torch.cat([skip, self.up(deep) + smooth], dim=1)
        return self.head(tf.relu(self.gn3(self.dec(joined))))


def _data(n=4, size=16, seed=0):
    """Images of a bright disc on noise; the label is the disc's mask (2 classes)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    images = rng.standard_normal((n, 3, size, size)).astype(np.float32) * 0.3
    masks = np.zeros((n, size, size), np.int32)
    for k in range(n):
        cy, cx, r = rng.uniform(4, size - 4, 2).tolist() + [rng.uniform(2, 5)]
        inside = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        masks[k] = inside
        images[k, :, inside] += 1.0
    return images, masks


def _pair():
    ours, theirs = UNet(), TorchUNet()
    state = {k: v for k, v in ours.state_dict().items()}
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            param.copy_(torch.from_numpy(np.ascontiguousarray(state[name]).reshape(param.shape)))
    return ours, theirs


def test_forward_and_gradients_match_pytorch():
    ours, theirs = _pair()
    images, masks = _data()
    gm = mg.GradManager().attach(ours.parameters())
    with gm:
        loss = F.cross_entropy(ours(mg.tensor(images)), mg.tensor(masks))
        gm.backward(loss)
    tloss = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(images)),
                                              torch.from_numpy(masks).long())
    tloss.backward()
    np.testing.assert_allclose(float(loss), tloss.item(), rtol=1e-5)
    grads = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        want = grads[name].grad.numpy().reshape(param.shape)
        np.testing.assert_allclose(param.grad.numpy(), want, rtol=2e-4, atol=2e-5, err_msg=name)


def test_trains_saves_loads_and_exports(tmp_path):
    ours, _ = _pair()
    images, masks = _data(8)
    opt = optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    step = mg.compile_train_step(ours, F.cross_entropy, opt, example_batch=(images, masks))
    losses = [float(step(images, masks)) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], losses
    ours.eval()
    predict = mg.compile_module(ours, example_inputs=(images,))
    want = predict(images)
    accuracy = (want.argmax(1) == masks).mean()
    assert accuracy > 0.9, accuracy
    mg.save(predict, tmp_path / "unet.mgm")
    (got,) = runtime.load(tmp_path / "unet.mgm").run([images])
    np.testing.assert_array_equal(got, want)
    ort = pytest.importorskip("onnxruntime")
    mg.onnx.export(predict, tmp_path / "unet.onnx")
    session = ort.InferenceSession(str(tmp_path / "unet.onnx"), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {session.get_inputs()[0].name: images})
    np.testing.assert_allclose(theirs, want, rtol=1e-4, atol=1e-4)
