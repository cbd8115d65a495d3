"""MegEngine's functional API as mgegraph gives it: the functions first defined under MegEngine's
submodule paths (F.tensor, F.math, F.elemwise, F.loss, F.einsum), and MegEngine's meanings of
full, broadcast_to, split, sort, elementwise functions of Python numbers and normalize/norm of
integers. Each is checked against NumPy (and PyTorch where it has the function) and, where
differentiable, against finite differences."""
import importlib
import math

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.testing import gradcheck


def wide(x):
    """A tensor of x keeping its NumPy dtype (mg.tensor makes float64 data float32, as
    MegEngine's does)."""
    return mg.tensor(x, dtype=np.asarray(x).dtype)

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("path", ["tensor", "math", "elemwise", "loss", "einsum", "nn", "vision"])
def test_megengine_submodule_paths_import(path):
    assert importlib.import_module(f"mgegraph.functional.{path}") is not None
    assert F.math.std is F.std and F.tensor.eye is F.eye and F.elemwise.abs is F.abs
    assert F.loss.square_loss is F.nn.square_loss


# -- F.tensor ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [(3,), (2, 5), ((4,),), ((3, 2),)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_eye_matches_numpy(args, dtype):
    want = np.eye(*(args[0] if isinstance(args[0], tuple) else args)).astype(dtype)
    got = F.eye(*args, dtype=dtype).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(F.eye(mg.tensor(list(want.shape)), dtype=dtype).numpy(), want)


def test_eye_refuses_bad_sizes_and_devices():
    with pytest.raises(mg.OpError, match="eye.*ints >= 0"):
        F.eye(-1)
    with pytest.raises(mg.OpError, match="eye.*one or two sizes"):
        F.eye((1, 2, 3))
    with pytest.raises(mg.GraphError, match="eye.*host memory"):
        F.eye(2, device="gpu0")


@pytest.mark.parametrize("shape", [(5,), (1,), (4, 4), (3, 6), (7, 2)])
@pytest.mark.parametrize("k", [-3, -1, 0, 2, 7])
def test_diag_matches_numpy_and_torch(shape, k):
    torch = pytest.importorskip("torch")
    x = rand(*shape, dtype=np.float32)
    got = F.diag(wide(x), k=k).numpy()
    np.testing.assert_array_equal(got, np.diag(x, k))
    np.testing.assert_array_equal(got, torch.diag(torch.from_numpy(x), k).numpy())


@pytest.mark.parametrize("shape, k", [((4,), 1), ((3,), -2), ((3, 4), 1), ((4, 3), -1)])
def test_diag_gradient(shape, k):
    gradcheck(lambda x: F.diag(x, k), rand(*shape))


def test_diag_refuses_other_ranks_and_k():
    with pytest.raises(mg.OpError, match=r"diag\(f32\[2,2,2\]\).*1-d or 2-d"):
        F.diag(mg.tensor(np.zeros((2, 2, 2), np.float32)))
    with pytest.raises(mg.OpError, match="diag.*k must be an int"):
        F.diag(mg.tensor(np.zeros(3, np.float32)), k=1.5)


def test_swapaxes_and_copy():
    x = rand(2, 3, 4)
    np.testing.assert_array_equal(F.swapaxes(wide(x), 0, -1).numpy(), np.swapaxes(x, 0, -1))
    gradcheck(lambda v: F.swapaxes(v, 1, 2) * 2, x)
    gradcheck(lambda v: F.copy(v) * v, x)
    with pytest.raises(mg.OpError, match="swapaxes.*out of range"):
        F.swapaxes(wide(x), 0, 3)


def test_cond_take_and_its_gradient():
    x = rand(3, 4, dtype=np.float32)
    mask = x > 0
    values, positions = F.cond_take(wide(mask), wide(x))
    np.testing.assert_array_equal(values.numpy(), x[mask])
    np.testing.assert_array_equal(positions.numpy(), np.flatnonzero(mask))
    assert positions.dtype == np.int32
    p = mg.nn.Parameter(x)
    with mg.autodiff.GradManager().attach([p]) as gm:
        gm.backward(F.sum(F.cond_take(wide(mask), p)[0] * 3))
    np.testing.assert_array_equal(p.grad.numpy(), np.where(mask, 3.0, 0.0))


