"""The thread policy (mgegraph/_kernels/parallel.pyx) and the kernels split over it: pooling and
its gradients, reductions and the elementwise kernels against NumPy on 1, 2 and 3 planned
threads, with odd shapes (empty, one element, sizes no thread count divides), the same bits at
every thread count, and a forked child running a threaded plan on one thread."""
import multiprocessing
import sys

import numpy as np
import pytest
from test_conv import adaptive_ref, pool_ref
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(19)
# several threads need an OpenMP build; results are checked at every planned count regardless
needs_openmp = pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
POLICY_OPS = ("pool2d", "max_pool2d_backward", "avg_pool2d_backward", "max_pool2d_select",
              "reduce", "unary", "binary", "compare", "where", "cast", "batch_norm")


def compile_planned(fn, arrays, threads, monkeypatch):
    """A plan of ``fn`` over inputs like ``arrays`` whose instructions plan ``threads``, and
    OpenMP allowing that many while the caller's block runs (the kernels cap at both)."""
    monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0: threads)
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    plan = mg.compile([fn(*xs)], optimize=0)
    monkeypatch.undo()
    return plan


def run_at(fn, arrays, threads, monkeypatch):
    plan = compile_planned(fn, arrays, threads, monkeypatch)
    with threadpool_limits(limits=threads):
        assert parallel.max_threads() == (threads if parallel.OPENMP else 1)
        (out,) = plan.run({f"x{i}": a for i, a in enumerate(arrays)})
    return out, plan


def threads_field(plan):
    """The threads each policy instruction of ``plan`` planned: the last of its ints, or the
    Pool or BatchNorm struct's field."""
    from mgegraph._kernels import nn, pool
    got = []
    for ins in plan.instructions:
        family = ins.kernel.rsplit("_", 1)[0]
        fields = pool.POOL_FIELDS if "pool" in family else nn.BATCH_NORM_FIELDS
        if family in POLICY_OPS:
            got.append(ins.ints[fields.index("threads") if family == "batch_norm" or "pool" in
                                family else -1])
    return got


def check_all_threads(fn, arrays, expected, monkeypatch, tol=1e-5):
    """fn's plan on 1, 2 and 3 threads: NumPy's result within tol, and the same bits."""
    first = None
    for threads in (1, 2, 3):
        out, plan = run_at(fn, arrays, threads, monkeypatch)
        assert threads_field(plan) and set(threads_field(plan)) == {threads}
        assert out.dtype == expected.dtype and out.shape == expected.shape
        np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)
        if first is None:
            first = out
        else:
            assert out.tobytes() == first.tobytes(), f"{threads} threads changed bits"


