"""Compiling and running plans: feeds checks, output ownership, printing, dispatch errors."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import get_backend


def plan_and_graph():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float32")
    b = g.param("b", np.arange(3, dtype=np.float32))
    y = F.exp(x) + b
    return mg.compile([y], optimize=0), g


def test_run_checks_feeds():
    plan, _ = plan_and_graph()
    good = np.zeros((2, 3), np.float32)
    with pytest.raises(mg.FeedError, match=r"missing \['x'\]"):
        plan.run({})
    with pytest.raises(mg.FeedError, match=r"extra \['z'\]"):
        plan.run({"x": good, "z": good})
    with pytest.raises(mg.FeedError, match=r"float32\[3, 2\].*needs float32\[2, 3\]"):
        plan.run({"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(mg.FeedError, match="float64.*needs float32"):
        plan.run({"x": np.zeros((2, 3))})
    with pytest.raises(mg.FeedError, match="must be a numpy array"):
        plan.run({"x": [[0.0] * 3] * 2})


def test_outputs_are_owned_by_the_caller():
    plan, _ = plan_and_graph()
    first = plan.run({"x": np.zeros((2, 3), np.float32)})[0]
    kept = first.copy()
    plan.run({"x": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(kept, np.ones((2, 3)) + np.arange(3))


def test_non_contiguous_feed_is_accepted():
    plan, _ = plan_and_graph()
    x = np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2]
    assert not x.flags.c_contiguous
    (out,) = plan.run({"x": x})
    np.testing.assert_allclose(out, np.exp(x) + np.arange(3), rtol=1e-6)


def test_plan_prints_slots_and_instructions():
    plan, _ = plan_and_graph()
    assert str(plan) == """\
