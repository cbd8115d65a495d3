"""MegEngine's Tensor API on eager tensors: names, devices, indexing and writes by index,
mgegraph.device and mgegraph.config."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph import config, device
from mgegraph.ops.indexing import IndexingError

RNG = np.random.default_rng(0)


def test_name_device_and_to():
    x = mg.tensor([1.0, 2.0], name="x")
    assert x.name == "x" and mg.tensor(x).name == ""
    x.name = "renamed"
    assert x.name == "renamed"
    assert mg.tensor(0).name == ""
    assert x.device == device.get_default_device() == "xpux"
    assert x.device.logical_name == "xpux"
    moved = x.to("cpu0")
    assert moved.device == "cpu0" and moved.numpy().tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="invalid device name 'cpu-zero'"):
        x.to("cpu-zero")
    with pytest.raises(mg.GraphError, match="eager tensors live in host memory"):
        x.to("gpu0")


def test_to_is_recorded_by_a_grad_manager():
    w = mg.tensor([1.0, 2.0])
    gm = mg.GradManager().attach([w])
    with gm:
        gm.backward((w.to("cpu0") * 3.0).sum())
    assert w.grad.numpy().tolist() == [3.0, 3.0]


def test_device_module():
    assert device.get_device_count("cpu") == 1
    gpus = device.get_device_count("gpu")
    assert gpus == (device.get_device_count("xpu") - 1) and gpus >= 0
    assert device.is_cuda_available() == ("cuda" in mg.devices())
    assert device.what_is_xpu() == ("cuda" if device.is_cuda_available() else "cpu")
    with pytest.raises(ValueError, match="device type is one of"):
        device.get_device_count("tpu")
    before = device.get_default_device()
    try:
        mg.set_default_device("cpu0")
        assert mg.get_default_device() == "cpu0" and mg.tensor(1).device == "cpu0"
        with pytest.raises(ValueError, match="invalid device name"):
            mg.set_default_device("cpu")
    finally:
        mg.set_default_device(before)


def test_config_settings_are_checked_and_read_back():
    before = config.current()
    try:
        config.async_level = 0
        config.deterministic_kernel = True
        assert config.async_level == 0 and mg.config.deterministic_kernel is True
        with pytest.raises(ValueError, match="async_level must be 0, 1 or 2"):
            config.async_level = 3
        with pytest.raises(TypeError, match="benchmark_kernel must be a bool"):
            config.benchmark_kernel = "yes"
        assert config.async_level == 0  # a refused value changes nothing
    finally:
        config._current = before
    with pytest.raises(AttributeError, match="no attribute 'jit_fuse_reduce'"):
        config.jit_fuse_reduce  # noqa: B018


def test_megengine_tensor_module_path_keeps_the_class_name():
    import mgegraph.tensor as module_or_class  # noqa: F401  (binds mg.tensor, the class)
    from mgegraph.tensor import Parameter, Tensor

    assert mg.tensor is Tensor and issubclass(Parameter, Tensor)
    assert isinstance(mg.tensor([1]), mg.tensor)


def test_len_of_a_0d_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="0-d"):
        len(mg.tensor(1.0))
    assert len(mg.tensor([[1, 2]])) == 1


INDEXES = [
    (1, slice(None), 1), (slice(None, 2), np.array([0, 2]), [0, 1]), (None, None),
    (slice(None), None, Ellipsis), (1, None, slice(None), 1), (slice(None), None, 1, None),
    (slice(None, 2), np.array([0, 2]), None, [0, 1]),
    (None, slice(None), None, [0, 2], None, [1, 2]), np.array([[0, 1], [1, 2]]),
    (np.array([[0, 1], [1, 2]]), None, np.array([[0, 1], [1, 2]])), ((0, 2, 1), slice(None)),
    (Ellipsis, [-1, 0]), ([True, False, True],), (slice(None), [True, False, True], 0),
    (np.arange(27).reshape(3, 3, 3) % 2 == 0,), ([], slice(None)), (slice(2, 0, -1), [[2], [0]]),
]


@pytest.mark.parametrize("index", INDEXES, ids=repr)
def test_getitem_matches_numpy(index):
    x = np.arange(27, dtype=np.float32).reshape(3, 3, 3)
    got = mg.tensor(x)[index]
    np.testing.assert_array_equal(got.numpy(), x[index])
    assert got.shape == x[index].shape


def test_getitem_with_index_tensors_matches_numpy_and_torch():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((4, 5, 6)).astype(np.float32)
    i, j = np.array([[0, 3], [-1, 2]]), np.array([4, -5])
    got = mg.tensor(x)[:, mg.tensor(i), mg.tensor(j)]
    np.testing.assert_array_equal(got.numpy(), x[:, i, j])
    np.testing.assert_array_equal(got.numpy(), torch.from_numpy(x)[:, i, j].numpy())
    mask = x[:, 0, 0] > 0
    np.testing.assert_array_equal(mg.tensor(x)[mg.tensor(mask)].numpy(), x[mask])


def test_an_index_tensor_out_of_range_raises_instead_of_reading_a_neighbour():
    x = mg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(mg.KernelError):
        x[mg.tensor([0, 1]), mg.tensor([1, 4])].numpy()  # (1, 4) would be row 2's first
    with pytest.raises(IndexingError, match=r"subscript\(f32\[3,4\]\).*out of bounds"):
        x[[0, 1], [1, 4]]


def test_indexing_errors_are_index_errors_naming_the_input():
    x = mg.tensor(np.zeros((3, 3), np.float32))
    with pytest.raises(IndexError, match=r"subscript\(f32\[3,3\]\).*single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="too many indices"):
        x[[0], [1], [2]]
    with pytest.raises(IndexError):
        x[[True, False]]  # a mask of the wrong length
    with pytest.raises(ValueError, match=r"value's shape \(2,\) does not broadcast"):
        x[:] = mg.tensor([1, 2])


def test_getitem_gradient_matches_finite_differences_and_torch():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((3, 4)).astype(np.float64)
    w = RNG.standard_normal((3, 2)).astype(np.float64)
    index = (slice(None), [3, 0])
    t = mg.tensor(x, dtype="float64")
    gm = mg.GradManager().attach([t])
    with gm:
        gm.backward((t[index] * mg.tensor(w, dtype="float64")).sum())
    tx = torch.tensor(x, requires_grad=True)
    (tx[index] * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    eps, fd = 1e-6, np.zeros_like(x)
    for k in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[k] += eps
        down[k] -= eps
        fd[k] = ((up[index] * w).sum() - (down[index] * w).sum()) / (2 * eps)
    np.testing.assert_allclose(t.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


WRITES = [
    ((Ellipsis,), (2, 3)), ((slice(None),), ()), (([1, 0],), (2, 3)), ((slice(1, 3),), (3,)),
    ((1, 1), ()), ((slice(None), 1), (2,)), (([True, False],), (3,)),
    (([0, 0, 1], [2, 2, 0]), (3,)),  # a position written twice: the last write wins
    (([], slice(None)), (3,)),
]


@pytest.mark.parametrize("index, vshape", WRITES, ids=repr)
def test_setitem_matches_numpy(index, vshape):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    v = RNG.standard_normal(vshape).astype(np.float32)
    t = mg.tensor(x)
    old = t
    t[index] = v
    want = x.copy()
    want[index] = v
    np.testing.assert_array_equal(t.numpy(), want)
    assert t is old


def test_setitem_gives_a_new_value_and_keeps_the_old_one_for_its_readers():
    t = mg.tensor([1, 2, 3])
    view = t.reshape(3)
    before = t.id
    t[[0, 2]] = [3, 2]
    assert t.numpy().tolist() == [3, 2, 2] and t.dtype == np.int32
    assert t.id != before and view.numpy().tolist() == [1, 2, 3]
    t[1:3] = 7.9  # cast to the tensor's dtype, as MegEngine's
    assert t.numpy().tolist() == [3, 7, 7]


def test_setitem_on_a_recorded_tensor_sends_gradients_to_the_old_value_and_the_value():
    w, v = mg.tensor([1.0, 2.0, 3.0]), mg.tensor(5.0)
    gm = mg.GradManager().attach([w, v])
    with gm:
        y = w * 2.0
        y[1] = v * 3.0
        gm.backward((y * y).sum())
    # y = [2 w0, 3 v, 2 w2]: d/dw = [8 w0, 0, 8 w2], d/dv = 18 v
    assert w.grad.numpy().tolist() == [8.0, 0.0, 24.0]
    assert v.grad.item() == 90.0


def test_setitem_on_an_attached_tensor_while_recording_is_refused():
    w = mg.tensor([1.0, 2.0])
    gm = mg.GradManager().attach([w])
    with gm, pytest.raises(mg.GraphError, match="attached to a recording GradManager"):
        w[0] = 3.0
    assert w.numpy().tolist() == [1.0, 2.0]


def test_setitem_on_a_parameter_writes_its_array_in_place():
    p = mg.nn.Parameter(np.zeros((2, 2), np.float32))
    ident = p.id
    p[0] = [1.0, 2.0]
    assert p.id == ident and p.value.tolist() == [[1.0, 2.0], [0.0, 0.0]]


def test_setitem_inside_a_trace_is_a_new_value_in_the_graph_and_leaves_the_argument():
    @mg.trace
    def double_middle(x):
        x[1:3] = x[1:3] * 2.0
        return x

    for start in range(3):
        a = mg.tensor(np.arange(4, dtype=np.float32) + start)
        got = double_middle(a)
        want = np.arange(4, dtype=np.float32) + start
        assert a.numpy().tolist() == want.tolist()  # every call, the capture included
        want[1:3] *= 2
        assert got.numpy().tolist() == want.tolist()


def test_index_tensors_in_a_trace_are_inputs_of_the_plan():
    @mg.trace
    def pick(x, idx):
        return x[idx]

    x = mg.tensor(np.arange(11))
    for _ in range(3):
        idx = RNG.integers(11, size=(5, 7))
        np.testing.assert_array_equal(pick(x, mg.tensor(idx)).numpy(), np.arange(11)[idx])


def test_numpy_ufuncs_of_mgegraph_functions_give_tensors():
    x, y = np.array([1, 2, 3], np.int32), np.array([1, 0, 3], np.int32)
    t = mg.tensor(x)
    added = np.add(t, y)
    assert isinstance(added, mg.Tensor) and added.numpy().tolist() == [2, 2, 6]
    assert np.equal(t, t).numpy().tolist() == [True, True, True]
    assert isinstance(np.subtract(y, t), mg.Tensor)
    assert np.cumsum(t).tolist() == [1, 3, 6]  # not a function of mgegraph: NumPy's answer


def test_prod_method():
    assert mg.tensor([[1, 2], [3, 4]]).prod(axis=-1, keepdims=True).numpy().tolist() == [[2], [12]]


def test_setitem_in_a_lazy_block_is_pending_like_any_op():
    x = mg.tensor([1.0, 2.0, 3.0])
    with mg.lazy():
        y = x * 2.0
        y[0] = 10.0
        z = y + 1.0
    assert y.numpy().tolist() == [10.0, 4.0, 6.0] and z.numpy().tolist() == [11.0, 5.0, 7.0]
    assert x.numpy().tolist() == [1.0, 2.0, 3.0]
