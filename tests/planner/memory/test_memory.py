"""The memory planner end to end: every plan against the same graph run with no reuse at all,
in-place reuse per op, views, the schedule, poisoning, options, and training steps."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.ops import all_ops
from mgegraph.ops import elementwise_table as ELEMENTWISE_TABLE
from mgegraph.planner import MemoryOptions
from mgegraph.testing import random_graph


def run_both(outputs, feeds, memory=None, optimize=0):
    """Outputs of the planned graph and of the same graph with no reuse; they must agree
    bitwise, as both run the same kernels on the same inputs. The graph passes are off unless
    asked for, so that each test plans the ops it names."""
    planned = mg.compile(outputs, memory=memory, optimize=optimize)
    plain = mg.compile(outputs, memory="no_reuse", optimize=optimize)
    got, want = planned.run(feeds), plain.run(feeds)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    return planned


def took_over(plan, op: str) -> bool:
    """Whether some instruction of ``op`` wrote its output into a dying input's bytes."""
    return any(ins.op == op and ins.outputs[0] in plan.memory.overwrites
               for ins in plan.instructions)


# -- the 200 random DAGs ---------------------------------------------------------------------
@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["default", "debug", "greedy_by_size",
                                                    "best_fit"]), st.sampled_from([0, 1]))
def test_random_dags_match_the_unplanned_graph(seed, memory, optimize):
    _, outputs, feeds = random_graph(seed)
    plan = run_both(outputs, feeds, memory, optimize)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes


def test_no_reuse_gives_every_buffer_its_own_bytes():
    _, outputs, _ = random_graph(7)
    plan = mg.compile(outputs, memory="no_reuse", optimize=0)
    assert plan.arena_bytes == plan.naive_bytes
    assert not plan.memory.overwrites


# -- in-place reuse ----------------------------------------------------------------------------
ELEMENTWISE_INPLACE = sorted(n for n, o in all_ops().items()
                             if o.inplace and o.category == "elementwise"
                             and n not in ("relu_backward", "copy", "fused_elementwise"))


BINARY = set(ELEMENTWISE_TABLE.BINARY)  # the table's two-input ops (prelu, atan2, ...)
ATTRS = {"leaky_relu": {"negative_slope": 0.1}, "clip": {"lower": 0.6, "upper": 1.2},
         "hardsigmoid": {"alpha": 0.2, "beta": 0.5}}


@pytest.mark.parametrize("name", ELEMENTWISE_INPLACE)
def test_elementwise_ops_write_into_a_dying_input(name):
    from mgegraph.ops.builder import apply
    g = mg.Graph()
    x = g.input("x", (4, 33), "float32")
    t = F.sigmoid(x) + 0.5           # a temporary in (0.5, 1.5): in every op's domain
    inputs = (F.tanh(t) + 2.0, t) if name in BINARY else (t,)
    y = apply(name, inputs, **ATTRS.get(name, {}))
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 33)).astype(np.float32)}
    plan = run_both([F.sum(y)], feeds)
    assert took_over(plan, name), str(plan)


def test_binary_op_may_take_its_second_input():
    g = mg.Graph()
    x = g.input("x", (8, 16), "float32")
    y = F.exp(x)
    z = F.sum(x, axis=0) * y            # input 1 dies here; input 0 is a broadcast row
    plan = run_both([F.sum(z)], {"x": np.ones((8, 16), np.float32)})
    (mul,) = [i for i in plan.instructions if i.op == "mul"]
    assert plan.memory.overwrites[mul.outputs[0]][0] == mul.inputs[1]


def test_an_input_read_twice_through_different_views_is_not_overwritten():
    g = mg.Graph()
    x = g.input("x", (8, 16), "float32")
    t = F.exp(x)
    y = t[0:4] + t[4:8]                 # two views of one buffer dying at the same step
    plan = run_both([F.sum(y)], {"x": np.arange(128, dtype=np.float32).reshape(8, 16) / 99})
    (add,) = [i for i in plan.instructions if i.op == "add"]
    assert add.outputs[0] not in plan.memory.overwrites


