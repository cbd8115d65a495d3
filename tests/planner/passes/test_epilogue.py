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


@pytest.mark.parametrize("groups,ws", [(8, (8, 1, 3, 3)), (1, (6, 8, 3, 3)), (1, (6, 8, 1, 1))])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv_relu6_becomes_one_node_bitwise(groups, ws, bias, stride):
    """MobileNet's conv + clip(0, 6): relu6 in the conv's epilogue, on the depthwise path and
    the others, gives the unoptimised plan's bits (NaN, and the clip's signed zeros too)."""
    g = mg.Graph()
    x = g.input("x", (1, 8, 9, 11), "float32")
    w = g.const(RNG.standard_normal(ws).astype(np.float32))
    b = g.const(RNG.standard_normal(ws[0]).astype(np.float32)) if bias else None
    y = F.relu6(F.conv2d(x, w, b, stride=stride, padding=ws[2] // 2, groups=groups))
    r = epilogue(g, [y])
    assert r.stats == {"fused": 1, "groups": ["conv2d+clip"]}
    (conv,) = [n for n in r.graph.nodes if n.op.category != "source"]
    assert conv.attr["activation"] == "relu6"
    xv = 4 * RNG.standard_normal((1, 8, 9, 11)).astype(np.float32)
    xv[0, :, 4, 4] = np.nan  # an input every stride reads
    got = mg.compile(r.outputs, optimize=0).run({"x": xv})[0]
    want = mg.compile([y], optimize=0).run({"x": xv})[0]
    assert (want == 6).any() and (want == 0).any() and np.isnan(want).any()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_linear_bias_relu6_becomes_one_node():
    g = mg.Graph()
    x = g.input("x", (4, 8), "float32")
    w = g.const(3 * RNG.standard_normal((5, 8)).astype(np.float32))
    b = g.const(RNG.standard_normal(5).astype(np.float32))
    y = F.relu6(F.linear(x, w) + b)
    r = epilogue(g, [y])
    assert str(r.graph).splitlines()[-1] == "%3:f32[4,5] = linear[activation=relu6] %0 %1 %2"
    assert r.stats == {"fused": 1, "groups": ["linear+add+clip"]}
    feeds = {"x": RNG.standard_normal((4, 8)).astype(np.float32)}
    want = mg.compile([y], optimize=0).run(feeds)[0]
    assert (want == 6).any()
    np.testing.assert_array_equal(mg.compile(r.outputs, optimize=0).run(feeds)[0], want)


@pytest.mark.parametrize("lower,upper", [(0.0, 5.0), (-0.0, 6.0), (-1.0, 6.0), (0.0, np.inf)])
def test_other_clips_stay_nodes(lower, upper):
    """Only a clip to exactly [+0, 6] is relu6: a clip to -0 keeps -0 where relu6 gives +0."""
    g = mg.Graph()
    x = g.input("x", (2, 3, 6, 6), "float32")
    y = F.clip(F.conv2d(x, g.const(np.ones((4, 3, 3, 3), np.float32))), lower, upper)
    assert not epilogue(g, [y]).changed


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


@pytest.mark.parametrize("op", ["linear", "conv2d"])
def test_fused_relu6_gradient(op):
    """relu6 in the epilogue passes the gradient where 0 < y < 6, as PyTorch's relu6 (and as
    the unfused clip does, away from exactly 0 and 6)."""
    from mgegraph.ops.builder import apply
    from mgegraph.testing import gradcheck
    torch = pytest.importorskip("torch")
    if op == "linear":
        x, w = 3 * RNG.standard_normal((5, 4)), RNG.standard_normal((3, 4))
        fn, tfn = lambda x, w: apply("linear", (x, w), activation="relu6"), \
            torch.nn.functional.linear
    else:
        x, w = 3 * RNG.standard_normal((2, 3, 5, 5)), RNG.standard_normal((3, 1, 3, 3))
        fn = lambda x, w: apply("conv2d", (x, w), padding=(1, 1), groups=3,
                                activation="relu6")
        tfn = lambda x, w: torch.nn.functional.conv2d(x, w, padding=1, groups=3)
    dx, dw = gradcheck(fn, x, w)  # its upstream gradient: seed 0's normal draws
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (x, w))
    ty = torch.nn.functional.relu6(tfn(tx, tw))
    ty.backward(torch.from_numpy(np.random.default_rng(0).standard_normal(tuple(ty.shape))))
    assert (ty.detach().numpy() == 6).any() and (ty.detach().numpy() == 0).any()
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-10, atol=1e-10)


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
