"""On a GPU (marker ``cuda``; skipped elsewhere with the reason): plans run by the CUDA backend
against the CPU backend: elementwise ops and fused groups bitwise (where the math is the same
instructions: not sin, cos, pow and float64 erf, which are CUDA's), training within 1e-4 over
20 steps, remat, CUDA graph replay, shared weights on the device, errors (a kernel's failure
through the status word raises the CPU's KernelError)."""
import numpy as np
import pytest
from graphs import failing_cases, fusion_chain

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.ops import elementwise_table as TABLE
from mgegraph.ops.builder import apply

pytestmark = pytest.mark.cuda
LIBM = {"sin", "cos", "pow", "erf", "gelu"}  # CUDA's math, not the CPU's libm: ulps apart


def _same(a, b, op="", x=None):
    if op in LIBM and a.dtype.kind == "f":
        # gelu's 1 + erf(x/sqrt 2) cancels for negative x (as PyTorch's formula does): an ulp
        # of difference in erf is then an error of about eps * |x| in the result, however small
        # the result; the bound adds that much to the relative one.
        ulps = 4 * np.finfo(a.dtype).eps * np.abs(np.nan_to_num(x, posinf=0, neginf=0)) \
            if op == "gelu" else 0.0
        bad = ~(np.abs(a - b) <= (4e-6 if a.dtype == np.float32 else 1e-14) * np.abs(b) + ulps)
        bad &= ~((a == b) | (np.isnan(a) & np.isnan(b)))
        assert not bad.any(), (op, a[bad][:5], b[bad][:5])
        return
    nan = np.isnan(a) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    assert np.array_equal(nan, np.isnan(b) if b.dtype.kind == "f" else nan)
    assert np.where(nan, 0, a).tobytes() == np.where(nan, 0, b).tobytes(), op


def _both(outputs, feeds, **options):
    return (mg.compile(outputs, device="cpu", **options).run(feeds),
            mg.compile(outputs, device="cuda", **options).run(feeds))


@pytest.mark.parametrize("op", TABLE.OPS,
                         ids=lambda op: op.name)
def test_every_elementwise_op_and_dtype_equals_the_cpu(op):
    rng = np.random.default_rng(0)
    for dtype in op.dtypes:
        g = mg.Graph()
        shape = (33, 65)
        if np.dtype(dtype).kind == "f":
            x = (rng.standard_normal(shape) * 3).astype(dtype)
            x.ravel()[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40]
        else:
            x = rng.integers(-50, 50, shape).astype(dtype)
        a = g.input("x", shape, dtype)
        if op.kind == "unary":
            y = apply(op.name, (a,), **dict(zip(op.params, (-0.5, 2.0))))
            feeds = {"x": x}
        else:
            z = np.abs(x[:1]) % 7 if op.name == "pow" and x.dtype.kind == "i" else x[:1] + 1
            y = apply(op.name, (a, g.input("z", (1, 65), dtype)))
            feeds = {"x": x, "z": np.ascontiguousarray(z.astype(dtype))}
        (cpu,), (gpu,) = _both([y], feeds, optimize=0)
        _same(cpu, gpu, op.name, x)


def test_fused_groups_equal_the_cpu_bitwise():
    outputs = fusion_chain(1 << 20)
    rng = np.random.default_rng(1)
    feeds = {k: rng.standard_normal(1 << 20).astype(np.float32) for k in "xabc"}
    plan = mg.compile(outputs, device="cuda")
    assert [i.op for i in plan.instructions] == ["fused_elementwise"]
    (cpu,), (gpu,) = _both(outputs, feeds)
    _same(cpu, gpu)


def test_random_graphs_match_the_cpu():
    from mgegraph.testing import random_graph
    for seed in range(8):
        _, outputs, feeds = random_graph(seed)
        for a, b in zip(*_both(outputs, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _mlp():
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))


def _losses(model_fn, batch, device, steps=20, **options):
    model = model_fn()
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=batch,
                                 device=device, **options)
    losses = [step(*batch) for _ in range(steps)]
    if device.startswith("cuda"):
        from mgegraph.cuda import fetch
        fetch(*[p.value for p in model.parameters()])
    return losses, model.state_dict()


def _batch(shape, classes=10):
    rng = np.random.default_rng(2)
    return (rng.standard_normal(shape).astype(np.float32),
            rng.integers(0, classes, shape[0]).astype(np.int64))


