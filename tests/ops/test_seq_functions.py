"""The functions of sequence models (ops/sequence.py): RMS norm, SwiGLU, rotary embeddings, the
embedding lookup's padding_idx, MegEngine's uneven split and indexing helpers; against NumPy and
PyTorch, their gradients against finite differences and PyTorch, and a model file round trip."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, runtime
from mgegraph.ir.errors import OpError
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def run(fn, *arrays):
    """``fn`` over graph inputs of ``arrays``, compiled and run."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})[0]


# -- NumPy references ------------------------------------------------------------------------
def rms_ref(x, ndims, w=None, eps=1e-6):
    axes = tuple(range(x.ndim - ndims, x.ndim))
    y = x / np.sqrt(np.mean(np.square(x), axes, keepdims=True) + eps)
    return y if w is None else y * w


def rotary_ref(x, cos, sin, ids=None, interleaved=False, rot=0, heads=0):
    """ONNX's RotaryEmbedding, from its definition."""
    shape = x.shape
    x = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(*shape[:2], heads, -1)
    rot = rot or x.shape[-1]
    if ids is not None:
        cos, sin = cos[ids], sin[ids]
    cos, sin = cos[:, :, None], sin[:, :, None]
    xr, keep = x[..., :rot], x[..., rot:]
    x1, x2 = (xr[..., 0::2], xr[..., 1::2]) if interleaved else np.split(xr, 2, -1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    out = np.stack([real, imag], -1).reshape(xr.shape) if interleaved else \
        np.concatenate([real, imag], -1)
    out = np.concatenate([out, keep], -1)
    return out.reshape(shape) if len(shape) == 3 else out.transpose(0, 2, 1, 3)


# -- RMS norm --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, ndims", [((3, 7), 1), ((2, 5, 3, 4), 2), ((1, 1), 1),
                                          ((4, 9), 2)])
def test_rms_norm_matches_numpy_and_torch(shape, ndims):
    torch = pytest.importorskip("torch")
    x, w = rand(*shape), rand(*shape[len(shape) - ndims:])
    norm = shape[len(shape) - ndims:]
    got = run(lambda a, b: F.rms_norm(a, norm, weight=b, eps=1e-6), x, w)
    np.testing.assert_allclose(got, rms_ref(x, ndims, w), rtol=1e-5, atol=1e-6)
    want = torch.nn.functional.rms_norm(torch.tensor(x), norm, torch.tensor(w), eps=1e-6)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    # eps=None: the machine epsilon of the computing type, as PyTorch
    got = run(lambda a: F.rms_norm(a, norm), x)
    want = torch.nn.functional.rms_norm(torch.tensor(x), norm)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_rms_norm_of_zeros_is_zeros_and_half_is_computed_in_float32():
    assert not run(lambda a: F.rms_norm(a, (5,)), np.zeros((2, 5), np.float32)).any()
    x = (rand(3, 64) * 100).astype(np.float16)  # x**2 overflows float16's 65504
    got = F.rms_norm(mg.tensor(x), (64,)).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, rms_ref(x.astype(np.float32), 1, eps=1.2e-7), rtol=2e-3)


def test_rms_norm_refuses_bad_input():
    with pytest.raises(OpError, match=r"rms_norm.*normalized_shape \(4,\) does not match"):
        run(lambda a: F.rms_norm(a, 4), rand(3, 5))
    with pytest.raises(OpError, match=r"rms_norm.*weight shape \(3,\)"):
        run(lambda a, b: F.rms_norm(a, 5, weight=b), rand(3, 5), rand(3))
    with pytest.raises(OpError, match=r"rms_norm.*floating-point input, got int32"):
        run(lambda a: F.rms_norm(a, 5), np.ones((3, 5), np.int32))


def test_rms_norm_module():
    m = nn.RMSNorm(6, eps=1e-5)
    x = rand(2, 6)
    np.testing.assert_allclose(m(mg.tensor(x)).numpy(), rms_ref(x, 1, eps=1e-5), rtol=1e-5)
    assert m.state_dict().keys() == {"weight"}
    assert nn.RMSNorm((2, 3), elementwise_affine=False).state_dict() == {}


