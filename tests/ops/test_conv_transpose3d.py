"""conv_transpose3d and nn.ConvTranspose3d (ops/conv_api.py: a sum over the kernel's depth of
transposed 2-D convolutions, no op of its own) against a NumPy scatter reference and PyTorch,
forward and gradients; the errors of bad input; ONNX ConvTranspose over volumes, imported
against ONNX Runtime and exported back."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.ir.errors import OpError
from mgegraph.ops.conv_api import transposed3d
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)

CASES = [
    # x shape, weight shape, stride, padding, output_padding, dilation, groups
    ((1, 2, 3, 4, 5), (2, 3, 2, 3, 3), 1, 0, 0, 1, 1),
    ((2, 4, 3, 3, 2), (4, 1, 3, 2, 3), (2, 1, 3), (1, 0, 2), (1, 0, 2), (1, 2, 1), 2),
    ((1, 3, 2, 3, 3), (3, 2, 3, 3, 1), 3, 2, 2, 2, 1),        # stride and dilation 3 and 2
    ((1, 2, 4, 2, 2), (2, 2, 2, 2, 2), 1, 0, 1, (2, 2, 2), 1),  # output_padding >= stride
    ((1, 1, 1, 1, 1), (1, 1, 1, 1, 1), 1, 0, 0, 1, 1),
]


def _args(stride, padding, output_padding, dilation, groups):
    return {"stride": stride, "padding": padding, "output_padding": output_padding,
            "dilation": dilation, "groups": groups}


def _triple(v):
    return (v,) * 3 if isinstance(v, int) else tuple(v)


def scatter_ref(x, w, b, stride, padding, output_padding, dilation, groups):
    """Every input cell adds its weighted kernel into the full output, cut by the padding and
    extended with zeros by output_padding."""
    stride, padding, output_padding, dilation = map(
        _triple, (stride, padding, output_padding, dilation))
    n, c, *ins = x.shape
    _, ocg, *ks = w.shape
    cg = c // groups
    full = [(i - 1) * s + d * (k - 1) + 1 for i, s, d, k in zip(ins, stride, dilation, ks)]
    out = np.zeros((n, ocg * groups, *(f + o for f, o in zip(full, output_padding))))
    for taps in np.ndindex(*ks):
        cells = tuple(slice(t * d, t * d + s * (i - 1) + 1, s)
                      for t, d, s, i in zip(taps, dilation, stride, ins))
        for g in range(groups):
            out[(slice(None), slice(g * ocg, (g + 1) * ocg)) + cells] += np.einsum(
                "ncdhw,co->nodhw", x[:, g * cg:(g + 1) * cg],
                w[(slice(g * cg, (g + 1) * cg), slice(None)) + taps])
    crop = tuple(slice(p, s - p) for p, s in zip(padding, out.shape[2:]))
    out = out[(slice(None), slice(None)) + crop]
    return out if b is None else out + b.reshape(1, -1, 1, 1, 1)


def _data(xs, ws, groups, dtype=np.float64):
    return (RNG.standard_normal(xs).astype(dtype), RNG.standard_normal(ws).astype(dtype),
            RNG.standard_normal(ws[1] * groups).astype(dtype))


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,dilation,groups", CASES)
def test_matches_scatter_reference(xs, ws, stride, padding, output_padding, dilation, groups,
                                   dtype):
    args = _args(stride, padding, output_padding, dilation, groups)
    x, w, b = _data(xs, ws, groups, dtype)
    got = run(lambda v, k, c: F.conv_transpose3d(v, k, c, **args), x, w, b)
    want = scatter_ref(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), **args)
    assert got.dtype == dtype and got.shape == want.shape
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,dilation,groups", CASES)
def test_matches_torch_forward_and_gradients(xs, ws, stride, padding, output_padding, dilation,
                                             groups):
    torch = pytest.importorskip("torch")
    args = _args(stride, padding, output_padding, dilation, groups)
    x, w, b = _data(xs, ws, groups)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv_transpose3d(tx, tw, tb, **args)
    dy = RNG.standard_normal(tuple(ty.shape))
    ty.backward(torch.from_numpy(dy))

    g = mg.Graph()
    vx, vw, vb = (g.input(n, a.shape, a.dtype) for n, a in (("x", x), ("w", w), ("b", b)))
    y = F.conv_transpose3d(vx, vw, vb, **args)
    loss = F.sum(y * g.const(dy))
    outs = mg.compile([y, *mg.grad(loss, [vx, vw, vb])]).run({"x": x, "w": w, "b": b})
    for got, want in zip(outs, (ty, tx.grad, tw.grad, tb.grad)):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-10, atol=1e-10)


def test_gradients_match_finite_differences():
    x, w, b = _data((1, 2, 3, 2, 3), (2, 2, 2, 2, 3), 2)
    gradcheck(lambda v, k, c: F.conv_transpose3d(v, k, c, stride=(2, 1, 2), padding=(1, 0, 1),
                                                 output_padding=(1, 0, 0), groups=2), x, w, b)


def test_asymmetric_padding_and_larger_output_match_reference():
    # transposed3d takes (begin, end) pads and any output size, as ONNX's output_shape gives
    x, w, _ = _data((1, 2, 3, 3, 2), (2, 2, 3, 2, 2), 1)
    full = scatter_ref(x, w, None, 2, 0, 0, 1, 1)        # (1, 2, 7, 6, 4)
    got = run(lambda v, k: transposed3d(v, k, None, (2, 2, 2), ((2, 0), (0, 1), (1, 1)),
                                        (7, 5, 2), (1, 1, 1), 1), x, w)
    want = np.zeros((1, 2, 7, 5, 2))
    want[:, :, :5] = full[:, :, 2:, :5, 1:3]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_module_matches_torch():
    torch = pytest.importorskip("torch")
    layer = nn.ConvTranspose3d(4, 6, (2, 3, 3), stride=2, padding=1, output_padding=1, groups=2)
    ref = torch.nn.ConvTranspose3d(4, 6, (2, 3, 3), stride=2, padding=1, output_padding=1,
                                   groups=2)
    assert tuple(ref.weight.shape) == tuple(layer.weight.shape)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(layer.weight.numpy()))
        ref.bias.copy_(torch.from_numpy(layer.bias.numpy()))
    x = RNG.standard_normal((2, 4, 3, 4, 4)).astype(np.float32)
    got = layer(mg.tensor(x)).numpy()
    want = ref(torch.from_numpy(x)).detach().numpy()
    assert got.shape == want.shape == (2, 6, 5, 8, 8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xs,ws,kwargs,match", [
    ((1, 2, 3, 3), (2, 2, 2, 2, 2), {}, r"5-D \(N, C, D, H, W\).*\(1, 2, 3, 3\)"),
    ((1, 2, 3, 3, 3), (3, 2, 2, 2, 2), {}, "weight's first dim \\(3\\).*2 channels"),
    ((1, 4, 3, 3, 3), (4, 2, 2, 2, 2), {"groups": 3}, "groups=3 must divide"),
    ((1, 2, 3, 3, 3), (2, 2, 2, 2, 2), {"stride": 2, "output_padding": 2},
     "output_padding .* must be smaller"),
    ((1, 2, 1, 3, 3), (2, 2, 2, 2, 2), {"padding": (2, 0, 0)}, "output size would be -2 on axis 2"),
    ((1, 2, 3, 3, 3), (2, 2, 2, 2, 2), {"stride": (1, 2)}, "stride must be"),
])
def test_bad_input_is_refused(xs, ws, kwargs, match):
    g = mg.Graph()
    x, w = g.input("x", xs, "float32"), g.input("w", ws, "float32")
    with pytest.raises(OpError, match=match) as err:
        F.conv_transpose3d(x, w, **kwargs)
    assert "conv_transpose3d" in str(err.value)


def test_integer_input_is_refused():
    g = mg.Graph()
    x, w = g.input("x", (1, 2, 2, 2, 2), "int32"), g.input("w", (2, 2, 1, 1, 1), "int32")
    with pytest.raises(OpError, match="conv_transpose3d.*float32 or float64.*int32"):
        F.conv_transpose3d(x, w)


def test_onnx_import_matches_onnx_runtime_and_exports_back():
    pytest.importorskip("onnx.helper")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper  # lazy: optional dependency (onnx)

    import mgegraph.onnx as mo  # lazy: optional dependency (onnx)
    w = RNG.standard_normal((4, 3, 2, 3, 2)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 1, 3],
                            pads=[1, 0, 0, 0, 2, 1], output_padding=[1, 0, 2],
                            dilations=[1, 2, 1], group=2)
    graph = helper.make_graph(
        [node], "ct3", [helper.make_tensor_value_info("x", 1, [1, 4, 3, 4, 3])],
        [helper.make_tensor_value_info("y", 1, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((1, 4, 3, 4, 3)).astype(np.float32)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    imported = mo.import_model(m)
    (got,) = imported.run({"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    again = mo.export(imported)
    session = ort.InferenceSession(again.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"x": x})
    np.testing.assert_allclose(theirs, got, rtol=0, atol=1e-5)
