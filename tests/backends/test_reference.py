"""A second backend, registered from a test: the NumPy reference backend (reference.py) runs an
MLP's inference and training plans through the same compiler as the CPU backend, gets the same
plans but for the kernels, and the CPU's results."""
from dataclasses import replace

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.backend import get_backend, unregister_backend
from mgegraph.train import accuracy

from .reference import ReferenceBackend

# Not bitwise: the kernels of the two backends may sum in different orders (the CPU's GEMM,
# tree reductions and fused kernel against NumPy's BLAS, pairwise sums and one call per step).
# Over these 8- and 16-term sums that is at most about k * eps relative per value (1e-6 in
# float32, 2e-15 in float64), compounded over three training steps; here they agree to 1 ulp.
TOLERANCE = {np.float32: {"rtol": 1e-5, "atol": 1e-6},
             np.float64: {"rtol": 1e-13, "atol": 1e-14}}
BATCH, FEATURES, HIDDEN, CLASSES = 32, 8, 16, 4


@pytest.fixture
def reference():
    mg.register_backend("reference", ReferenceBackend)
    yield "reference"
    unregister_backend("reference")


def _mlp(dtype, seed=0) -> nn.Module:
    """Linear, ReLU, Linear with seeded weights of ``dtype``: the same model on every call."""
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    rng = np.random.default_rng(seed)
    for p in model.parameters():  # before any graph binds them: a new array is fine
        p.value = (rng.standard_normal(p.shape) * 0.5).astype(dtype)
    return model


def _batch(dtype, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, FEATURES)).astype(dtype)
    return x, rng.integers(0, CLASSES, BATCH)


def _inference_plan(model, x, device, optimize=1):
    g = mg.Graph()
    return mg.compile([model(g.input("input0", x.shape, x.dtype))], device=device,
                      optimize=optimize)


def _train_plan(model, batch, device, optimize=1, memory=None):
    """What mg.compile_train_step compiles (it has no device argument): the loss, its
    gradients, SGD's update and the accuracy, as one plan; returns it and the optimiser."""
    model.train()
    g = mg.Graph()
    x, y = (g.input(f"input{i}", a.shape, a.dtype) for i, a in enumerate(batch))
    out = model(x)
    loss = F.cross_entropy(out, y)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    grads = mg.grad(loss, [g.bind(p) for p in opt.params])
    opt.build(g, {id(p): dg for p, dg in zip(opt.params, grads)})
    outputs = [F.reshape(loss, ()), accuracy(out, y)]
    return mg.compile(outputs, device=device, optimize=optimize, memory=memory), opt


def _train(model, batch, device, steps=3, **options) -> list:
    plan, opt = _train_plan(model, batch, device, **options)
    feeds = {"input0": batch[0], "input1": batch[1]}
    results = []
    for _ in range(steps):
        opt.prepare_step()
        results.append(plan.run(feeds))
    return results


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("optimize", [0, 1])
def test_inference_matches_the_cpu(reference, dtype, optimize):
    model, (x, _) = _mlp(dtype).eval(), _batch(dtype)
    want = mg.compile_module(model, (x,), optimize=optimize)(x)
    (got,) = _inference_plan(model, x, reference, optimize).run({"input0": x})
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("optimize", [0, 1])
def test_training_steps_match_the_cpu(reference, dtype, optimize):
    batch = _batch(dtype)
    cpu_model, ref_model = _mlp(dtype), _mlp(dtype)
    cpu_step = mg.compile_train_step(cpu_model, F.cross_entropy,
                                     optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9),
                                     batch, metrics=("accuracy",), optimize=optimize)
    want = [cpu_step(*batch) for _ in range(3)]
    got = _train(ref_model, batch, reference, optimize=optimize)
    for (want_loss, want_metrics), (loss, acc) in zip(want, got):
        np.testing.assert_allclose(loss, want_loss, **TOLERANCE[dtype])
        assert acc == want_metrics["accuracy"]
    assert got[-1][0] < got[0][0]  # it trains
    for name, value in cpu_model.state_dict().items():
        np.testing.assert_allclose(ref_model.state_dict()[name], value, **TOLERANCE[dtype],
                                   err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("optimize", [0, 1])
def test_an_elementwise_chain_matches_the_cpu(reference, dtype, optimize):
    # fused (optimize=1), one program whose constants include leaky_relu's slope and clip's
    # bounds, read from the program's operands; unfused, one kernel per op
    g = mg.Graph()
    x, y = g.input("x", (3, 5), dtype), g.input("y", (5,), dtype)
    z = F.clip(F.leaky_relu(F.tanh(x) * 3.0 - F.sigmoid(y), 0.2), -0.5, 2.0)
    z = F.maximum(F.sqrt(F.abs(z)) / (F.exp(-z) + 1.0), F.square(y) - 1.0)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((3, 5)).astype(dtype),
             "y": rng.standard_normal(5).astype(dtype)}
    (want,) = mg.compile([z], optimize=optimize).run(feeds)
    plan = mg.compile([z], device=reference, optimize=optimize)
    assert ("fused_elementwise" in [i.op for i in plan.instructions]) == (optimize == 1)
    np.testing.assert_allclose(plan.run(feeds)[0], want, **TOLERANCE[dtype])