# -- SwiGLU ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, axis", [((3, 8), -1), ((2, 6, 5), 1), ((2, 2), 0)])
def test_swiglu_matches_numpy(shape, axis):
    x = rand(*shape)
    a, b = np.split(x, 2, axis)
    got = run(lambda v: F.swiglu(v, axis), x)
    np.testing.assert_allclose(got, a / (1 + np.exp(-a)) * b, rtol=1e-5, atol=1e-6)
    got = run(lambda v: F.swiglu(v, axis, alpha=1.702), x)
    np.testing.assert_allclose(got, a / (1 + np.exp(-1.702 * a)) * b, rtol=1e-5, atol=1e-6)


def test_swiglu_refuses_an_odd_axis_and_a_missing_one():
    with pytest.raises(OpError, match=r"swiglu.*axis -1 of size 5 does not split"):
        run(F.swiglu, rand(2, 5))
    with pytest.raises(OpError, match=r"swiglu.*axis 3 is out of range for 2-d input"):
        run(lambda a: F.swiglu(a, 3), rand(2, 4))


# -- rotary embeddings -----------------------------------------------------------------------
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rot", [0, 4])
def test_rotary_embedding_with_position_ids(interleaved, rot):
    x, ids = rand(2, 3, 5, 8), RNG.integers(0, 7, (2, 5))
    half = (rot or 8) // 2
    cos, sin = rand(7, half), rand(7, half)
    got = run(lambda a, c, s: F.rotary_embedding(a, c, s, ids, interleaved, rot), x, cos, sin)
    np.testing.assert_allclose(got, rotary_ref(x, cos, sin, ids, interleaved, rot),
                               rtol=1e-5, atol=1e-6)


def test_rotary_embedding_3d_without_position_ids():
    x, cos, sin = rand(2, 5, 12), rand(2, 5, 3), rand(2, 5, 3)
    got = run(lambda a, c, s: F.rotary_embedding(a, c, s, num_heads=2), x, cos, sin)
    np.testing.assert_allclose(got, rotary_ref(x, cos, sin, heads=2), rtol=1e-5, atol=1e-6)


def test_rotary_embedding_matches_llama_rotate_half():
    torch = pytest.importorskip("torch")
    q = rand(1, 2, 4, 6)
    theta = np.arange(4)[:, None] / 10000 ** (np.arange(3) / 3)
    cos, sin = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
    tq = torch.tensor(q)
    full_cos, full_sin = (torch.tensor(np.concatenate([t, t], -1)) for t in (cos, sin))
    rotate_half = torch.cat([-tq[..., 3:], tq[..., :3]], -1)
    want = tq * full_cos + rotate_half * full_sin
    got = run(lambda a: F.nn.rotary_embedding(a, cos, sin, np.zeros((1, 4), np.int64)
                                              + np.arange(4)), q)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_rotary_embedding_refuses_bad_input():
    with pytest.raises(OpError, match=r"rotary_embedding.*num_heads dividing"):
        run(lambda a: F.rotary_embedding(a, rand(2, 5, 2), rand(2, 5, 2)), rand(2, 5, 12))
    with pytest.raises(OpError, match=r"rotary_embedding.*rotary_dim / 2 = 4, got 3"):
        run(lambda a: F.rotary_embedding(a, rand(2, 5, 3), rand(2, 5, 3)), rand(2, 1, 5, 8))
    with pytest.raises(OpError, match=r"rotary_dim 5 must be even"):
        run(lambda a: F.rotary_embedding(a, rand(9, 2), rand(9, 2), np.zeros((2, 5), np.int64),
                                         rotary_dim=5), rand(2, 1, 5, 8))