def gradients(fn, shape, backward=True, seed=0):
    """sum(fn(2 tanh(x)) * c) and, with ``backward``, its gradient; fn's input is a temporary
    that dies at fn unless the gradient needs it."""
    rng = np.random.default_rng(seed)
    g = mg.Graph()
    x = g.input("x", shape, "float32")
    c = g.const(rng.standard_normal(shape).astype(np.float32))
    loss = F.sum(fn(F.tanh(x) * 2.0) * c)
    outputs = [loss, *mg.grad(loss, [x])] if backward else [loss]
    return outputs, {"x": rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("op, fn, shape", [
    ("softmax", lambda t: F.softmax(t, axis=1), (4, 10)),
    ("log_softmax", lambda t: F.log_softmax(t, axis=1), (4, 10)),
    ("layer_norm", lambda t: F.layer_norm(t, (10,), affine=False), (4, 10)),
    ("layer_norm_backward", lambda t: F.layer_norm(t, (10,), affine=False), (4, 10)),
    ("batch_norm", lambda t: F.batch_norm(t, training=True), (6, 3, 2, 2)),
    ("batch_norm_backward", lambda t: F.batch_norm(t, training=True), (6, 3, 2, 2)),
    ("dropout", lambda t: F.dropout(t, 0.5, seed=3), (8, 8)),
])
def test_norm_and_softmax_ops_write_into_a_dying_input(op, fn, shape):
    outputs, feeds = gradients(fn, shape, backward=op.endswith("_backward"))
    plan = run_both(outputs, feeds)
    assert took_over(plan, op), str(plan)


def test_cross_entropy_backward_writes_into_the_logits():
    g = mg.Graph()
    x = g.input("x", (4, 10), "float32")
    labels = g.const(np.array([1, 0, 9, 3]))
    loss = F.cross_entropy(F.tanh(x) * 3.0, labels)
    (dx,) = mg.grad(loss, [x])
    plan = run_both([loss, dx], {"x": np.random.default_rng(1).standard_normal((4, 10))
                                 .astype(np.float32)})
    assert took_over(plan, "cross_entropy_backward"), str(plan)


def test_inputs_params_and_outputs_are_never_overwritten():
    g = mg.Graph()
    x = g.input("x", (4, 4), "float32")
    w = g.param("w", np.ones((4, 4), np.float32))
    a = F.relu(x + w)
    b = F.exp(a)
    plan = run_both([a, b], {"x": np.eye(4, dtype=np.float32)})
    assert not plan.memory.overwrites  # x and w persist, a is an output
    assert {plan.slots[s].role for s in plan.outputs} == {"output"}


def test_inplace_off_keeps_every_output_apart():
    outputs, feeds = gradients(lambda t: F.softmax(t, axis=1), (4, 10))
    plan = run_both(outputs, feeds, MemoryOptions(inplace=False))
    assert not plan.memory.overwrites and plan.memory.inplace_saved_bytes == 0


# -- views ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("index, is_view", [
    ((slice(2, 5),), True),
    ((1, slice(None)), True),
    ((slice(1, 2), slice(3, 7)), True),
    ((slice(None), slice(0, 3)), False),
    ((slice(0, 6, 2),), False),
    ((slice(None, None, -1),), False),
    ((slice(3, 3),), True),
])
def test_contiguous_slices_are_views(index, is_view):
    g = mg.Graph()
    x = g.input("x", (6, 8), "float32")
    t = F.exp(x)
    y = t[index]
    out = y * 2.0
    value = np.arange(48, dtype=np.float32).reshape(6, 8) / 48
    plan = run_both([out], {"x": value})
    views = [s for s in plan.slots if s.role == "view"]
    assert bool(views) == is_view
    if is_view and views[0].nbytes:
        plan.run({"x": value})
        assert np.shares_memory(plan.executable().buffers[views[0].index], plan.executable().buffers[views[0].alias])


def test_flatten_squeeze_and_expand_dims_are_views():
    g = mg.Graph()
    x = g.input("x", (2, 1, 6), "float32")
    t = F.exp(x)
    y = F.expand_dims(F.squeeze(F.flatten(t, 1), None), 0) + 1.0
    plan = run_both([y], {"x": np.ones((2, 1, 6), np.float32)})
    assert [i.op for i in plan.instructions] == ["exp", "add"]


