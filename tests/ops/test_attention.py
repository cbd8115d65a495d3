"""Scaled dot-product attention (ops/attention.py, the tiled CPU kernel _kernels/attention.pyx):
against a NumPy reference and PyTorch's scaled_dot_product_attention (masks: none, causal,
bool, additive; grouped-query heads; Lq != Lk; sizes no tile divides; L = 1; huge logits),
fully masked rows, eager, traced and graph mode, threads, the planned memory at long
sequences, a model file round trip and the errors of bad input."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph._kernels import parallel
from mgegraph.ir.errors import OpError
from mgegraph.jit import trace

RNG = np.random.default_rng(37)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def sdpa_ref(q, k, v, mask=None, causal=False, scale=None):
    """softmax(q k^T scale + mask) v in float64, grouped heads repeated, fully masked rows 0."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    groups = q.shape[-3] // k.shape[-3] if q.ndim >= 3 else 1
    k, v = np.repeat(k, groups, axis=-3), np.repeat(v, groups, axis=-3)
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    top = np.max(s, -1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0))
    total = e.sum(-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0) @ v


def run(fn, *arrays, optimize=1):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return mg.compile([fn(*xs)], optimize=optimize).run(
        {f"x{i}": a for i, a in enumerate(arrays)})[0]


def sdpa(*args, **kwargs):
    return F.nn.scaled_dot_product_attention(*args, **kwargs)


# (q shape, k shape, v shape, mask kind, causal): sizes cross the 64 x 64 tile unevenly
CASES = {
    "plain": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), None, False),
    "causal": ((2, 2, 70, 16), (2, 2, 70, 16), (2, 2, 70, 16), None, True),
    "causal Lq < Lk": ((1, 2, 9, 4), (1, 2, 130, 4), (1, 2, 130, 3), None, True),
    "causal Lq > Lk": ((1, 2, 80, 4), (1, 2, 33, 4), (1, 2, 33, 5), None, True),
    "bool padding": ((2, 2, 65, 8), (2, 2, 67, 8), (2, 2, 67, 8), "padding", False),
    "additive": ((2, 2, 31, 8), (2, 2, 129, 8), (2, 2, 129, 8), "additive", False),
    "additive causal": ((1, 3, 66, 8), (1, 3, 66, 8), (1, 3, 66, 8), "additive", True),
    "gqa": ((2, 6, 65, 8), (2, 2, 70, 8), (2, 2, 70, 4), None, True),
    "gqa bool full": ((1, 4, 20, 8), (1, 1, 20, 8), (1, 1, 20, 8), "full bool", False),
    "L = 1": ((3, 2, 1, 8), (3, 2, 1, 8), (3, 2, 1, 8), None, True),
    "3-d": ((4, 9, 8), (4, 11, 8), (4, 11, 2), None, False),
    "5-d": ((2, 3, 2, 7, 8), (2, 3, 2, 9, 8), (2, 3, 2, 9, 8), "padding", False),
}


def make_mask(kind, q, k):
    lead, lq, lk = q[:-2], q[-2], k[-2]
    if kind == "padding":           # (batch, 1, 1, Lk): keys past each sequence's length
        mask = RNG.random((*lead[:-1], 1, 1, lk)) > 0.3
        mask[..., 0] = True
        return mask
    if kind == "additive":
        return rand(lq, lk)
    if kind == "full bool":
        return RNG.random((*lead, lq, lk)) > 0.5
    return None


def case_arrays(name, dtype=np.float32):
    qs, ks, vs, kind, causal = CASES[name]
    return rand(*qs, dtype=dtype), rand(*ks, dtype=dtype), rand(*vs, dtype=dtype), \
        make_mask(kind, qs, ks), causal


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_against_numpy(name, dtype):
    q, k, v, mask, causal = case_arrays(name, dtype)
    gqa = q.ndim >= 3 and q.shape[-3] != k.shape[-3]
    arrays = (q, k, v) + (() if mask is None else (mask.astype(dtype) if mask.dtype != bool
                                                   else mask,))
    out = run(lambda *xs: sdpa(*xs[:3], attn_mask=xs[3] if len(xs) > 3 else None,
                               is_causal=causal, enable_gqa=gqa), *arrays)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, sdpa_ref(q, k, v, mask, causal),
                               rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("name", [n for n in CASES if n != "L = 1"])