def test_cond_take_refuses_bad_masks_and_graphs():
    x = mg.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(mg.OpError, match="cond_take.*mask must be bool, got float32"):
        F.cond_take(x, x)
    with pytest.raises(mg.OpError, match=r"cond_take.*shape \(3,\) differs"):
        F.cond_take(mg.tensor(np.ones(3, bool)), x)
    g = mg.Graph()
    with pytest.raises(mg.OpError, match="cond_take.*eager tensors"):
        F.cond_take(g.input("m", (2, 3), np.bool_), g.input("x", (2, 3)))


@pytest.mark.parametrize("shape", [(2, 5), (0, 3, 0), (1, 2, 3, 4)])
@pytest.mark.parametrize("as_tuple", [True, False])
def test_non_zero_matches_numpy_and_torch(shape, as_tuple):
    torch = pytest.importorskip("torch")
    c = RNG.integers(0, 2, shape)
    got = F.non_zero(wide(c), as_tuple=as_tuple)
    want = torch.nonzero(torch.from_numpy(c), as_tuple=as_tuple)
    if as_tuple:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    else:
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(got.numpy(), np.transpose(np.nonzero(c)))
    with pytest.raises(mg.OpError, match="non_zero.*scalar"):
        F.non_zero(mg.tensor(1))


def test_full_takes_its_dtype_from_the_value():
    for value in (True, 4, 5.0):
        assert F.full((2, 3), value).dtype == mg.tensor(value).dtype
    assert F.full((2,), 7, "int32").dtype == np.int32
    np.testing.assert_array_equal(F.ones(mg.tensor([2, 3])).numpy(), np.ones((2, 3), np.float32))
    assert F.zeros(4).shape == (4,)
    assert F.full((3, 2), 4, device="xpux").shape == (3, 2)
    with pytest.raises(mg.GraphError, match="linspace.*host memory"):
        F.linspace(0, 1, 3, device="cuda0")
    np.testing.assert_allclose(F.linspace(1, 9, 8, device="cpu:0").numpy(), np.linspace(1, 9, 8))


def test_broadcast_to_keeps_sizes_at_none():
    x = mg.tensor(rand(1, 2, 3, dtype=np.float32))
    assert F.broadcast_to(x, (1, None, 3)).shape == (1, 2, 3)
    assert F.broadcast_to(x, (4, None, 2, 3)).shape == (4, 1, 2, 3)
    assert F.broadcast_to(x, (mg.tensor(2), None, 2, 3)).shape == (2, 1, 2, 3)
    one = mg.tensor(np.ones(1, np.float32))
    assert F.broadcast_to(one, F.sum(mg.tensor([1, 1, 1, 1]))).shape == (4,)  # a 0-d size
    with pytest.raises(mg.OpError, match="None at position 0"):
        F.broadcast_to(x, (None, 1, 2, 3))
    with pytest.raises(mg.OpError, match="cannot broadcast"):
        F.broadcast_to(x, (1, -1, 3))


def test_split_refuses_points_out_of_order():
    x = mg.tensor(rand(2, 5, dtype=np.float32))
    with pytest.raises(mg.OpError, match=r"split.*\[3, 2, 5\] must be in order"):
        F.split(x, [3, 2, 5], axis=1)
    parts = F.split(x, [2, -1], axis=1)
    assert [p.shape for p in parts] == [(2, 2), (2, 2), (2, 1)]


# -- F.math --------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)])
def test_std_matches_numpy_and_torch(axis):
    torch = pytest.importorskip("torch")
    x = rand(3, 4, 5)
    got = F.std(wide(x), axis=axis, keepdims=True).numpy()
    np.testing.assert_allclose(got, np.std(x, axis=axis, keepdims=True), rtol=1e-12)
    dims = axis if axis is not None else (0, 1, 2)
    np.testing.assert_allclose(got, torch.std(torch.from_numpy(x), dim=dims, correction=0,
                                              keepdim=True).numpy(), rtol=1e-12)
    gradcheck(lambda v: F.std(v, axis=axis), x)


