"""Test helpers for users and for mgegraph's own tests: gradient checks by finite differences."""
from __future__ import annotations

import numpy as np

from .autodiff import grad
from .ir.graph import Graph
from .plan import compile


def gradcheck(fn, *arrays, wrt=None, eps=1e-6, rtol=1e-5, atol=1e-7, seed=0):
    """Check mg.grad of ``fn`` against central finite differences, in float64.

    ``fn`` takes Vars (one per array) and returns a Var; the check differentiates
    ``sum(fn(...) * c)`` for a fixed random ``c``, so every output element counts. ``wrt`` lists
    the indices of the arrays to differentiate (default: every floating-point one). Returns the
    analytic gradients; raises AssertionError naming the input and the worst element.

    >>> gradcheck(lambda x: F.tanh(x) * x, np.random.rand(3, 4))
    """
    arrays = [np.asarray(a) for a in arrays]
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    g = Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    out = fn(*xs)
    weights = np.random.default_rng(seed).standard_normal(out.shape).astype(out.dtype)
    from . import functional as F

    loss = F.sum(out * g.const(weights))
    forward = compile([loss])
    analytic = compile(grad(loss, [xs[i] for i in wrt])).run(_feeds(arrays))
    for k, i in enumerate(wrt):
        numeric = _finite_differences(forward, arrays, i, eps)
        np.testing.assert_allclose(analytic[k], numeric, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i} (shape {arrays[i].shape})")
    return analytic


def _feeds(arrays):
    return {f"x{i}": a for i, a in enumerate(arrays)}


def _finite_differences(forward, arrays, index, eps):
    base = [a.copy() for a in arrays]
    flat = base[index].reshape(-1)
    result = np.empty(flat.size, np.float64)
    for j in range(flat.size):
        keep = flat[j]
        flat[j] = keep + eps
        up = forward.run(_feeds(base))[0]
        flat[j] = keep - eps
        down = forward.run(_feeds(base))[0]
        flat[j] = keep
        result[j] = (float(up) - float(down)) / (2 * eps)
    return result.reshape(arrays[index].shape)