def test_against_torch(name):
    torch = pytest.importorskip("torch")
    q, k, v, mask, causal = case_arrays(name)
    gqa = q.ndim >= 3 and q.shape[-3] != k.shape[-3]
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(t) for t in (q, k, v)),
        attn_mask=None if mask is None else torch.tensor(mask), is_causal=causal,
        enable_gqa=gqa).numpy()
    got = sdpa(*(mg.tensor(t) for t in (q, k, v)),
               attn_mask=None if mask is None else mg.tensor(mask), is_causal=causal,
               enable_gqa=gqa).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_scale_and_huge_logits_stay_finite():
    # scores of 1e4 and more: the running maximum keeps every exp in range
    q, k, v = rand(1, 2, 70, 8) * 100, rand(1, 2, 90, 8) * 100, rand(1, 2, 90, 8)
    out = run(lambda a, b, c: sdpa(a, b, c, scale=1.0), q, k, v)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, sdpa_ref(q, k, v, scale=1.0), rtol=1e-4, atol=1e-4)


def test_a_fully_masked_row_gives_zero_not_nan():
    q, k, v = rand(1, 1, 70, 4), rand(1, 1, 70, 4), rand(1, 1, 70, 4)
    mask = np.ones((70, 70), bool)
    mask[3] = False                  # row 3 attends nothing
    mask[66] = False                 # so does a row of the second query tile
    additive = np.where(mask, 0, -np.inf).astype(np.float32)
    for m in (mask, additive):
        out = run(lambda a, b, c, d: sdpa(a, b, c, attn_mask=d), q, k, v, m)
        assert (out[0, 0, 3] == 0).all() and (out[0, 0, 66] == 0).all()
        np.testing.assert_allclose(out, sdpa_ref(q, k, v, mask), rtol=1e-5, atol=1e-6)
    # no key at all (Lk = 0): every row is fully masked
    out = run(lambda a, b, c: sdpa(a, b, c), q, k[:, :, :0], v[:, :, :0])
    assert out.shape == (1, 1, 70, 4) and (out == 0).all()


def test_lse_output_is_the_rows_logsumexp():
    from mgegraph.ops.builder import apply_multi
    q, k, v = rand(2, 2, 67, 8), rand(2, 2, 70, 8), rand(2, 2, 70, 8)
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate((q, k, v))]
    _, lse = apply_multi("attention", xs, scale=0.5, is_causal=True)
    got = mg.compile([lse]).run({"x0": q, "x1": k, "x2": v})[0]
    s = np.where(np.tril(np.ones((67, 70), bool)), q.astype(np.float64) @
                 k.astype(np.float64).swapaxes(-1, -2) * 0.5, -np.inf)
    np.testing.assert_allclose(got, np.log(np.exp(s).sum(-1)), rtol=1e-5)


def test_dropout_is_a_composition_applied_to_the_weights():
    q, k, v = rand(1, 2, 30, 8), rand(1, 2, 30, 8), np.ones((1, 2, 30, 8), np.float32)
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate((q, k, v))]
    plan = mg.compile([sdpa(*xs, dropout_p=0.5, is_causal=True)], optimize=0)
    ops = {ins.op for ins in plan.instructions}
    assert "dropout" in ops and "attention" not in ops
    out = plan.run({"x0": q, "x1": k, "x2": v})[0]
    # v = 1: each row is the sum of its kept weights, 1 / (1 - p) times theirs; not all 1
    assert not np.allclose(out, 1) and np.isfinite(out).all() and (out >= 0).all()
    np.testing.assert_allclose(run(lambda *x: sdpa(*x, dropout_p=0.0), q, k, v),
                               sdpa_ref(q, k, v), rtol=1e-5, atol=1e-6)


def test_eager_traced_and_graph_agree():
    q, k, v, mask, _ = case_arrays("bool padding")

    def fn(a, b, c, d):
        return sdpa(a, b, c, attn_mask=d, is_causal=True)
    want = run(fn, q, k, v, mask)
    eager = fn(*(mg.tensor(t) for t in (q, k, v, mask))).numpy()
    traced = trace(fn)
    for _ in range(2):               # capture, then replay
        got = traced(*(mg.tensor(t) for t in (q, k, v, mask))).numpy()
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(eager, want)


@pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
@pytest.mark.parametrize("heads", [3, 1])
def test_the_same_bits_on_one_and_two_threads(monkeypatch, heads):
    # with one (batch, kv head) the backward's two threads take the two-pass way (query tiles,
    # then key tiles), one thread the one-pass way: the same sums in the same order
    q, k, v = rand(2 // heads, 3, 130, 16), rand(2 // heads, heads, 100, 16), \
        rand(2 // heads, heads, 100, 16)
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        g = mg.Graph()
        xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate((q, k, v))]
        out = sdpa(*xs, is_causal=True, enable_gqa=True)
        plan = mg.compile([out, *mg.grad(F.sum(out * out), xs)])
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            results.append(plan.run({"x0": q, "x1": k, "x2": v}))
    for a, b in zip(*results):
        assert a.tobytes() == b.tobytes()


def planned(length, composed=False):
    g = mg.Graph()
    xs = [g.input(f"x{i}", (1, 8, length, 64), "float32") for i in range(3)]
    out = sdpa(*xs, is_causal=True, dropout_p=0.1 if composed else 0.0)
    plan = mg.compile([out, *mg.grad(F.sum(out), xs)])
    return plan.arena_bytes


def test_planned_memory_grows_linearly_with_the_length():
    # forward and backward at L = 4096 and 8192: the arena doubles (a (L, L) score matrix per
    # head would make it 4x, and alone take 8 * 4096^2 * 4 bytes = 512 MiB at 4096)
    small, large = planned(4096), planned(8192)
    assert large <= 2.1 * small
    assert small < 8 * 4096 * 4096 * 4 / 16
    # the composition (dropout) does build the weights: quadratic, as the test would catch
    assert planned(512, composed=True) > 3.5 * planned(256, composed=True)


def test_the_workspace_is_declared_per_thread():
    g = mg.Graph()
    xs = [g.input(f"x{i}", (1, 1, 1000, 32), "float32") for i in range(3)]
    plan = mg.compile([sdpa(*xs)])
    (ins,) = [i for i in plan.instructions if i.op == "attention"]
    assert ins.workspace is not None
    threads = ins.ints[-1]
    assert plan.slots[ins.workspace].nbytes == threads * (64 * 64 + 2 * 64) * 4


def test_round_trips_through_the_model_file(tmp_path):
    q, k, v, _, _ = case_arrays("gqa")
    plan = mg.compile([_graph_of_sdpa(q, k, v)])
    mg.save(plan, tmp_path / "m.mgm")
    feeds = {"x0": q, "x1": k, "x2": v}
    assert runtime.load(tmp_path / "m.mgm").run(feeds)[0].tobytes() == \
        plan.run(feeds)[0].tobytes()


def _graph_of_sdpa(q, k, v):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate((q, k, v))]
    mask = g.const(np.tril(np.ones((q.shape[2], k.shape[2]), bool))[::-1].copy())
    return sdpa(*xs, attn_mask=mask, enable_gqa=True, scale=0.3)


# -- bad input -------------------------------------------------------------------------------
def graph_error(fn, *shapes_dtypes):
    g = mg.Graph()
    xs = [g.input(f"x{i}", s, d) for i, (s, d) in enumerate(shapes_dtypes)]
    with pytest.raises(OpError) as info:
        fn(*xs)
    return str(info.value)


@pytest.mark.parametrize("shapes,kwargs,words", [
    ([(2, 4, 5, 8), (2, 4, 6, 7), (2, 4, 6, 8)], {}, ["attention", "key", "(2, 4, 6, 7)"]),
    ([(2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 5, 8)], {}, ["value", "(2, 4, 5, 8)"]),
    ([(2, 4, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8)], {}, ["4 heads", "2", "enable_gqa"]),
    ([(2, 6, 5, 8), (2, 4, 6, 8), (2, 4, 6, 8)], {"enable_gqa": True}, ["6 heads", "4"]),
    ([(2, 4, 5, 8), (3, 4, 6, 8), (3, 4, 6, 8)], {}, ["batch"]),
])
def test_bad_shapes_name_the_op_and_shapes(shapes, kwargs, words):
    msg = graph_error(lambda *xs: sdpa(*xs, **kwargs), *((s, "float32") for s in shapes))
    assert "scaled_dot_product_attention" in msg or "attention" in msg
    for w in words:
        assert w in msg, msg
    assert "f32[" in msg


def test_bad_mask_and_dtypes_name_them():
    msg = graph_error(lambda a, b, c, m: sdpa(a, b, c, attn_mask=m),
                      ((2, 4, 5, 8), "float32"), ((2, 4, 6, 8), "float32"),
                      ((2, 4, 6, 8), "float32"), ((5, 7), "float32"))
    assert "attn_mask" in msg and "(5, 7)" in msg
    msg = graph_error(lambda a, b, c: sdpa(a, b, c), ((1, 1, 5, 8), "float32"),
                      ((1, 1, 6, 8), "float64"), ((1, 1, 6, 8), "float32"))
    assert "attention" in msg and "f64[" in msg
    msg = graph_error(lambda a, b, c: sdpa(a, b, c), ((1, 1, 5, 8), "int32"),
                      ((1, 1, 6, 8), "int32"), ((1, 1, 6, 8), "int32"))
    assert "floating-point" in msg and "i32[" in msg
    msg = graph_error(lambda a, b, c, m: sdpa(a, b, c, attn_mask=m),
                      ((1, 1, 5, 8), "float32"), ((1, 1, 6, 8), "float32"),
                      ((1, 1, 6, 8), "float32"), ((5, 6), "int32"))
    assert "attn_mask" in msg and "int32" in msg
