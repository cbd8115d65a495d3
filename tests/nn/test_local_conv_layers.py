"""MegEngine's LocalConv2d and RegionRestrictedConv layers (nn/local_conv.py): weight shapes and
initialisation, forward through F, MegEngine's module paths, training, and bad arguments."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.module as M
from mgegraph import nn
from mgegraph.ir.errors import GraphError
from mgegraph.module import conv as module_conv


def test_local_conv2d_layer():
    m = nn.LocalConv2d(4, 8, 10, 9, 3, padding=1, groups=2)
    assert m.weight.shape == (2, 10, 9, 2, 3, 3, 4) and m.bias is None
    assert abs(float(m.weight.numpy().std()) - (1 / 18) ** 0.5) < 0.02  # std sqrt(1 / fan_in)
    x = mg.tensor(np.random.default_rng(0).standard_normal((2, 4, 10, 9)).astype(np.float32))
    want = F.local_conv2d(x, m.weight, padding=1)
    np.testing.assert_array_equal(m(x).numpy(), want.numpy())


def test_local_conv2d_dtype_promotion():
    """A float16 input with the float32 weight: the float32 input's numbers."""
    m = M.LocalConv2d(16, 32, 7, 7, 3)
    x = mg.tensor(np.random.default_rng(1).random((2, 16, 7, 7)).astype(np.float16))
    np.testing.assert_equal(m(x).numpy(), m(x.astype("float32")).numpy())


def test_region_restricted_conv_layer_trains():
    m = nn.RegionRestrictedConv(4, 4, 3, groups=4, padding=1)
    assert m.weight.shape == (4, 1, 1, 3, 3) and m.bias.shape == (1, 4, 1, 1)
    rng = np.random.default_rng(2)
    x = mg.tensor(rng.standard_normal((2, 4, 6, 6)).astype(np.float32))
    rin = mg.tensor(rng.integers(0, 2, (2, 6, 6)).astype(np.uint8))
    rout = mg.tensor(rng.integers(0, 2, (2, 6, 6)).astype(np.uint8))
    gm = mg.autodiff.GradManager().attach(m.parameters())
    with gm:
        loss = F.sum(m(x, rin, rout) ** 2)
        gm.backward(loss)
    assert m.weight.grad.shape == m.weight.shape and m.bias.grad.shape == m.bias.shape
    assert np.abs(m.weight.grad.numpy()).sum() > 0


def test_megengine_module_paths():
    assert M.LocalConv2d is nn.LocalConv2d is module_conv.LocalConv2d
    assert M.RegionRestrictedConv is nn.RegionRestrictedConv is module_conv.RegionRestrictedConv
    assert F.nn.local_conv2d is F.local_conv2d
    assert F.nn.region_restricted_conv is F.region_restricted_conv


@pytest.mark.parametrize("make, match", [
    (lambda: nn.LocalConv2d(4, 6, 8, 8, 3, groups=4), "divisible by groups"),
    (lambda: nn.LocalConv2d(4, 8, 2, 2, 3), "leaves no output cell"),
    (lambda: nn.LocalConv2d(4, 8, 8, 8, 3, conv_mode="convolution"), "cross_correlation"),
    (lambda: nn.RegionRestrictedConv(2, 2, 3, padding_mode="reflect"), "padding_mode"),
])
def test_bad_arguments(make, match):
    with pytest.raises(GraphError, match=match):
        make()
