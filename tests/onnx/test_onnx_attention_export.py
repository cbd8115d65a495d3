"""Attention exported to ONNX (onnx/export_attention.py: MatMul, Softmax, MatMul, the masks as
Where and Add) at opsets 17 and 21: run by ONNX Runtime against the plan, with every mask kind,
grouped heads, a fully masked row (0, not NaN) and a named batch; MegEngine's multi-head
attention layer; and the exported model imported back."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo
from mgegraph import nn

RNG = np.random.default_rng(41)


def _ort(onnx_model, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(onnx_model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def fully_masked_row(lq, lk):
    mask = RNG.random((2, 1, lq, lk)) > 0.4
    mask[..., 0], mask[1, 0, 2] = True, False
    return mask


CASES = {
    "causal gqa": ((2, 4, 9, 8), (2, 2, 11, 8), (2, 2, 11, 5),
                   lambda g: {"is_causal": True, "enable_gqa": True}),
    "bool mask, a fully masked row": ((2, 2, 6, 4), (2, 2, 7, 4), (2, 2, 7, 4),
                                      lambda g: {"attn_mask": g.const(fully_masked_row(6, 7))}),
    "additive, scale": ((1, 3, 5, 4), (1, 3, 8, 4), (1, 3, 8, 4),
                        lambda g: {"attn_mask": g.const(rand(5, 8)), "scale": 0.3}),
    "3-d": ((3, 5, 4), (3, 6, 4), (3, 6, 2), lambda g: {}),
}


@pytest.mark.parametrize("opset", [17, 21])
@pytest.mark.parametrize("name", CASES)
def test_runs_in_onnx_runtime_as_in_the_plan(name, opset):
    qs, ks, vs, kwargs = CASES[name]
    g = mg.Graph()
    xs = [g.input(n, s, "float32") for n, s in zip("qkv", (qs, ks, vs))]
    out = F.nn.scaled_dot_product_attention(*xs, **kwargs(g))
    plan = mg.compile([out])
    feeds = {"q": rand(*qs), "k": rand(*ks), "v": rand(*vs)}
    (want,) = plan.run(feeds)
    exported = mo.export(plan, opset=opset)
    (got,) = _ort(exported, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.isfinite(got).all()
    (back,) = mo.import_model(exported).run(feeds)
    np.testing.assert_allclose(back, want, rtol=1e-5, atol=1e-6)


def test_a_named_batch_exports():
    g = mg.Graph()
    xs = [g.input(n, ("batch", 2, 7, 4), "float32") for n in "qkv"]
    plan = mg.compile([F.nn.scaled_dot_product_attention(*xs, is_causal=True)])
    exported = mo.export(plan, opset=21)
    for batch in (1, 3):
        feeds = {n: rand(batch, 2, 7, 4) for n in "qkv"}
        np.testing.assert_allclose(_ort(exported, feeds)[0], plan.run(feeds)[0], rtol=1e-5,
                                   atol=1e-6)


def test_megengine_multi_head_attention_layer_exports():
    layer = nn.MultiHeadAttention(8, 2)
    layer.eval()
    g = mg.Graph()
    x = g.input("x", (2, 6, 8), "float32")
    pad = g.input("pad", (2, 6), "bool")
    out, _ = layer(x, x, x, key_padding_mask=pad, is_causal=True)
    plan = mg.compile([out])
    mask = np.zeros((2, 6), bool)
    mask[1, 4:] = True
    feeds = {"x": rand(2, 6, 8), "pad": mask}
    np.testing.assert_allclose(_ort(mo.export(plan), feeds)[0], plan.run(feeds)[0], rtol=1e-5,
                               atol=1e-6)
