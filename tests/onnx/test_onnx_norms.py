"""ONNX's normalisations: InstanceNormalization, GroupNormalization (opset 18's scale per group,
21's per channel), LRN, LpNormalization and MeanVarianceNormalization imported and checked
against ONNX Runtime; mgegraph's normalisations exported and run by ONNX Runtime."""
import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
from onnx import helper, numpy_helper
from onnx_builders import model, run_onnxruntime, value_info

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo
from mgegraph import nn

RNG = np.random.default_rng(0)


def _single(op, shape, attrs, params=(), opset=17):
    """A model of one ``op`` node on input x (``shape``) and the initializers ``params``."""
    names = ["x"] + [f"p{i}" for i in range(len(params))]
    node = helper.make_node(op, names, ["y"], **attrs)
    inits = [numpy_helper.from_array(p, f"p{i}") for i, p in enumerate(params)]
    return model([node], [value_info("x", list(shape))], [value_info("y", None)], inits, opset)


def _check_against_ort(onnx_model, x, rtol=1e-5, atol=1e-5):
    (got,) = mo.import_model(onnx_model).run({"x": x})
    (want,) = run_onnxruntime(onnx_model, {"x": x})
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


def _x(*shape, shift=0.0):
    return (RNG.standard_normal(shape) * 2 + shift).astype(np.float32)


def test_instance_normalization():
    c = 5
    scale, bias = _x(c), _x(c)
    m = _single("InstanceNormalization", (2, c, 4, 3), {"epsilon": 1e-3}, (scale, bias))
    _check_against_ort(m, _x(2, c, 4, 3, shift=1.0))


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_scale_per_group_then_per_channel(opset):
    groups, c = 3, 6
    per = groups if opset == 18 else c
    scale, bias = _x(per), _x(per)
    m = _single("GroupNormalization", (2, c, 3, 2), {"num_groups": groups, "epsilon": 1e-4},
                (scale, bias), opset)
    x = _x(2, c, 3, 2, shift=-1.0)
    got = _check_against_ort(m, x)
    grouped = x.reshape(2, groups, -1).astype(np.float64)
    y = ((grouped - grouped.mean(-1, keepdims=True))
         / np.sqrt(grouped.var(-1, keepdims=True) + 1e-4)).reshape(x.shape)
    per_channel = np.repeat(scale, c // groups) if opset == 18 else scale
    shift = np.repeat(bias, c // groups) if opset == 18 else bias
    np.testing.assert_allclose(got, y * per_channel[:, None, None] + shift[:, None, None],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_lrn_even_and_odd_windows(size):
    m = _single("LRN", (2, 7, 3, 3), {"size": size, "alpha": 0.05, "beta": 0.6, "bias": 1.5},
                opset=13)
    x = _x(2, 7, 3, 3)
    if size % 2:  # ONNX Runtime refuses even sizes
        _check_against_ort(m, x)
    # the spec's window: floor((size - 1) / 2) channels below c, ceil((size - 1) / 2) above
    x64, want = x.astype(np.float64), np.empty(x.shape)
    for c in range(x.shape[1]):
        window = x64[:, max(0, c - (size - 1) // 2):c + size // 2 + 1]
        want[:, c] = x64[:, c] / (1.5 + 0.05 / size * np.square(window).sum(1)) ** 0.6
    (got,) = mo.import_model(m).run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p, axis", [(1, 0), (2, 1), (2, -1)])
def test_lp_normalization_with_a_zero_row(p, axis):
    x = _x(4, 5)
    x[2] = 0.0
    x[:, 3] = 0.0
    got = _check_against_ort(_single("LpNormalization", (4, 5), {"p": p, "axis": axis}), x)
    assert np.isfinite(got).all()


@pytest.mark.parametrize("axes", [None, [2, 3], [1]])
def test_mean_variance_normalization(axes):
    attrs = {} if axes is None else {"axes": axes}
    _check_against_ort(_single("MeanVarianceNormalization", (3, 2, 4, 5), attrs, opset=13),
                       _x(3, 2, 4, 5, shift=2.0))


@pytest.mark.parametrize("op, shape, attrs, params, opset, match", [
    ("GroupNormalization", (2, 6, 3), {"num_groups": 4}, (np.ones(6), np.zeros(6)), 21,
     r"num_groups 4 must divide the channels of the input of shape \[2, 6, 3\]"),
    ("GroupNormalization", (2, 6, 3), {"num_groups": 3}, (np.ones(6), np.zeros(6)), 18,
     r"scale and bias must have shape \(3,\) \(one per group before opset 21\)"),
    ("LpNormalization", (2, 3), {"p": 3}, (), 17, r"p must be 1 or 2, got 3"),
    ("InstanceNormalization", (2, 3), {}, (np.ones(3), np.zeros(3)), 17,
     r"the input must be \(N, C, D1, \.\.\.\), got shape \[2, 3\]"),
])
def test_errors_name_the_node(op, shape, attrs, params, opset, match):
    params = tuple(np.asarray(p, np.float32) for p in params)
    with pytest.raises(mo.OnnxImportError, match=match):
        mo.import_model(_single(op, shape, attrs, params, opset))


class Norms(nn.Module):
    def __init__(self):
        self.gn, self.inorm = nn.GroupNorm(2, 4), nn.InstanceNorm(4)
        self.lrn, self.bn = nn.LocalResponseNorm(3, alpha=0.1), nn.BatchNorm1d(4)
        for p in self.parameters():
            p.value = RNG.standard_normal(p.shape).astype(np.float32)

    def forward(self, x):
        h = self.lrn(self.inorm(self.gn(x)))
        return F.normalize(self.bn(F.mean(h, (2, 3))), axis=1), \
            F.nn.mean_variance_normalization(h, (2, 3))


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_export_runs_in_onnx_runtime_and_imports_back(opset):
    module = Norms().eval()
    x = _x(3, 4, 5, 5, shift=1.0)
    fn = mg.compile_module(module, (x,))
    want = fn(x)
    exported = mo.export(fn.plan, None, opset=opset)
    for got, ref in zip(run_onnxruntime(exported, {exported.graph.input[0].name: x}), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # before opset 21 group norm goes out as InstanceNormalization and a separate affine, which
    # comes back as two steps rounded apart
    back = mo.import_model(exported).run({exported.graph.input[0].name: x})
    for got, ref in zip(back, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    ops = {node.op_type for node in exported.graph.node}
    assert ("GroupNormalization" in ops) == (opset >= 21) != ("InstanceNormalization" in ops)
