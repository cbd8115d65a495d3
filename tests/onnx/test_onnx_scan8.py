"""Scan of opset 8 (a batch axis first, each row scanned on its own) imported through
scan8.py's rewrite into one Scan per row before onnx's version converter: against ONNX
Runtime, which runs Scan 8 itself, with several rows, states and scan inputs and a reversed
direction; a batch not known and sequence_lens refused by name."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")
from onnx import TensorProto, helper
from onnx_builders import model, run_onnxruntime, value_info

import mgegraph.onnx as mo

pytestmark = pytest.mark.filterwarnings("ignore::mgegraph.onnx.OnnxImportWarning")
F = TensorProto.FLOAT


def _body():
    """State s (2,) and product p (2,); scan inputs a and b (2,): s += a, p *= b, and each
    step's s - b as a scan output."""
    nodes = [helper.make_node("Add", ["s", "a"], ["s2"]), helper.make_node("Mul", ["p", "b"],
                                                                          ["p2"]),
             helper.make_node("Sub", ["s2", "b"], ["y"])]
    return helper.make_graph(nodes, "body", [value_info(n, [2]) for n in ("s", "p", "a", "b")],
                             [value_info(n, [2]) for n in ("s2", "p2", "y")])


def _scan8(batch, directions=(0, 1), lens=False):
    node = helper.make_node("Scan", ["lens" if lens else "", "s0", "p0", "a", "b"],
                            ["s", "p", "ys"], body=_body(), num_scan_inputs=2,
                            directions=list(directions))
    ins = [value_info("s0", [batch, 2]), value_info("p0", [batch, 2]),
           value_info("a", [batch, 4, 2]), value_info("b", [batch, 4, 2])]
    ins += [value_info("lens", [batch], TensorProto.INT32)] if lens else []
    outs = [value_info("s", [batch, 2]), value_info("p", [batch, 2]),
            value_info("ys", [batch, 4, 2])]
    return model([node], ins, outs, opset=8)


@pytest.mark.parametrize("batch, directions", [(1, (0, 0)), (3, (0, 1)), (2, (1, 1))])
def test_scan8_rows_match_onnxruntime(batch, directions):
    rng = np.random.default_rng(batch)
    feeds = {"s0": rng.standard_normal((batch, 2)), "p0": rng.standard_normal((batch, 2)),
             "a": rng.standard_normal((batch, 4, 2)), "b": rng.standard_normal((batch, 4, 2))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    onnx_model = _scan8(batch, directions)
    got = mo.import_model(onnx_model).run(feeds)
    want = run_onnxruntime(onnx_model, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_scan8_batch_not_known_is_refused():
    onnx_model = _scan8(1)
    for vi in onnx_model.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "n"
    with pytest.raises(mo.OnnxImportError, match=r"Scan, opset 8.*batch size .* one number"):
        mo.import_graph(onnx_model)


def test_scan8_sequence_lens_is_refused():
    with pytest.raises(mo.OnnxImportError, match=r"Scan, opset 8.*sequence_lens"):
        mo.import_graph(_scan8(2, lens=True))
