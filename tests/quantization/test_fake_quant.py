"""ops/fake_quant.py and its kernel (_kernels/fake_quant.pyx): the floats of quantize then
dequantize bit for bit, PyTorch's fake quantizers, the straight-through gradient and LSQ's for
the scale, clear errors, the model file and the ONNX export (QuantizeLinear + DequantizeLinear)."""
import io

import numpy as np
import pytest

import mgegraph as mg
from mgegraph.ir.errors import KernelError, OpError
from mgegraph.ops.fake_quant import fake_quant
from mgegraph.ops.quantize import dequantize, quantize

RNG = np.random.default_rng(0)


def _x(shape=(4, 3, 5, 7), dtype=np.float32, seed=0):
    x = np.random.default_rng(seed).normal(size=shape).astype(dtype) * 4
    x.reshape(-1)[:4] = [0.125, -0.375, 1e6, -1e6]  # ties at scale 0.25; saturation both ways
    return x


def _params(axis, dtype=np.float32):
    if axis is None:
        return np.asarray(0.25, dtype), np.asarray(3, dtype)
    return np.asarray([0.25, 0.05, 0.5], dtype), np.asarray([3, -2, 0], dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [None, 1])
def test_equals_quantize_then_dequantize_bitwise(dtype, axis):
    x, (s, z) = _x(dtype=dtype), _params(axis, dtype)
    got = fake_quant(mg.tensor(x, dtype=dtype), mg.tensor(s, dtype=dtype),
                     mg.tensor(z, dtype=dtype), -128, 127, axis=axis).numpy()
    q = quantize(mg.tensor(x, dtype=dtype), s.tolist(), z.astype(int).tolist(), "int8", axis)
    np.testing.assert_array_equal(got, dequantize(q, dtype).numpy())
    # and NumPy's formula, computed in x's dtype
    shape = (-1, 1, 1) if axis is not None else ()
    sb, zb = s.reshape(shape), z.reshape(shape)
    want = (np.clip(np.rint(x / sb) + zb, -128, 127) - zb) * sb
    np.testing.assert_array_equal(got, want.astype(dtype))


def test_compiled_is_eager_and_nan_stays_nan():
    x, (s, z) = _x(), _params(1)
    x.reshape(-1)[5] = np.nan
    g = mg.Graph()
    y = fake_quant(g.input("x", x.shape), g.const(s), g.const(z), 0, 255, axis=1)
    (got,) = mg.compile([y]).run({"x": x})
    eager = fake_quant(mg.tensor(x), mg.tensor(s), mg.tensor(z), 0, 255, axis=1).numpy()
    np.testing.assert_array_equal(got, eager)
    assert np.isnan(got.reshape(-1)[5]) and np.nanmin(got) >= -0.25 * 3


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_give_the_same_floats(threads, monkeypatch):
    from threadpoolctl import threadpool_limits

    from mgegraph._kernels import parallel
    x, (s, z) = _x((5, 3, 31, 33)), _params(1)
    monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0: threads)
    g = mg.Graph()
    y = fake_quant(g.input("x", x.shape), g.const(s), g.const(z), axis=1)
    plan = mg.compile([y])
    monkeypatch.undo()
    assert plan.instructions[-1].ints[-1] == threads
    with threadpool_limits(limits=threads):
        (got,) = plan.run({"x": x})
    eager = fake_quant(mg.tensor(x), mg.tensor(s), mg.tensor(z), axis=1).numpy()
    np.testing.assert_array_equal(got, eager)


def _grads(x, s, z, axis, lsq=None, qmin=-128, qmax=127):
    xt, st = mg.tensor(x), mg.Parameter(s)
    gm = mg.GradManager().attach([xt, st])
    weights = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    with gm:
        y = fake_quant(xt, st, mg.tensor(z), qmin, qmax, axis=axis, lsq_grad_scale=lsq)
        gm.backward((y * mg.tensor(weights)).sum())
    return y.numpy(), xt.grad.numpy(), None if st.grad is None else st.grad.numpy(), weights


@pytest.mark.parametrize("axis", [None, 1])
def test_straight_through_gradient_inside_the_range_only(axis):
    x, (s, z) = _x(), _params(axis)
    _, dx, ds, w = _grads(x, s, z, axis)
    sb, zb = (s.reshape(-1, 1, 1), z.reshape(-1, 1, 1)) if axis else (s, z)
    q = np.rint(x / sb) + zb
    np.testing.assert_array_equal(dx, np.where((q >= -128) & (q <= 127), w, 0))
    assert ds is None or not ds.any()


@pytest.mark.parametrize("axis", [None, 1])
def test_lsq_scale_gradient_is_the_papers(axis):
    x, (s, z) = _x(), _params(axis)
    _, _, ds, w = _grads(x, s, z, axis, lsq=0.125)
    sb, zb = (s.reshape(-1, 1, 1), z.reshape(-1, 1, 1)) if axis else (s, z)
    v = x / sb
    q = np.rint(v) + zb
    step = np.where(q < -128, -128 - zb, np.where(q > 127, 127 - zb, np.rint(v) - v))
    keep = (0, 2, 3) if axis else None
    np.testing.assert_allclose(ds, (w * step).sum(axis=keep) * 0.125, rtol=2e-5, atol=1e-3)