@pytest.mark.parametrize("ord", [None, 1, 2, 3.5, 0, math.inf, -math.inf])
def test_norm_matches_numpy(ord):
    x = rand(3, 4)
    x[0, 1] = 0.0
    got = F.norm(wide(x), ord=ord, axis=-1).numpy()
    np.testing.assert_allclose(got, np.linalg.norm(x, ord=ord, axis=-1), rtol=1e-12)
    if ord not in (0,):
        gradcheck(lambda v: F.norm(v, ord=ord, axis=1), rand(3, 4))


def test_norm_and_normalize_of_integers_give_float32():
    x = mg.tensor(np.arange(1, 7, dtype=np.int32).reshape(2, 3))
    assert F.norm(x, axis=-1).dtype == np.float32
    y = F.normalize(x, axis=-1)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), np.arange(1, 7).reshape(2, 3) /
                               np.linalg.norm(np.arange(1, 7).reshape(2, 3), axis=-1,
                                              keepdims=True), rtol=1e-6)
    with pytest.raises(mg.OpError, match="norm.*axis is required"):
        F.norm(x)


@pytest.mark.parametrize("dim", [-3, -1, 0, 1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_takes_megengine_positional_arguments(dim, descending):
    torch = pytest.importorskip("torch")
    x = RNG.integers(-5, 6, (4, 5, 3)).astype(np.float32)
    values, indices = F.sort(wide(x), descending, dim)
    want = torch.sort(torch.from_numpy(x), dim=dim, descending=descending, stable=True)
    np.testing.assert_array_equal(values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())
    gradcheck(lambda v: F.sort(v, descending, dim)[0] ** 2, rand(3, 4, 2))


@pytest.mark.parametrize("shapes, axes", [(((4, 3), (4, 3)), {}), (((3, 5), (2, 3, 5)), {
    "axisa": 0, "axisb": 1}), (((2, 3, 4), (2, 3, 4)), {"axis": 1})])
def test_cross_matches_numpy_and_torch(shapes, axes):
    torch = pytest.importorskip("torch")
    a, b = rand(*shapes[0]), rand(*shapes[1])
    got = F.cross(wide(a), wide(b), **axes).numpy()
    np.testing.assert_allclose(got, np.cross(a, b, **axes), rtol=1e-12)
    if axes.get("axis") is not None:
        want = torch.linalg.cross(torch.from_numpy(a), torch.from_numpy(b), dim=axes["axis"])
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-12)
    gradcheck(lambda x, y: F.cross(x, y, **axes), a, b)
    with pytest.raises(mg.OpError, match="cross.*vectors of 3.*got 4 and 4"):
        F.cross(mg.tensor(rand(2, 4)), mg.tensor(rand(2, 4)))


@pytest.mark.parametrize("axis, keepdims", [(1, False), ((0, 2), True), (-1, False)])
def test_logsumexp_matches_torch(axis, keepdims):
    torch = pytest.importorskip("torch")
    x = rand(3, 4, 5) * 300  # exp would overflow without the maximum taken out
    x[0, 0] = -np.inf
    got = F.nn.logsumexp(wide(x), axis, keepdims).numpy()
    want = torch.logsumexp(torch.from_numpy(x), dim=axis, keepdim=keepdims).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    gradcheck(lambda v: F.logsumexp(v, axis, keepdims), rand(3, 4, 5))


def test_megengine_nn_names_defined_elsewhere():
    assert F.nn.pad is F.pad and F.nn.one_hot is F.one_hot
    assert F.nn.warp_affine is F.warp_affine is F.vision.warp_affine
    assert F.nn.remap is F.remap and F.nn.warp_perspective is F.warp_perspective


def test_isnan_isinf():
    x = np.array([1.0, np.nan, -np.inf, np.inf, 0.0], np.float32)
    np.testing.assert_array_equal(F.isnan(wide(x)).numpy(), np.isnan(x))
    np.testing.assert_array_equal(F.isinf(wide(x)).numpy(), np.isinf(x))
    assert not F.isnan(mg.tensor([1, 2])).numpy().any()


# -- F.elemwise ----------------------------------------------------------------------------------
def test_elementwise_functions_take_python_numbers():
    assert isinstance(F.abs(-3.0), mg.Tensor) and F.abs(-3.0).item() == 3.0
    assert F.add(1, 2).item() == 3 and F.exp(0.0).item() == 1.0
    assert F.div(1, 2).item() == 0.5


def test_float_binary_functions_of_integers_compute_in_floats():
    got = F.atan2(mg.tensor(np.array([1, -2], np.int32)), mg.tensor(np.array([1, 1], np.int32)))
    assert got.dtype == np.float32  # int32 computes in float32, as the unary functions do
    np.testing.assert_allclose(got.numpy(), np.arctan2([1, -2], [1, 1]), rtol=1e-6)


def test_elemwise_module_lists_megengines_one_and_two_argument_functions():
    import inspect

    for name in F.elemwise.__all__:
        arity = len(inspect.signature(getattr(F.elemwise, name)).parameters)
        assert arity in (1, 2) or name == "clip", name


def test_logical_functions():
    a = RNG.integers(0, 2, (3, 4)).astype(bool)
    b = RNG.integers(0, 2, (4,)).astype(bool)
    ta, tb = wide(a), wide(b)
    np.testing.assert_array_equal(F.logical_and(ta, tb).numpy(), a & b)
    np.testing.assert_array_equal(F.logical_or(ta, tb).numpy(), a | b)
    np.testing.assert_array_equal(F.logical_xor(ta, tb).numpy(), a ^ b)
    np.testing.assert_array_equal(F.logical_not(ta).numpy(), ~a)
    with pytest.raises(mg.OpError, match="logical_and.*bool inputs, got float32"):
        F.logical_and(mg.tensor([1.0]), tb)


def test_logaddexp_matches_numpy_and_torch():
    torch = pytest.importorskip("torch")
    x, y = rand(2, 50) * 50, rand(2, 50) * 50
    x[0, :3], y[0, :3] = [-np.inf, np.inf, 800.0], [-np.inf, np.inf, 800.0]
    got = F.logaddexp(wide(x), wide(y)).numpy()
    np.testing.assert_allclose(got, np.logaddexp(x, y), rtol=1e-12)
    np.testing.assert_allclose(got, torch.logaddexp(torch.from_numpy(x),
                                                    torch.from_numpy(y)).numpy(), rtol=1e-12)
    gradcheck(F.logaddexp, rand(3, 4), rand(3, 4))


# -- F.loss --------------------------------------------------------------------------------------
def test_losses_match_torch():
    torch = pytest.importorskip("torch")
    p = RNG.uniform(0.05, 0.95, (4, 3))
    y = RNG.integers(0, 2, (4, 3)).astype(np.float64)
    got = F.nn.binary_cross_entropy(wide(p), wide(y), with_logits=False).numpy()
    want = torch.nn.functional.binary_cross_entropy(torch.from_numpy(p), torch.from_numpy(y))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12)
    # a probability of exactly 0 or 1 costs 100 (logs clipped at -100), as in PyTorch
    edge = F.nn.binary_cross_entropy(mg.tensor(np.array([0.0, 1.0])), mg.tensor(np.array([1.0, 0.0])),
                                     with_logits=False, reduction="none").numpy()
    np.testing.assert_array_equal(edge, [100.0, 100.0])
    scores, labels = rand(4, 3), np.sign(rand(4, 3))
    hinge = F.nn.hinge_loss(wide(scores), wide(labels), reduction="none").numpy()
    np.testing.assert_allclose(hinge, np.maximum(0, 1 - scores * labels).sum(1), rtol=1e-12)
    l2 = F.nn.hinge_loss(wide(scores), wide(labels), norm="L2").numpy()
    np.testing.assert_allclose(l2, (np.maximum(0, 1 - scores * labels) ** 2).sum(1).mean())
    gradcheck(lambda s: F.nn.hinge_loss(s, mg.Graph.const(s.graph, labels)), scores)
    with pytest.raises(ValueError, match="norm must be 'L1' or 'L2'"):
        F.nn.hinge_loss(wide(scores), wide(labels), norm="L3")


