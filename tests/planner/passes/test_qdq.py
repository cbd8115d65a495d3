"""QDQ folding (planner/passes/qdq.py): which quantize/float op/dequantize chains become int8
ops, and how close the int8 ops' integers come to the float path they replace.

The folded graph's integers are computed two ways: by the NumPy reference of the int8 ops
(tests/quant_reference.py, walking the folded graph), and by the compiled plan where the
backend has the int8 kernels (they must be bitwise the reference). Both are compared with the
unfolded plan (dequantize, float op, quantize): within one output step, the share of equal
integers printed (``pytest -s``).
"""
import numpy as np
import pytest
from quant_reference import quantized_add, quantized_conv2d, quantized_linear

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import get_backend
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.planner.passes.pipeline import LEVELS
from mgegraph.planner.passes.qdq import fold_qdq

WITHOUT_QDQ = [name for name in LEVELS[1] if name != "fold_qdq"]
RNG = np.random.default_rng(7)


def _qconst(g, array, quant):
    return dequantize(g.const(array, quant=quant))


def _weight(g, shape, per_channel_axis=None, rng=RNG):
    ints = rng.integers(-127, 128, shape).astype(np.int8)
    if per_channel_axis is None:
        return _qconst(g, ints, per_tensor(0.02)), ints
    scales = rng.uniform(0.005, 0.03, shape[per_channel_axis])
    return _qconst(g, ints, per_channel(scales, None, per_channel_axis)), ints


def _input(g, shape, dtype="uint8"):
    x = g.input("x", shape)
    return dequantize(quantize(x, 0.05, 128 if dtype == "uint8" else 3, dtype))


def _ops(graph):
    return [n.op.name for n in graph.nodes]


def _out(y, scale=0.1, zero_point=-5, dtype="int8"):
    return quantize(y, scale, zero_point, dtype)


# -- what is rewritten ------------------------------------------------------------------------

def test_conv_with_int32_bias_and_relu_becomes_one_quantized_conv():
    g = mg.Graph()
    x = _input(g, (1, 3, 6, 6))
    w, _ = _weight(g, (4, 3, 3, 3), per_channel_axis=0)
    scales = 0.05 * np.asarray(w.node.inputs[0].type.quant.scales)
    b = _qconst(g, np.arange(-2, 2, dtype=np.int32), per_channel(scales, None, 0))
    y = _out(F.relu(F.conv2d(x, w, b, padding=1)))
    res = fold_qdq(g, [y])
    assert res.stats == {"folded": {"quantized_conv2d": 1}}
    (conv,) = [n for n in res.graph.nodes if n.op.name == "quantized_conv2d"]
    assert conv.attr["relu"] and conv.attr["padding"] == (1, 1)
    assert [v.node.op.name for v in conv.inputs] == ["quantize", "const", "const"]
    assert conv.inputs[2].dtype == np.int32  # the model's integers, as they are
    assert "dequantize" not in _ops(res.graph) and "conv2d" not in _ops(res.graph)


def test_conv_activation_and_float_bias_add_fold():
    g = mg.Graph()
    x = _input(g, (1, 3, 6, 6))
    w, _ = _weight(g, (4, 3, 3, 3))
    bias = g.const(RNG.standard_normal((1, 4, 1, 1)).astype(np.float32))
    conv = F.conv2d(x, w)
    y = _out(g.add_node("relu", (conv + bias,), {}).outputs[0])
    res = fold_qdq(g, [y])
    (qconv,) = [n for n in res.graph.nodes if n.op.name == "quantized_conv2d"]
    assert qconv.attr["relu"]
    bias_q = qconv.inputs[2].node
    assert bias_q.op.name == "quantize" and bias_q.attr["dtype"] == "int32"
    assert bias_q.attr["scales"] == (0.05 * 0.02,)


def test_linear_and_matmul_weights_become_out_by_in():
    g = mg.Graph()
    x = _input(g, (2, 5, 8))
    w_kn, ints = _weight(g, (8, 6), per_channel_axis=1)  # matmul's (K, N), one scale per column
    y = _out(F.matmul(x, w_kn) + g.const(np.ones(6, np.float32)))
    res = fold_qdq(g, [y])
    (lin,) = [n for n in res.graph.nodes if n.op.name == "quantized_linear"]
    w = lin.inputs[1]
    np.testing.assert_array_equal(res.graph.values[w.id], ints.T)
    assert w.type.quant.axis == 0 and w.type.quant.scales == w_kn.node.inputs[0].type.quant.scales


def test_a_transposed_constant_weight_of_linear_is_transposed_once():
    g = mg.Graph()
    x = _input(g, (3, 8))
    w_kn, ints = _weight(g, (8, 6), per_channel_axis=1)  # Gemm without transB: linear of w.T
    res = fold_qdq(g, [_out(F.linear(x, F.transpose(w_kn, (1, 0))))])
    (lin,) = [n for n in res.graph.nodes if n.op.name == "quantized_linear"]
    np.testing.assert_array_equal(res.graph.values[lin.inputs[1].id], ints.T)
    assert "transpose" not in _ops(res.graph)