def test_lsq_scale_gradient_on_clamped_values_is_the_finite_difference():
    # where every value saturates, y = (qmax - z) * s: its derivative in s is LSQ's rule
    x = np.abs(_x((2, 3, 4), np.float64)) + 100
    s, z = np.asarray(0.25), np.asarray(3.0)
    g = mg.Graph()
    xv, sv = g.input("x", x.shape, np.float64), g.input("s", (), np.float64)
    y = fake_quant(xv, sv, g.const(z), -128, 127, lsq_grad_scale=1.0).sum()
    (ds,) = mg.compile(mg.grad(y, [sv])).run({"x": x, "s": s})
    f = mg.compile([y])
    eps = 1e-6
    numeric = (f.run({"x": x, "s": s + eps})[0] - f.run({"x": x, "s": s - eps})[0]) / (2 * eps)
    np.testing.assert_allclose(ds, numeric, rtol=1e-7)


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    x = _x((3, 4, 5, 6))
    x.reshape(-1)[:2] = 0.0  # PyTorch multiplies by 1/scale: keep off exact ties
    xt = torch.tensor(x, requires_grad=True)
    y = torch.fake_quantize_per_tensor_affine(xt, 0.0625, 3, -128, 127)
    w = np.random.default_rng(2).normal(size=x.shape).astype(np.float32)
    (y * torch.tensor(w)).sum().backward()
    got, dx, _, mine_w = _grads(x, np.float32(0.0625), np.float32(3), None)
    # 0.0625 is a power of two: multiplying by its inverse divides exactly
    np.testing.assert_array_equal(got, y.detach().numpy())
    np.testing.assert_array_equal(dx, np.where(xt.grad.numpy() != 0, mine_w, 0))
    # LSQ: PyTorch's learnable fake quantizer's gradient of the scale
    xt = torch.tensor(x, requires_grad=True)
    st = torch.tensor([0.0625], requires_grad=True)
    y = torch._fake_quantize_learnable_per_tensor_affine(xt, st, torch.tensor([3.0]), -128, 127,
                                                          0.5)
    (y * torch.tensor(mine_w)).sum().backward()
    _, _, ds, _ = _grads(x, np.float32(0.0625), np.float32(3), None, lsq=0.5)
    np.testing.assert_allclose(ds, st.grad.numpy().reshape(()), rtol=1e-4)


@pytest.mark.parametrize("make, match", [
    (lambda g: fake_quant(g.input("x", (2, 3), np.int32), g.const(np.float32(1)),
                          g.const(np.float32(0))), "float32 or float64"),
    (lambda g: fake_quant(g.input("x", (2, 3)), g.const(np.ones(2, np.float32)),
                          g.const(np.float32(0))), "per tensor"),
    (lambda g: fake_quant(g.input("x", (2, 3)), g.const(np.ones(2, np.float32)),
                          g.const(np.zeros(2, np.float32)), axis=1), r"\(3,\)"),
    (lambda g: fake_quant(g.input("x", (2, 3)), g.const(1.0, np.float64),
                          g.const(np.float32(0))), "must be float32"),
    (lambda g: fake_quant(g.input("x", (2, 3)), 1.0, 0.0, 5, 5), "qmin < qmax"),
])
def test_bad_input_names_the_op(make, match):
    with pytest.raises(OpError, match=match) as info:
        make(mg.Graph())
    assert "fake_quant" in str(info.value)


@pytest.mark.parametrize("scale", [0.0, -1.0, np.inf, np.nan])
def test_a_bad_scale_fails_the_run(scale):
    with pytest.raises(KernelError, match="fake_quant.*invalid"):
        fake_quant(mg.tensor(_x()), mg.tensor(np.float32(scale)), 0.0).numpy()


def test_model_file_round_trip():
    x, (s, z) = _x(), _params(1)
    g = mg.Graph()
    y = fake_quant(g.input("x", x.shape), g.const(s), g.const(z), axis=1, lsq_grad_scale=0.5)
    plan = mg.compile([y])
    f = io.BytesIO()
    mg.save(plan, f)
    loaded = mg.load(io.BytesIO(f.getvalue()))
    np.testing.assert_array_equal(loaded.run({"x": x})[0], plan.run({"x": x})[0])


@pytest.mark.parametrize("qmin, qmax, axis", [(-128, 127, None), (0, 255, None), (-128, 127, 1)])
def test_onnx_export_is_qdq_and_onnx_runtimes(tmp_path, qmin, qmax, axis):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import mgegraph.onnx as mo
    x, (s, z) = _x(), _params(axis)
    if qmin == 0:
        z = np.abs(z)
    g = mg.Graph()
    y = fake_quant(g.input("x", x.shape), g.const(s), g.const(z), qmin, qmax, axis=axis)
    plan = mg.compile([y])
    path = tmp_path / "fq.onnx"
    mo.export(plan, path, opset=13)
    model = onnx.load(path)
    assert [n.op_type for n in model.graph.node] == ["QuantizeLinear", "DequantizeLinear"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_array_equal(plan.run({"x": x})[0], want)


def test_onnx_export_refuses_a_narrow_range(tmp_path):
    import mgegraph.onnx as mo
    g = mg.Graph()
    y = fake_quant(g.input("x", (2, 3)), 0.1, 0.0, -127, 127)
    with pytest.raises(mo.OnnxExportError, match="whole range"):
        mo.export(mg.compile([y]), tmp_path / "n.onnx", opset=13)
