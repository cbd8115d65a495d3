"""Eager dispatch's C path (eager/fastpath.pyx): an op cached for its input types runs without
Python, with the bits, errors, recorders and memory accounting of the path that makes the node
in Python."""
import threading

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.eager import dispatch
from mgegraph.eager.tensor import type_of
from mgegraph.ops.elementwise_table import OPS

RNG = np.random.default_rng(7)
SHAPES = [((3, 4), (4,)), ((5,), ()), ((2, 1, 3), (4, 3))]  # same rank, a scalar, both broadcast


def _data(dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return RNG.uniform(0.2, 2.0, shape).astype(dtype)
    if dtype.kind == "b":
        return RNG.random(shape) > 0.5
    return RNG.integers(1, 9, shape).astype(dtype)


def _plan(fn, *arrays):
    """``fn`` on ``arrays`` through an unoptimised plan: the same kernels, run by the executor."""
    g = mg.Graph()
    return mg.compile([fn(*(g.const(a) for a in arrays))], optimize=0).run({})[0]


def _cases():
    for op in OPS:
        if op.public and not op.params:
            for dtype in op.dtypes:
                yield pytest.param(op, np.dtype(dtype), id=f"{op.name}-{np.dtype(dtype).name}")


@pytest.mark.parametrize("entry, dtype", list(_cases()))
def test_every_elementwise_op_gives_the_plans_bits_when_cached(entry, dtype):
    fn = getattr(F, entry.name)
    for shapes in SHAPES if entry.kind != "unary" else [((3, 4),), ((),)]:
        arrays = [_data(dtype, s) for s in shapes]
        want = _plan(fn, *arrays)
        tensors = [mg.tensor(a, dtype=a.dtype) for a in arrays]
        for _ in range(3):  # the first call prepares the op; the others find it cached
            got = fn(*tensors)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got.numpy(), want)
            assert np.signbit(got.numpy()).tolist() == np.signbit(want).tolist()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ops_with_attributes_give_the_plans_bits_per_attribute_value(dtype):
    a = RNG.standard_normal((3, 4)).astype(dtype)
    t = mg.tensor(a, dtype=dtype)
    calls = [lambda x: F.leaky_relu(x, 0.1), lambda x: F.leaky_relu(x, 0.3),
             lambda x: F.clip(x, -0.5, 0.25), lambda x: F.clip(x, -0.25, 0.5),
             lambda x: x.sum(axis=0), lambda x: x.sum(axis=1), lambda x: x.astype("int32")]
    for _ in range(3):  # each attribute value its own entry, cached from the second round
        for fn in calls:
            want = _plan(fn, a)
            got = fn(t)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got.numpy(), want)


OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
             "/": lambda a, b: a / b}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("symbol", list(OPERATORS))
def test_operators_on_tensors_and_python_numbers_give_the_plans_bits(symbol, dtype):
    op = OPERATORS[symbol]
    for a_shape, b_shape in SHAPES:
        a, b = _data(dtype, a_shape), _data(dtype, b_shape)
        ta, tb = mg.tensor(a, dtype=dtype), mg.tensor(b, dtype=dtype)
        number = 3 if np.dtype(dtype).kind == "i" else 0.75
        cases = [(lambda x, y: op(x, y), (ta, tb), (a, b)),
                 (lambda x, y: op(y, x), (ta, tb), (a, b)),   # swapped operands
                 (lambda x: op(x, number), (ta,), (a,)),
                 (lambda x: op(number, x), (ta,), (a,))]     # __radd__ and its kin
        for fn, tensors, arrays in cases:
            want = _plan(fn, *arrays)
            for _ in range(3):
                got = fn(*tensors)
                assert got.dtype == want.dtype and got.shape == want.shape, symbol
                np.testing.assert_array_equal(got.numpy(), want)


def test_a_python_zero_keeps_its_sign_on_the_cached_path():
    x = mg.tensor(np.array([1.0, -2.0], np.float32))
    for _ in range(3):
        assert np.signbit((x * 0.0).numpy()).tolist() == [False, True]
        assert np.signbit((x * -0.0).numpy()).tolist() == [True, False]


def test_one_python_number_on_tensors_of_several_dtypes_takes_each_dtypes_rule():
    numbers = [2, 2.0, 2.5, -0.0, 0.0, 7]
    arrays = [_data(d, (3,)) for d in ("float32", "float64", "int32", "int64")]
    for _ in range(3):  # the same number objects again and again, on alternating dtypes
        for v in numbers:
            for a in arrays:
                got, want = mg.tensor(a, dtype=a.dtype) * v, _plan(lambda x: x * v, a)
                assert got.dtype == want.dtype, (v, a.dtype)
                np.testing.assert_array_equal(got.numpy(), want)
                assert np.signbit(got.numpy()).tolist() == np.signbit(want).tolist()