def test_add_and_add_relu_become_quantized_add():
    g = mg.Graph()
    a = _input(g, (2, 3, 4))
    b = dequantize(quantize(g.input("b", (3, 4)), 0.07, -2, "int8"))
    y1, y2 = _out(a + b), _out(F.relu(a + b), 0.2, 0, "uint8")
    res = fold_qdq(g, [y1, y2])
    adds = [n for n in res.graph.nodes if n.op.name == "quantized_add"]
    assert [n.attr["relu"] for n in adds] == [False, True]
    assert adds[1].attr["out_dtype"] == "uint8"


def test_a_value_read_elsewhere_keeps_the_float_path():
    g = mg.Graph()
    x = _input(g, (1, 3, 6, 6))
    w, _ = _weight(g, (4, 3, 3, 3))
    conv = F.conv2d(x, w)
    res = fold_qdq(g, [_out(conv), conv])  # the float conv is an output too
    assert not res.changed and "quantized_conv2d" not in _ops(res.graph)


def test_a_shared_dequantize_stays_for_its_other_readers():
    g = mg.Graph()
    x = _input(g, (1, 3, 6, 6))
    w, _ = _weight(g, (4, 3, 3, 3))
    res = fold_qdq(g, [_out(F.conv2d(x, w)), F.sigmoid(x)])
    assert _ops(res.graph).count("quantized_conv2d") == 1
    (deq,) = [n for n in res.graph.nodes if n.op.name == "dequantize"]
    readers = [n.op.name for n in res.graph.nodes
               if any(v is deq.outputs[0] for v in n.inputs)]
    assert readers == ["sigmoid"]


def test_a_target_without_the_int8_kernel_keeps_the_float_path():
    g = mg.Graph()
    x = _input(g, (1, 3, 6, 6))
    w, _ = _weight(g, (4, 3, 3, 3))
    y = _out(F.conv2d(x, w))
    assert not fold_qdq(g, [y], runs=lambda op: op != "quantized_conv2d").changed
    assert fold_qdq(g, [y], runs=lambda op: True).changed


@pytest.mark.parametrize("why", ["per-channel output", "float64", "relu6", "matmul param"])
def test_what_is_not_int8_is_left_alone(why):
    g = mg.Graph()
    x = _input(g, (1, 3, 6, 6))
    w, _ = _weight(g, (4, 3, 3, 3))
    if why == "per-channel output":
        y = quantize(F.conv2d(x, w), [0.1] * 4, 0, "int8", axis=1)
    elif why == "float64":
        y = quantize(F.conv2d(x, w).astype("float64"), 0.1, 0, "int8")
    elif why == "relu6":
        y = _out(g.add_node("conv2d", (x, w), {"activation": "relu6"}).outputs[0])
    else:  # a matmul weight that is no constant cannot be transposed once
        wp = dequantize(quantize(g.param("w", np.ones((6, 5), np.float32)), 0.1, 0, "int8"))
        y = _out(F.matmul(dequantize(quantize(g.input("m", (2, 6)), 0.1, 0, "int8")), wp))
    res = fold_qdq(g, [y])
    assert not res.changed


POOLS = {"max_pool2d": lambda x: F.max_pool2d(x, 2),
         "avg_pool2d": lambda x: F.avg_pool2d(x, 3, 2, padding=1),
         "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, 1),
         "reshape": lambda x: F.reshape(x, (x.shape[0], -1))}


def _takes_quantized(op):
    from mgegraph.ops.registry import QUANT_KEEPING_OPS, get_op
    if not (get_op(op).quantized or op in QUANT_KEEPING_OPS):
        pytest.skip(f"{op} takes no quantized values on this branch")


@pytest.mark.parametrize("op", list(POOLS))
def test_ops_keeping_the_quantization_run_on_the_integers(op):
    _takes_quantized(op)
    g = mg.Graph()
    xq = quantize(g.input("x", (1, 2, 5, 5)), 0.05, 3, "int8")
    pooled = POOLS[op](dequantize(xq))
    res = fold_qdq(g, [quantize(pooled, 0.05, 3, "int8")])
    assert _ops(res.graph) == ["input", "quantize", op]
    other = fold_qdq(g, [quantize(pooled, 0.06, 3, "int8")])  # requantised: stays float
    assert not other.changed


@pytest.mark.parametrize("op", list(POOLS))
def test_pooled_integers_are_the_float_paths_within_one_step(op, capsys):
    _takes_quantized(op)
    g = mg.Graph()
    xq = quantize(g.input("x", (2, 8, 5, 5)), 0.05, 3, "uint8")
    y = quantize(POOLS[op](dequantize(xq)), 0.05, 3, "uint8")
    x = np.random.default_rng(5).standard_normal((2, 8, 5, 5)).astype(np.float32) * 3
    (want,) = mg.compile([y], optimize=WITHOUT_QDQ).run({"x": x})
    plan = mg.compile([y])
    assert dict(plan.passes)["fold_qdq"]["folded"] == {op: 1}
    (got,) = plan.run({"x": x})
    diff = np.abs(got.astype(np.int64) - want)
    # an average's integers differ only at exact halves of the mean (measured: all 24 of 144
    # on avg_pool2d's edge windows of 4 and 6 cells), which the float path's scalings round
    # either way
    assert diff.max() <= (1 if "avg" in op else 0)
    with capsys.disabled():
        print(f"\nfold_qdq {op}: {np.mean(diff == 0):.2%} of {diff.size} bitwise")


