"""Test helpers for users and for mgegraph's own tests: gradient checks by finite differences."""
from __future__ import annotations

import numpy as np

from . import functional as F
from .autodiff import grad
from .compiler import compile
from .ir.errors import OpError
from .ir.graph import Graph
from .ir.types import is_float


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
        wrt = [i for i, a in enumerate(arrays) if is_float(a.dtype)]
    g = Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    out = fn(*xs)
    weights = np.random.default_rng(seed).standard_normal(out.shape).astype(out.dtype)
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


# The ops random_graph draws from: (name, how many inputs, function of the Vars).
_RANDOM_OPS = (
    ("tanh", 1, lambda a: F.tanh(a)),
    ("relu", 1, lambda a: F.relu(a)),
    ("sigmoid", 1, lambda a: F.sigmoid(a)),
    ("neg", 1, lambda a: -a),
    ("add", 2, lambda a, b: a + b),
    ("mul", 2, lambda a, b: a * b),
    ("sub", 2, lambda a, b: a - b),
    ("maximum", 2, lambda a, b: F.maximum(a, b)),
    ("sum_keep", 1, lambda a: F.sum(a, axis=-1, keepdims=True)),
    ("mean_rows", 1, lambda a: F.mean(a, axis=0)),
    ("transpose", 1, lambda a: F.transpose(a, (1, 0))),
    ("matmul", 2, lambda a, b: F.matmul(F.matmul(a, F.transpose(b, (1, 0))), b)),
    ("softmax", 1, lambda a: F.softmax(a, axis=-1)),
    ("rows", 1, lambda a: F.concat([a[1:3], a[:-2]])),            # slices are views
    ("cols", 1, lambda a: F.concat([a[:, 1:3], a[:, :-2]], 1)),   # strided: copies
    ("flat", 1, lambda a: F.reshape(F.flatten(a), a.shape)),
)


def assert_same_results(before, after, feeds, rtol: float = 0.0) -> None:
    """The outputs ``before`` and ``after`` a graph pass give the same values on ``feeds``,
    each compiled without passes: bitwise, or to ``rtol`` where the pass changes arithmetic
    (fused tanh, sigmoid and exp use vector math that differs from libm in the last bits).

    >>> assert_same_results([y], dce(g, [y]).outputs, {"x": x_value})
    """
    want = compile(before, optimize=0).run(feeds)
    for a, b in zip(want, compile(after, optimize=0).run(feeds)):
        if rtol:
            np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-6)
        else:
            np.testing.assert_array_equal(b, a)


def random_graph(seed: int, nodes: int = 24, shape=(6, 8)):
    """A seeded random DAG of elementwise, reduction, movement, matmul and softmax ops over
    2-D float32 tensors, for fuzzing the planner: returns (graph, outputs, feeds).

    Values stay bounded (tanh, sigmoid and softmax keep magnitudes small), so two plans of it
    agree bitwise whenever they run the same kernels on the same inputs.

    >>> g, outs, feeds = random_graph(3); mg.compile(outs).run(feeds)
    """
    rng = np.random.default_rng(seed)
    g = Graph()
    pool = [g.input(f"x{i}", shape, "float32") for i in range(rng.integers(1, 4))]
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name in g.inputs}
    pool.append(g.param("w", rng.standard_normal(shape).astype(np.float32)))
    for _ in range(nodes):
        name, arity, make = _RANDOM_OPS[rng.integers(len(_RANDOM_OPS))]
        picks = [pool[int(i)] for i in rng.integers(max(0, len(pool) - 8), len(pool), arity)]
        var = _broadcast_or_none(make, picks, shape)
        if var is not None:
            pool.append(var)
    temps = [v for v in pool if v.node is not None and v.node.op.category != "source"]
    count = min(len(temps), int(rng.integers(1, 4)))
    outputs = [temps[int(i)] for i in rng.choice(len(temps), count, replace=False)]
    return g, outputs, feeds


def _broadcast_or_none(make, picks, shape):
    """The op's result brought back to ``shape`` (broadcasting), or None when it does not fit."""
    try:
        var = make(*picks)
        if var.shape != shape:
            var = var + F.zeros_like(picks[0])
        return var if var is not None and var.shape == shape else None
    except OpError:
        return None
