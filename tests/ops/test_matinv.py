"""matinv (ops/linalg_inv.py): the inverses of batches of matrices against NumPy and PyTorch,
pivoting, odd sizes, empty batches; its gradient against finite differences and PyTorch; a
singular matrix is a KernelError; clear OpErrors; the model file; the ONNX exporter's refusal."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.io.graph_json import OP_VERSIONS
from mgegraph.ir.errors import KernelError, OpError
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(11)


def well_conditioned(shape, dtype=np.float64):
    n = shape[-1]
    return (RNG.standard_normal(shape) + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (3, 9, 9), (2, 3, 4, 4), (7, 2, 2)])
def test_matches_numpy(dtype, rtol, shape):
    a = well_conditioned(shape, dtype)
    y = F.matinv(mg.tensor(a, dtype=dtype))
    assert y.dtype == dtype and y.shape == shape
    np.testing.assert_allclose(y.numpy(), np.linalg.inv(a), rtol=rtol, atol=rtol)


def test_needs_row_exchanges():
    """Zeros on the diagonal: elimination without pivoting would divide by zero."""
    a = np.array([[[0.0, 2.0, 1.0], [1.0, 0.0, 0.0], [3.0, 1.0, 0.0]],
                  [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]])
    got = F.matinv(mg.tensor(a, dtype=np.float64)).numpy()
    np.testing.assert_allclose(got, np.linalg.inv(a), rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(got[1], a[1].T)  # a permutation's inverse, exactly


def test_partial_pivoting_keeps_a_badly_scaled_matrix_accurate():
    a = np.array([[1e-12, 1.0], [1.0, 1.0]])
    got = F.matinv(mg.tensor(a, dtype=np.float64)).numpy()
    np.testing.assert_allclose(got @ a, np.eye(2), atol=1e-12)


def test_empty_batch_and_graph_compile():
    g = mg.Graph()
    x = g.input("x", (0, 3, 3), np.float32)
    (out,) = mg.compile([F.matinv(x)]).run({"x": np.zeros((0, 3, 3), np.float32)})
    assert out.shape == (0, 3, 3)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    a = well_conditioned((4, 6, 6))
    np.testing.assert_allclose(F.matinv(mg.tensor(a, dtype=np.float64)).numpy(),
                               torch.linalg.inv(torch.tensor(a)).numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 3, 3)])
def test_gradient_against_finite_differences(shape):
    gradcheck(F.matinv, well_conditioned(shape))


def test_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    a, seed = well_conditioned((3, 5, 5)), RNG.standard_normal((3, 5, 5))
    ta = torch.tensor(a, requires_grad=True)
    (torch.linalg.inv(ta) * torch.tensor(seed)).sum().backward()
    g = mg.Graph()
    v = g.input("a", a.shape, np.float64)
    (da,) = mg.compile(mg.grad(F.sum(F.matinv(v) * g.const(seed)), [v])).run({"a": a})
    np.testing.assert_allclose(da, ta.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_small_scales_are_not_singular_and_nans_propagate():
    """1e-4 * I is invertible whatever its scale (MegEngine's kernel refuses pivots under
    1e-7); a NaN input gives NaNs, as NumPy's, not a singular-matrix error."""
    small = F.matinv(mg.tensor(1e-4 * np.eye(3), dtype=np.float32)).numpy()
    np.testing.assert_allclose(small, 1e4 * np.eye(3), rtol=1e-6)
    a = np.eye(3)
    a[:, 0] = np.nan
    got = F.matinv(mg.tensor(a, dtype=np.float64)).numpy()
    assert np.isnan(got).any() and np.isnan(np.linalg.inv(a)).any()


@pytest.mark.parametrize("a", [np.zeros((2, 2)), np.array([[1.0, 2.0], [2.0, 4.0]]),
                               np.stack([np.eye(3), np.ones((3, 3))])])
def test_a_singular_matrix_is_a_kernel_error(a):
    with pytest.raises(KernelError, match="matinv"):
        F.matinv(mg.tensor(a, dtype=np.float32)).numpy()


@pytest.mark.parametrize("shape, dtype, words", [
    ((3,), np.float32, "at least 2 dims"),
    ((2, 3, 4), np.float32, "square"),
    ((3, 3), np.int32, "int32"),
])
def test_bad_input_is_a_clear_op_error(shape, dtype, words):
    with pytest.raises(OpError, match="matinv") as info:
        F.matinv(mg.tensor(np.ones(shape, dtype), dtype=dtype))
    assert words in str(info.value)


def test_model_file_round_trip_bitwise(tmp_path):
    assert OP_VERSIONS["matinv"] == 1
    g = mg.Graph()
    x = g.input("x", (2, 4, 4))
    y = F.matinv(x)
    (dx,) = mg.grad(F.sum(y * y), [x])
    plan = mg.compile([y, dx])
    mg.save(plan, tmp_path / "m.mgm")
    data = well_conditioned((2, 4, 4), np.float32)
    for got, want in zip(mg.load(tmp_path / "m.mgm").run([data]), plan.run({"x": data})):
        assert got.tobytes() == want.tobytes()


def test_megengine_paths():
    assert F.math.matinv is F.matinv
    a = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
    np.testing.assert_array_equal(F.matinv(mg.tensor(a)).numpy(), [[1.0, 0.0], [-1.0, 1.0]])
