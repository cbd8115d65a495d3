"""The CUDA kernels of float16 and bfloat16, run on the host (csrc_cuda/host_emu.h), equal the
CPU kernels bit for bit: the casts to and from every dtype (the rounding of csrc_cuda/half.h, the
CPU's own file), the movement kernels of 2-byte elements, where and assign's copy; and a whole
half MLP planned for CUDA (the other ops widened to float32 by planner/passes/half.py, as for the
CPU) gives the CPU plan's bits. NVRTC compiles every entry (marker nvrtc)."""
import warnings
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from host_emu import run_on_host
from kernel_checks import (
    ARCHS,
    cpu_result,
    emulate,
    node_of,
    nvrtc_compile,
    poisoned,
    ptx_of,
    run_plan_emulated,
)

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import KernelTable, kernel_name, unregister_backend
from mgegraph.cuda import render
from mgegraph.cuda.backend import CudaBackend
from mgegraph.cuda.kernels import elementwise
from mgegraph.cuda.kernels import movement as family
from mgegraph.cuda.launches import plan_calls

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
HALVES = (F16, BF16)
EVERY = [np.dtype(d) for d in (*render.CTYPES, *render.HALF_CTYPES)]
PAIRS = [(s, d) for s in EVERY for d in EVERY if s in HALVES or d in HALVES]
# every kernel of the half types in one module, built once with g++
MODULE = render.module([render.cast_kernel(s, d)[1] for s, d in PAIRS]
                       + [render.where_kernel(d)[1] for d in HALVES]
                       + [render.copy_kernel(d)[1] for d in HALVES])


def every_half(dtype) -> np.ndarray:
    """All 65536 values of a half type, NaNs and infinities included."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)


def rounding_cases(dtype) -> np.ndarray:
    """Values of ``dtype`` at each half type's rounding rules: exact ties between neighbours and
    the values beside them, the subnormal edges, overflow, NaN, signed zeros."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NaNs and overflows cast: what the cases are for
        halves = np.concatenate([every_half(h).astype(np.float64) for h in HALVES])
        finite = np.sort(halves[np.isfinite(halves)])
        ties = (finite[:-1] + finite[1:]) / 2
        specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, 2.0 ** -25,
                    2.0 ** -26, 2.0 ** -134, 3.39e38, 1e300, 5e-324]
        values = np.concatenate([ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf),
                                 specials])
        return values.astype(dtype)


def _source_values(src) -> np.ndarray:
    if src in HALVES:
        return every_half(src)
    if src.kind == "f":
        return rounding_cases(src)
    if src.kind == "b":
        return np.array([True, False, True])
    info = np.iinfo(src)
    return np.array([info.min, info.max, 0, 1, -1, 255, 2049, 2051, 65504, 65519, 65520,
                     1 << 24, (1 << 24) + 1, (1 << 53) + 1, -300], np.int64
                    ).clip(info.min, info.max).astype(src)


def _run_rendered(node, arrays, out_shape, out_dtype):
    """The node's rendered elementwise kernel (the CUDA backend's lowering and steps) run on the
    host from the one module above."""
    table = KernelTable("cuda")
    elementwise.implement(table)
    impl = table.impl(node.op.name)
    launch = impl.lower(node)
    kernel = elementwise.KERNELS[kernel_name(impl.kernel, impl.dispatch_dtype(node))]
    types = [v.type for v in node.inputs + node.outputs]
    text, steps = kernel.render(SimpleNamespace(ints=launch.ints, floats=launch.floats), types)
    assert text in MODULE
    out = poisoned(out_shape, out_dtype)
    run_on_host(MODULE, steps, [np.ascontiguousarray(a) for a in arrays] + [out], launch.ints,
                launch.floats)
    return out