def test_mlp_training_matches_the_cpu_over_20_steps_and_weights_come_back():
    batch = _batch((32, 20))
    cpu, cpu_state = _losses(_mlp, batch, "cpu")
    gpu, gpu_state = _losses(_mlp, batch, "cuda")
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4)
    for name in cpu_state:
        np.testing.assert_allclose(gpu_state[name], cpu_state[name], rtol=1e-4, atol=1e-6)


def _convnet():
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


def test_convnet_training_matches_the_cpu_over_20_steps():
    batch = _batch((8, 3, 16, 16))
    cpu, _ = _losses(_convnet, batch, "cpu")
    gpu, _ = _losses(_convnet, batch, "cuda")
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4)


def test_remat_gives_the_plain_plans_gradients_on_the_gpu():
    g = mg.Graph()
    x = g.input("x", (16, 32), "float32")
    w = g.param("w", np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32))
    h = x
    for _ in range(6):
        h = F.tanh(h @ w)
    loss = F.sum(h * h)
    (dw,) = mg.grad(loss, [w])
    feeds = {"x": np.random.default_rng(4).standard_normal((16, 32)).astype(np.float32)}
    plain = mg.compile([loss, dw], device="cuda").run(feeds)
    remat = mg.compile([loss, dw], device="cuda", remat="sqrt").run(feeds)
    for a, b in zip(plain, remat):
        np.testing.assert_array_equal(a, b)


def test_graph_replay_equals_launching_one_by_one():
    outputs = fusion_chain(10_000)
    feeds = {k: np.full(10_000, 0.5, np.float32) for k in "xabc"}
    plan = mg.compile(outputs, device="cuda")
    runs = [plan.run(feeds)[0] for _ in range(3)]  # the third run replays the captured graph
    assert plan.executable()._graph is not None
    plan.executable().use_graph = False
    other = mg.compile(outputs, device="cuda")
    other.executable().use_graph = False
    runs.append(other.run(feeds)[0])
    for r in runs[1:]:
        np.testing.assert_array_equal(r, runs[0])


def test_a_device_index_beyond_the_machines_is_a_clear_error():
    from mgegraph.cuda.driver import Device
    g = mg.Graph()
    y = g.input("x", (3,)) * 2.0
    with pytest.raises(mg.GraphError, match=r"'cuda:64' asked for; this machine has \d+ CUDA"):
        mg.compile([y], device="cuda:64")
    assert Device(0).arch.startswith("sm_")


def test_check_numerics_names_the_instruction_on_the_gpu():
    g = mg.Graph()
    x = g.input("x", (4,), "float32")
    y = F.log(x) * 2.0
    plan = mg.compile([y], device="cuda", check_numerics=True, optimize=0)
    with pytest.raises(mg.NumericsError, match="log"):
        plan.run({"x": np.array([1, 0, 2, 3], np.float32)})


@pytest.mark.parametrize("name", list(failing_cases()))
def test_a_failing_kernel_raises_the_cpus_error_on_the_gpu(name):
    # the status word: set by the kernel (mg_fail), zeroed by every run, graph replays included
    outputs, good, bad = failing_cases()[name]
    cpu = mg.compile(outputs, device="cpu", optimize=0)
    gpu = mg.compile(outputs, device="cuda", optimize=0)
    with pytest.raises(mg.KernelError) as want:
        cpu.run(bad)
    for _ in range(2):  # launched one by one, then captured as a graph and replayed
        for a, b in zip(cpu.run(good), gpu.run(good), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        with pytest.raises(mg.KernelError) as got:
            gpu.run(bad)
        assert str(got.value) == str(want.value)
    assert gpu.executable()._graph is not None
    gpu.run(good)


def test_the_first_failing_instruction_is_reported_on_the_gpu():
    g = mg.Graph()
    i, k = g.input("i", (3,), "int32"), g.input("k", (2,), "int32")
    rows = F.take(g.input("t", (4, 6), "float32"), i, axis=0)
    outputs = [rows, F.one_hot(k, 3)]  # both fail; many threads of each
    feeds = {"t": np.ones((4, 6), np.float32), "i": np.array([0, 9, 1], np.int32),
             "k": np.array([5, 0], np.int32)}
    with pytest.raises(mg.KernelError) as want:
        mg.compile(outputs, device="cpu", optimize=0).run(feeds)
    plan = mg.compile(outputs, device="cuda", optimize=0)
    for _ in range(3):
        with pytest.raises(mg.KernelError) as got:
            plan.run(feeds)
        assert str(got.value) == str(want.value)