def test_the_train_helper_builds_what_compile_train_step_builds():
    model, batch = _mlp(np.float32), _batch(np.float32)
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.1,
                                                                   momentum=0.9),
                                 batch, metrics=("accuracy",))
    assert _anywhere(_train_plan(model, batch, "cpu")[0]) == _anywhere(step.plan)


def _anywhere(plan):
    # a node's location is the user's line that made it: here one of _train_plan's lines
    return replace(plan, instructions=tuple(replace(i, location="") for i in plan.instructions))


def test_a_debug_plan_poisons_dead_buffers_and_still_matches(reference):
    batch = _batch(np.float32)
    plain = _train(_mlp(np.float32), batch, reference)
    debug = _train(_mlp(np.float32), batch, reference, memory="debug")
    np.testing.assert_array_equal(np.array(debug), np.array(plain))


def _planned(plan):
    """What the planner decided, renumbered without workspace slots: which workspaces a kernel
    needs is the backend's lowering, as are kernel names and parameter blocks."""
    kept = [s for s in plan.slots if s.role != mg.Role.WORKSPACE]
    number = {s.index: i for i, s in enumerate(kept)}
    slots = [(s.type, s.role, s.name, number.get(s.alias), s.view_offset) for s in kept]
    instructions = [(ins.op, ins.attrs, tuple(number[s] for s in ins.inputs),
                     tuple(number[s] for s in ins.outputs)) for ins in plan.instructions]
    feeds = {name: number[s] for name, s in plan.feeds.items()}
    return slots, instructions, feeds, [number[s] for s in plan.outputs]


@pytest.mark.parametrize("optimize", [0, 1])
def test_the_planner_gives_both_backends_the_same_plan(reference, optimize, monkeypatch):
    # the CPU backend moves what reads only weights (an optimiser's scalars picked from its
    # array) into a prologue, which the reference backend does not run: compared without it
    monkeypatch.setattr(get_backend("cpu"), "runs_prologue", False)
    model, batch = _mlp(np.float32), _batch(np.float32)
    cpu, ref = (_inference_plan(model, batch[0], d, optimize) for d in ("cpu", reference))
    # the same slots, instructions, feeds and outputs; the CPU's lowering may give a small GEMM
    # a workspace (its tiles' packed operands, on AVX2), which the reference's never asks for
    assert _planned(ref) == _planned(cpu)
    assert not any(s.role == mg.Role.WORKSPACE for s in ref.slots)
    assert ref.arena_bytes <= cpu.arena_bytes
    assert (ref.device, cpu.device) == ("reference", "cpu")

    cpu, ref = (_train_plan(_mlp(np.float32), batch, d, optimize)[0] for d in ("cpu", reference))
    assert _planned(ref) == _planned(cpu)
    assert any(s.role == mg.Role.WORKSPACE for s in ref.slots)  # cross entropy's log-probs


def test_the_executable_carves_the_plan_offsets(reference):
    model, batch = _mlp(np.float32), _batch(np.float32)
    plan, opt = _train_plan(model, batch, reference)
    assert plan.arena_bytes < plan.naive_bytes  # temporaries share bytes: offsets matter
    executable = plan.executable()
    arena, buffers = executable.arena.ctypes.data, executable.buffers
    assert executable.arena.nbytes == plan.arena_bytes and arena % plan.memory.options.alignment == 0
    for slot in plan.slots:
        address = buffers[slot.index].ctypes.data
        if slot.offset is not None:
            assert address == arena + slot.offset, slot
        elif slot.alias is not None:
            assert address == buffers[slot.alias].ctypes.data + slot.view_offset, slot
    params = {p.name: p.value for p in model.parameters()}
    shared = {s.name: buffers[s.index] for s in plan.slots if s.index in plan.shared}
    assert all(shared[name] is value for name, value in params.items())  # the model's arrays
    before = {name: value.copy() for name, value in params.items()}
    opt.prepare_step()
    (loss, _) = plan.run({"input0": batch[0], "input1": batch[1]})
    assert loss == buffers[plan.outputs[0]]  # the result was written into the planned buffer
    assert not any(np.array_equal(params[n], before[n]) for n in params)  # updated in place


