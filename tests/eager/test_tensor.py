"""Eager tensors: every op runs at once through the op registry and the CPU kernels, with the
values NumPy gives and the errors a graph gives."""
import threading

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.elementwise_table import OPS

RNG = np.random.default_rng(0)


def test_a_tensor_holds_a_copy_and_reads_like_an_array():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = mg.tensor(data)
    data[0, 0] = 99
    assert t.shape == (2, 3) and t.dtype == np.float32 and t.ndim == 2 and len(t) == 2
    out = t.numpy()
    out[0, 0] = -1  # the caller owns its copy
    assert t.numpy()[0, 0] == 0
    assert np.asarray(t).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert "Tensor([[0., 1., 2.]," in repr(t) and "dtype=float32" in repr(t)
    assert [r.numpy().tolist() for r in t] == [[0, 1, 2], [3, 4, 5]]
    assert float(t[1, 2]) == 5.0 and int(t[1, 2]) == 5 and t[1, 2].item() == 5.0
    with pytest.raises(mg.GraphError, match="6 elements, not 1"):
        float(t)


def test_python_literals_take_the_graphs_dtype_rules():
    assert mg.tensor([1.0, 2.0]).dtype == np.float32
    assert mg.tensor([1, 2]).dtype == np.int64
    assert mg.tensor(np.ones(2, np.float64)).dtype == np.float64
    assert mg.tensor([1, 2], dtype="int32").dtype == np.int32
    assert (mg.tensor([1, 2], dtype="int32") + 1).dtype == np.int32  # weak scalars
    with pytest.raises(mg.GraphError, match="uint8 is not supported"):
        mg.tensor(np.ones(2, np.uint8))


@pytest.mark.parametrize("entry", [op for op in OPS if op.public], ids=lambda op: op.name)
def test_every_elementwise_table_op_runs_eagerly_as_its_reference(entry):
    fn = getattr(F, entry.name)
    dtype = np.dtype(entry.dtypes[0])
    if dtype.kind == "f":
        a, b = RNG.uniform(0.2, 2.0, (3, 4)).astype(dtype), RNG.uniform(0.2, 2.0, (4,)).astype(dtype)
    elif dtype.kind == "b":
        a, b = RNG.random((3, 4)) > 0.5, RNG.random(4) > 0.5
    else:
        a, b = RNG.integers(1, 9, (3, 4)).astype(dtype), RNG.integers(1, 4, (4,)).astype(dtype)
    args = (a,) if entry.kind == "unary" else (a, b)
    got = fn(*map(mg.tensor, args))
    g = mg.Graph()
    want = mg.compile([fn(*(g.const(x) for x in args))], optimize=0).run({})[0]
    assert isinstance(got, mg.Tensor)
    np.testing.assert_array_equal(got.numpy(), want)  # the same kernel: bitwise


def test_operators_reductions_movement_and_nn_functions_match_numpy():
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    w = RNG.standard_normal((6, 3)).astype(np.float32)
    x, wt = mg.tensor(a), mg.tensor(w)
    np.testing.assert_allclose((x @ wt).numpy(), a @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal((-x).numpy(), -a)
    np.testing.assert_array_equal((x > 0).numpy(), a > 0)
    np.testing.assert_array_equal((2.0 - x).numpy(), np.float32(2.0) - a)
    np.testing.assert_allclose(x.sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(F.mean(x).numpy(), a.mean(), rtol=1e-5)
    np.testing.assert_array_equal(x[1:, ::2].numpy(), a[1:, ::2])
    np.testing.assert_array_equal(x.T.numpy(), a.T)
    np.testing.assert_array_equal(x.reshape(3, 8).numpy(), a.reshape(3, 8))
    np.testing.assert_array_equal(F.concat([x, x], axis=0).numpy(), np.concatenate([a, a]))
    np.testing.assert_array_equal(F.argmax(x, axis=1).numpy(), a.argmax(1))
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(F.softmax(x, axis=1).numpy(), e / e.sum(1, keepdims=True),
                               rtol=1e-5)
    img = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    conv = mg.nn.Conv2d(3, 4, 3, padding=1)
    g = mg.Graph()
    want = mg.compile([conv(g.input("x", img.shape))]).run({"x": img})[0]
    np.testing.assert_allclose(conv(mg.tensor(img)).numpy(), want, rtol=1e-5, atol=1e-6)


def test_views_share_bytes_and_keep_their_base_alive():
    x = mg.tensor(np.arange(12, dtype=np.float32))
    v = x.reshape(3, 4)[1]
    before = mg.memory_stats().current
    del x
    assert mg.memory_stats().current == before  # the view holds the base
    assert v.numpy().tolist() == [4, 5, 6, 7]


def test_memory_stats_count_live_tensors_and_the_peak():
    start = mg.memory_stats(reset_peak=True)
    x = mg.tensor(np.zeros(1000, np.float32))
    y = x * 2.0
    assert mg.memory_stats().current == start.current + 8000
    del y
    assert mg.memory_stats().current == start.current + 4000
    assert mg.memory_stats().peak >= start.current + 8000
    assert mg.memory_stats(reset_peak=True).peak >= start.current + 8000
    assert mg.memory_stats().peak == start.current + 4000
    del x


def test_errors_name_the_op_the_types_and_the_users_line():
    x, y = mg.tensor(np.ones((2, 3), np.float32)), mg.tensor(np.ones((4, 5), np.float32))
    with pytest.raises(mg.OpError, match=r"matmul\(f32\[2,3\], f32\[4,5\]\).*test_tensor.py"):
        x @ y
    with pytest.raises(mg.KernelError, match="take.*test_tensor.py.*index is out of range"):
        F.take(x, mg.tensor(np.array([5])), axis=0)


def test_a_tensor_and_a_graph_var_do_not_mix():
    g = mg.Graph()
    v = g.input("x", (2,))
    t = mg.tensor([1.0, 2.0])
    for make in (lambda: t + v, lambda: v + t, lambda: F.maximum(v, t)):
        with pytest.raises(mg.GraphError, match="an eager Tensor and a graph Var cannot be mixed"):
            make()


def test_python_control_flow_on_values():
    x = mg.tensor([3.0])
    steps = 0
    while float(x) > 0.1:
        x = x * 0.5
        steps += 1
    assert steps == 5
    assert bool(x.sum() > 0) and not bool(x.sum() < 0)


def test_eager_ops_from_many_threads_give_the_serial_results():
    arrays = [RNG.standard_normal((64, 64)).astype(np.float32) for _ in range(8)]
    serial = [(F.relu(mg.tensor(a) @ mg.tensor(a)) + 1.0).numpy() for a in arrays]
    results = [None] * len(arrays)

    def work(i):
        for _ in range(20):
            results[i] = (F.relu(mg.tensor(arrays[i]) @ mg.tensor(arrays[i])) + 1.0).numpy()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, serial):
        np.testing.assert_array_equal(got, want)


def test_empty_and_special_values():
    e = mg.tensor(np.zeros((0, 3), np.float32))
    assert (e + 1.0).shape == (0, 3) and F.sum(e).item() == 0.0
    s = mg.tensor(np.array([np.nan, -np.inf, 0.0], np.float32))
    np.testing.assert_array_equal(F.relu(s).numpy(), [np.nan, 0.0, 0.0])
    m = mg.tensor(np.array([np.iinfo(np.int32).min], np.int32))
    assert (m // -1).numpy().tolist() == [np.iinfo(np.int32).min]  # NumPy's wrap, no SIGFPE