def test_a_cached_result_is_a_whole_tensor():
    x = mg.tensor(np.arange(4, dtype=np.float32))
    x + x
    y = x + x
    z = F.relu(y)
    assert type(y) is mg.Tensor and y.graph is dispatch.EAGER and y.node is None
    assert y.grad is None and y.owns_bytes and y.index == 0
    assert y.type is type_of((4,), np.dtype(np.float32)) and y.id < z.id
    assert z.numpy().tolist() == [0, 2, 4, 6] and z.value.flags.c_contiguous


class _Counter(dispatch.Recorder):
    def __init__(self):
        self.ops = []

    def record_node(self, node):
        self.ops.append(node.op.name)


def test_recorders_see_cached_ops_and_only_those_of_their_thread():
    x, y = mg.tensor(np.ones(3, np.float32)), mg.tensor(np.full(3, 2.0, np.float32))
    x * y, F.relu(x)  # cached from here on
    elsewhere = []

    def other_thread():
        for _ in range(50):
            elsewhere.append((x * y).numpy())

    counter = _Counter()
    with dispatch.recording(counter):
        worker = threading.Thread(target=other_thread)
        worker.start()
        z = F.relu(x * y + x)
        worker.join()
    assert counter.ops == ["mul", "add", "relu"]
    assert z.numpy().tolist() == [3, 3, 3] and len(elsewhere) == 50
    after = _Counter()
    x * y  # recorded no more, and runs its cached kernel again
    assert after.ops == [] and (x * y).numpy().tolist() == [2, 2, 2]


def test_grad_manager_and_trace_see_ops_cached_before_them():
    w = mg.nn.Parameter(np.array([1.0, -2.0, 3.0], np.float32))
    x = mg.tensor(np.array([0.5, 0.5, 0.5], np.float32))
    F.relu(w * x + x)  # cached
    gm = mg.GradManager().attach([w])
    with gm:
        loss = F.relu(w * x + x).sum()
        gm.backward(loss)
    assert w.grad.numpy().tolist() == [0.5, 0.0, 0.5]

    traced = mg.jit.trace(lambda v: F.relu(v * x + x))
    traced(mg.tensor(np.ones(3, np.float32)))
    again = mg.tensor(np.array([-4.0, 1.0, 2.0], np.float32))
    assert traced(again).numpy().tolist() == [0.0, 1.0, 1.5]  # the plan, not a constant


def test_a_lazy_block_keeps_cached_ops_pending():
    x = mg.tensor(np.array([1.0, -1.0], np.float32))
    x + x
    with mg.lazy():
        y = x + x
        assert y._value is None  # pending: the C path did not run it
        assert y.numpy().tolist() == [2.0, -2.0]
    z = x + x
    assert z._value is not None and z.numpy().tolist() == [2.0, -2.0]


def test_errors_on_the_cached_path_name_the_op_the_types_and_the_line():
    a = mg.tensor(np.array([2, 3]), dtype=np.int64)
    a ** mg.tensor(np.array([2, 1]), dtype=np.int64)  # pow on these types is cached
    with pytest.raises(mg.KernelError, match=r"pow\(i64\[2\], i64\[2\]\).*test_fastpath.py:\d+"
                       r".*negative integer powers"):
        a ** mg.tensor(np.array([2, -1]), dtype=np.int64)
    x = mg.tensor(np.ones(3, np.float32))
    x + x
    with pytest.raises(mg.OpError, match=r"add.*f32\[3\].*f32\[4\].*test_fastpath.py:\d+"):
        x + mg.tensor(np.ones(4, np.float32))


def test_memory_stats_count_tensors_the_c_path_makes():
    x = mg.tensor(np.ones(1000, np.float32))
    x * x
    before = mg.memory_stats().current
    kept = [x * x for _ in range(10)]
    assert mg.memory_stats().current == before + 10 * 4000
    del kept
    assert mg.memory_stats().current == before


@pytest.mark.parametrize("n", [16, 1 << 16])  # small calls keep the GIL, large ones release it
def test_two_threads_running_cached_ops_get_their_own_results(n):
    inputs = [RNG.standard_normal(n).astype(np.float32) for _ in range(2)]
    wants = [np.maximum((a * np.float32(0.5) + a), 0) for a in inputs]
    results: dict = {}

    def run(i):
        t = mg.tensor(inputs[i])
        for _ in range(200):
            got = F.relu(t * 0.5 + t).numpy()
            if not np.array_equal(got, wants[i]):
                results[i] = got
                return
        results[i] = None

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {0: None, 1: None}


def test_clear_cache_forgets_the_c_paths_entries():
    x = mg.tensor(np.ones(2, np.float32))
    x - x
    dispatch.clear_cache()
    assert not dispatch._ENTRIES
    assert (x - x).numpy().tolist() == [0.0, 0.0] and dispatch._ENTRIES


def test_the_c_path_refuses_a_tensor_class_with_a_slot_it_would_leave_unset():
    from mgegraph.eager import fastpath

    class Wider(mg.Tensor):
        __slots__ = ("extra",)

    with pytest.raises(TypeError, match="'extra'"):  # before it changes anything
        fastpath.install(Wider, None, None, {}, {}, None, None, None)
    assert (mg.tensor([1.0]) + mg.tensor([2.0])).numpy().tolist() == [3.0]