def normal(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# -- the policy -----------------------------------------------------------------------------------
@needs_openmp
def test_threads_for_plans_a_thread_per_grain_up_to_openmps_maximum():
    grain = parallel.GRAIN_BYTES
    with threadpool_limits(limits=2):
        assert parallel.max_threads() == 2
        assert parallel.threads_for(0) == parallel.threads_for(2 * grain - 1) == 1
        assert parallel.threads_for(2 * grain) == 2
        assert parallel.threads_for(100 * grain) == 2  # capped by max_threads()
        assert parallel.threads_for(3, grain=1) == 2
    with threadpool_limits(limits=1):
        assert parallel.threads_for(100 * grain) == 1
    with pytest.raises(ValueError, match="grain must be positive"):
        parallel.threads_for(10, grain=0)


@needs_openmp
def test_fork_join_is_measured():
    # what it costs is a benchmark's to say (a loaded 2-core machine took 25 ms): here, that
    # the probe runs and reports a time
    one, two = parallel.fork_join_us(1, 50), parallel.fork_join_us(2, 50)
    assert np.isfinite([one, two]).all() and one >= 0 and two > 0


@needs_openmp
def test_lowerings_plan_threads_by_bytes_moved():
    g = mg.Graph()
    big, small = g.input("big", (32, 64, 32, 32)), g.input("small", (2, 3, 4, 4))
    outs = [F.max_pool2d(big, 2), F.sum(big, axis=(0, 2, 3)), F.relu(big),
            F.max_pool2d(small, 2), F.sum(small, axis=0), F.relu(small)]
    with threadpool_limits(limits=2):
        plan = mg.compile(outs, optimize=0)
    assert threads_field(plan) == [2, 2, 2, 1, 1, 1]


# -- pooling --------------------------------------------------------------------------------------
def max_backward_ref(x, dy, kernel, stride, padding):
    """Each window's dy added at its first maximum (NaN-free inputs)."""
    dx = np.zeros(x.shape, np.float64)
    n, c, h, w = x.shape
    for i in range(dy.shape[2]):
        for j in range(dy.shape[3]):
            h0, w0 = i * stride - padding, j * stride - padding
            r0, c0 = max(h0, 0), max(w0, 0)
            win = x[:, :, r0:h0 + kernel, c0:w0 + kernel].reshape(n, c, (min(h0 + kernel, h) - r0)
                                                                   * (min(w0 + kernel, w) - c0))
            k = win.argmax(axis=2)
            cols = min(w0 + kernel, w) - c0
            for b in range(n):
                for ch in range(c):
                    dx[b, ch, r0 + k[b, ch] // cols, c0 + k[b, ch] % cols] += dy[b, ch, i, j]
    return dx.astype(x.dtype)


POOL_SHAPES = [(3, 5, 7, 9), (1, 1, 1, 1), (0, 3, 4, 4), (2, 3, 6, 6)]


@pytest.mark.parametrize("xs", POOL_SHAPES)
@pytest.mark.parametrize("kernel,stride,padding", [(1, 1, 0), (2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_max_and_avg_pool(xs, kernel, stride, padding, monkeypatch):
    if kernel > min(xs[2:]) + 2 * padding:
        pytest.skip("no output")
    x = normal(xs)
    check_all_threads(lambda v: F.max_pool2d(v, kernel, stride, padding), [x],
                      pool_ref(x, kernel, stride, padding, "max"), monkeypatch)
    check_all_threads(lambda v: F.avg_pool2d(v, kernel, stride, padding), [x],
                      pool_ref(x, kernel, stride, padding, "average_count_exclude_padding"),
                      monkeypatch)


def test_max_pool_2x2_keeps_the_first_maximum_bits(monkeypatch):
    # the vectorised 2x2/2 loop gives the sequential scan's bits: the first of tied -0.0 / 0.0,
    # -inf windows, NaN wherever a window holds one
    cells = np.array([0.0, -0.0, -np.inf, np.nan, 1.0, 2.0], np.float32)
    x = cells[RNG.integers(0, len(cells), (3, 4, 6, 10))]
    want = np.empty((3, 4, 3, 5), np.float32)
    for b, c, i, j in np.ndindex(want.shape):
        m, nan = np.float32(-np.inf), False
        for v in x[b, c, 2 * i:2 * i + 2, 2 * j:2 * j + 2].ravel():
            m, nan = max(m, v), nan or np.isnan(v)  # max keeps m unless v > m
        want[b, c, i, j] = np.float32(np.nan) if nan else m
    for threads in (1, 2):
        out, _ = run_at(lambda v: F.max_pool2d(v, 2), [x], threads, monkeypatch)
        assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("xs", [(3, 5, 7, 9), (2, 3, 6, 6), (0, 2, 4, 4)])
@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 1, 1), (3, 2, 1)])
def test_pool_backward_scatters(xs, kernel, stride, padding, monkeypatch):
    # overlapping windows (stride < kernel) add into the same cells: split by planes, no race
    x = normal(xs, np.float64)
    attrs = {"kernel_size": (kernel,) * 2, "stride": (stride,) * 2, "padding": (padding,) * 2}
    y = pool_ref(x, kernel, stride, padding, "max")
    dy = normal(y.shape, np.float64)
    check_all_threads(lambda a, b: apply("max_pool2d_backward", (a, b), **attrs), [x, dy],
                      max_backward_ref(x, dy, kernel, stride, padding), monkeypatch, 1e-12)
    check_all_threads(lambda a, b: apply("max_pool2d_select", (a, b), **attrs), [x, 2 * x], 2 * y,
                      monkeypatch, 1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,oshp", [
    ((3, 9, 5, 5), (1, 1)),     # global: 27 planes, 3 groups of 8 summed at once and 3 alone
    ((2, 3, 8, 6), (4, 3)),     # even division: sliding windows
    ((2, 3, 7, 5), (3, 2)),     # uneven: adaptive windows
    ((1, 1, 1, 1), (1, 1)), ((0, 3, 4, 4), (2, 2)), ((4, 64, 7, 7), (1, 1)),
])
def test_adaptive_pools(xs, oshp, dtype, monkeypatch):
    x = normal(xs, dtype)
    for fn, kind in ((F.adaptive_avg_pool2d, "mean"), (F.adaptive_max_pool2d, "max")):
        check_all_threads(lambda v, fn=fn: fn(v, oshp), [x], adaptive_ref(x, oshp, kind),
                          monkeypatch)


@pytest.mark.parametrize("xs,oshp", [((3, 9, 5, 5), (1, 1)), ((2, 3, 8, 6), (4, 3)),
                                     ((2, 3, 7, 5), (3, 2))])
def test_adaptive_pool_gradients(xs, oshp, monkeypatch):
    x = normal(xs, np.float64)
    dy = normal(xs[:2] + oshp, np.float64)
    expected = np.zeros(xs)  # each window spreads dy / its size over its cells
    h, w = xs[2:]
    for i in range(oshp[0]):
        for j in range(oshp[1]):
            rows = slice(i * h // oshp[0], -(-(i + 1) * h // oshp[0]))
            cols = slice(j * w // oshp[1], -(-(j + 1) * w // oshp[1]))
            size = (rows.stop - rows.start) * (cols.stop - cols.start)
            expected[:, :, rows, cols] += dy[:, :, i:i + 1, j:j + 1] / size
    check_all_threads(lambda b: apply("adaptive_avg_pool2d_backward", (b,), oshp=oshp,
                                      input_hw=(h, w)), [dy], expected, monkeypatch, 1e-12)
    if oshp == (4, 3):  # windows that tile: each cell's gradient is its window's if it won
        want = max_backward_ref(x, dy, h // oshp[0], h // oshp[0], 0)
        check_all_threads(lambda a, b: apply("adaptive_max_pool2d_backward", (a, b), oshp=oshp),
                          [x, dy], want, monkeypatch, 1e-12)


def test_global_average_is_the_plane_sum_in_order(monkeypatch):
    # the 8-planes-at-once sum adds each plane's cells in order, in double, as one plane alone
    x = normal((2, 8, 13, 11))
    out, _ = run_at(lambda v: F.adaptive_avg_pool2d(v, 1), [x], 1, monkeypatch)
    for b in range(2):
        for c in range(8):
            acc = 0.0
            for v in x[b, c].ravel().tolist():
                acc += v
            assert out[b, c, 0, 0] == np.float32(acc / x[b, c].size)


# -- reductions -----------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's mean and var of nothing: NaN
@pytest.mark.parametrize("op", ["sum", "mean", "var", "max", "argmax"])
@pytest.mark.parametrize("xs,axis", [
    ((5, 7, 3, 3), (0, 2, 3)),  # a bias gradient: outputs with strided blocks (by rows)
    ((3, 2051), 0),             # by columns: chunks of 1024, 1024 and 3 outputs
    ((1031, 5), 1),             # many short rows
    ((3, 5, 1), (1, 2)), ((1,), 0), ((0, 5), 0),
])
def test_reductions(op, xs, axis, monkeypatch):
    x = normal(xs, np.float64)
    if op in ("max", "argmax") and x.size == 0:
        pytest.skip("no identity")
    if op == "argmax" and not isinstance(axis, int):
        pytest.skip("argmax takes one axis")
    check_all_threads(lambda v: getattr(F, op)(v, axis=axis), [x],
                      np.asarray(getattr(np, op)(x, axis=axis)), monkeypatch, 1e-12)


def test_integer_and_float32_sums(monkeypatch):
    xi = RNG.integers(-1000, 1000, (9, 1100)).astype(np.int64)
    check_all_threads(lambda v: F.sum(v, axis=0), [xi], xi.sum(axis=0), monkeypatch)
    x = normal((32, 13, 8, 8))
    check_all_threads(lambda v: F.sum(v, axis=(0, 2, 3)), [x],
                      x.astype(np.float64).sum(axis=(0, 2, 3)).astype(np.float32), monkeypatch)


# -- elementwise ----------------------------------------------------------------------------------
@pytest.mark.parametrize("xs", [(3, 5, 7), (1,), (0, 7), (), (2, 1030)])
def test_unary_binary_compare_where_cast(xs, monkeypatch):
    x, y = normal(xs, np.float64), normal(xs, np.float64)
    check_all_threads(lambda a: F.relu(a), [x], np.maximum(x, 0), monkeypatch, 0)
    check_all_threads(lambda a, b: apply("relu_backward", (a, b)), [x, y],
                      np.where(x > 0, y, 0), monkeypatch, 0)
    check_all_threads(lambda a, b: F.greater(a, b), [x, y], x > y, monkeypatch, 0)
    check_all_threads(lambda a, b: F.where(F.greater(a, b), a, b), [x, y],
                      np.where(x > y, x, y), monkeypatch, 0)
    check_all_threads(lambda a: F.astype(a * 100, "int32"), [x], (x * 100).astype(np.int32),
                      monkeypatch, 0)


def test_broadcast_binary(monkeypatch):
    # rows that the threads cut in the middle, read through broadcast strides
    a, b = normal((7, 1), np.float64), normal((1, 9), np.float64)
    check_all_threads(lambda u, v: u * v + u, [a, b], a * b + a, monkeypatch, 1e-15)
    ai = RNG.integers(-3, 3, (5, 4)).astype(np.int64)
    bi = RNG.integers(0, 3, (4,)).astype(np.int64)
    check_all_threads(lambda u, v: u ** v, [ai, bi], ai ** bi, monkeypatch, 0)


def test_negative_integer_power_fails_on_any_thread(monkeypatch):
    a = np.ones((4, 1000), np.int64)
    b = np.ones((4, 1000), np.int64)
    b[3, 999] = -1  # in the last thread's part
    for threads in (1, 2, 3):
        plan = compile_planned(lambda u, v: u ** v, [a, b], threads, monkeypatch)
        with threadpool_limits(limits=threads), pytest.raises(mg.KernelError, match="negative"):
            plan.run({"x0": a, "x1": b})


# -- batch norm ----------------------------------------------------------------------------------
@pytest.mark.parametrize("xs", [(4, 7, 5, 3), (3, 300, 2), (2, 1, 9), (2, 5)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_splits_channels(xs, training, monkeypatch):
    x = normal(xs, np.float64)
    c = xs[1]
    mean, var = normal((c,), np.float64), np.abs(normal((c,), np.float64)) + 0.5
    w, b = normal((c,), np.float64), normal((c,), np.float64)
    axes = (0, *range(2, len(xs)))
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    shape = (1, c) + (1,) * (len(xs) - 2)
    want = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-5) * w.reshape(shape) \
        + b.reshape(shape)
    # training takes no running statistics (MegEngine's F.batch_norm would write them in place)
    check_all_threads(lambda v, m, s, g, h: F.batch_norm(v, None if training else m,
                                                         None if training else s, g, h,
                                                         training=training),
                      [x, mean, var, w, b], want, monkeypatch, 1e-10)


# -- fork ------------------------------------------------------------------------------------------
_FORK = {}


def _child_run(seed):
    x = np.random.default_rng(seed).standard_normal((16, 32, 32, 32)).astype(np.float32)
    return parallel.max_threads(), [a.copy() for a in _FORK["plan"].run({"x": x})]


def _threaded_plan():
    g = mg.Graph()
    x = g.input("x", (16, 32, 32, 32))
    outs = [F.max_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1), F.sum(x, axis=(0, 2, 3)),
            apply("relu_backward", (x, x))]
    with threadpool_limits(limits=2):
        plan = mg.compile(outs, optimize=0)
    assert set(threads_field(plan)) == {2}
    return plan


@needs_openmp
@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_forked_children_run_threaded_plans_on_one_thread():
    _FORK["plan"] = _threaded_plan()
    try:
        with threadpool_limits(limits=2):
            expected = [_child_run(s) for s in range(2)]  # the parent's OpenMP threads start
            assert expected[0][0] == 2
            with multiprocessing.get_context("fork").Pool(2) as pool:
                got = pool.map_async(_child_run, range(2)).get(timeout=60)
    finally:
        _FORK.clear()
    for (_, want), (child_threads, outs) in zip(expected, got):
        assert child_threads == 1
        for w, o in zip(want, outs):
            assert w.tobytes() == o.tobytes()
