"""The CUDA kernels of the elementwise math (tan, the inverse and hyperbolic functions, atan2, the
two roundings), rendered from the elementwise table and run on the host (csrc_cuda/host_emu.h),
equal the CPU backend's bit for bit: unfused, in fused programs, and in the compositions (clip
with tensor bounds, masked_fill, hardmax), on the domains' edges, the halves, signed zeros,
infinities and NaN. On a GPU the functions are CUDA's (within their ulp bounds); on the host
both builds call the same libm."""
import host_emu
import numpy as np
import pytest
from kernel_checks import run_plan_emulated

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.cuda import render
from mgegraph.cuda.backend import CudaBackend

pytestmark = pytest.mark.skipif(not host_emu.have_compiler(), reason="no C++ compiler")

EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.0, -1.0, 1.0000001, -1.0000001,
         0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 8388607.5, 1.5707964, 89.5,
         -89.5, 710.5, 3.4e38, -3.4e38]
UNARY = ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "round",
         "round_half_even"]


def inputs(dtype, n=257):
    rng = np.random.default_rng(n)
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(EDGES), rng.standard_normal(n) * 3]).astype(dtype)


@pytest.fixture(scope="module")
def planner():
    """``device="cuda-ewmath-plan"``: the CUDA backend without a device, for planning."""
    mg.register_backend("cuda-ewmath-plan", lambda: CudaBackend(device=None))
    yield "cuda-ewmath-plan"
    mg.backend.unregister_backend("cuda-ewmath-plan")


def bitwise_equal(a, b) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN."""
    nan = np.isnan(a)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(nan, np.isnan(b)) and \
        np.where(nan, 0, a).tobytes() == np.where(nan, 0, b).tobytes()


def unfused(x, y):
    return [getattr(F, name)(x) for name in UNARY] + [F.atan2(x, y), F.atan2(y, x)]


def fused(x, y):
    return [F.atan2(F.sinh(x) * 0.5, F.cosh(y)) + F.round(x * 3.0),
            F.asin(F.tanh(x)) - F.acos(F.tanh(y) * 0.5) * F.atanh(F.sin(x) * 0.9),
            F.asinh(F.tan(x)) + F.acosh(F.abs(y) + 1.0) * F.round_half_even(y * 2.0)
            - F.atan(x)]


def compositions(x, y):
    lo = F.minimum(y, 0.0)
    return [F.clip(x, lo, F.abs(y)), F.masked_fill(x, y > 0.5, -2.5), F.hardmax(F.round(y), 0)]


def graph(make, dtype, n=283):
    g = mg.Graph()
    x, y = g.input("x", (n,), dtype), g.input("y", (n,), dtype)
    values = inputs(dtype, n - len(EDGES))
    return make(x, y), {"x": values, "y": values[::-1].copy()}


def test_the_rendered_module_has_a_kernel_per_op_and_dtype():
    kernels = render.elementwise_kernels()
    for op in UNARY + ["atan2"]:
        entries = [e for e in kernels if e.split("_", 2)[-1] in (f"{op}_f32", f"{op}_f64")]
        assert len(entries) == 2, (op, entries)  # float32 and float64
        assert all(f"ew_{op}(" in kernels[e] for e in entries)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make,optimize", [(unfused, 0), (fused, 2), (compositions, 0)],
                         ids=["unfused", "fused", "compositions"])
def test_plans_run_on_the_host_equal_the_cpu_bitwise(planner, make, optimize, dtype):
    outputs, feeds = graph(make, dtype)
    plan = mg.compile(outputs, device=planner, optimize=optimize)
    ops = {ins.op for ins in plan.instructions}
    if make is fused:
        assert "fused_elementwise" in ops, ops
    with np.errstate(all="ignore"):
        # hardmax's argmax is a hand-written kernel: built with the fiber emulation
        got = run_plan_emulated(plan, mg.backend.get_backend(planner), feeds)
        expected = mg.compile(outputs, optimize=optimize).run(feeds)
    for k, (a, b) in enumerate(zip(expected, got)):
        assert bitwise_equal(a, b), (make.__name__, k)


def test_the_host_kernels_give_numpys_special_values(planner):
    # the rounding of halves and the ends of the domains, checked on the CUDA side directly
    g = mg.Graph()
    x = g.input("x", (8,), "float32")
    feeds = {"x": np.array([2.5, -2.5, 0.5, -0.5, 1.0, -1.0, 1.5, -0.0], np.float32)}
    outs = [F.round(x), F.round_half_even(x), F.atanh(x), F.acosh(x), F.asin(x)]
    plan = mg.compile(outs, device=planner, optimize=0)
    got = host_emu.run_plan_on_host(plan, mg.backend.get_backend(planner), feeds)
    np.testing.assert_array_equal(got[0], [3, -3, 1, -1, 1, -1, 2, -0.0])
    np.testing.assert_array_equal(got[1], np.rint(feeds["x"]))
    assert np.signbit(got[0][-1]) and np.signbit(got[1][-1])
    with np.errstate(all="ignore"):  # NumPy's float32 functions are its own, within 1 ulp
        for out, ref in zip(got[2:], (np.arctanh, np.arccosh, np.arcsin)):
            np.testing.assert_allclose(out, ref(feeds["x"]), rtol=2.5e-7, atol=0)
