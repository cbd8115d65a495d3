"""The prepack pass: a conv2d of weights alone reads them packed for its kernel, packed once
(by the prologue for params, by the pass for consts, after folding for a frozen model), and
every plan gives what the unoptimised graph gives on the same inputs."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering.conv import prepack_block
from mgegraph.backend import get_backend
from mgegraph.ops.conv import pack_weight_array
from mgegraph.planner.passes.prepack import prepack

RNG = np.random.default_rng(3)
X = RNG.standard_normal((2, 64, 14, 14)).astype(np.float32)
BLOCK = get_backend("cpu").prepack


def thin_net():
    """Two convolutions at stride 2 to small planes (the GEMM paths' case), batch norm after
    the first."""
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(64, 96, 3, stride=2, padding=1, bias=False),
                          nn.BatchNorm2d(96), nn.ReLU(), nn.Conv2d(96, 64, 3, stride=2, padding=1),
                          nn.ReLU())
    for name, p in model.named_parameters():
        if "running_var" in name:
            p.value = RNG.uniform(0.5, 2.0, p.shape).astype(np.float32)
        elif p.value.ndim == 1:
            p.value = RNG.standard_normal(p.shape).astype(np.float32)
    return model.eval()


def ops_of(plan):
    return [i.op for i in plan.instructions]


def test_a_predictor_packs_its_weights_in_the_prologue_and_matches_the_plain_plan():
    model = thin_net()
    live, plain = mg.compile_module(model, (X,)), mg.compile_module(model, (X,), optimize=0)
    assert ops_of(live.plan) == ["conv2d_packed", "conv2d_packed"]
    assert ops_of(live.plan.prologue).count("conv2d_pack_weight") == 2
    assert "prepack      packed 2" in live.plan.passes_report()
    np.testing.assert_allclose(live(X), plain(X), rtol=1e-4, atol=1e-4)


def test_a_weight_change_repacks_before_the_next_run():
    model = thin_net()
    live = mg.compile_module(model, (X,))
    before = live(X)
    model[0].weight.value = -model[0].weight.value
    after = live(X)
    np.testing.assert_allclose(after, mg.compile_module(model, (X,), optimize=0)(X),
                               rtol=1e-4, atol=1e-4)
    assert not np.allclose(before, after)


def test_a_frozen_model_holds_the_packed_weights_as_constants():
    model = thin_net()
    frozen = mg.compile_module(model, (X,), freeze=True)
    assert ops_of(frozen.plan) == ["conv2d_packed", "conv2d_packed"]
    assert frozen.plan.prologue is None
    # the plain weight is a const for the pipeline's pass; the batch-normed one, computed from
    # consts, is packed once folded
    report = frozen.plan.passes_report()
    assert "prepack      packed 1" in report and "prepack_folded packed 1" in report
    np.testing.assert_allclose(frozen(X), mg.compile_module(model, (X,), optimize=0)(X),
                               rtol=1e-4, atol=1e-4)


def test_a_const_weight_is_packed_by_the_pass():
    g = mg.Graph()
    w = RNG.standard_normal((48, 64, 3, 3)).astype(np.float32)
    y = F.conv2d(g.input("x", X.shape), g.const(w), stride=2, padding=1)
    res = prepack(g, [y], BLOCK)
    (node,) = [n for n in res.graph.nodes if n.op.name == "conv2d_packed"]
    packed = res.graph.values[node.inputs[1].id]
    np.testing.assert_array_equal(packed, pack_weight_array(w, 1, BLOCK(y.node)))
    plan, plain = mg.compile([y]), mg.compile([y], optimize=0)
    assert ops_of(plan) == ["conv2d_packed"]
    np.testing.assert_allclose(plan.run({"x": X})[0], plain.run({"x": X})[0],
                               rtol=1e-4, atol=1e-4)


def test_weights_a_step_writes_or_fed_weights_are_not_packed():
    g = mg.Graph()
    x = g.input("x", X.shape)
    fed = F.conv2d(x, g.input("w", (48, 64, 3, 3)), stride=2)
    trained = g.param("v", RNG.standard_normal((48, 64, 3, 3)).astype(np.float32))
    y = F.conv2d(x, trained, stride=2)
    g.assign(trained, trained * 0.5)
    res = prepack(g, [fed, y], BLOCK)
    assert not res.changed and res.stats == {"packed": 0}


def test_without_a_target_rule_nothing_is_packed():
    g = mg.Graph()
    y = F.conv2d(g.input("x", X.shape), g.param("w", np.ones((48, 64, 3, 3), np.float32)),
                 stride=2)
    assert not prepack(g, [y]).changed
    report = mg.compile([y], device="cpu").passes_report()
    assert "prepack      packed 1" in report


@pytest.mark.parametrize("x_shape,w_shape,attrs,packed", [
    ((1, 512, 7, 7), (512, 512, 3, 3), {"padding": 1}, True),            # ResNet's 7x7 layers
    ((1, 128, 28, 28), (256, 128, 3, 3), {"padding": 1, "stride": 2}, True),
    # a 1x1 skip: its plain GEMM is faster than AVX2's 16-channel tiles (the rule's docstring)
    ((1, 64, 56, 56), (128, 64, 1, 1), {"stride": 2}, "avx512" in K.blocked_isas()),
    ((1, 128, 28, 28), (128, 128, 3, 3), {"padding": 1}, False),         # Winograd's
    ((1, 3, 224, 224), (64, 3, 7, 7), {"padding": 3, "stride": 2}, True),   # the stem
    ((1, 16, 32, 32), (64, 16, 3, 3), {"padding": 1}, False),            # row tiles at stride 1
    ((1, 64, 7, 7), (16, 64, 3, 3), {"padding": 1}, False),              # 16 output channels
    ((1, 64, 7, 7), (64, 32, 3, 3), {"padding": 1, "groups": 2}, False),
    ((1, 64, 7, 7), (64, 64, 1, 1), {}, False),                          # the direct GEMM
])
def test_the_rule_packs_where_the_gemm_paths_would_run(x_shape, w_shape, attrs, packed):
    g = mg.Graph()
    y = F.conv2d(g.input("x", x_shape), g.param("w", np.ones(w_shape, np.float32)), **attrs)
    assert (prepack_block(y.node) is not None) == packed
    g64 = mg.Graph()
    y64 = F.conv2d(g64.input("x", x_shape, "float64"),
                   g64.param("w", np.ones(w_shape, np.float64)), **attrs)
    assert prepack_block(y64.node) is None


# -- linear layers: the 1x1 convolution of 1x1 planes over their rows ------------------------------
needs_avx512 = pytest.mark.skipif("avx512" not in K.blocked_isas(),
                                  reason="linear layers are packed for the AVX-512 tiles only")


def mlp():
    nn.init.manual_seed(1)
    return nn.Sequential(nn.Linear(300, 100), nn.ReLU(), nn.Linear(100, 40), nn.Linear(40, 10))


@needs_avx512
@pytest.mark.parametrize("const", [False, True])
def test_a_matmul_of_a_weight_packs_its_transpose(const):
    g = mg.Graph()
    x = g.input("x", (2, 6, 50))
    w = RNG.standard_normal((50, 70)).astype(np.float32)
    y = F.relu(x @ (g.const(w) if const else g.param("w", w)))
    plan, plain = mg.compile([y]), mg.compile([y], optimize=0)
    assert ops_of(plan)[0] == "conv2d_packed"
    if not const:  # the transpose and the pack run in the prologue, once
        assert ops_of(plan.prologue)[:2] == ["transpose", "conv2d_pack_weight"]
    xv = RNG.standard_normal((2, 6, 50)).astype(np.float32)
    np.testing.assert_allclose(plan.run({"x": xv})[0], plain.run({"x": xv})[0], rtol=1e-4,
                               atol=1e-4)


@needs_avx512
@pytest.mark.parametrize("form", ["x @ w + b", "b + x @ w", "relu(x @ w + b)",
                                  "relu6(x @ w + b)"])
def test_a_bias_and_relu_after_a_packed_matmul_run_in_its_epilogue(form):
    g = mg.Graph()
    x = g.input("x", (2, 6, 50))
    w = g.param("w", RNG.standard_normal((50, 70)).astype(np.float32))
    b = g.param("b", RNG.standard_normal(70).astype(np.float32))
    y = {"x @ w + b": lambda: x @ w + b, "b + x @ w": lambda: b + x @ w,
         "relu(x @ w + b)": lambda: F.relu(x @ w + b),
         "relu6(x @ w + b)": lambda: F.relu6(x @ w + b)}[form]()
    plan, plain = mg.compile([y]), mg.compile([y], optimize=0)
    assert ops_of(plan) == ["conv2d_packed"]  # the add (and relu) within it; reshapes are views
    (ins,) = plan.instructions
    assert dict(ins.attrs)["activation"] == form.split("(")[0] if "(" in form else "none"
    xv = 3 * RNG.standard_normal((2, 6, 50)).astype(np.float32)  # sums past relu6's 6 too
    xv[0, 0, :] = 0.0  # rows of zeros: relu's -0 and +0 as the unfused ops give them
    got, want = plan.run({"x": xv})[0], plain.run({"x": xv})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.signbit(got[0, 0]), np.signbit(want[0, 0]))


@needs_avx512
def test_a_bias_that_is_not_one_per_output_or_a_sum_used_twice_stays_an_add():
    g = mg.Graph()
    x = g.input("x", (8, 50))
    w = g.param("w", RNG.standard_normal((50, 70)).astype(np.float32))
    wide = x @ w + g.param("b2", np.ones((8, 70), np.float32))  # not a bias: a whole matrix
    s = x @ g.param("v", RNG.standard_normal((50, 70)).astype(np.float32)) + 1.0
    plan = mg.compile([wide, F.relu(s), s * 2.0])
    assert ops_of(plan).count("conv2d_packed") == 2
    assert not any(dict(i.attrs).get("activation") == "relu" for i in plan.instructions
                   if i.op == "conv2d_packed")


@needs_avx512
@pytest.mark.parametrize("x_shape", [(16, 300), (2, 9, 300)])
def test_a_linear_predictor_packs_its_weights_and_matches_the_plain_plan(x_shape):
    model = mlp()
    x = RNG.standard_normal(x_shape).astype(np.float32)
    live, plain = mg.compile_module(model, (x,)), mg.compile_module(model, (x,), optimize=0)
    # 100 and 40 outputs are packed; 10 (fewer than a tile's 32 channels) keeps the BLAS
    assert ops_of(live.plan) == ["conv2d_packed", "conv2d_packed", "linear"]
    assert ops_of(live.plan.prologue).count("conv2d_pack_weight") == 2
    got = live(x)
    assert got.shape == (*x_shape[:-1], 10)
    np.testing.assert_allclose(got, plain(x), rtol=1e-4, atol=1e-4)
    model[0].weight.value = -model[0].weight.value  # repacked before the next run
    np.testing.assert_allclose(live(x), mg.compile_module(model, (x,), optimize=0)(x),
                               rtol=1e-4, atol=1e-4)


@needs_avx512
def test_a_frozen_linear_holds_its_packed_weight_as_a_constant():
    model = mlp()
    x = RNG.standard_normal((16, 300)).astype(np.float32)
    frozen = mg.compile_module(model, (x,), freeze=True)
    assert ops_of(frozen.plan) == ["conv2d_packed", "conv2d_packed", "linear"]
    assert frozen.plan.prologue is None
    np.testing.assert_allclose(frozen(x), mg.compile_module(model, (x,), optimize=0)(x),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,outputs,dtype,packed", [
    (128, 1024, "float32", True), (4, 32, "float32", True),
    (3, 1024, "float32", False),    # fewer rows than the rule's 4 (one row: BLAS's gemv)
    (128, 10, "float32", False),    # fewer outputs than a tile's channels
    (128, 1024, "float64", False),
])
def test_the_rule_packs_linear_layers_of_enough_rows_and_outputs(rows, outputs, dtype, packed):
    g = mg.Graph()
    x = g.input("x", (rows, 64), dtype)
    y = F.linear(x, g.param("w", np.ones((outputs, 64), dtype)))
    z = F.matmul(x, g.param("v", np.ones((64, outputs), dtype)))  # the same, as x @ v
    want = packed and "avx512" in K.blocked_isas()
    assert (prepack_block(y.node) is not None) == want
    assert (prepack_block(z.node) is not None) == want
    assert prepack_block(F.matmul(x, z, transpose_a=True).node) is None
