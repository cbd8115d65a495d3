"""The activations of the elementwise table (elu, selu, celu, softsign, hardsigmoid, mish,
logsigmoid, thresholded_relu, shrink, prelu) and their public functions: against NumPy and
PyTorch in float32 and float64 on odd sizes and on edge values, unfused and fused (a chain at
optimisation level 2), their clear errors, and the model file."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph.ir.errors import GraphError, OpError
from mgegraph.ops import elementwise_table as TABLE

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(0)
DTYPES = [np.float32, np.float64]
EDGES = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-7, -1e-7, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0,
         3.0, -3.0, 20.0, -20.0, 88.0, -88.0, -104.0, 1e4, -1e4]

# name -> (mgegraph function, PyTorch function); both of the input alone
CASES = {
    "elu": (lambda x: F.elu(x, 0.7), lambda t: TF.elu(t, 0.7)),
    "selu": (F.selu, TF.selu),
    "celu": (lambda x: F.celu(x, 1.3), lambda t: TF.celu(t, 1.3)),
    "softsign": (F.softsign, TF.softsign),
    "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 2.0), lambda t: TF.hardtanh(t, -0.5, 2.0)),
    "mish": (F.mish, TF.mish),
    "logsigmoid": (F.logsigmoid, TF.logsigmoid),
    "thresholded_relu": (lambda x: F.thresholded_relu(x, 0.4),
                         lambda t: TF.threshold(t, 0.4, 0.0)),
    "softshrink": (lambda x: F.softshrink(x, 0.6), lambda t: TF.softshrink(t, 0.6)),
    "hardshrink": (lambda x: F.hardshrink(x, 0.6), lambda t: TF.hardshrink(t, 0.6)),
    "prelu": (lambda x: F.prelu(x, x.graph.const(np.asarray([0.3], x.dtype))),
              lambda t: TF.prelu(t, torch.tensor([0.3], dtype=t.dtype))),
}


def tol(dtype):
    return {"rtol": 3e-6, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-13, "atol": 1e-14}


def run(fn, x, optimize=0):
    g = mg.Graph()
    (y,) = mg.compile([fn(g.input("x", x.shape, x.dtype))], optimize=optimize).run({"x": x})
    return y


def torch_of(fn, x):
    return fn(torch.from_numpy(np.array(x))).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CASES)
def test_matches_torch_on_odd_sizes(name, dtype):
    fn, reference = CASES[name]
    x = (RNG.standard_normal((3, 7, 5)) * 3).astype(dtype)
    y = run(fn, x)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, torch_of(reference, x), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CASES)
def test_edge_values_match_torch(name, dtype):
    # NaN stays NaN (as relu's), infinities and signed zeros as PyTorch gives them, elu and its
    # kin precise just below 0 (e^x - 1 without the cancellation)
    fn, reference = CASES[name]
    with np.errstate(over="ignore"):
        x = np.array(EDGES, dtype)
    y = run(fn, x)
    want = torch_of(reference, x)
    np.testing.assert_allclose(y, want, equal_nan=True, **tol(dtype))
    # signs of zero where PyTorch's are one rule (its softshrink's vector and scalar loops differ)
    if name not in ("hardshrink", "softshrink", "logsigmoid"):
        zero = (want == 0) & (y == 0)
        np.testing.assert_array_equal(np.signbit(y[zero]), np.signbit(want[zero]), err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("entry", [op for op in TABLE.OPS if op.name in (
    "elu", "selu", "celu", "softsign", "hardsigmoid", "mish", "logsigmoid", "thresholded_relu",
    "shrink")], ids=lambda op: op.name)
def test_unary_ops_match_their_numpy_reference(entry, dtype):
    attrs = {"hardsigmoid": {"alpha": 0.2, "beta": 0.5},
             "shrink": {"lambd": 0.75, "bias": 0.25}}.get(entry.name, {})
    attrs = {**entry.defaults, **attrs}
    x = (RNG.standard_normal(1001) * 4).astype(dtype)

    def fn(v):
        (out,) = v.graph.add_node(entry.name, (v,), attrs).outputs
        return out
    want = entry.numpy(x.astype(np.float64), *(attrs[p] for p in entry.params))
    np.testing.assert_allclose(run(fn, x), want.astype(dtype), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_elu_kin_keep_their_relative_precision_just_below_zero(dtype):
    # e^x - 1 would lose every digit there: the kernels compute expm1 (Kahan's form)
    x = -np.geomspace(1e-30, 1e-3, 301).astype(dtype)
    rtol = 4 * np.finfo(dtype).eps
    np.testing.assert_allclose(run(F.elu, x), np.expm1(x.astype(np.float64)), rtol=rtol, atol=0)
    np.testing.assert_allclose(run(lambda v: F.celu(v, 2.0), x),
                               2 * np.expm1(x.astype(np.float64) / 2), rtol=rtol, atol=0)


def test_prelu_broadcasts_its_slope_per_channel():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w = np.array([0.1, -0.2, 0.3], np.float32)
    g = mg.Graph()
    xv, wv = g.input("x", x.shape, "float32"), g.input("w", (3, 1, 1), "float32")
    (y,) = mg.compile([F.prelu(xv, wv)]).run({"x": x, "w": w.reshape(3, 1, 1)})
    np.testing.assert_array_equal(y, np.where(x > 0, x, x * w.reshape(3, 1, 1)))
    np.testing.assert_allclose(y, TF.prelu(torch.from_numpy(x), torch.from_numpy(w)).numpy())


def test_hardsigmoid_has_both_meanings():
    x = np.linspace(-6, 6, 61)
    torch_meaning = run(F.hardsigmoid, x)
    np.testing.assert_allclose(torch_meaning, np.clip(x / 6 + 0.5, 0, 1), rtol=1e-15)
    np.testing.assert_allclose(torch_meaning, run(F.hsigmoid, x), rtol=1e-15, atol=1e-16)
    onnx_meaning = run(lambda v: F.hardsigmoid(v, 0.2, 0.5), x)
    np.testing.assert_allclose(onnx_meaning, np.clip(0.2 * x + 0.5, 0, 1), rtol=1e-15)


def test_selu_defaults_are_the_self_normalising_constants():
    x = np.array([-1.0, 1.0])
    y = run(F.selu, x)
    np.testing.assert_allclose(y, TF.selu(torch.from_numpy(x)).numpy(), rtol=1e-15)


CHAINS = {
    "elu of mish": (lambda x: F.elu(F.mish(x), 0.5), lambda t: TF.elu(TF.mish(t), 0.5)),
    "selu of softsign": (lambda x: F.selu(F.softsign(x) * 3.0),
                         lambda t: TF.selu(TF.softsign(t) * 3.0)),
    "shrinks": (lambda x: F.hardshrink(F.softshrink(x, 0.2), 0.5),
                lambda t: TF.hardshrink(TF.softshrink(t, 0.2), 0.5)),
    "celu then logsigmoid": (lambda x: F.logsigmoid(F.celu(x, 0.8)),
                             lambda t: TF.logsigmoid(TF.celu(t, 0.8))),
    "hardsigmoid then threshold": (lambda x: F.thresholded_relu(F.hardsigmoid(x), 0.6),
                                   lambda t: TF.threshold(TF.hardsigmoid(t), 0.6, 0.0)),
    "prelu of hardtanh": (lambda x: F.prelu(F.hardtanh(x, -2.0, 2.0),
                                            x.graph.const(np.asarray([0.25], x.dtype))),
                          lambda t: TF.prelu(TF.hardtanh(t, -2.0, 2.0),
                                             torch.tensor([0.25], dtype=t.dtype))),
}


def same_bits(a, b) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN (its sign is the instruction's)."""
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and \
        np.where(nan, 0, a).tobytes() == np.where(nan, 0, b).tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CHAINS)