def test_an_op_the_backend_lacks_is_an_op_error_naming_op_and_device(reference):
    g = mg.Graph()
    x = g.input("x", (4, 3))
    with pytest.raises(mg.OpError, match=r"device 'reference' does not run 'softmax'"):
        mg.compile([F.softmax(x, axis=1)], device=reference)
    with pytest.raises(mg.OpError, match=r"reference backend's fused interpreter has no op "
                                         r"\['gelu'\]"):
        mg.compile([F.gelu(x) * 2.0], device=reference)
    i = g.input("i", (4, 3), "int64")
    with pytest.raises(mg.OpError, match=r"no kernel for op 'matmul' on device 'reference' with "
                                         r"dtype int64"):
        mg.compile([F.matmul(i, i, transpose_b=True)], device=reference)


def test_run_time_errors_name_the_instruction(reference):
    model, (x, y) = _mlp(np.float32), _batch(np.float32)
    plan, _ = _train_plan(model, (x, y), reference)
    with pytest.raises(mg.KernelError, match=r"cross_entropy \(kernel cross_entropy_f32, .*\): "
                                             r"a label is out of range \[0, 4\)"):
        plan.run({"input0": x, "input1": np.full_like(y, CLASSES)})
    with pytest.raises(mg.FeedError, match="feed 'input0' is float64"):
        plan.run({"input0": x.astype(np.float64), "input1": y})


def test_devices_lists_the_registered_backend(reference):
    assert "reference" in mg.devices()
    with pytest.raises(mg.GraphError, match="'reference' is registered already"):
        mg.register_backend("reference", ReferenceBackend)
    g = mg.Graph()
    x = g.input("x", (2,))
    with pytest.raises(mg.GraphError, match=r"unknown device 'tpu'; known devices: 'cpu'.* "
                                            r"'reference'"):
        mg.compile([x * 2.0], device="tpu")
    unregister_backend("reference")
    assert "reference" not in mg.devices()
    with pytest.raises(mg.GraphError, match=r"unknown device 'reference'; known devices: 'cpu'"):
        mg.compile([x * 2.0], device="reference")
    mg.register_backend("reference", ReferenceBackend)  # the fixture unregisters it again


def test_compile_train_step_and_compile_module_take_the_device(reference):
    batch = _batch(np.float32)
    cpu_model, ref_model = _mlp(np.float32), _mlp(np.float32)
    steps = [mg.compile_train_step(m, F.cross_entropy, optim.SGD(m.parameters(), lr=0.1),
                                   batch, device=d)
             for m, d in ((cpu_model, "cpu"), (ref_model, reference))]
    assert steps[1].plan.device == reference
    for _ in range(2):
        want, got = (step(*batch) for step in steps)
        np.testing.assert_allclose(got, want, **TOLERANCE[np.float32])
    predict = mg.compile_module(ref_model.eval(), (batch[0],), device=reference)
    np.testing.assert_allclose(predict(batch[0]),
                               mg.compile_module(cpu_model.eval(), (batch[0],))(batch[0]),
                               **TOLERANCE[np.float32])


def test_out_on_a_backend_that_returns_new_arrays(reference):
    """Plan.run(out=) on a backend whose executable takes no out=: copied into the arrays."""
    model = _mlp(np.float32)
    x, _ = _batch(np.float32)
    plan = _inference_plan(model, x, reference)
    out = [np.empty(plan.slots[plan.outputs[0]].type.shape, np.float32)]
    got = plan.run({"input0": x}, out=out)
    assert got[0] is out[0]
    np.testing.assert_array_equal(out[0], plan.run({"input0": x})[0])


def test_a_dropped_plan_frees_its_executable_without_the_cycle_collector(reference):
    # every executable holds its plan weakly (backend.HeldPlan), the reference one included
    import gc
    import weakref

    g = mg.Graph()
    x = g.input("x", (8, 8), "float32")
    plan = mg.compile([F.relu(x * 2.0)], device="reference")
    plan.run({"x": np.ones((8, 8), np.float32)})
    alive = [weakref.ref(plan), weakref.ref(plan.executable())]
    gc.collect()
    gc.disable()
    try:
        del plan
        assert [r() is None for r in alive] == [True, True]
    finally:
        gc.enable()
