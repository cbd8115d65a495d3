"""The rendered elementwise and fused kernels, run on the host (csrc_cuda/host_emu.h), equal
the CPU backend's results bit for bit, edge values included (+-0, +-inf, NaN, subnormals,
INT_MIN): both compute with the same scalar functions (scalar.pxd / scalar.cuh), rendered
from the same elementwise table."""
import host_emu
import numpy as np
import pytest
from host_emu import run_on_host

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import Launch
from mgegraph.cuda import render
from mgegraph.cuda.backend import CudaBackend
from mgegraph.ops import elementwise_table as TABLE

F32_EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17e-38, 3.4e38,
                      -3.4e38, 1.0, -1.0, 0.5, 2.5, -2.5, 88.8, -104.5, 7.9, 1e-4, 3.0, -3.0,
                      6.0, 0.1, 100.0, -0.7], np.float64)
INT_EDGES = {np.dtype(np.int32): [0, 1, -1, 2, -2, 7, -7, 2**31 - 1, -2**31, 3, 100],
             np.dtype(np.int64): [0, 1, -1, 2, -2, 7, -7, 2**63 - 1, -2**63, 3, 100],
             np.dtype(np.uint8): [0, 1, 2, 7, 3, 100, 127, 128, 254, 255],
             np.dtype(np.int8): [0, 1, -1, 2, -2, 7, -7, 127, -128, 3, 100],
             np.dtype(np.int16): [0, 1, -1, 2, -2, 7, -7, 2**15 - 1, -2**15, 3, 100, 255]}


def edges(dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            return F32_EDGES.astype(dtype)
    if dtype.kind == "b":
        return np.array([True, False, True, True, False])
    return np.array(INT_EDGES[dtype], dtype)


@pytest.fixture(scope="module")
def backend():
    return CudaBackend(device=None)  # planning only: no GPU, no driver


def bitwise_equal(a, b) -> bool:
    """Equal bit for bit (so +0 and -0 differ), except that any NaN equals any NaN: which
    operand's NaN payload and sign an x86 instruction keeps depends on the operand order the
    compiler chose, on the CPU as much as on the host build of a CUDA kernel."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if not np.array_equal(nan, np.isnan(b)):
            return False
        a, b = np.where(nan, 0, a), np.where(nan, 0, b)
    return a.tobytes() == b.tobytes()


def run_cpu_and_host(backend, outputs, feeds):
    """The CPU plan of ``outputs`` (one instruction, optimize=0) run on ``feeds``, and the CUDA
    kernel of the same instruction run on the host with the CUDA backend's lowering."""
    plan = mg.compile(outputs, optimize=0)
    (expected,) = plan.run(feeds)
    (ins,) = plan.instructions
    node = outputs[0].node
    impl = backend.impl(ins.op)
    launch = impl.lower(node)
    entry = backend.kernel(ins.op, impl.dispatch_dtype(node)).entry
    types = [v.type for v in node.inputs] + [v.type for v in node.outputs]
    hosted = _instruction(ins, launch)
    text, steps = entry.render(hosted, types)
    args = [feeds[v.node.attr["name"]] for v in node.inputs]
    out = np.zeros(expected.shape, expected.dtype)
    assert text in ELEMENTWISE_TEXTS  # the kernel is one of the module built once
    run_on_host(ELEMENTWISE_MODULE, steps, [np.ascontiguousarray(a) for a in args] + [out],
                launch.ints, launch.floats)
    return expected, out


def _instruction(ins, launch: Launch):
    from dataclasses import replace
    return replace(ins, ints=launch.ints, floats=launch.floats)


# every unfused kernel in one module, built once with g++ (seconds; one per kernel: minutes)
ELEMENTWISE_TEXTS = set(render.elementwise_kernels().values())
ELEMENTWISE_MODULE = render.module(render.elementwise_kernels().values())
UNARY = [op for op in TABLE.OPS if op.kind == "unary"]
BINARY = [op for op in TABLE.OPS if op.kind != "unary"]


def _unary_graph(op, x_value):
    g = mg.Graph()
    x = g.input("x", x_value.shape, x_value.dtype)
    attrs = {p: v for p, v in zip(op.params, (-0.5, 6.0))}
    from mgegraph.ops.builder import apply
    return apply(op.name, (x,), **attrs)


@pytest.mark.parametrize("op", UNARY, ids=lambda op: op.name)
def test_unary_ops_equal_the_cpu_bitwise(backend, op):
    for dtype in op.dtypes:
        x = edges(dtype)
        expected, got = run_cpu_and_host(backend, [_unary_graph(op, x)], {"x": x})
        assert bitwise_equal(expected, got), (op.name, dtype, x, expected, got)


def _grid(dtype):
    """Every pair of edge values: x as a column, y as a row (the broadcasting path), and the
    same pairs flattened (the contiguous, vectorised path)."""
    e = edges(dtype)
    xs, ys = np.broadcast_arrays(e[:, None], e[None, :])
    return e[:, None].copy(), e[None, :].copy(), xs.ravel().copy(), ys.ravel().copy()


def _binary(op, x, y):
    g = mg.Graph()
    a, b = g.input("x", x.shape, x.dtype), g.input("y", y.shape, y.dtype)
    from mgegraph.ops.builder import apply
    return apply(op, (a, b))


@pytest.mark.parametrize("op", BINARY, ids=lambda op: op.name)
def test_binary_ops_and_comparisons_equal_the_cpu_bitwise(backend, op):
    for dtype in op.dtypes:
        col, row, xs, ys = _grid(dtype)
        if op.name == "pow" and dtype.kind == "i":  # a negative integer power is an error
            row, ys = np.abs(row) % 40, np.abs(ys) % 40
        for x, y in ((col, row), (xs, ys), (xs, ys[:1].reshape(())), (xs[:1].reshape(()), ys)):
            expected, got = run_cpu_and_host(backend, [_binary(op.name, x, y)], {"x": x, "y": y})
            assert bitwise_equal(expected, got), (op.name, dtype, x.shape, y.shape)


@pytest.mark.parametrize("dtype", list(render.CTYPES))
def test_where_equals_the_cpu(backend, dtype):
    g = mg.Graph()
    e = edges(dtype)
    cond = g.input("c", (1, e.size), "bool")
    x, y = g.input("x", (e.size, 1), dtype), g.input("y", (e.size,), dtype)
    feeds = {"c": (np.arange(e.size) % 3 == 0)[None, :], "x": e[:, None].copy(),
             "y": e[::-1].copy()}
    expected, got = run_cpu_and_host(backend, [F.where(cond, x, y)], feeds)
    assert bitwise_equal(expected, got)
    g = mg.Graph()  # every operand contiguous: the kernel's direct path
    c = g.input("c", (e.size,), "bool")
    x, y = g.input("x", e.shape, dtype), g.input("y", e.shape, dtype)
    flat = {"c": feeds["c"].ravel().copy(), "x": e, "y": e[::-1].copy()}
    expected, got = run_cpu_and_host(backend, [F.where(c, x, y)], flat)
    assert bitwise_equal(expected, got)


@pytest.mark.parametrize("src", list(render.CTYPES))
def test_casts_equal_the_cpu_bitwise(backend, src):
    # float -> int: NaN, inf and out of range give INT_MIN; anything -> bool: != 0
    for dst in render.CTYPES:
        if dst == src:
            continue
        x = edges(src)
        g = mg.Graph()
        y = F.astype(g.input("x", x.shape, x.dtype), dst)
        expected, got = run_cpu_and_host(backend, [y], {"x": x})
        assert bitwise_equal(expected, got), (src, dst, x, expected, got)


# -- whole plans of rendered kernels (fused groups) run on the host --------------------------------
@pytest.fixture(scope="module")
def planner():
    """``device="cuda-plan"``: the CUDA backend without a device, for planning."""
    mg.register_backend("cuda-plan", lambda: CudaBackend(device=None))
    yield "cuda-plan"
    mg.backend.unregister_backend("cuda-plan")


def _chain(n, dtype="float32"):
    g = mg.Graph()
    x, a, b, c = (g.input(k, (n,), dtype) for k in "xabc")
    y = F.relu(x * a + b) * c - F.tanh(x) / (1 + F.exp(-x))
    rng = np.random.default_rng(n)
    return [y], {k: rng.standard_normal(n).astype(dtype) for k in "xabc"}


def _broadcast_two_outputs():
    g = mg.Graph()
    x = g.input("x", (3, 5, 7), "float32")
    row, col = g.input("row", (7,), "float32"), g.input("col", (3, 1, 1), "float32")
    h = F.sigmoid(x * row) + col
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((3, 5, 7)).astype(np.float32),
             "row": rng.standard_normal(7).astype(np.float32),
             "col": rng.standard_normal((3, 1, 1)).astype(np.float32)}
    return [F.square(h) - row, h], feeds


