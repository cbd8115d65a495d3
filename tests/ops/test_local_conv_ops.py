"""local_conv2d and region_restricted_conv (ops/local_conv.py, kernels _kernels/local_conv.pyx)
against a NumPy loop and PyTorch's unfold + einsum: odd sizes, strides, padding, dilation,
groups, both weight layouts, both id dtypes, half inputs, threads, and the errors of bad input."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph._kernels import parallel
from mgegraph.ir.errors import OpError

RNG = np.random.default_rng(0)
CASES = [  # (n, c, oc, (h, w), (kh, kw), groups, stride, padding, dilation)
    (2, 4, 8, (10, 10), (3, 3), 1, (1, 1), (1, 1), (1, 1)),
    (1, 6, 4, (7, 5), (2, 3), 2, (2, 1), (0, 2), (1, 2)),
    (3, 3, 3, (5, 6), (1, 1), 3, (1, 2), (0, 0), (1, 1)),
    (1, 2, 2, (6, 7), (3, 2), 1, (3, 2), (2, 1), (2, 1)),
    (1, 2, 70, (4, 3), (2, 2), 1, (1, 1), (1, 0), (1, 1)),  # the kernel's blocks of 32 outputs
    (1, 70, 2, (4, 3), (2, 2), 1, (1, 1), (1, 0), (1, 1)),  # and of 32 inputs (dx)
]


def out_size(hw, k, stride, padding, dilation):
    return tuple((hw[a] + 2 * padding[a] - dilation[a] * (k[a] - 1) - 1) // stride[a] + 1
                 for a in range(2))


def taps(x, n, c, oh, ow, k, stride, padding, dilation):
    """{(kh, kw): (ih, iw)} of output cell (oh, ow)'s window inside the image."""
    found = {}
    for kh in range(k[0]):
        for kw in range(k[1]):
            ih = oh * stride[0] - padding[0] + kh * dilation[0]
            iw = ow * stride[1] - padding[1] + kw * dilation[1]
            if 0 <= ih < x.shape[2] and 0 <= iw < x.shape[3]:
                found[kh, kw] = ih, iw
    return found


def local_reference(x, w, stride, padding, dilation):
    groups, oh_, ow_, icg, kh_, kw_, ocg = w.shape
    y = np.zeros((x.shape[0], groups * ocg, oh_, ow_))
    for n in range(x.shape[0]):
        for g in range(groups):
            for oh in range(oh_):
                for ow in range(ow_):
                    for (kh, kw), (ih, iw) in taps(x, n, 0, oh, ow, (kh_, kw_), stride, padding,
                                                   dilation).items():
                        xs = x[n, g * icg:(g + 1) * icg, ih, iw].astype(np.float64)
                        y[n, g * ocg:(g + 1) * ocg, oh, ow] += xs @ w[g, oh, ow, :, kh, kw, :]
    return y


def region_reference(x, w, rin, rout, stride, padding, dilation):
    groups, ocg, icg, kh_, kw_ = w.shape
    oh_, ow_ = rout.shape[1:]
    y = np.zeros((x.shape[0], groups * ocg, oh_, ow_))
    for n in range(x.shape[0]):
        for g in range(groups):
            for oh in range(oh_):
                for ow in range(ow_):
                    for (kh, kw), (ih, iw) in taps(x, n, 0, oh, ow, (kh_, kw_), stride, padding,
                                                   dilation).items():
                        if rin[n, ih, iw] != rout[n, oh, ow]:
                            continue
                        xs = x[n, g * icg:(g + 1) * icg, ih, iw].astype(np.float64)
                        y[n, g * ocg:(g + 1) * ocg, oh, ow] += w[g, :, :, kh, kw] @ xs
    return y


def run(fn, *arrays, **kw):
    """fn's output on ``arrays`` through a compiled graph (eager tensors are float32)."""
    g = mg.Graph()
    out = fn(*[g.input(f"a{i}", a.shape, a.dtype) for i, a in enumerate(arrays)], **kw)
    return mg.compile([out]).run({f"a{i}": a for i, a in enumerate(arrays)})[0]


