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


def test_data_without_dtype_takes_megengines_default_dtypes():
    # MegEngine's rule: float64 data becomes float32 and int64 data int32, lists and NumPy
    # arrays alike (PyTorch keeps a NumPy array's float64)
    assert mg.tensor([1.0, 2.0]).dtype == np.float32
    assert mg.tensor([1, 2]).dtype == np.int32
    assert mg.tensor(3).dtype == np.int32 and mg.tensor(True).dtype == np.bool_
    assert mg.tensor(np.ones(2, np.float64)).dtype == np.float32
    assert mg.tensor(np.arange(3, dtype=np.int64)).dtype == np.int32
    assert mg.tensor(np.ones(2, np.float16)).dtype == np.float16
    assert mg.tensor(np.ones(2, np.uint8)).dtype == np.uint8
    # dtype= keeps the wide types, and a tensor made from a tensor keeps its dtype
    wide = mg.tensor(np.array([0.1, 2.0 ** 40]), dtype="float64")
    assert wide.dtype == np.float64 and wide.numpy()[0] == 0.1
    assert mg.tensor(wide).dtype == np.float64
    assert mg.tensor(np.array([2 ** 40]), dtype="int64").item() == 2 ** 40
    with pytest.raises(mg.GraphError, match=r"outside int32's range.*dtype='int64'"):
        mg.tensor(np.array([2 ** 40]))
    assert mg.tensor([1, 2], dtype="int32").dtype == np.int32
    assert (mg.tensor([1, 2], dtype="int32") + 1).dtype == np.int32  # weak scalars
    with pytest.raises(mg.GraphError, match="uint16 is not supported"):
        mg.tensor(np.ones(2, np.uint16))


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
    one = mg.tensor(np.ones(2, np.float32))
    assert not np.signbit((one * 0.0).numpy()).any() and np.signbit((one * -0.0).numpy()).all()
    assert np.signbit((-0.0 * one).numpy()).all() and np.isnan((one * float("nan")).numpy()).all()
    m = mg.tensor(np.array([np.iinfo(np.int32).min], np.int32))
    assert (m // -1).numpy().tolist() == [np.iinfo(np.int32).min]  # NumPy's wrap, no SIGFPE


X = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
IDX = np.array([[1, 0, 2]], np.int64)
# every public function that is not an elementwise table entry, on one NCHW input v
CALLS = {
    "adaptive_avg_pool2d": lambda v: F.adaptive_avg_pool2d(v, 2),
    "adaptive_max_pool2d": lambda v: F.adaptive_max_pool2d(v, 3),
    "argmax": lambda v: F.argmax(v, axis=1), "argmin": lambda v: F.argmin(v, axis=3),
    "astype": lambda v: F.astype(v, "int32"), "cast": lambda v: F.cast(v, "float64"),
    "avg_pool2d": lambda v: F.avg_pool2d(v, 2), "max_pool2d": lambda v: F.max_pool2d(v, 3, 2, 1),
    "batch_norm": lambda v: F.batch_norm(v, training=True),
    "broadcast_to": lambda v: F.broadcast_to(v[:, :1], (2, 5, 6, 6)),
    "concat": lambda v: F.concat([v, v * 2.0], axis=2),
    "conv2d": lambda v: F.conv2d(v, v.graph.const(W), padding=1, stride=2),
    "cross_entropy": lambda v: F.cross_entropy(F.flatten(v, 1)[:, :5], v.graph.const(IDX[0, :2])),
    "dropout": lambda v: F.dropout(v, 0.4, seed=2),
    "expand_dims": lambda v: F.expand_dims(v, 1), "flatten": lambda v: F.flatten(v, 2),
    "flip": lambda v: F.flip(v, 3), "full_like": lambda v: F.full_like(v, 3.0),
    "gather": lambda v: F.gather(v[0, 0, :1], 1, v.graph.const(IDX)),
    "hsigmoid": F.hsigmoid, "hswish": F.hswish, "relu6": F.relu6,
    "hardtanh": lambda v: F.hardtanh(v, -0.5, 0.7), "softshrink": lambda v: F.softshrink(v, 0.3),
    "hardshrink": lambda v: F.hardshrink(v, 0.3),
    "layer_norm": lambda v: F.layer_norm(v, (6, 6)),
    "linear": lambda v: F.linear(F.flatten(v, 1)[:, :3], v.graph.const(W.reshape(4, 27)[:, :3].copy())),
    "log_softmax": lambda v: F.log_softmax(v, axis=1), "logsoftmax": lambda v: F.logsoftmax(v, 1),
    "softmax": lambda v: F.softmax(v, axis=-1),
    "matmul": lambda v: F.matmul(v, v, transpose_b=True),
    "max": lambda v: F.max(v, axis=(2, 3)), "min": lambda v: F.min(v, axis=0, keepdims=True),
    "mean": lambda v: F.mean(v, axis=1), "prod": lambda v: F.prod(v[:, :, :2, :2], axis=3),
    "sum": lambda v: F.sum(v), "var": lambda v: F.var(v, axis=2),
    "one_hot": lambda v: F.one_hot(v.graph.const(IDX), 4),
    "ones_like": F.ones_like, "zeros_like": F.zeros_like,
    "pad": lambda v: F.pad(v, ((0, 0), (0, 0), (1, 2), (2, 1))),
    "repeat": lambda v: F.repeat(v, 2, axis=1), "tile": lambda v: F.tile(v, (1, 2, 1, 1)),
    "reshape": lambda v: F.reshape(v, (6, -1)), "roll": lambda v: F.roll(v, 2, axis=3),
    "split": lambda v: F.split(v, 3, axis=1)[1], "squeeze": lambda v: F.squeeze(v[:, :1], 1),
    "stack": lambda v: F.stack([v, v], axis=0), "subscript": lambda v: F.subscript(v, (1, ..., slice(None, None, 2))),
    "take": lambda v: F.take(v, v.graph.const(IDX[0]), axis=1),
    "transpose": lambda v: F.transpose(v, (0, 2, 3, 1)),
    "where": lambda v: F.where(v > 0, v, v * 0.1),
}
# normalisations (functional/norms.py)
CALLS.update({
    "group_norm": lambda v: F.group_norm(v, 3), "instance_norm": F.instance_norm,
    "local_response_norm": lambda v: F.local_response_norm(v, 3, alpha=0.5),
    "mean_variance_normalization": lambda v: F.mean_variance_normalization(v, (2, 3)),
    "normalize": lambda v: F.normalize(v, axis=1),
})
CALLS |= {  # resampling
    "interpolate": lambda v: F.interpolate(v, scale_factor=1.5, mode="bicubic"),
    "pixel_shuffle": lambda v: F.pixel_shuffle(F.concat([v, v[:, :1]], axis=1), 2),
    "pixel_unshuffle": lambda v: F.pixel_unshuffle(v, 3),
}
CALLS |= {  # convolutions made of conv2d and its data gradient (ops/conv_api.py)
    "conv1d": lambda v: F.conv1d(F.reshape(v, (2, 3, 36)), v.graph.const(W[:, :, 0]), padding=1),
    "conv3d": lambda v: F.conv3d(F.reshape(v, (1, 3, 2, 6, 6)), v.graph.const(W[:, :, :2, :2,
                                                                            None].repeat(2, 4))),
    "conv_transpose1d": lambda v: F.conv_transpose1d(F.reshape(v, (2, 3, 36)),
                                                     v.graph.const(W[:3, :, 0]), stride=2),
    "conv_transpose2d": lambda v: F.conv_transpose2d(v, v.graph.const(W[:3]), stride=2,
                                                     padding=1, output_padding=1),
    "conv_transpose3d": lambda v: F.conv_transpose3d(
        F.reshape(v, (1, 3, 2, 6, 6)), v.graph.const(W[:3, :, :2, :2, None].repeat(2, 4)),
        stride=2, padding=1, output_padding=1),
    # the offsets and mask from the input itself: a 3x3 kernel's 9 taps, padding 1
    "deformable_conv2d": lambda v: F.deformable_conv2d(
        v, v.graph.const(W), F.concat([v] * 6, axis=1) * 0.3, F.sigmoid(F.concat([v] * 3, axis=1)),
        padding=1),
}
CALLS |= {  # pooling made of other ops (ops/pooling.py)
    "avg_pool1d": lambda v: F.avg_pool1d(F.reshape(v, (2, 3, 36)), 3, 2, 1),
    "max_pool1d": lambda v: F.max_pool1d(F.reshape(v, (2, 3, 36)), 4),
    "global_avg_pool2d": F.global_avg_pool2d, "global_max_pool2d": F.global_max_pool2d,
    "lp_pool1d": lambda v: F.lp_pool1d(F.reshape(v, (2, 3, 36)), 2.0, 3),
    "lp_pool2d": lambda v: F.lp_pool2d(v, 3.0, 2),
    "max_unpool2d": lambda v: F.max_unpool2d(*F.max_pool2d(v, 2, return_indices=True), 2),
}
CALLS |= {  # sorting and scans (ops/sorting.py)
    "sort": lambda v: F.sort(v, descending=True)[0], "argsort": lambda v: F.argsort(v),
    "topk": lambda v: F.topk(v, 3, kth_only=True)[1], "cumsum": lambda v: F.cumsum(v, 2),
    "cumprod": lambda v: F.cumprod(v, 1),
}
CALLS |= {  # compositions of the elementwise math (ops/elementwise.py, ops/hardmax.py)
    "masked_fill": lambda v: F.masked_fill(v, v > 0.5, -1.0),
    "hardmax": lambda v: F.hardmax(v, 1),
}
CALLS |= {  # sequence models and MegEngine's indexing helpers (ops/sequence.py)
    "embedding": lambda v: F.embedding(v.graph.const(IDX), F.reshape(v, (6, 36)), padding_idx=2),
    "indexing_one_hot": lambda v: F.indexing_one_hot(v, v.graph.const(IDX[:, :2].repeat(
        6, 0).reshape(2, 6, 1).repeat(6, 2)), axis=1),
    "rms_norm": lambda v: F.rms_norm(v, (6, 6), weight=v.graph.const(W[0, 0, :2, :2].repeat(
        3, 0).repeat(3, 1))),
    "rotary_embedding": lambda v: F.rotary_embedding(v, F.cos(v[:, 0, :, :3]),
                                                     F.sin(v[:, 0, :, :3])),
    "scatter": lambda v: F.scatter(v, 1, v.graph.const(IDX.reshape(1, 3, 1, 1).repeat(2, 0)
                                                       .repeat(6, 2).repeat(6, 3)), v * 2.0),
    "swiglu": lambda v: F.swiglu(v, axis=2),
}
CALLS |= {  # attention (ops/attention_api.py): v (2, 3, 6, 6) as (batch, heads, L, E)
    "scaled_dot_product_attention": lambda v: F.scaled_dot_product_attention(
        v, v * 0.5, v + 1.0, is_causal=True),
    "multi_head_attention": lambda v: F.multi_head_attention(
        F.reshape(v, (2, 18, 6)), F.reshape(v, (2, 18, 6)), F.reshape(v, (2, 18, 6)), 6, 2,
        0.0, 0.0, v.graph.const(np.resize(W, (1, 168)) * 0.1), qbias=True,
        kbias=True, vbias=True, obias=True)[0],
}
CALLS |= {  # MegEngine's F.tensor, F.math, F.elemwise and F.einsum (functional/)
    "copy": F.copy, "diag": lambda v: F.diag(v[0, 0], k=1), "swapaxes": lambda v: F.swapaxes(v, 1, 3),
    "std": lambda v: F.std(v, axis=(1, 2)), "norm": lambda v: F.norm(v, ord=3, axis=2),
    "isnan": lambda v: F.isnan(F.log(v)), "isinf": lambda v: F.isinf(1.0 / F.floor(v)),
    "logaddexp": lambda v: F.logaddexp(v, v[:, :1] * 2.0),
    "logical_and": lambda v: F.logical_and(v > 0, v < 0.5), "logical_or": lambda v: F.logical_or(
        v > 1, v < -1), "logical_xor": lambda v: F.logical_xor(v > 0, v[:1] > 0),
    "logical_not": lambda v: F.logical_not(v > 0),
    "einsum": lambda v: F.einsum("bcij,bcjk->bik", v, v),
    "cross": lambda v: F.cross(v[:, :, 0], v[:, :, 1], axisa=1, axisb=1),
    "logsumexp": lambda v: F.logsumexp(v * 30.0, axis=(1, 3)),
    "remap": lambda v: F.remap(v, F.concat([v[:, :1], v[:, 1:2]], axis=1).transpose(
        0, 2, 3, 1) * 3.0 + 2.0),
    "warp_affine": lambda v: F.warp_affine(v, v.graph.const(AFFINE), (5, 4), format="NCHW"),
    "warp_perspective": lambda v: F.warp_perspective(v, v.graph.const(PERSPECTIVE), (5, 4)),
}
CALLS |= {  # MegEngine's local and region-restricted convolutions (ops/local_conv.py)
    "local_conv2d": lambda v: F.local_conv2d(v, v.graph.const(LOCAL_W), padding=1),
    "region_restricted_conv": lambda v: F.region_restricted_conv(
        v, v.graph.const(W[:3, :2, None]), v.graph.const(REGIONS),
        v.graph.const(REGIONS[:, ::-1].copy()), padding=1, groups=3),
}
CALLS |= {  # MegEngine's matinv and sliding windows (ops/linalg_inv.py, ops/sliding_window.py)
    "matinv": lambda v: F.matinv(v[:, :, :3, :3] + v.graph.const(EYE3)),
    "sliding_window": lambda v: F.sliding_window(v, 3, padding=1, stride=2),
    "sliding_window_transpose": lambda v: F.sliding_window_transpose(
        F.sliding_window(v, 3, padding=1), (6, 6), 3, padding=1),
}
CALLS |= {  # MegEngine's F.metric (functional/metric.py)
    "topk_accuracy": lambda v: F.topk_accuracy(v.reshape(6, 36), v.graph.const(LABELS), topk=5),
}
LABELS = np.array([0, 7, 35, 3, 20, 11], np.int32)
EYE3 = np.eye(3, dtype=np.float32) * 4  # keeps the matrices matinv inverts well conditioned
LOCAL_W = np.linspace(-1, 1, 6 * 6 * 3 * 3 * 3 * 2, dtype=np.float32).reshape(6, 6, 3, 3, 3, 2)
REGIONS = (np.arange(2 * 6 * 6).reshape(2, 6, 6) % 3).astype(np.int32)
AFFINE = np.array([[[0.9, 0.1, 0.5], [-0.1, 1.1, 0.2]]] * 2, np.float32)
PERSPECTIVE = np.array([[[1.0, 0.1, 0.3], [0.0, 0.9, 0.1], [0.01, 0.0, 1.0]]] * 2, np.float32)
# their output's length depends on values: eager only (tests/ops/test_megengine_functional.py)
EAGER_ONLY = {"cond_take", "non_zero"}
# sources without an input: run eagerly without graph=, compared with the graph's below
SOURCES = {"arange": lambda g: F.arange(2, 9, 3, graph=g), "full": lambda g: F.full((2,), 7, graph=g),
           "linspace": lambda g: F.linspace(0, 1, 5, graph=g), "ones": lambda g: F.ones((3,), graph=g),
           "zeros": lambda g: F.zeros((2, 2), "int32", graph=g), "eye": lambda g: F.eye(3, 4, graph=g)}


def test_every_functional_function_is_covered_here():
    table = {op.name for op in OPS if op.public}
    assert set(F.__all__) - table == set(CALLS) | set(SOURCES) | EAGER_ONLY


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_function_runs_eagerly_with_the_graphs_numbers(name):
    g = mg.Graph()
    want = mg.compile([CALLS[name](g.input("x", X.shape))], optimize=0).run({"x": X})[0]
    got = CALLS[name](mg.tensor(X))
    assert isinstance(got, mg.Tensor)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_fills_without_a_graph_are_eager_tensors(name):
    got = SOURCES[name](None)
    want = mg.compile([SOURCES[name](mg.Graph())], optimize=0).run({})[0]
    assert isinstance(got, mg.Tensor)
    np.testing.assert_array_equal(got.numpy(), want)


def test_a_tensor_works_in_a_fresh_interpreter_that_imported_only_mgegraph():
    import subprocess
    import sys

    code = ("import mgegraph as mg; t = mg.tensor([1.0, 2.0]); "
            "print((t + 1.0).numpy().tolist(), (2.0 * t).numpy().tolist(), t.graph.eager)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2.0, 3.0] [2.0, 4.0] True"


def test_tensor_takes_megengines_device_and_hints():
    x = mg.tensor([1.0, 2.0], device="cpu0", is_const=True, no_cache=True)
    assert x.numpy().tolist() == [1.0, 2.0]
    assert mg.Tensor([3], device="xpux").numpy().tolist() == [3]
    with pytest.raises(mg.GraphError, match=r"device='gpu0'.*host memory"):
        mg.tensor([1.0], device="gpu0")