def _attributes_f64():
    g = mg.Graph()
    x = g.input("x", (64,), "float64")
    y = F.clip(F.leaky_relu(x * 3.0, 0.2), -1.0, 2.5) + F.exp(x) + F.gelu(x) - F.softplus(x)
    return [y], {"x": np.concatenate([edges("float64"), np.linspace(-5, 5, 39)])}


def _edges_everywhere():
    g = mg.Graph()
    e = edges("float32")
    x = g.input("x", e.shape, "float32")
    y = F.hardswish(F.silu(x)) + F.log1p(F.abs(x)) * F.sqrt(F.maximum(x, 0.0)) + F.floor(x)
    return [F.where(x > 0.0, y, F.minimum(y, x)), F.sign(x) * F.square(x)], {"x": e}


GRAPHS = {"chain 1": lambda: _chain(1), "chain 7": lambda: _chain(7),
          "chain 4099": lambda: _chain(4099), "chain f64 1000": lambda: _chain(1000, "float64"),
          "broadcast, two outputs": _broadcast_two_outputs, "attributes f64": _attributes_f64,
          "edge values": _edges_everywhere}


@pytest.mark.parametrize("name", GRAPHS)
def test_fused_plans_run_on_the_host_equal_the_cpu_bitwise(planner, name):
    outputs, feeds = GRAPHS[name]()
    plan = mg.compile(outputs, device=planner)
    assert any(ins.op == "fused_elementwise" for ins in plan.instructions)
    got = host_emu.run_plan_on_host(plan, mg.backend.get_backend(planner), feeds)
    expected = mg.compile(outputs).run(feeds)
    for a, b in zip(expected, got):
        assert bitwise_equal(a, b), name
