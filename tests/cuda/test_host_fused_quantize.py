"""Fused programs that load, dequantize, quantize and store int8 and uint8 values, rendered for
CUDA (mgegraph/cuda/render.py) and run on the host (host_emu.h): the CPU plan's integers and
floats bit for bit, and a NaN met by a fused quantize fails the run with the CPU's error."""
import host_emu
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.cuda.backend import CudaBackend
from mgegraph.ir.errors import KernelError
from mgegraph.ir.quant import per_tensor
from mgegraph.ops.quantize import dequantize, quantize


@pytest.fixture(scope="module")
def planner():
    """``device="cuda-qplan"``: the CUDA backend without a device, for planning."""
    mg.register_backend("cuda-qplan", lambda: CudaBackend(device=None))
    yield "cuda-qplan"
    mg.backend.unregister_backend("cuda-qplan")


def _ints(shape, dtype, seed):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


def _add_relu(storage, zps):
    shape = (3, 37)
    g = mg.Graph()
    qa = g.input("a", shape, storage, per_tensor(0.0625, zps[0]))
    qb = g.input("b", shape, storage, per_tensor(0.1037, zps[1]))
    # b weighted by 0.5: an add of the two alone is the QDQ pass's quantized_add instead
    y = quantize(F.relu(dequantize(qa) + dequantize(qb) * 0.5), 0.0871, zps[2],
                 np.dtype(storage).name)
    return [y], {"a": _ints(shape, storage, 0), "b": _ints(shape, storage, 1)}


def _scale_shift_and_requantize():
    g = mg.Graph()
    q = g.input("q", (5, 33), np.int8, per_tensor(0.037, 7))
    gamma = g.input("gamma", (33,))
    y = dequantize(q) * gamma + 0.25
    feeds = {"q": _ints((5, 33), np.int8, 2),
             "gamma": np.random.default_rng(3).normal(size=33).astype(np.float32)}
    return [y, quantize(y, 0.02, 128, "uint8")], feeds


GRAPHS = {"int8 add relu": lambda: _add_relu(np.int8, (-3, 5, 1)),
          "uint8 add relu": lambda: _add_relu(np.uint8, (128, 120, 131)),
          "scale, shift, requantize": _scale_shift_and_requantize}


@pytest.mark.parametrize("name", GRAPHS)
def test_fused_quantized_plans_on_the_host_are_the_cpus(planner, name):
    outputs, feeds = GRAPHS[name]()
    plan = mg.compile(outputs, device=planner)
    assert [ins.op for ins in plan.instructions] == ["fused_elementwise"]
    got = host_emu.run_plan_on_host(plan, mg.backend.get_backend(planner), feeds)
    for want, have in zip(mg.compile(outputs).run(feeds), got):
        assert want.dtype == have.dtype
        np.testing.assert_array_equal(want, have)


def test_a_nan_fails_the_run(planner):
    g = mg.Graph()
    x = g.input("x", (4,))
    outputs = [quantize(x / x, 0.5, 0, "int8")]
    plan = mg.compile(outputs, device=planner)
    assert [ins.op for ins in plan.instructions] == ["fused_elementwise"]
    feeds = {"x": np.array([1.0, 0.0, 2.0, 3.0], np.float32)}
    with pytest.raises(KernelError, match="NaN"):
        host_emu.run_plan_on_host(plan, mg.backend.get_backend(planner), feeds)