def local_inputs(case, dtype):
    n, c, oc, hw, k, groups, stride, padding, dilation = case
    oh, ow = out_size(hw, k, stride, padding, dilation)
    x = RNG.standard_normal((n, c, *hw)).astype(dtype)
    w = RNG.standard_normal((groups, oh, ow, c // groups, *k, oc // groups)).astype(dtype)
    return x, w, {"stride": stride, "padding": padding, "dilation": dilation}


def region_inputs(case, dtype, id_dtype=np.int32):
    n, c, oc, hw, k, groups, stride, padding, dilation = case
    oh, ow = out_size(hw, k, stride, padding, dilation)
    x = RNG.standard_normal((n, c, *hw)).astype(dtype)
    w = RNG.standard_normal((groups, oc // groups, c // groups, *k)).astype(dtype)
    rin = RNG.integers(0, 3, (n, *hw)).astype(id_dtype)
    rout = RNG.integers(0, 3, (n, oh, ow)).astype(id_dtype)
    return x, w, rin, rout, {"stride": stride, "padding": padding, "dilation": dilation}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_local_conv2d_matches_numpy(case, dtype):
    x, w, attrs = local_inputs(case, dtype)
    y = run(F.local_conv2d, x, w, **attrs)
    assert y.dtype == dtype
    np.testing.assert_allclose(y, local_reference(x, w, **attrs), rtol=1e-5, atol=1e-5)


def test_local_conv2d_takes_the_ungrouped_6d_weight_and_a_bias():
    x, w, attrs = local_inputs(CASES[0], np.float32)
    bias = RNG.standard_normal((1, 8, 1, 1)).astype(np.float32)
    y = F.local_conv2d(mg.tensor(x), mg.tensor(w[0]), mg.tensor(bias), **attrs).numpy()
    np.testing.assert_allclose(y, local_reference(x, w, **attrs) + bias, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("id_dtype", [np.int32, np.uint8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_region_restricted_conv_matches_numpy(case, dtype, id_dtype):
    x, w, rin, rout, attrs = region_inputs(case, dtype, id_dtype)
    y = run(F.region_restricted_conv, x, w, rin, rout, groups=w.shape[0], **attrs)
    assert y.dtype == dtype
    np.testing.assert_allclose(y, region_reference(x, w, rin, rout, **attrs), rtol=1e-5,
                               atol=1e-5)


def test_region_restricted_conv_with_one_region_is_a_grouped_conv2d():
    x, w, rin, rout, attrs = region_inputs(CASES[1], np.float64)
    y = run(F.region_restricted_conv, x, w, np.zeros_like(rin), np.zeros_like(rout), groups=2,
            **attrs)
    want = run(F.conv2d, x, w.reshape(-1, *w.shape[2:]), groups=2, **attrs)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_megengine_example():
    """MegEngine's own numbers: 2 depthwise 2x2 filters over a 2x2 image, one region."""
    x = mg.tensor(np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2))
    w = mg.tensor(np.arange(8, dtype=np.float32).reshape(2, 1, 1, 2, 2))
    y = F.region_restricted_conv(x, w, mg.tensor(np.ones((1, 2, 2), np.int32)),
                                 mg.tensor(np.ones((1, 1, 1), np.int32)), groups=2)
    np.testing.assert_array_equal(y.numpy().ravel(), [14, 126])


@pytest.mark.parametrize("name", ["local", "region"])
def test_half_input_computes_as_float32(name):
    """A float16 input with a float32 weight promotes to float32: the same numbers as the
    input cast first (MegEngine's dtype promotion of its conv modules)."""
    if name == "local":
        x, w, attrs = local_inputs(CASES[0], np.float32)
        run = lambda x: F.local_conv2d(x, mg.tensor(w), **attrs)
    else:
        x, w, rin, rout, attrs = region_inputs(CASES[0], np.float32)
        run = lambda x: F.region_restricted_conv(x, mg.tensor(w), mg.tensor(rin),
                                                 mg.tensor(rout), **attrs)
    half = mg.tensor(x.astype(np.float16))
    y = run(half).numpy()
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, run(half.astype("float32")).numpy())


def training_step(g, feeds):
    """Both ops and both their gradients, in one loss."""
    x, wl, wr = (g.input(k, feeds[k].shape, feeds[k].dtype) for k in ("x", "wl", "wr"))
    rin, rout = (g.input(k, feeds[k].shape, feeds[k].dtype) for k in ("rin", "rout"))
    a = F.local_conv2d(x, wl, padding=1)
    b = F.region_restricted_conv(x, wr, rin, rout, padding=1)
    loss = F.sum(a * a) + F.sum(b * b * 0.5)
    return [loss, *mg.grad(loss, [x, wl, wr])]


def step_feeds(dtype):
    x, wl, _ = local_inputs(CASES[0], dtype)
    _, wr, rin, rout, _ = region_inputs(CASES[0], dtype)
    return {"x": x, "wl": wl, "wr": wr, "rin": rin, "rout": rout}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_two_and_three_threads_give_the_same_bits(dtype, monkeypatch):
    """Every kernel of the family planned on 1, 2 and 3 threads, fed read-only arrays: the
    same bits, and the inputs untouched."""
    feeds = step_feeds(dtype)
    for a in feeds.values():
        a.flags.writeable = False
    outs = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        plan = mg.compile(training_step(mg.Graph(), feeds), optimize=0)
        monkeypatch.undo()
        outs.append([a.tobytes() for a in plan.run(feeds)])
    assert outs[0] == outs[1] == outs[2]


def test_every_op_round_trips_through_the_model_file(tmp_path):
    feeds = step_feeds(np.float32)
    plan = mg.compile(training_step(mg.Graph(), feeds))
    assert {"local_conv2d", "local_conv2d_backward", "region_restricted_conv",
            "region_restricted_conv_backward"} <= {ins.op for ins in plan.instructions}
    mg.save(plan, tmp_path / "local.mgm")
    for got, want in zip(runtime.load(tmp_path / "local.mgm").run(feeds), plan.run(feeds)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    case = CASES[1]
    x, w, attrs = local_inputs(case, np.float64)
    n = x.shape[0]
    groups, oh, ow, icg, kh, kw, ocg = w.shape
    cols = torch.nn.functional.unfold(torch.from_numpy(x), (kh, kw), **attrs)
    cols = cols.reshape(n, groups, icg, kh * kw, oh * ow)
    tw = torch.from_numpy(w).reshape(groups, oh * ow, icg, kh * kw, ocg)
    want = torch.einsum("ngitl,glito->ngol", cols, tw).reshape(n, groups * ocg, oh, ow)
    got = run(F.local_conv2d, x, w, **attrs)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)


def _fails(match, fn):
    with pytest.raises(OpError, match=match):
        fn()


def test_bad_input_is_a_clear_error():
    x, w, attrs = local_inputs(CASES[0], np.float32)
    t = mg.tensor
    _fails(r"local_conv2d.*weight must be 7-D", lambda: F.local_conv2d(t(x), t(w[0, 0])))
    _fails(r"local_conv2d.*holds 10x10 output cells.*gives 8x8",
           lambda: F.local_conv2d(t(x), t(w)))
    _fails(r"local_conv2d.*4 input channels, the input \(2, 3, 10, 10\) has 3",
           lambda: F.local_conv2d(t(x[:, :3]), t(w), padding=1))
    _fails(r"cross_correlation", lambda: F.local_conv2d(t(x), t(w), conv_mode="convolution"))
    _fails(r"input dtype int32 is not supported by local_conv2d", lambda: F.local_conv2d(
        t(x.astype(np.int32)), t(w.astype(np.int32)), padding=1))
    x, w, rin, rout, attrs = region_inputs(CASES[0], np.float32)
    _fails(r"rin must be \(2, 10, 10\)", lambda: F.region_restricted_conv(
        t(x), t(w), t(rin[:, :5]), t(rout), **attrs))
    _fails(r"int32 or both uint8", lambda: F.region_restricted_conv(
        t(x), t(w), t(rin), t(rout.astype(np.uint8)), **attrs))
    _fails(r"int32 or both uint8", lambda: F.region_restricted_conv(
        t(x), t(w), t(rin.astype(np.float32)), t(rout.astype(np.float32)), **attrs))
    _fails(r"groups=2 must be a positive int equal to the weight's first axis",
           lambda: F.region_restricted_conv(t(x), t(w), t(rin), t(rout), groups=2, **attrs))
    _fails(r"compute_mode", lambda: F.region_restricted_conv(
        t(x), t(w), t(rin), t(rout), compute_mode="int8", **attrs))


def test_an_empty_batch_gives_empty_outputs_and_zero_weight_gradients():
    feeds = {k: a[:0] if k in ("x", "rin", "rout") else a
             for k, a in step_feeds(np.float32).items()}
    loss, dx, dwl, dwr = mg.compile(training_step(mg.Graph(), feeds)).run(feeds)
    assert loss == 0 and dx.shape == (0, 4, 10, 10)
    assert not dwl.any() and not dwr.any()