# -- F.einsum ------------------------------------------------------------------------------------
EINSUM_CASES = [
    ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]), ("kj,ji", [(4, 5), (5, 3)]),
    ("...ij->...ji", [(2, 3, 4, 5)]), ("ik,kj->ij", [(2, 3), (3, 4)]), ("i,j->ij", [(2,), (3,)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("pqrs,tuqvr->pstuv", [(2, 3, 4, 5), (6, 7, 3, 8, 4)]),
    ("ik,jkl,il->ij", [(2, 3), (4, 3, 5), (2, 5)]), ("...ik,...kj", [(2, 1, 3, 4), (3, 4, 5)]),
    ("i...k,k...j", [(2, 3, 4, 5), (5, 3, 4, 6)]), ("ii->i", [(4, 4)]), ("iijj->ji", [(3, 3, 4, 4)]),
    ("i...i", [(3, 7, 6, 3)]), ("iajbjci,jxjyizi->abcxyz", [(2, 3, 5, 4, 5, 6, 2),
                                                          (5, 2, 5, 3, 2, 7, 2)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUM_CASES)
def test_einsum_matches_numpy_and_torch(equation, shapes):
    torch = pytest.importorskip("torch")
    arrays = [rand(*s) for s in shapes]
    got = F.einsum(equation, *map(wide, arrays)).numpy()
    np.testing.assert_allclose(got, np.einsum(equation, *arrays), rtol=1e-10, atol=1e-12)
    want = torch.einsum(equation, *map(torch.from_numpy, arrays)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("equation, shapes", [("ij,jk->ik", [(2, 3), (3, 4)]),
                                              ("ii->i", [(3, 3)]),
                                              ("bij,j->bi", [(2, 3, 4), (4,)])])
def test_einsum_gradient(equation, shapes):
    gradcheck(lambda *xs: F.einsum(equation, *xs), *[rand(*s) for s in shapes])


def test_einsum_refuses_bad_equations():
    a = mg.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(mg.OpError, match="einsum.*names 2 operands, got 1"):
        F.einsum("ij,jk", a)
    with pytest.raises(mg.OpError, match="einsum.*names 3 axes of a 2-d operand"):
        F.einsum("ijk", a)
    with pytest.raises(mg.OpError, match="einsum.*label 'j' names axes of sizes 3 and 2"):
        F.einsum("ij,jk", a, a)
    with pytest.raises(mg.OpError, match="einsum.*output 'iz'"):
        F.einsum("ij->iz", a)


# -- F.vision ------------------------------------------------------------------------------------
@pytest.mark.parametrize("vertical, horizontal", [(True, True), (True, False), (False, True),
                                                  (False, False)])
def test_vision_flip_of_nhwc_images(vertical, horizontal):
    x = rand(2, 3, 5, 2)
    axes = tuple(a for a, on in ((1, vertical), (2, horizontal)) if on)
    np.testing.assert_array_equal(F.vision.flip(wide(x), vertical, horizontal).numpy(),
                                  np.flip(x, axes) if axes else x)
    gradcheck(lambda v: F.vision.flip(v, vertical, horizontal) * v, x)


@pytest.mark.parametrize("clockwise", [True, False])
def test_vision_rot90_of_nhwc_images(clockwise):
    torch = pytest.importorskip("torch")
    x = rand(2, 3, 5, 2)
    got = F.vision.rot90(wide(x), clockwise=clockwise).numpy()
    np.testing.assert_array_equal(got, np.rot90(x, 3 if clockwise else 1, (1, 2)))
    want = torch.rot90(torch.from_numpy(x), -1 if clockwise else 1, (1, 2)).numpy()
    np.testing.assert_array_equal(got, want)
    with pytest.raises(mg.OpError, match=r"rot90\(f32\[3,5\]\).*NHWC"):
        F.vision.rot90(mg.tensor(rand(3, 5)))
