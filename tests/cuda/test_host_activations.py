"""The activations' CUDA kernels, run on the host (csrc_cuda/host_emu.h), equal the CPU
backend's bit for bit: every activation unfused at the parameters its users pass (PyTorch's and
ONNX's defaults), prelu with a per-channel slope, and chains of them in fused programs, on edge
values (signed zeros, infinities, NaN, subnormals, expm1's range just below 0)."""
import host_emu
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.cuda.backend import CudaBackend

pytestmark = pytest.mark.skipif(not host_emu.have_compiler(), reason="no C++ compiler")

EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-30, -1e-30, 1e-7, -1e-7, 3e-4,
         -3e-4, 0.4, -0.4, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, 20.0, -20.0, 88.8, -88.8,
         -104.5, 710.0, -746.0, 3.4e38, -3.4e38]


def inputs(dtype, n=257):
    rng = np.random.default_rng(n)
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(EDGES), rng.standard_normal(n) * 4]).astype(dtype)


@pytest.fixture(scope="module")
def planner():
    """``device="cuda-plan"``: the CUDA backend without a device, for planning."""
    mg.register_backend("cuda-act-plan", lambda: CudaBackend(device=None))
    yield "cuda-act-plan"
    mg.backend.unregister_backend("cuda-act-plan")


def bitwise_equal(a, b) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN (its sign and payload are the
    instruction's operand order, on either build)."""
    nan = np.isnan(a)
    return a.dtype == b.dtype and np.array_equal(nan, np.isnan(b)) and \
        np.where(nan, 0, a).tobytes() == np.where(nan, 0, b).tobytes()


def activations(x, w):
    return [F.elu(x), F.elu(x, 0.3), F.selu(x), F.selu(x, 1.67326319217681884765625,
                                                      1.05070102214813232421875),
            F.celu(x, 1.7), F.softsign(x), F.hardsigmoid(x), F.hardsigmoid(x, 0.2, 0.5),
            F.mish(x), F.logsigmoid(x), F.thresholded_relu(x, 0.4), F.softshrink(x, 0.5),
            F.hardshrink(x, 0.5), F.shrink(x, 1.0, 0.25), F.prelu(x, w)]


def chains(x, w):
    return [F.elu(F.mish(x), 0.5) * F.softsign(x),
            F.prelu(F.selu(F.logsigmoid(x) + 1.0), w) - F.celu(x, 0.8),
            F.softshrink(F.hardsigmoid(x, 0.2, 0.5) * 4.0 - 2.0, 0.3)
            + F.thresholded_relu(F.hardshrink(x, 0.7), 1.5)]


def graph(make, dtype, n):
    g = mg.Graph()
    x = g.input("x", (n,), dtype)
    w = g.input("w", (1,), dtype)
    return make(x, w), {"x": inputs(dtype, n - len(EDGES)), "w": np.array([-0.3], dtype)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make,optimize", [(activations, 0), (chains, 2)],
                         ids=["unfused", "fused"])
def test_plans_run_on_the_host_equal_the_cpu_bitwise(planner, make, optimize, dtype):
    outputs, feeds = graph(make, dtype, 289)
    plan = mg.compile(outputs, device=planner, optimize=optimize)
    ops = {ins.op for ins in plan.instructions}
    assert ops == ({"fused_elementwise"} if optimize else ops - {"fused_elementwise"}), ops
    got = host_emu.run_plan_on_host(plan, mg.backend.get_backend(planner), feeds)
    with np.errstate(all="ignore"):
        expected = mg.compile(outputs, optimize=optimize).run(feeds)
    for k, (a, b) in enumerate(zip(expected, got)):
        assert bitwise_equal(a, b), (make.__name__, k)


def test_prelu_with_a_per_channel_slope_on_the_host(planner):
    g = mg.Graph()
    x, w = g.input("x", (2, 3, 4, 5), "float32"), g.input("w", (3, 1, 1), "float32")
    outputs = [F.prelu(x, w)]
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32),
             "w": np.array([0.1, -2.0, 0.7], np.float32).reshape(3, 1, 1)}
    plan = mg.compile(outputs, device=planner, optimize=0)
    (got,) = host_emu.run_plan_on_host(plan, mg.backend.get_backend(planner), feeds)
    np.testing.assert_array_equal(got, np.where(feeds["x"] > 0, feeds["x"],
                                                feeds["x"] * feeds["w"]))
