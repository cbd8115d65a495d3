"""The argument forms MegEngine's functions take: several axes for argmax, repeated reduction
axes, pad modes in capitals, Tensor bounds for linspace/arange, broadcast-shaped conv biases and
``compute_mode="float32"``."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.autodiff import GradManager
from mgegraph.ir.errors import GraphError, OpError

RNG = np.random.default_rng(0)


def _x(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


# -- argmax / argmin over several axes -----------------------------------------------------------
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_several_axes_reduce_the_last_axis_first(name):
    data = _x(4, 5, 6)
    ref = getattr(np, name)(getattr(np, name)(data, axis=2), axis=0)  # MegEngine's order
    for axis in ((0, 2), (2, 0), (-1, -3), [0, -1]):
        got = getattr(F, name)(mg.tensor(data), axis=axis)
        np.testing.assert_array_equal(got.numpy(), ref)


def test_several_axes_keep_dims():
    data = _x(3, 4, 5)
    got = F.argmax(mg.tensor(data), axis=(0, 1), keepdims=True)
    ref = np.argmax(np.argmax(data, axis=1, keepdims=True), axis=0, keepdims=True)
    assert got.shape == (1, 1, 5)
    np.testing.assert_array_equal(got.numpy(), ref)


@pytest.mark.parametrize("axis", [(), (0, 0), (0, -2), "1", (0, 2)])
def test_bad_axes_of_argmax_are_refused(axis):
    with pytest.raises(OpError, match=r"argmax\(f32\[3,4\]\)"):
        F.argmax(mg.tensor(_x(3, 4)), axis=axis)


# -- repeated reduction axes ---------------------------------------------------------------------
@pytest.mark.parametrize("axis", [(-1, 1), (0, -2), [1, 1]])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "argmin"])
def test_an_axis_given_twice_is_an_assertion_error_as_megengine(name, axis):
    with pytest.raises(AssertionError) as info:
        getattr(F, name)(mg.tensor(_x(2, 3)), axis=axis)
    assert isinstance(info.value, OpError) and "repeated axis" in str(info.value)
    assert info.value.op == name and "f32[2,3]" in str(info.value)


def test_negative_axes_that_do_not_repeat_still_reduce():
    data = _x(2, 3)
    for axis in ((-2, 1), (-1, 0)):
        np.testing.assert_allclose(F.sum(mg.tensor(data), axis=axis).numpy(),
                                   data.sum(axis=axis), rtol=1e-6)


def test_an_out_of_range_axis_stays_a_plain_op_error():
    with pytest.raises(OpError) as info:
        F.sum(mg.tensor(_x(2, 3)), axis=(0, 5))
    assert not isinstance(info.value, AssertionError)


# -- pad modes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, np_mode", [("CONSTANT", "constant"), ("EDGE", "edge"),
                                           ("REPLICATE", "edge"), ("REFLECT", "reflect"),
                                           ("Reflect", "reflect")])
def test_pad_modes_in_any_case(mode, np_mode):
    data = _x(3, 4)
    got = F.nn.pad(mg.tensor(data), ((2, 1), (1, 2)), mode)
    np.testing.assert_array_equal(got.numpy(), np.pad(data, ((2, 1), (1, 2)), np_mode))


def test_an_unknown_pad_mode_is_still_refused():
    with pytest.raises(OpError, match="mode must be one of"):
        F.nn.pad(mg.tensor(_x(3, 3)), ((1, 1), (1, 1)), "MIRROR")


# -- Tensor bounds of linspace and arange --------------------------------------------------------
def test_linspace_takes_one_value_tensors():
    got = F.linspace(mg.tensor(1), mg.tensor(9.0), mg.tensor(9))
    np.testing.assert_allclose(got.numpy(), np.linspace(1, 9, 9, dtype=np.float32))


def test_arange_takes_one_value_tensors():
    got = F.arange(mg.tensor(10), mg.tensor([2]), mg.tensor(-2))
    np.testing.assert_array_equal(got.numpy(), np.arange(10, 2, -2, dtype=np.float32))
    np.testing.assert_array_equal(F.arange(mg.tensor(4)).numpy(), np.arange(4.0))


def test_a_bound_of_several_values_is_refused():
    with pytest.raises(OpError, match=r"linspace\(i32\[2\]\): stop must be a single value"):
        F.linspace(0, mg.tensor([1, 2]), 5)


def test_a_graph_value_as_a_bound_is_refused():
    g = mg.Graph()
    x = g.input("x", (1,), "float32")
    with pytest.raises(OpError, match="start must be a number or an eager Tensor"):
        F.arange(x, 5, graph=g)


# -- conv biases in MegEngine's broadcast form, compute_mode -------------------------------------
def test_conv1d_takes_a_1_oc_1_bias():
    x, w, b = _x(2, 2, 7), _x(3, 2, 3), _x(3)
    ref = F.conv1d(mg.tensor(x), mg.tensor(w), mg.tensor(b), 2, 1).numpy()
    got = F.conv1d(mg.tensor(x), mg.tensor(w), mg.tensor(b.reshape(1, 3, 1)), 2, 1).numpy()
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(got - F.conv1d(mg.tensor(x), mg.tensor(w), None, 2, 1).numpy(),
                               np.broadcast_to(b.reshape(1, 3, 1), ref.shape), atol=1e-5)


def test_conv_transpose1d_takes_a_1_oc_1_bias():
    x, w, b = _x(2, 4, 5), _x(4, 3, 3), _x(6)
    ref = F.conv_transpose1d(mg.tensor(x), mg.tensor(w), mg.tensor(b), 2, groups=2).numpy()
    got = F.conv_transpose1d(mg.tensor(x), mg.tensor(w), mg.tensor(b.reshape(1, 6, 1)), 2,
                             groups=2).numpy()
    np.testing.assert_array_equal(got, ref)


def test_conv3d_takes_a_1_oc_1_1_1_bias():
    x, w, b = _x(2, 2, 4, 5, 4), _x(3, 2, 2, 2, 2), _x(3)
    ref = F.conv3d(mg.tensor(x), mg.tensor(w), mg.tensor(b), 2).numpy()
    got = F.conv3d(mg.tensor(x), mg.tensor(w), mg.tensor(b.reshape(1, 3, 1, 1, 1)), 2).numpy()
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("fn, x, w, bias", [
    (F.conv1d, (2, 2, 6), (3, 2, 2), (1, 3, 2)),
    (F.conv1d, (2, 2, 6), (3, 2, 2), (4,)),
    (F.conv3d, (1, 2, 3, 3, 3), (3, 2, 1, 1, 1), (1, 3, 1, 1)),
    (F.conv3d, (1, 2, 3, 3, 3), (3, 2, 1, 1, 1), (1, 3, 1, 1, 2))])
def test_a_bias_of_another_shape_is_refused(fn, x, w, bias):
    with pytest.raises(OpError, match=r"bias must have shape \(3,\) or \(1, 3"):
        fn(mg.tensor(_x(*x)), mg.tensor(_x(*w)), mg.tensor(_x(*bias)))


def test_compute_mode_float32_accumulates_halves_in_float32():
    x, w = _x(1, 3, 9, 9), _x(4, 3, 3, 3)
    half = F.conv2d(mg.tensor(x.astype(np.float16)), mg.tensor(w.astype(np.float16)),
                    compute_mode="float32")
    wide = F.conv2d(mg.tensor(x.astype(np.float16).astype(np.float32)),
                    mg.tensor(w.astype(np.float16).astype(np.float32)))
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half.numpy(), wide.numpy().astype(np.float16))
    y = F.conv3d(mg.tensor(_x(1, 2, 3, 3, 3)), mg.tensor(_x(2, 2, 1, 1, 1)),
                 compute_mode="float32")
    assert y.shape == (1, 2, 3, 3, 3)


@pytest.mark.parametrize("fn", [F.conv2d, F.conv1d])
def test_an_unknown_compute_mode_is_refused(fn):
    x, w = (_x(1, 2, 5, 5), _x(2, 2, 3, 3)) if fn is F.conv2d else (_x(1, 2, 5), _x(2, 2, 3))
    with pytest.raises(GraphError, match="compute_mode 'default' or 'float32', got .*'float64'"):
        fn(mg.tensor(x), mg.tensor(w), compute_mode="float64")


def test_deformable_conv2d_takes_compute_mode_float32():
    x, w = _x(1, 2, 5, 5), _x(3, 2, 3, 3)
    offset, mask = np.zeros((1, 18, 3, 3), np.float32), np.ones((1, 9, 3, 3), np.float32)
    args = [mg.tensor(v) for v in (x, w, offset, mask)]
    np.testing.assert_array_equal(
        F.vision.deformable_conv2d(*args, compute_mode="float32").numpy(),
        F.vision.deformable_conv2d(*args).numpy())
    with pytest.raises(OpError, match="compute_mode 'default' or 'float32'"):
        F.vision.deformable_conv2d(*args, compute_mode="float16")


def test_a_broadcast_bias_gets_its_gradient_in_its_own_shape():
    x, w = mg.tensor(_x(2, 2, 6)), mg.tensor(_x(3, 2, 2))
    bias = mg.tensor(_x(1, 3, 1))
    upstream = _x(2, 3, 5)
    gm = GradManager().attach([bias])
    with gm:
        gm.backward(F.conv1d(x, w, bias), mg.tensor(upstream))
    assert bias.grad.shape == (1, 3, 1)
    np.testing.assert_allclose(bias.grad.numpy(), upstream.sum(axis=(0, 2), keepdims=True),
                               rtol=1e-5)


def test_the_deformable_conv2d_layer_takes_compute_mode_float32():
    x = _x(1, 2, 5, 5)
    offset, mask = np.zeros((1, 18, 3, 3), np.float32), np.ones((1, 9, 3, 3), np.float32)
    layer = mg.module.DeformableConv2d(2, 3, 3, compute_mode="float32")
    plain = mg.module.DeformableConv2d(2, 3, 3)
    plain.load_state_dict(layer.state_dict())
    args = [mg.tensor(v) for v in (x, offset, mask)]
    np.testing.assert_array_equal(layer(*args).numpy(), plain(*args).numpy())
    with pytest.raises(GraphError, match="compute_mode 'default' or 'float32'"):
        mg.module.DeformableConv2d(2, 3, 3, compute_mode="float16")
