"""Epilogue fusion: exact IR after the pass, bitwise-equal results, and the cases it must leave."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.planner.passes.epilogue import epilogue

RNG = np.random.default_rng(0)


def run(outputs, feeds):
    return mg.compile(outputs).run(feeds)


def mlp_graph():
    g = mg.Graph()
    x = g.input("x", (4, 8), "float32")
    w = g.const(RNG.standard_normal((5, 8)).astype(np.float32))
    b = g.const(RNG.standard_normal(5).astype(np.float32))
    return g, [F.sum(F.relu(F.linear(x, w) + b))], {"x": RNG.standard_normal((4, 8))
                                                  .astype(np.float32)}


def test_linear_bias_relu_become_one_node():
    g, outputs, feeds = mlp_graph()
    r = epilogue(g, outputs)
    assert str(r.graph) == """\
%0:f32[4,8] = input[name=x]
%1:f32[5,8] = const[value=None]
%2:f32[5] = const[value=None]
%3:f32[4,5] = linear[activation=relu] %0 %1 %2
%4:f32[] = sum[axis=(0,1), keepdims=False] %3"""
    assert r.stats == {"fused": 1, "groups": ["linear+add+relu"]}
    np.testing.assert_array_equal(run(r.outputs, feeds)[0], run(outputs, feeds)[0])


@pytest.mark.parametrize("bias", [False, True])
def test_conv_relu_becomes_one_node(bias):
    g = mg.Graph()
    x = g.input("x", (2, 3, 6, 6), "float32")
    w = g.const(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = g.const(RNG.standard_normal(4).astype(np.float32)) if bias else None
    y = F.relu(F.conv2d(x, w, b, padding=1))
    r = epilogue(g, [y])
    assert [n.op.name for n in r.graph.nodes if n.op.category != "source"] == ["conv2d"]
    feeds = {"x": RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)}
    np.testing.assert_array_equal(run(r.outputs, feeds)[0], run([y], feeds)[0])


def test_values_needed_elsewhere_are_not_absorbed():
    g = mg.Graph()
    x = g.input("x", (4, 8), "float32")
    w = g.const(np.ones((5, 8), np.float32))
    h = F.linear(x, w)
    y = F.relu(h) + h                 # h has two uses
    z = F.relu(F.linear(x, w))
    r = epilogue(g, [y, z, F.linear(x, w * 2.0)])
    assert r.stats["groups"] == ["linear+relu"]
    g2 = mg.Graph()
    h2 = F.linear(g2.input("x", (4, 8), "float32"), g2.const(np.ones((5, 8), np.float32)))
    assert not epilogue(g2, [h2, F.relu(h2)]).changed  # h2 is an output


def test_training_step_with_fused_epilogues_is_unchanged():
    def weights(fuse):
        nn.init.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.Flatten(),
                              nn.Linear(48, 6), nn.ReLU(), nn.Linear(6, 3))
        g = mg.Graph()
        x = g.input("x", (5, 2, 4, 4), "float32")
        y = g.input("y", (5,), "int64")
        loss = F.cross_entropy(model(x), y)
        params = list(model.parameters())
        opt = optim.SGD(params, lr=0.1, momentum=0.9)
        grads = mg.grad(loss, [g.bind(p) for p in params])
        opt.build(g, {id(p): dg for p, dg in zip(params, grads)})
        outputs = [loss]
        if fuse:
            r = epilogue(g, outputs)
            assert r.stats["groups"] == ["conv2d+relu", "linear+relu"]
            outputs = r.outputs
        plan = mg.compile(outputs)
        feeds = {"x": np.linspace(-1, 1, 160, dtype=np.float32).reshape(5, 2, 4, 4),
                 "y": np.array([0, 1, 2, 1, 0])}
        losses = [plan.run(feeds)[0] for _ in range(3)]
        return losses, model.state_dict()

    fused, plain = weights(True), weights(False)
    assert [float(v) for v in fused[0]] == [float(v) for v in plain[0]]
    for key in plain[1]:
        np.testing.assert_array_equal(fused[1][key], plain[1][key], err_msg=key)


def test_activation_attr_is_checked():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float32")
    with pytest.raises(mg.OpError, match="activation must be one of"):
        mg.ops.builder.apply("linear", (x, g.const(np.ones((2, 3), np.float32))),
                             activation="tanh")


def test_fused_linear_relu_gradient():
    from mgegraph.ops.builder import apply
    from mgegraph.testing import gradcheck
    w = RNG.standard_normal((3, 4))
    gradcheck(lambda x, w: apply("linear", (x, w), activation="relu"),
              RNG.standard_normal((5, 4)), w)


# -- batch-norm folding (inference) --------------------------------------------------------------
def resnet_block(train_steps=2):
    from mgegraph.planner.passes.bnfold import bnfold
    nn.init.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4))
    x = RNG.standard_normal((4, 3, 6, 6)).astype(np.float32)
    step = mg.compile_train_step(model, lambda out, y: F.mean(out * out), optim.SGD(
        model.parameters(), 0.1), example_batch=(x, np.zeros(4, np.int64)))
    for _ in range(train_steps):  # running statistics away from their initial 0 and 1
        step(x, np.zeros(4, np.int64))
    model.eval()
    g = mg.Graph()
    out = model(g.input("x", x.shape, "float32"))
    return g, out, x, bnfold


def test_batch_norm_folds_into_the_conv():
    g, out, x, bnfold = resnet_block()
    r = bnfold(g, [out])
    assert r.stats == {"folded": 2}
    ops = [n.op.name for n in r.graph.nodes]
    assert "batch_norm" not in ops
    folded, plain = run(r.outputs, {"x": x})[0], run([out], {"x": x})[0]
    np.testing.assert_allclose(folded, plain, rtol=1e-5, atol=1e-5)
    fused = epilogue(r.graph, r.outputs)
    assert fused.stats["groups"] == ["conv2d+relu"]
    np.testing.assert_allclose(run(fused.outputs, {"x": x})[0], plain, rtol=1e-5, atol=1e-5)


def test_batch_norm_in_training_is_not_folded():
    from mgegraph.planner.passes.bnfold import bnfold
    g = mg.Graph()
    x = g.input("x", (2, 3, 4, 4), "float32")
    y = F.batch_norm(F.conv2d(x, g.const(np.ones((3, 3, 1, 1), np.float32))), training=True)
    assert not bnfold(g, [y]).changed
