"""nn.Upsample, PixelShuffle/PixelUnshuffle and the 2-D pads against PyTorch's modules, in eager
mode and compiled, and their argument errors."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph import nn

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(11)


def compiled(module, x):
    g = mg.Graph()
    (out,) = mg.compile([module(g.input("x", x.shape, x.dtype))]).run({"x": x})
    return out


CASES = [
    (lambda: nn.Upsample(scale_factor=2), lambda: torch.nn.Upsample(scale_factor=2)),
    (lambda: nn.Upsample(size=(5, 9), mode="bilinear"),
     lambda: torch.nn.Upsample(size=(5, 9), mode="bilinear")),
    (lambda: nn.Upsample(scale_factor=1.5, mode="bicubic", align_corners=True),
     lambda: torch.nn.Upsample(scale_factor=1.5, mode="bicubic", align_corners=True)),
    (lambda: nn.PixelShuffle(2), lambda: torch.nn.PixelShuffle(2)),
    (lambda: nn.PixelUnshuffle(2), lambda: torch.nn.PixelUnshuffle(2)),
    (lambda: nn.ZeroPad2d((1, 2, 0, 3)), lambda: torch.nn.ZeroPad2d((1, 2, 0, 3))),
    (lambda: nn.ConstantPad2d(2, -1.5), lambda: torch.nn.ConstantPad2d(2, -1.5)),
    (lambda: nn.ReflectionPad2d((3, 1, 2, 0)), lambda: torch.nn.ReflectionPad2d((3, 1, 2, 0))),
    (lambda: nn.ReplicationPad2d(3), lambda: torch.nn.ReplicationPad2d(3)),
]


@pytest.mark.parametrize(("ours", "theirs"), CASES)
@pytest.mark.parametrize("shape", [(2, 4, 4, 6), (4, 6, 4)])
def test_modules_match_torch_eager_and_compiled(ours, theirs, shape):
    if len(shape) == 3 and "Upsample" in repr(ours()):
        pytest.skip("interpolate's modes want (N, C, ...) inputs")
    x = RNG.standard_normal(shape).astype(np.float32)
    want = theirs()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours()(mg.Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled(ours(), x), want, rtol=1e-5, atol=1e-5)


def test_a_small_upsampling_network_trains_like_torch():
    # a conv, a pixel shuffle and a bilinear upsample: the gradient of the conv's weight
    w = RNG.standard_normal((8, 2, 3, 3)).astype(np.float32) * 0.1
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    g = mg.Graph()
    v, wv = g.input("x", x.shape), g.input("w", w.shape)
    up = nn.Upsample(scale_factor=2, mode="bilinear")
    y = up(nn.PixelShuffle(2)(mg.functional.conv2d(v, wv, padding=1)))
    loss = mg.functional.sum(y * y)
    (dw,) = mg.compile(mg.grad(loss, [wv])).run({"x": x, "w": w})
    tw = torch.from_numpy(w).requires_grad_()
    ty = torch.nn.functional.interpolate(torch.nn.functional.pixel_shuffle(
        torch.nn.functional.conv2d(torch.from_numpy(x), tw, padding=1), 2), scale_factor=2,
        mode="bilinear")
    (ty * ty).sum().backward()
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("make", "reason"), [
    (lambda: nn.ZeroPad2d((1, 2)), "four of them"),
    (lambda: nn.ReflectionPad2d(-1), "int >= 0"),
    (lambda: nn.ConstantPad2d(1.5, 0), "int >= 0"),
])
def test_pad_modules_refuse_bad_padding(make, reason):
    with pytest.raises(mg.GraphError, match=f"Pad2d: padding must be an {reason}|{reason}"):
        make()


def test_pad_modules_refuse_inputs_of_other_ranks():
    with pytest.raises(mg.GraphError, match="ReplicationPad2d: input must be 3-D or 4-D"):
        nn.ReplicationPad2d(1)(mg.Tensor(np.zeros((2, 2, 2, 2, 2), np.float32)))