def _same_bits(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert got.tobytes() == want.tobytes(), (what, got[got.tobytes() != want.tobytes()][:8]
                                             if got.ndim else got)


def test_every_half_kernel_is_declared():
    backend = CudaBackend(device=None)  # resolving the table is what refused a missing kernel
    for dt in ("f16", "bf16"):
        for kernel in ("strided", "slice_backward", "concat", "split", "take", "gather", "pad",
                       "fill"):
            assert f"{kernel}_{dt}" in family.KERNELS
        for kernel in ("where", "cast", "unary"):
            assert f"{kernel}_{dt}" in elementwise.KERNELS
        assert f"binary_{dt}" not in elementwise.KERNELS  # arithmetic widens to float32
    for op in ("cast", "where", "assign", "transpose", "concat"):
        assert set(HALVES) <= set(backend.impl(op).dtypes), op


@pytest.mark.parametrize("src", EVERY, ids=str)
def test_casts_to_and_from_the_halves_are_bitwise(src):
    """Every half value to every dtype, and every dtype's rounding cases to each half type."""
    x = _source_values(src)
    for dst in (d for s, d in PAIRS if s == src):
        node = node_of("cast", [x], dtype=dst)
        (want,) = cpu_result(node, [x])
        got = _run_rendered(node, [x], want.shape, want.dtype)
        _same_bits(got, want, (src, dst))


def test_half_casts_round_as_numpy_and_ml_dtypes():
    """The kernels' reference itself: float64 to float16 as NumPy, to bfloat16 as ml_dtypes
    (NaNs aside: both keep a NaN a NaN)."""
    x = rounding_cases(np.float64)
    keep = ~np.isnan(x)
    for dst in HALVES:
        got = _run_rendered(node_of("cast", [x], dtype=dst), [x], x.shape, dst)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _same_bits(got[keep], x[keep].astype(dst), dst)
        assert np.isnan(got[~keep].astype(np.float32)).all()


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_where_and_assign_move_the_bits(dtype):
    e = every_half(dtype)[::97].copy()
    c = np.arange(e.size) % 3 == 0
    for cond, x, y in ((c, e, e[::-1].copy()), (c[None, :], e[:, None].copy(), e[::-1].copy())):
        node = node_of("where", [cond, x, y])
        (want,) = cpu_result(node, [cond, x, y])
        _same_bits(_run_rendered(node, [cond, x, y], want.shape, dtype), want, "where")
    g = mg.Graph()
    g.assign(g.param("p", np.zeros(e.shape, dtype)), g.input("v", e.shape, dtype))
    got = _run_rendered(g.nodes[-1], [e], e.shape, dtype)  # the copy reads the new value
    _same_bits(got, e, "assign")


MOVING = [
    ("transpose", [(3, 5, 7)], {"pattern": (2, 0, 1)}),
    ("broadcast_to", [(3, 1)], {"shape": (2, 3, 5)}),
    ("slice", [(6, 7)], {"starts": (1, None), "stops": (5, None), "steps": (2, -2)}),
    ("slice_backward", [(2, 4)], {"shape": (6, 7), "starts": (1, None), "stops": (5, None),
                                  "steps": (2, -2)}),
    ("concat", [(2, 3), (2, 1), (2, 5)], {"axis": 1}),
    ("split", [(3, 7)], {"axis": 1, "ranges": ((0, 2), (2, 7), (1, 4))}),
    ("pad", [(3, 5)], {"pad_width": ((1, 2), (0, 3)), "mode": "constant",
                       "constant_value": -1.5}),
    ("pad", [(3, 5)], {"pad_width": ((2, 2), (4, 1)), "mode": "reflect"}),
    ("pad", [(3, 5)], {"pad_width": ((2, 0), (1, 4)), "mode": "edge"}),
]


def _halves(dtype, shape, seed):
    """Random bit patterns of a half type, NaNs and infinities among them."""
    bits = np.random.default_rng(seed).integers(0, 1 << 16, shape, dtype=np.uint32)
    return bits.astype(np.uint16).view(dtype)


def _same_as_cpu(op, arrays, **attrs):
    node = node_of(op, arrays, **attrs)
    for got, want in zip(emulate(family, node, arrays, fibers=False), cpu_result(node, arrays)):
        _same_bits(got, want, op)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("case", MOVING, ids=lambda c: c[0])
def test_moving_kernels_are_bitwise(dtype, case):
    op, shapes, attrs = case
    _same_as_cpu(op, [_halves(dtype, s, seed=i) for i, s in enumerate(shapes)], **attrs)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_take_gather_and_fill_are_bitwise(dtype):
    x = _halves(dtype, (4, 5, 3), seed=3)
    _same_as_cpu("take", [x, np.array([4, -1, 0, 2, 2], np.int64)], axis=1)
    index = np.random.default_rng(1).integers(-5, 5, (4, 2, 3)).astype(np.int32)
    _same_as_cpu("gather", [x, index], axis=1)
    _same_as_cpu("fill", [], shape=(3, 5), dtype=dtype.name, value=-0.1)


@pytest.mark.nvrtc
def test_nvrtc_compiles_the_half_entries():
    ptx = ptx_of(nvrtc_compile("movement.cu", ARCHS[-1])[2])
    for dt in ("f16", "bf16"):
        assert f".entry mg_strided_{dt}(" in ptx and f".entry mg_fill_{dt}(" in ptx


# -- a whole plan ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-half-plan", lambda: CudaBackend(device=None))
    yield "cuda-half-plan"
    unregister_backend("cuda-half-plan")


def _half_mlp(dtype):
    """Linear, ReLU, linear, sigmoid, and a transpose and concat of the half values. Inputs and
    weights are multiples of 1/16 and 1/64 below 1, so every float32 sum of the GEMMs is exact in
    any order: the CPU's BLAS and the CUDA GEMM meet the same float32 values, and the bits
    compared are those of the casts, the movement kernels and the elementwise ops."""
    rng = np.random.default_rng(0)
    grid = lambda shape, step: (rng.integers(-15, 16, shape) / step).astype(dtype)
    g = mg.Graph()
    x = g.input("x", (8, 12), dtype)
    w1, b1 = g.param("w1", grid((16, 12), 64)), g.param("b1", grid((16,), 16))
    w2, b2 = g.param("w2", grid((5, 16), 64)), g.param("b2", grid((5,), 16))
    h = F.relu(F.linear(x, w1, b1))
    logits = F.linear(h, w2, b2)
    both = F.concat([F.transpose(h, (1, 0)), F.transpose(logits, (1, 0))], axis=0)
    return [F.sigmoid(logits), both], {"x": grid((8, 12), 16)}


@pytest.mark.parametrize("optimize", (0, 1, 2))
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_a_half_mlp_plan_gives_the_cpu_plans_bits(planner, dtype, optimize):
    outputs, feeds = _half_mlp(dtype)
    plan = mg.compile(outputs, device=planner, optimize=optimize)
    # the widening pass ran for CUDA: linear, relu and sigmoid on float32 between casts; the
    # movement ops ran on the half values themselves
    assert dict(plan.passes)["widen_half"]["nodes_widened"] == 4
    half_ops = {ins.op for ins in plan.instructions
                if any(plan.slots[s].type.dtype == dtype for s in ins.outputs)}
    assert half_ops <= {"cast", "transpose", "concat"} and {"cast", "concat"} <= half_ops
    entries = {c.step.entry for c in plan_calls(plan, mg.backend.get_backend(planner))[0]}
    assert f"mg_cast_f32_{dtype_short(dtype)}" in entries
    got = run_plan_emulated(plan, mg.backend.get_backend(planner), feeds)
    want = mg.compile(outputs, optimize=optimize).run(feeds)
    for a, b in zip(got, want):
        _same_bits(a, b, (dtype, optimize))


def dtype_short(dtype) -> str:
    return "f16" if dtype == F16 else "bf16"
