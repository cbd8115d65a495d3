"""Gradients of sort, topk, cumsum and cumprod against central finite differences (float64) and
PyTorch's autograd: a sorted value's gradient goes back to its index; cumprod's is right where
the input holds zeros (one zero, two zeros, a zero first or last)."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(7)


def distinct(*shape):
    """Values far apart, so finite differences never reorder them."""
    return RNG.permutation(np.prod(shape)).reshape(shape) * 0.1 + RNG.uniform(-0.01, 0.01, shape)


@pytest.mark.parametrize("descending", (False, True))
def test_sort_and_topk(descending):
    gradcheck(lambda a: F.sort(a, descending)[0], distinct(3, 7))
    gradcheck(lambda a: F.topk(a, 3, descending=descending)[0], distinct(2, 3, 5))
    gradcheck(lambda a: F.topk(a, 4, kth_only=True)[0], distinct(5, 6))


@pytest.mark.parametrize("axis", (0, 1, -1))
@pytest.mark.parametrize("exclusive, reverse", ((False, False), (True, False), (False, True),
                                                (True, True)))
def test_scans(axis, exclusive, reverse):
    x = RNG.uniform(0.5, 1.5, (3, 4, 5)) * RNG.choice([-1, 1], (3, 4, 5))
    for op in ("cumsum", "cumprod"):
        gradcheck(lambda a, op=op: apply(op, (a,), axis=axis, exclusive=exclusive,
                                         reverse=reverse), x)


@pytest.mark.parametrize("zeros", ([2], [0], [5], [1, 4], [0, 5]))
@pytest.mark.parametrize("exclusive, reverse", ((False, False), (True, False), (False, True)))
def test_cumprod_with_zeros(zeros, exclusive, reverse):
    x = RNG.uniform(0.5, 1.5, (2, 6))
    x[:, zeros] = 0.0
    gradcheck(lambda a: apply("cumprod", (a,), axis=1, exclusive=exclusive, reverse=reverse), x)


def _grads(ours, theirs, x, dy):
    torch = pytest.importorskip("torch")
    t = mg.tensor(x)
    with mg.GradManager().attach([t]) as gm:
        gm.backward(F.sum(ours(t) * mg.tensor(dy)))
    tt = torch.tensor(x, requires_grad=True)
    theirs(torch, tt).backward(torch.from_numpy(dy))
    return t.grad.numpy(), tt.grad.numpy()


@pytest.mark.parametrize("case", ("sort", "sort_desc", "topk", "topk_largest", "cumsum",
                                  "cumprod", "cumprod_zeros"))
def test_gradients_match_torch(case):
    x = RNG.standard_normal((4, 9)).astype(np.float32)
    if case == "cumprod_zeros":
        x[0, 3] = x[1, 0] = x[2, 8] = x[3, 2] = x[3, 6] = 0.0
    ours, theirs = {
        "sort": (lambda a: F.sort(a)[0], lambda t, a: t.sort(a, -1)[0]),
        "sort_desc": (lambda a: F.sort(a, True)[0], lambda t, a: t.sort(a, -1, True)[0]),
        "topk": (lambda a: F.topk(a, 4)[0], lambda t, a: t.topk(a, 4, largest=False)[0]),
        "topk_largest": (lambda a: F.topk(a, 2, descending=True)[0],
                         lambda t, a: t.topk(a, 2)[0]),
        "cumsum": (lambda a: F.cumsum(a, 1), lambda t, a: t.cumsum(a, 1)),
        "cumprod": (lambda a: F.cumprod(a, 0), lambda t, a: t.cumprod(a, 0)),
        "cumprod_zeros": (lambda a: F.cumprod(a, 1), lambda t, a: t.cumprod(a, 1)),
    }[case]
    dy = RNG.standard_normal(ours(mg.tensor(x)).shape).astype(np.float32)
    got, want = _grads(ours, theirs, x, dy)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