plan device=cpu: 2 instructions, 4 slots
  s0: f32[2,3] input x 24B
  s1: f32[3] param b 12B
  s2: f32[2,3] @+0x0 temp 24B
  s3: f32[2,3] output 24B
  0: s2 = exp s0  <unary_f32>
  1: s3 = add s2 s1  <binary_f32>
  outputs: s3
  arena: 64B (lower bound 64B, naive 64B), persistent: 60B"""


def test_only_needed_nodes_are_planned():
    g = mg.Graph()
    x = g.input("x", (4,))
    F.exp(x)
    y = F.relu(x)
    assert [ins.op for ins in mg.compile([y]).instructions] == ["relu"]


def test_dispatch_miss_names_op_device_and_dtype():
    with pytest.raises(mg.DispatchError) as info:
        get_backend("cpu").kernel("exp", "int32")
    message = str(info.value)
    assert "'exp'" in message and "'cpu'" in message and "int32" in message
    assert "cpu/float32" in message


def test_every_kernel_family_dtype_is_registered():
    for (op, dtype), kernel in get_backend("cpu").table.items():
        assert kernel.entry != 0, (op, dtype)


def test_compile_rejects_bad_arguments():
    g1, g2 = mg.Graph(), mg.Graph()
    a, b = g1.input("a", (1,)), g2.input("b", (1,))
    with pytest.raises(mg.GraphError, match="one graph"):
        mg.compile([a, b])
    with pytest.raises(mg.GraphError, match="unknown device"):
        mg.compile([a], device="tpu")
    with pytest.raises(mg.GraphError, match="non-empty"):
        mg.compile([])


def test_plan_is_reusable_many_times():
    plan, _ = plan_and_graph()
    for k in range(5):
        x = np.full((2, 3), k, np.float32)
        np.testing.assert_allclose(plan.run({"x": x})[0], np.exp(x) + np.arange(3), rtol=1e-6)


def doubling_param():
    """A graph reading shared param w (as y = x * w) that doubles w on every run."""
    w0 = np.ones(3, np.float32)
    g = mg.Graph()
    w = g.param("w", w0, share=True)
    x = g.input("x", (3,), "float32")
    y = x * w
    g.assign(w, w * 2.0)
    return w0, w, y


def test_assign_updates_a_shared_param_after_all_reads():
    w0, w, y = doubling_param()
    z = w + 0.0  # made after the assign, still reads the value at the start of the run
    plan = mg.compile([y, z])
    assert [ins.op for ins in plan.instructions][-1] == "assign"  # z's add reads w after w * 2
    out_y, out_z = plan.run({"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out_y, 1)
    np.testing.assert_array_equal(out_z, 1)
    np.testing.assert_array_equal(w0, 2)  # the user's array is the plan's buffer
    out_y, _ = plan.run({"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out_y, 2)
    np.testing.assert_array_equal(w0, 4)


def test_assign_checks_target_and_type():
    g = mg.Graph()
    w = g.param("w", np.zeros(3, np.float32))
    x = g.input("x", (3,), "float32")
    with pytest.raises(mg.GraphError, match="must be a param"):
        g.assign(x, x)
    with pytest.raises(mg.GraphError, match=r"does not match param 'w'"):
        g.assign(w, F.astype(x, "float64"))
    with pytest.raises(mg.GraphError, match="C-contiguous"):
        g.param("v", np.zeros((3, 2), np.float32).T, share=True)


def test_an_update_after_every_read_is_written_into_the_param():
    w0, _, y = doubling_param()
    plan = mg.compile([y])
    assert [ins.op for ins in plan.instructions] == ["mul", "mul"]
    assert plan.slots[plan.instructions[-1].outputs[0]].role == "param"
    for k in (1, 2):
        np.testing.assert_array_equal(plan.run({"x": np.ones(3, np.float32)})[0], 2 ** (k - 1))
    np.testing.assert_array_equal(w0, 4)


def test_to_dot_draws_the_instructions_and_the_sources_without_the_graph():
    import mgegraph.functional as F

    g = mg.Graph()
    x = g.input("x", (2, 3))
    w = g.param("w", np.ones((3, 4), np.float32))
    plan = mg.compile([F.relu(x @ w).reshape(8) + 1.0], optimize=0)
    dot = plan.to_dot()
    assert dot.startswith("digraph plan {") and dot.endswith("}")
    assert 's0 [shape=ellipse, label="input x\\nf32[2,3]"]' in dot
    assert "s0 -> i0" in dot and "s1 -> i0" in dot
    assert dot.count(" [label=") - dot.count("->") == len(plan.instructions)
    # the add reads the reshape view of the relu's output: drawn from the relu
    relu = next(i for i, ins in enumerate(plan.instructions) if ins.op == "relu")
    add = next(i for i, ins in enumerate(plan.instructions) if ins.op == "add")
    assert f"i{relu} -> i{add}" in dot


# -- lifetime: a plan is freed when its last reference goes ------------------------------------
def _plan_kind(kind: str) -> mg.Plan:
    g = mg.Graph()
    x = g.input("x", (64, 64), "float32")
    w = g.param("w", np.ones((64, 64), np.float32), share=True)
    y = F.relu(x @ (w * 2.0)) if kind != "plain" else F.relu(x * 2.0)
    return mg.compile([y], freeze=kind == "frozen")


def _arena_of(executable) -> np.ndarray:
    temp = next(s.index for s in executable.plan.slots if s.offset is not None)
    array = executable.buffers[temp]
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


@pytest.mark.parametrize("kind", ["plain", "prologue", "frozen"])
def test_a_dropped_plan_and_its_arena_are_freed_without_the_cycle_collector(kind):
    import gc
    import weakref

    plan = _plan_kind(kind)
    assert (plan.prologue is not None) == (kind == "prologue")
    plan.run({"x": np.ones((64, 64), np.float32)})
    executable = plan.executable()
    alive = [weakref.ref(o) for o in (plan, executable, _arena_of(executable))]
    del executable
    gc.collect()
    gc.disable()
    try:
        del plan
        assert [r() is None for r in alive] == [True] * 3
    finally:
        gc.enable()


def test_an_executable_outliving_its_plan_says_so():
    executable = plan_and_graph()[0].executable()
    with pytest.raises(mg.GraphError, match="plan was freed"):
        executable.run({"x": np.zeros((2, 3), np.float32)})


def test_plan_save_html_is_deprecated_for_the_viewers_function(tmp_path):
    plan, _ = plan_and_graph()
    with pytest.warns(DeprecationWarning, match=r"mg.viz.save_html\(plan, path\)"):
        plan.save_html(tmp_path / "p.html")
    assert (tmp_path / "p.html").read_text(encoding="utf-8") == mg.viz.html(plan)