# -- embedding's padding_idx -----------------------------------------------------------------
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_matches_torch_values_and_gradients(padding_idx):
    torch = pytest.importorskip("torch")
    w, ids = rand(5, 3), np.array([[0, 2, 2], [4, 0, 1]])
    g = mg.Graph()
    wv, iv = g.input("w", w.shape), g.input("i", ids.shape, "int64")
    y = F.embedding(iv, wv, padding_idx=padding_idx)
    (dw,) = mg.grad(F.sum(y * y), [wv])
    got, got_dw = mg.compile([y, dw]).run({"w": w, "i": ids})
    tw = torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.embedding(torch.tensor(ids), tw, padding_idx=padding_idx)
    (ty * ty).sum().backward()
    np.testing.assert_array_equal(got, ty.detach().numpy())
    np.testing.assert_allclose(got_dw, tw.grad.numpy(), rtol=1e-6)
    if padding_idx is not None:
        assert not got_dw[padding_idx].any() and w[padding_idx].any()


def test_embedding_module_starts_the_padding_row_at_zero():
    m = nn.Embedding(6, 4, padding_idx=1)
    assert not m.weight.numpy()[1].any() and m.weight.numpy()[0].any()
    out = m(mg.tensor(np.array([1, 0, 1])))
    assert not out.numpy()[0].any()
    with pytest.raises(mg.GraphError, match="padding_idx 6 is no row of 6"):
        nn.Embedding(6, 4, padding_idx=6)


def test_embedding_refuses_a_padding_row_outside_the_table():
    with pytest.raises(OpError, match=r"embedding.*padding_idx must be a row of the 5-row"):
        run(lambda w, i: F.embedding(i, w, padding_idx=5), rand(5, 3), np.zeros(2, np.int64))
    with pytest.raises(OpError, match=r"embedding.*\(num_embeddings, dim\) table, got 3-D"):
        run(lambda w, i: F.embedding(i, w), rand(5, 3, 1), np.zeros(2, np.int64))
    with pytest.raises(OpError, match=r"embedding.*indices dtype float32"):
        run(lambda w, i: F.embedding(i, w, padding_idx=0), rand(5, 3), rand(2))


# -- uneven split (MegEngine's rule) ---------------------------------------------------------
@pytest.mark.parametrize("n, k, sizes", [(20, 3, [7, 7, 6]), (10, 3, [4, 3, 3]), (7, 7, [1] * 7),
                                         (12, 4, [3] * 4), (5, 2, [3, 2])])
def test_split_into_uneven_parts(n, k, sizes):
    x = rand(n, 2)
    parts = F.split(mg.tensor(x), k)
    assert [p.shape[0] for p in parts] == sizes
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in parts]), x)


def test_split_points_as_megengine_and_too_many_parts():
    parts = F.split(mg.tensor(rand(10, 20)), [6, 17], axis=1)
    assert [p.shape for p in parts] == [(10, 6), (10, 11), (10, 3)]
    with pytest.raises(OpError, match="size 3 cannot be split into 4 non-empty parts"):
        F.split(mg.tensor(rand(3)), 4)


# -- MegEngine's indexing helpers ------------------------------------------------------------
@pytest.mark.parametrize("axis, keepdims", [(1, False), (0, True), (-1, False)])
def test_indexing_one_hot(axis, keepdims):
    x = rand(3, 4, 5)
    ax = axis % 3
    idx = RNG.integers(0, x.shape[ax], x.shape[:ax] + x.shape[ax + 1:])
    got = run(lambda a: F.indexing_one_hot(a, idx, axis, keepdims), x)
    want = np.take_along_axis(x, np.expand_dims(idx, ax), ax)
    np.testing.assert_array_equal(got, want if keepdims else want.squeeze(ax))


def test_indexing_one_hot_refuses_a_wrong_index_shape():
    with pytest.raises(OpError, match=r"indexing_one_hot.*without axis 1, \(3,\), got \(4,\)"):
        run(lambda a: F.indexing_one_hot(a, np.zeros(4, np.int64)), rand(3, 4))


