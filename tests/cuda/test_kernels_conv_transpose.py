"""The transposed convolutions on CUDA: conv_transpose2d is conv2d's data gradient (ops/conv_api.py),
so csrc_cuda/conv.cu's data-gradient kernel runs it. Its fiber emulation against the CPU kernels
on the geometries only a transposed convolution gives (an input_hw past the stride's grid from
output_padding, padding wider than the dilated kernel, depthwise, stride 3); a whole plan of
conv_transpose2d with asymmetric padding, bias and every gradient against the CPU's plan; and
(marker cuda) the same on a device."""
import numpy as np
import pytest
from kernel_checks import assert_close, cpu_result, emulate, node_of, run_plan_emulated

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import unregister_backend
from mgegraph.cuda.backend import CudaBackend
from mgegraph.cuda.kernels import conv as family
from mgegraph.ops.conv_api import transposed

CASES = [  # (x shape, weight shape (C_in, C_out/groups, kh, kw), attributes of conv_transpose2d)
    ((2, 4, 5, 6), (4, 3, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ((1, 6, 4, 5), (6, 1, 3, 3), {"stride": 3, "padding": 2, "output_padding": 2, "groups": 6}),
    ((2, 4, 3, 4), (4, 2, 2, 3), {"stride": (1, 2), "dilation": (2, 1), "groups": 2}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"padding": 3, "dilation": 2}),
]


def _rand(dtype, shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _data_node(xs, ws, attrs, dtype):
    """The conv2d_backward_data node conv_transpose2d makes for these arguments, and its
    inputs (w, x)."""
    g = mg.Graph()
    y = F.conv_transpose2d(g.input("x", xs, dtype), g.input("w", ws, dtype), **attrs)
    (node,) = [n for n in g.nodes if n.op.name == "conv2d_backward_data"]
    assert node.outputs[0] is y
    x, w = _rand(dtype, xs, 0), _rand(dtype, ws, 1)
    return node_of("conv2d_backward_data", [w, x], **node.attr), [w, x]


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("case", CASES)
def test_data_gradient_kernel_matches_cpu(dtype, case):
    node, arrays = _data_node(*case, dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    assert_close(emulate(family, node, arrays)[0], cpu_result(node, arrays)[0], **tol)


@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-conv-transpose-plan", lambda: CudaBackend(device=None))
    yield "cuda-conv-transpose-plan"
    unregister_backend("cuda-conv-transpose-plan")


def _upsampler():
    """An asymmetric-padded transposed convolution (crop and zero pad), bias and relu, then a
    symmetric one with output_padding; the output and its vector-Jacobian products. The bias is
    (1, C, 1, 1): a (C,) one's reshape reads a weight only, which the fold pass would evaluate
    on the device, absent here."""
    rng = np.random.default_rng(3)
    g = mg.Graph()
    x = g.input("x", (2, 4, 5, 4), "float32")
    w1, b1, w2 = (g.param(f"p{i}", (rng.standard_normal(s) * 0.3).astype(np.float32))
                  for i, s in enumerate([(4, 3, 3, 3), (1, 3, 1, 1), (3, 2, 3, 3)]))
    h = F.relu(transposed(x, w1, b1, (2, 2), ((0, 2), (1, 0)), (11, 10), (1, 1), 1))
    y = F.conv_transpose2d(h, w2, stride=2, padding=1, output_padding=1)
    dy = g.input("dy", (2, 2, 22, 20), "float32")  # a fed seed: no constants for fold to run
    feeds = {name: rng.standard_normal(shape).astype(np.float32)
             for name, shape in (("x", (2, 4, 5, 4)), ("dy", (2, 2, 22, 20)))}
    return [y, *mg.grad(y, [x, w1, b1, w2], seed=dy)], feeds


@pytest.mark.nvrtc
@pytest.mark.parametrize("optimize", (0, 1))
def test_plan_emulated_like_cpu(planner, optimize):
    outputs, feeds = _upsampler()
    cpu = mg.compile(outputs, optimize=optimize).run(feeds)
    plan = mg.compile(outputs, device=planner, optimize=optimize)
    assert any(ins.op == "conv2d_backward_data" for ins in plan.instructions)
    got = run_plan_emulated(plan, mg.backend.get_backend(planner), feeds)
    for g, w in zip(got, cpu):
        assert_close(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.cuda
def test_plan_on_device_like_cpu():
    from mgegraph import cuda
    reason = cuda.unavailable_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")
    outputs, feeds = _upsampler()
    cpu = mg.compile(outputs).run(feeds)
    for g, w in zip(mg.compile(outputs, device="cuda").run(feeds), cpu):
        assert_close(g, w, rtol=1e-4, atol=1e-6)