# -- the integers ---------------------------------------------------------------------------

def _reference(graph, outputs, feeds):
    """The folded graph's values, the int8 ops by tests/quant_reference.py."""
    env = {}
    for node in graph.nodes:
        ins = [env[v.id] for v in node.inputs]
        env.update(zip((v.id for v in node.outputs), _evaluate(graph, node, ins, feeds)))
    return [env[v.id] for v in outputs]


def _evaluate(graph, node, ins, feeds):
    name, ps = node.op.name, [v.type.quant for v in node.inputs]
    if name == "input":
        return [feeds[node.attr["name"]]]
    if name == "const":
        return [graph.values[node.outputs[0].id]]
    if name == "quantize":
        return [_numpy_quantize(ins[0], node.outputs[0].type)]
    if name == "dequantize":
        shape = [1] * ins[0].ndim
        if ps[0].per_channel:
            shape[ps[0].axis] = -1
        z = np.asarray(ps[0].zero_points).reshape(shape)
        return [((ins[0] - z) * np.asarray(ps[0].scales, np.float32).reshape(shape)).astype(
            np.float32)]
    if name == "reshape":
        return [ins[0].reshape(node.attr["shape"])]
    attrs = node.attr
    if name == "quantized_conv2d":
        return [quantized_conv2d(ins[0], ps[0], ins[1], ps[1], *ins[2:], **attrs)]
    if name == "quantized_linear":
        return [quantized_linear(ins[0], ps[0], ins[1], ps[1], *ins[2:], **attrs)]
    if name == "quantized_add":
        return [quantized_add(ins[0], ps[0], ins[1], ps[1], **attrs)]
    raise AssertionError(f"no reference for {name}")


def _numpy_quantize(x, t):
    q, lo_hi = t.quant, {"int8": (-128, 127), "uint8": (0, 255), "int32": (-2 ** 31, 2 ** 31 - 1)}
    shape = [1] * x.ndim
    if q.per_channel:
        shape[q.axis] = -1
    s = np.asarray(q.scales, np.float32).reshape(shape)
    z = np.asarray(q.zero_points, np.float64).reshape(shape)
    return np.clip(np.rint(x / s) + z, *lo_hi[t.dtype.name]).astype(t.dtype)


def _cases():
    """A graph of the three int8 patterns, and its feeds: the same whichever tests ran."""
    rng = np.random.default_rng(11)
    g = mg.Graph()
    x = _input(g, (2, 6, 9, 7))
    w, _ = _weight(g, (8, 3, 3, 3), per_channel_axis=0, rng=rng)
    conv = F.conv2d(x, w, g.const(rng.standard_normal(8).astype(np.float32)), stride=(2, 1),
                    padding=1, groups=2)
    c = _out(F.relu(conv), 0.08, -20)
    w2, _ = _weight(g, (280, 10), per_channel_axis=1, rng=rng)
    flat = F.reshape(dequantize(c), (2, 8 * 5 * 7))
    m = _out(F.matmul(dequantize(quantize(flat, 0.08, -20, "int8")), w2)
             + g.const(rng.standard_normal(10).astype(np.float32)), 0.3, 4)
    s = _out(dequantize(c) + dequantize(c), 0.15, -30)
    feeds = {"x": rng.standard_normal((2, 6, 9, 7)).astype(np.float32) * 2}
    return g, [c, m, s], feeds


def test_folded_integers_are_the_float_paths_within_one_step(capsys):
    g, outputs, feeds = _cases()
    unfolded = mg.compile(outputs, optimize=WITHOUT_QDQ).run(feeds)
    folded = fold_qdq(g, outputs)
    assert folded.stats["folded"] == {"quantized_conv2d": 1, "quantized_linear": 1,
                                      "quantized_add": 1, "reshape": 1}
    ints = _reference(folded.graph, folded.outputs, feeds)
    with capsys.disabled():
        for name, got, want in zip(("conv2d", "matmul", "add"), ints, unfolded):
            diff = np.abs(got.astype(np.int64) - want)
            assert diff.max() <= 1, name
            print(f"\nfold_qdq {name}: {np.mean(diff == 0):.2%} of {diff.size} bitwise")


def test_compiled_folded_plan_is_the_reference_bitwise():
    if get_backend("cpu").impl("quantized_conv2d") is None:
        pytest.skip("the CPU backend has no int8 kernels on this branch")
    g, outputs, feeds = _cases()
    plan = mg.compile(outputs)
    assert "fold_qdq" in dict(plan.passes)
    folded = fold_qdq(g, outputs)
    for got, want in zip(plan.run(feeds), _reference(folded.graph, folded.outputs, feeds)):
        np.testing.assert_array_equal(got, want)
