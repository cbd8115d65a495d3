"""ONNX RNN, GRU and LSTM imported onto the unrolled loop (onnx/convert_rnn.py) against ONNX
Runtime (directions, layouts, initial states, sequence_lens, peepholes, clip, activations,
linear_before_reset) and ONNX's own node cases; the recurrent modules exported through the
ops they unroll to, against ONNX Runtime; bad weights refused by name."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it
from onnx import TensorProto, helper, numpy_helper
from onnx_node_cases import _every, run_case

import mgegraph as mg
import mgegraph.onnx as mo
from mgegraph import nn

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _model(kind, *, directions=1, layout=0, bias=True, lens=False, initial=False, peep=False,
           seed=0, **attrs):
    """A one-node model: X, sequence_lens, initial_h/initial_c fed; W, R, B, P initializers."""
    rng = np.random.default_rng(seed)
    g = GATES[kind]
    x_shape = (BATCH, SEQ, INPUT) if layout else (SEQ, BATCH, INPUT)
    state_shape = (BATCH, directions, HIDDEN) if layout else (directions, BATCH, HIDDEN)
    weights = {"W": rng.uniform(-0.6, 0.6, (directions, g * HIDDEN, INPUT)),
               "R": rng.uniform(-0.6, 0.6, (directions, g * HIDDEN, HIDDEN))}
    if bias:
        weights["B"] = rng.uniform(-0.5, 0.5, (directions, 2 * g * HIDDEN))
    if peep:
        weights["P"] = rng.uniform(-0.5, 0.5, (directions, 3 * HIDDEN))
    inputs = {"X": x_shape}
    if lens:
        inputs["sequence_lens"] = (BATCH,)
    if initial:
        inputs["initial_h"] = state_shape
        if kind == "LSTM":
            inputs["initial_c"] = state_shape
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (
        ["initial_c", "P"] if kind == "LSTM" else [])
    names = [n if n in weights or n in inputs else "" for n in order]
    while names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outputs, hidden_size=HIDDEN, layout=layout,
                            direction=["forward", "bidirectional"][directions - 1]
                            if "direction" not in attrs else attrs.pop("direction"), **attrs)
    elem = {n: TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT for n in inputs}
    graph = helper.make_graph(
        [node], kind.lower(), [helper.make_tensor_value_info(n, elem[n], list(s))
                               for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v.astype(np.float32), n) for n, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    if lens:
        feeds["sequence_lens"] = np.array([SEQ, 2, 1][:BATCH], np.int32)
    for name in ("initial_h", "initial_c"):
        if name in inputs:
            feeds[name] = rng.standard_normal(state_shape).astype(np.float32)
    return model, feeds


def _check(model, feeds, atol=2e-5):
    got = mo.import_model(model).run(feeds)
    want = _ort(model, feeds)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("lens, initial", [(False, False), (True, True), (True, False)])
def test_recurrences_import_as_onnx_runtime_computes_them(kind, direction, layout, lens, initial):
    directions = 2 if direction == "bidirectional" else 1
    options = {"directions": directions, "lens": lens, "initial": initial,
               "direction": direction}
    model, feeds = _model(kind, layout=layout, **options)
    if not layout:
        _check(model, feeds)
        return
    # ONNX Runtime refuses layout 1: the time-first model on transposed feeds is the reference
    reference, _ = _model(kind, layout=0, **options)
    moved = {n: v if v.ndim == 1 else np.swapaxes(v, 0, 1) for n, v in feeds.items()}
    got = mo.import_model(model).run(feeds)
    want = _ort(reference, moved)
    np.testing.assert_allclose(got[0], np.transpose(want[0], (2, 0, 1, 3)), rtol=1e-4,
                               atol=2e-5)
    for a, b in zip(got[1:], want[1:]):
        np.testing.assert_allclose(a, np.swapaxes(b, 0, 1), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("before_reset", [0, 1])
@pytest.mark.parametrize("initial", [False, True])
def test_gru_linear_before_reset_both_ways(before_reset, initial):
    model, feeds = _model("GRU", directions=2, initial=initial, linear_before_reset=before_reset)
    _check(model, feeds)


@pytest.mark.parametrize("initial", [False, True])
def test_lstm_peepholes_and_input_forget(initial):
    _check(*_model("LSTM", peep=True, initial=initial, directions=2))
    _check(*_model("LSTM", peep=True, initial=initial, input_forget=1))


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_clip_and_no_bias(kind):
    _check(*_model(kind, clip=0.3, bias=False, initial=True))


@pytest.mark.parametrize("kind, activations, alpha, beta", [
    ("RNN", ["Relu"], [], []),
    ("GRU", ["HardSigmoid", "Softsign"], [0.3], [0.4]),
    ("LSTM", ["Sigmoid", "LeakyRelu", "ScaledTanh"], [0.1, 0.8], [1.2]),
])
def test_activations_with_their_alphas_and_betas(kind, activations, alpha, beta):
    attrs = {"activations": activations}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    _check(*_model(kind, initial=True, **attrs))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_onnx_node_cases_pass(op):
    cases = [c for c in _every() if [n.op_type for n in c.model.graph.node] == [op]]
    assert len(cases) == {"RNN": 6, "GRU": 6, "LSTM": 6}[op]
    for case in cases:
        run_case(case, strict=False)  # raises naming what differed


def test_wrong_weight_shape_is_refused_naming_the_node():
    model, _ = _model("LSTM")
    bad = numpy_helper.from_array(np.zeros((1, 4 * HIDDEN, INPUT + 1), np.float32), "W")
    model.graph.initializer[0].CopyFrom(bad)
    with pytest.raises(mo.OnnxImportError, match=r"LSTM.*W has shape \[1, 24, 5\].*need "
                                                  r"\[1, 24, 4\]"):
        mo.import_model(model)


def test_unknown_activation_is_refused_by_name():
    model, _ = _model("RNN", activations=["Gelu"])
    with pytest.raises(mo.OnnxImportError, match="activation 'Gelu' is not converted"):
        mo.import_model(model)


def test_a_hand_written_loop_stays_unrolled():
    """Only what nn.rnn.unroll builds is recognised: a loop of LSTMCell steps (a projection per
    step, no unroll) exports op by op, and still matches ONNX Runtime."""
    model = nn.LSTMCell(INPUT, HIDDEN)
    g = mg.Graph()
    x = g.input("x", (SEQ, BATCH, INPUT))
    h = c = None
    for t in range(SEQ):
        h, c = model(x[t], None if h is None else (h, c))
    plan = mg.compile([h])
    proto = mo.export(plan)
    assert "LSTM" not in [n.op_type for n in proto.graph.node]
    xv = np.random.default_rng(2).standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)
    np.testing.assert_allclose(_ort(proto, {"x": xv})[0], plan.run({"x": xv})[0], rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("given", [False, True])
def test_initial_states_and_relu_export_as_node_inputs(kind, given):
    nn.init.manual_seed(4)
    options = {"nonlinearity": "relu"} if kind == "RNN" else {}
    layer = getattr(nn, kind)(INPUT, HIDDEN, bidirectional=True, **options)
    g = mg.Graph()
    x = g.input("x", (SEQ, BATCH, INPUT))
    h0 = g.input("h0", (2, BATCH, HIDDEN))
    state = None if not given else ((h0, h0 * 0.5) if kind == "LSTM" else h0)
    out, _ = layer(x, state)
    plan = mg.compile([out])
    proto = mo.export(plan)
    assert [n.op_type for n in proto.graph.node].count(kind) == 2
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((SEQ, BATCH, INPUT)).astype(np.float32),
             "h0": rng.standard_normal((2, BATCH, HIDDEN)).astype(np.float32)}
    np.testing.assert_allclose(_ort(proto, feeds)[0], plan.run(feeds)[0], rtol=1e-5, atol=1e-5)


class _Head(nn.Module):
    def __init__(self, layer):
        self.layer = layer

    def forward(self, x):
        out, state = self.layer(x)
        return (out, *state) if isinstance(state, tuple) else (out, state)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_modules_export_and_match_onnx_runtime(kind, bidirectional):
    nn.init.manual_seed(3)
    model = _Head(getattr(nn, kind)(INPUT, HIDDEN, num_layers=2, batch_first=True,
                                    bidirectional=bidirectional)).eval()
    x = np.random.default_rng(1).standard_normal((BATCH, SEQ, INPUT)).astype(np.float32)
    predict = mg.compile_module(model, example_inputs=(x,))
    proto = mo.export(predict.plan)
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count(kind) == 2 * (2 if bidirectional else 1)  # a node per layer and direction
    assert "Sigmoid" not in ops and "Tanh" not in ops and "MatMul" not in ops
    want = predict(x)
    got = _ort(proto, {proto.graph.input[0].name: x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_a_named_batch_serves_two_batch_sizes():
    """The batch may be a named dimension; the sequence length is unrolled and fixed."""
    model, _ = _model("LSTM", directions=2)
    dim = model.graph.input[0].type.tensor_type.shape.dim[1]
    dim.ClearField("dim_value")
    dim.dim_param = "batch"
    plan = mo.import_model(model)
    for n in (2, 5):
        x = np.random.default_rng(n).standard_normal((SEQ, n, INPUT)).astype(np.float32)
        for a, b in zip(plan.run({"X": x}), _ort(model, {"X": x}), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)