def test_a_fused_chain_matches_the_unfused_plan_bitwise_and_torch(name, dtype):
    fn, reference = CHAINS[name]
    with np.errstate(over="ignore"):
        x = np.concatenate([RNG.standard_normal(2053) * 3, EDGES]).astype(dtype)
    g = mg.Graph()
    plan = mg.compile([fn(g.input("x", x.shape, x.dtype))], optimize=2)
    assert [ins.op for ins in plan.instructions] == ["fused_elementwise"], str(plan)
    (fused,) = plan.run({"x": x})
    unfused = run(fn, x)
    assert same_bits(fused, unfused)
    np.testing.assert_allclose(fused, torch_of(reference, x), equal_nan=True, **tol(dtype))


def test_integer_inputs_compute_in_float():
    x = np.array([-2, 0, 3], np.int32)
    y = run(F.elu, x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, [np.expm1(-2.0), 0, 3], rtol=1e-6)


def _var(shape=(2, 3), dtype="float32"):
    return mg.Graph().input("x", shape, dtype)


def test_bad_parameters_are_clear_errors():
    with pytest.raises(OpError, match=r"celu\(f32\[2,3\]\).*alpha must not be 0"):
        F.celu(_var(), 0.0)
    with pytest.raises(GraphError, match="softshrink: lambd must be >= 0, got -1"):
        F.softshrink(_var(), -1)
    with pytest.raises(GraphError, match="hardshrink: lambd must be >= 0"):
        F.hardshrink(_var(), float("nan"))
    with pytest.raises(GraphError, match="hardtanh: min_val 1 is greater than max_val -1"):
        F.hardtanh(_var(), 1, -1)
    with pytest.raises(OpError, match="hardsigmoid.*alpha"):
        x = _var()
        x.graph.add_node("hardsigmoid", (x,), {})


def test_bad_inputs_are_clear_errors():
    x = _var((2, 3, 4))
    # a per-channel slope of (N, C, W) data is (C, 1): nn.PReLU shapes its own
    with pytest.raises(OpError, match=r"prelu\(f32\[2,3,4\], f32\[3\]\): shapes .* do not "
                                      "broadcast"):
        F.prelu(x, x.graph.input("w", (3,), "float32"))
    with pytest.raises(OpError, match="dtype int32 is not supported by elu"):
        x.graph.add_node("elu", (x.graph.input("i", (2,), "int32"),), {"alpha": 1.0})


def test_the_model_file_keeps_every_activation(tmp_path):
    g = mg.Graph()
    x = g.input("x", (4, 3, 5), "float32")
    w = g.param("w", np.array([[0.1], [0.2], [-0.3]], np.float32))
    outs = [fn(x) for fn, _ in CASES.values()] + [F.prelu(x, w), F.hardsigmoid(x, 0.2, 0.4),
                                                   F.shrink(x, 0.3, 0.1)]
    plan = mg.compile(outs, optimize=0)
    mg.save(plan, tmp_path / "act.mgm")
    feeds = {"x": (RNG.standard_normal((4, 3, 5)) * 3).astype(np.float32)}
    for a, b in zip(plan.run(feeds), runtime.load(tmp_path / "act.mgm").run(feeds)):
        np.testing.assert_array_equal(a, b)


def test_the_functions_are_also_under_megengines_functional_nn():
    for name in ("elu", "selu", "celu", "softsign", "hardsigmoid", "hsigmoid", "hardtanh", "mish",
                 "logsigmoid", "prelu", "softshrink", "hardshrink", "thresholded_relu"):
        assert getattr(F.nn, name) is getattr(F, name) and name in F.nn.__all__, name