# -- schedule ------------------------------------------------------------------------------------
def fan_out_graph():
    """Built in a bad order: eight big temporaries first, each reduced only afterwards."""
    g = mg.Graph()
    x = g.input("x", (64, 64), "float32")
    big = [F.exp(x * float(k)) for k in range(8)]
    small = [F.sum(b) for b in big]
    total = small[0]
    for s in small[1:]:
        total = total + s
    return [total], {"x": np.full((64, 64), 0.01, np.float32)}


def test_memory_aware_schedule_lowers_the_peak():
    outputs, feeds = fan_out_graph()
    plan = run_both(outputs, feeds)
    user = mg.compile(outputs, memory=MemoryOptions(schedule="user"), optimize=0)
    assert plan.memory.schedule == "memory"
    assert plan.arena_bytes < user.arena_bytes
    assert plan.memory.lower_bounds["memory"] < plan.memory.lower_bounds["user"]


def test_schedule_keeps_the_user_order_when_it_is_as_good():
    g = mg.Graph()
    x = g.input("x", (16,), "float32")
    y = F.relu(F.exp(x) + 1.0)
    plan = mg.compile([y], optimize=0)
    assert plan.memory.schedule == "user"
    assert [i.op for i in plan.instructions] == ["exp", "add", "relu"]


# -- the training step ---------------------------------------------------------------------------
def train_weights(memory, steps=3):
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, 5))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, 5, 6).astype(np.int64)
    step = mg.compile_train_step(model, F.cross_entropy, optim.Adam(model.parameters(), 1e-2),
                                 example_batch=(x, y), memory=memory)
    losses = [float(step(x, y)) for _ in range(steps)]
    return losses, model.state_dict(), step.plan


def test_training_step_matches_the_unplanned_step_bitwise():
    losses, state, plan = train_weights(None)
    plain_losses, plain_state, plain = train_weights("no_reuse")
    assert losses == plain_losses
    for key in state:
        np.testing.assert_array_equal(state[key], plain_state[key], err_msg=key)
    assert plan.arena_bytes < plain.arena_bytes / 2


def test_poisoned_training_step_matches_too():
    losses, state, _ = train_weights("debug")
    plain_losses, plain_state, _ = train_weights("no_reuse")
    assert losses == plain_losses
    for key in state:
        np.testing.assert_array_equal(state[key], plain_state[key], err_msg=key)


# -- options -------------------------------------------------------------------------------------
def test_memory_option_errors_name_the_choices():
    g = mg.Graph()
    y = F.exp(g.input("x", (2,), "float32"))
    with pytest.raises(mg.GraphError, match="preset.*strategy"):
        mg.compile([y], memory="smallest")
    with pytest.raises(mg.GraphError, match="schedule 'random'"):
        MemoryOptions(schedule="random")
    with pytest.raises(mg.GraphError, match="power of two"):
        MemoryOptions(alignment=48)


@pytest.mark.parametrize("strategy", ["greedy_by_size", "best_fit", "greedy_by_breadth",
                                      "greedy_by_area", "best"])
def test_every_strategy_plans_a_training_step(strategy):
    losses, _, plan = train_weights(MemoryOptions(strategy=strategy), steps=1)
    assert losses == train_weights("no_reuse", steps=1)[0]
    assert plan.memory.strategy.startswith(strategy) or strategy == "best"


def test_alignment_is_honoured():
    _, outputs, _ = random_graph(11)
    plan = mg.compile(outputs, memory=MemoryOptions(alignment=256))
    assert all(s.offset % 256 == 0 for s in plan.slots if s.offset is not None)


def test_debug_poisons_a_dead_workspace_with_bytes_that_are_nan_as_floats():
    """So a kernel that reads its workspace before writing it gives NaN, not a tiny error."""
    g = mg.Graph()
    x, w = g.input("x", (1, 2, 6, 6)), g.input("w", (2, 2, 3, 3))
    plan = mg.compile([F.conv2d(x, w, padding=1)], memory="debug")
    plan.run({"x": np.ones((1, 2, 6, 6), np.float32), "w": np.ones((2, 2, 3, 3), np.float32)})
    (ins,) = [i for i in plan.instructions if i.workspace is not None]
    workspace = plan.executable().buffers[ins.workspace]
    assert workspace.size and (workspace == 0xFF).all()
    assert np.isnan(workspace[:workspace.size // 4 * 4].view(np.float32)).all()
