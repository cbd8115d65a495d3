"""group_norm's epilogue activation (relu, relu6): the epilogue pass folds a relu or a clip to
[0, 6] after group norm into it, and the fused plan gives bitwise the unfused plan's values at
one and two threads; the gradient through the fused activation against finite differences;
ONNX exports the activation after the normalisation (tests/io/test_group_norm_model_file.py: the
model file's versions)."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.ops.builder import apply
from mgegraph.planner.passes.epilogue import epilogue
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(3)
ACTS = {"relu": F.relu, "relu6": lambda v: F.clip(v, 0.0, 6.0)}


def data(shape=(2, 6, 5, 7), dtype=np.float32):
    x = RNG.standard_normal(shape).astype(dtype)
    w, b = RNG.standard_normal((2, shape[1])).astype(dtype) * 3
    return x, w, b


def plans(act, shape, dtype, groups=3):
    g = mg.Graph()
    x = g.input("x", shape, dtype)
    w, b = g.input("w", (shape[1],), dtype), g.input("b", (shape[1],), dtype)
    y = ACTS[act](F.nn.group_norm(x, groups, True, w, b))
    return mg.compile([y], optimize=0), mg.compile([y])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act", ["relu", "relu6"])
@pytest.mark.parametrize("shape", [(2, 6, 5, 7), (3, 9, 13), (1, 3, 1)])
def test_the_fused_plan_is_bitwise_the_unfused_one(act, shape, dtype):
    x, w, b = data(shape, dtype)
    x[0, 0, 0] = np.nan  # relu keeps NaN; its group's outputs are NaN either way
    unfused, fused = plans(act, shape, dtype)
    assert [i.op for i in fused.instructions] == ["group_norm"]
    assert "group_norm" in [i.op for i in unfused.instructions] and len(unfused.instructions) > 1
    feeds = {"x": x, "w": w, "b": b}
    want = unfused.run(feeds)[0]
    np.testing.assert_array_equal(fused.run(feeds)[0], want)
    assert (want == 0).any()


@pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
def test_one_and_two_threads_give_the_same_bits(monkeypatch):
    x, w, b = data((4, 8, 9, 5))
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        _, fused = plans("relu", x.shape, np.float32, groups=4)
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            outs.append(fused.run({"x": x, "w": w, "b": b})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_a_group_norm_whose_value_is_used_again_is_not_fused():
    g = mg.Graph()
    x = g.input("x", (2, 4, 3))
    y = F.nn.group_norm(x, 2)
    out = epilogue(g, [F.relu(y), y])
    assert not out.changed


@pytest.mark.parametrize("act", ["relu", "relu6"])
def test_gradient_through_the_activation_matches_finite_differences(act):
    x, w, b = data((2, 4, 3, 3), np.float64)
    gradcheck(lambda a, c, d: apply("group_norm", (a, c, d), groups=2, eps=1e-3, activation=act),
              x, w, b)


def test_a_bad_activation_is_refused():
    g = mg.Graph()
    x, w = g.input("x", (2, 4, 3)), g.input("w", (4,))
    with pytest.raises(mg.OpError, match="group_norm.*activation must be one of"):
        apply("group_norm", (x, w, w), groups=2, activation="gelu")


@pytest.mark.parametrize("opset", [17, 21])
def test_onnx_export_adds_the_activation(opset):
    ort = pytest.importorskip("onnxruntime")
    x, w, b = data((2, 6, 5, 7))
    g = mg.Graph()
    xv, wv, bv = g.input("x", x.shape), g.input("w", (6,)), g.input("b", (6,))
    plan = mg.compile([apply("group_norm", (xv, wv, bv), groups=3, activation="relu")])
    model = mg.onnx.export(plan, opset=opset)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, dict(zip((i.name for i in session.get_inputs()), (x, w, b))))[0]
    np.testing.assert_allclose(got, plan.run({"x": x, "w": w, "b": b})[0], rtol=1e-4, atol=1e-5)