def test_scatter_matches_megengine_and_torch():
    torch = pytest.importorskip("torch")
    source = np.array([[0.9935, 0.9465, 0.2256, 0.8926, 0.4396],
                       [0.7723, 0.0718, 0.5939, 0.357, 0.4576]], np.float32)
    index = np.array([[0, 2, 0, 2, 1], [2, 0, 1, 1, 2]])
    got = run(lambda a, s: F.scatter(a, 0, index, s), np.zeros((3, 5), np.float32), source)
    want = np.array([[0.9935, 0.0718, 0.2256, 0, 0], [0, 0, 0.5939, 0.357, 0.4396],
                     [0.7723, 0.9465, 0, 0.8926, 0.4576]], np.float32)
    np.testing.assert_array_equal(got, want)
    x, src = rand(4, 6), rand(3, 2)  # a smaller source, distinct places per row
    idx = np.array([[5, 0], [1, 2], [3, 4]])
    want = torch.tensor(x).scatter(1, torch.tensor(idx), torch.tensor(src)).numpy()
    np.testing.assert_array_equal(run(lambda a, s: F.scatter(a, 1, idx, s), x, src), want)


def test_scatter_refuses_mismatched_shapes():
    with pytest.raises(OpError, match=r"scatter.*index must have source's shape"):
        run(lambda a, s: F.scatter(a, 0, np.zeros((2, 2), np.int64), s), rand(3, 3), rand(2, 3))
    with pytest.raises(OpError, match=r"scatter.*same number of dims"):
        run(lambda a, s: F.scatter(a, 0, np.zeros(3, np.int64), s), rand(3, 3), rand(3))


# -- gradients -------------------------------------------------------------------------------
def test_gradients_against_finite_differences():
    r = np.random.default_rng(1)
    gradcheck(lambda a, w: F.rms_norm(a, (2, 3), weight=w, eps=1e-3), r.standard_normal(
        (4, 2, 3)), r.standard_normal((2, 3)))
    gradcheck(lambda a: F.swiglu(a, 0), r.standard_normal((4, 3)))
    gradcheck(lambda a, c, s: F.rotary_embedding(a, c, s, interleaved=True),
              r.standard_normal((2, 1, 3, 4)), r.standard_normal((2, 3, 2)),
              r.standard_normal((2, 3, 2)))
    gradcheck(lambda a, s: F.scatter(a, 1, np.array([[2, 0], [1, 3]]), s),
              r.standard_normal((2, 4)), r.standard_normal((2, 2)))
    gradcheck(lambda a: F.indexing_one_hot(a, np.array([2, 0]), 1), r.standard_normal((2, 3)))


def test_gradients_against_torch():
    torch = pytest.importorskip("torch")
    x, w = rand(3, 8), rand(8)
    g = mg.Graph()
    xv, wv = g.input("x", x.shape), g.input("w", w.shape)
    loss = F.sum(F.swiglu(F.rms_norm(xv, 8, weight=wv)) * F.rms_norm(xv, 8)[:, :4])
    got = mg.compile(mg.grad(loss, [xv, wv])).run({"x": x, "w": w})
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (x, w))
    a, b = torch.nn.functional.rms_norm(tx, (8,), tw).chunk(2, -1)
    (torch.nn.functional.silu(a) * b * torch.nn.functional.rms_norm(tx, (8,))[:, :4]).sum() \
        .backward()
    for mine, theirs in zip(got, (tx.grad, tw.grad)):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-4, atol=1e-5)


# -- the model file --------------------------------------------------------------------------
def test_a_graph_of_them_round_trips_through_the_model_file(tmp_path):
    g = mg.Graph()
    ids = g.input("ids", (2, 5), "int64")
    table = g.param("table", rand(11, 8))
    h = F.embedding(ids, table, padding_idx=0)
    h = F.rms_norm(h, 8, weight=g.param("gamma", rand(8)))
    h = F.reshape(h, (2, 5, 2, 4)).transpose(0, 2, 1, 3)
    h = F.rotary_embedding(h, rand(7, 2), rand(7, 2), RNG.integers(0, 7, (2, 5)))
    out = F.swiglu(F.split(h, 2, axis=1)[0], axis=-1)
    plan = mg.compile([out])
    mg.save(plan, tmp_path / "m.mgm")
    feeds = {"ids": RNG.integers(0, 11, (2, 5))}
    got, want = runtime.load(tmp_path / "m.mgm").run(feeds), plan.run(feeds)
    assert got[0].tobytes() == want[0].tobytes()
