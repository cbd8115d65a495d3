"""The plan checker catches each kind of unsound plan, made by breaking sound ones by hand; and
the poison mode turns a liveness bug into a wrong result."""
from dataclasses import replace

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.planner import PlanError, verify


def chain_outputs():
    """x -> exp -> a; a -> neg -> b; a + b -> c: ``a`` is live across ``b``'s write."""
    g = mg.Graph()
    x = g.input("x", (16,), "float32")
    a = F.exp(x)
    b = F.neg(a) * 3.0
    return [F.sum(a + b)]


def chain_plan(memory=None):
    return mg.compile(chain_outputs(), memory=memory, optimize=0)


def with_slot(plan, index, **changes):
    slots = list(plan.slots)
    slots[index] = replace(slots[index], **changes)
    return replace(plan, slots=tuple(slots))


def producer(plan, op):
    return next(i for i in plan.instructions if i.op == op)


def test_sound_plans_pass():
    verify(chain_plan())


def test_two_live_buffers_sharing_bytes_are_caught():
    plan = chain_plan()
    a, b = producer(plan, "exp").outputs[0], producer(plan, "mul").outputs[0]
    broken = with_slot(plan, b, offset=plan.slots[a].offset)
    with pytest.raises(PlanError, match=rf"writes s{b} over bytes .* of s{a}, which step \d+ "
                                        "still reads"):
        verify(broken)


def test_a_buffer_outside_the_arena_is_caught():
    plan = chain_plan()
    a = producer(plan, "exp").outputs[0]
    with pytest.raises(PlanError, match="fall outside the arena"):
        verify(with_slot(plan, a, offset=plan.arena_bytes))


def test_broken_alignment_is_caught():
    plan = chain_plan()
    a = producer(plan, "exp").outputs[0]
    with pytest.raises(PlanError, match="breaks the 64-byte alignment"):
        verify(with_slot(plan, a, offset=8))


def test_in_place_by_an_op_that_may_not_is_caught():
    g = mg.Graph()
    x = g.input("x", (8, 8), "float32")
    t = F.exp(x)
    y = F.matmul(t, t)
    plan = mg.compile([F.sum(y)], optimize=0)
    mm = producer(plan, "matmul")
    broken = with_slot(plan, mm.outputs[0], offset=plan.slots[mm.inputs[0]].offset)
    with pytest.raises(PlanError, match="matmul may not run in place"):
        verify(broken)


def test_reading_a_value_already_overwritten_in_place_is_caught():
    plan = chain_plan()
    exp, neg = producer(plan, "exp"), producer(plan, "neg")
    a = exp.outputs[0]
    # neg may run in place, but a is read again later by the add
    broken = with_slot(plan, neg.outputs[0], offset=plan.slots[a].offset)
    with pytest.raises(PlanError, match=f"s{a}, which step"):
        verify(broken)


def test_persistent_buffers_in_the_arena_are_caught():
    plan = chain_plan()
    with pytest.raises(PlanError, match="input s0 is persistent"):
        verify(with_slot(plan, 0, offset=0))


def test_a_temporary_without_an_offset_is_caught():
    plan = chain_plan()
    a = producer(plan, "exp").outputs[0]
    with pytest.raises(PlanError, match=f"temp s{a} has no arena offset"):
        verify(with_slot(plan, a, offset=None))


def test_reading_before_the_write_is_caught():
    plan = chain_plan()
    swapped = (plan.instructions[1], plan.instructions[0]) + plan.instructions[2:]
    with pytest.raises(PlanError, match="before all of its bytes were written"):
        verify(replace(plan, instructions=swapped))


def test_a_param_read_after_its_update_is_caught():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    x, y = np.ones((5, 4), np.float32), np.zeros(5, np.int64)
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), 0.1),
                                 example_batch=(x, y))
    plan = step.plan
    params = {s.index for s in plan.slots if s.role == "param"}
    update = next(i for i, ins in enumerate(plan.instructions) if set(ins.outputs) & params)
    param = next(iter(set(plan.instructions[update].outputs) & params))
    reader = next(ins for i, ins in enumerate(plan.instructions) if param in ins.inputs
                  and i != update)
    late = plan.instructions + (reader,)  # the param read again once the update ran
    with pytest.raises(PlanError, match=f"writes s{param} over .* of s{param}, which step "
                                        f"{len(late) - 1} still reads"):
        verify(replace(plan, instructions=late))


def test_poison_turns_a_liveness_bug_into_a_wrong_result():
    plan = chain_plan("debug")
    feeds = {"x": np.linspace(0, 1, 16, dtype=np.float32)}
    (good,) = plan.run(feeds)
    assert np.isfinite(good)
    taken = {src for src, _ in plan.memory.overwrites.values()}
    a = next(s for s, (begin, end) in plan.memory.spans.items()
             if end - begin > 1 and s not in taken)
    spans = dict(plan.memory.spans)
    spans[a] = (spans[a][0], spans[a][0] + 1)  # as if a died right after its write
    buggy = replace(plan, memory=replace(plan.memory, spans=spans))
    (bad,) = buggy.run(feeds)
    assert np.isnan(bad)
