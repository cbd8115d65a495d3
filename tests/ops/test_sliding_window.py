"""sliding_window and sliding_window_transpose (ops/sliding_window.py): against a NumPy loop and
PyTorch's unfold/fold (permuted to MegEngine's layout), on odd sizes, padding, strides and
dilations; each the other's gradient (finite differences, PyTorch); clear errors; the model
file."""
import itertools

import numpy as np
import pytest
from test_parallel_kernels import run_at

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.io.graph_json import OP_VERSIONS
from mgegraph.ir.errors import OpError
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(7)
# (N, C, H, W), kernel, padding, stride, dilation
CASES = [
    ((2, 3, 7, 8), (3, 2), (1, 2), (2, 1), (1, 3)),
    ((1, 1, 5, 5), (1, 1), (0, 0), (1, 1), (1, 1)),
    ((1, 2, 4, 6), (4, 6), (0, 0), (1, 1), (1, 1)),        # one window, the whole image
    ((3, 2, 9, 5), (2, 3), (3, 0), (3, 2), (2, 1)),        # padding wider than a stride
    ((1, 1, 3, 3), (3, 3), (2, 2), (4, 4), (1, 1)),        # windows mostly in the padding
]


def out_cells(hw, kernel, padding, stride, dilation):
    return tuple((hw[a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1
                 for a in range(2))


def windows_reference(x, kernel, padding, stride, dilation):
    """The windows by their definition: a loop over cells and taps of the zero-padded image."""
    n, c, h, w = x.shape
    oh, ow = out_cells((h, w), kernel, padding, stride, dilation)
    padded = np.zeros((n, c, h + 2 * padding[0], w + 2 * padding[1]), x.dtype)
    padded[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + w] = x
    out = np.empty((n, c, oh, ow, *kernel), x.dtype)
    for i, j, p, q in itertools.product(range(oh), range(ow), *map(range, kernel)):
        out[:, :, i, j, p, q] = padded[:, :, i * stride[0] + p * dilation[0],
                                       j * stride[1] + q * dilation[1]]
    return out


def transpose_reference(cols, hw, kernel, padding, stride, dilation):
    """Every tap added onto the cell it read, in the windows' order, taps in the padding
    dropped."""
    n, c, oh, ow = cols.shape[:4]
    out = np.zeros((n, c, hw[0] + 2 * padding[0], hw[1] + 2 * padding[1]), cols.dtype)
    for i, j, p, q in itertools.product(range(oh), range(ow), *map(range, kernel)):
        out[:, :, i * stride[0] + p * dilation[0], j * stride[1] + q * dilation[1]] += \
            cols[:, :, i, j, p, q]
    return out[:, :, padding[0]:padding[0] + hw[0], padding[1]:padding[1] + hw[1]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "kernel", "padding", "stride", "dilation"), CASES)
def test_sliding_window_matches_numpy(dtype, shape, kernel, padding, stride, dilation):
    x = RNG.standard_normal(shape).astype(dtype)
    y = F.sliding_window(mg.tensor(x, dtype=dtype), kernel, padding, stride, dilation)
    want = windows_reference(x, kernel, padding, stride, dilation)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "kernel", "padding", "stride", "dilation"), CASES)
def test_transpose_matches_numpy_bitwise(dtype, shape, kernel, padding, stride, dilation):
    """The same sums in the same order as a loop over the windows: the same bits."""
    oh, ow = out_cells(shape[2:], kernel, padding, stride, dilation)
    cols = RNG.standard_normal((*shape[:2], oh, ow, *kernel)).astype(dtype)
    x = F.sliding_window_transpose(mg.tensor(cols, dtype=dtype), shape[2:], kernel, padding,
                                   stride, dilation)
    want = transpose_reference(cols, shape[2:], kernel, padding, stride, dilation)
    np.testing.assert_array_equal(x.numpy(), want)


def test_ints_mean_both_sides_and_graphs_compile():
    g = mg.Graph()
    x = g.input("x", (2, 3, 6, 5))
    y = F.sliding_window(x, 3, padding=1, stride=2)
    z = F.sliding_window_transpose(y, (6, 5), 3, padding=1, stride=2)
    data = RNG.standard_normal((2, 3, 6, 5)).astype(np.float32)
    got_y, got_z = mg.compile([y, z]).run({"x": data})
    np.testing.assert_array_equal(got_y, windows_reference(data, (3, 3), (1, 1), (2, 2), (1, 1)))
    np.testing.assert_array_equal(
        got_z, transpose_reference(got_y, (6, 5), (3, 3), (1, 1), (2, 2), (1, 1)))


@pytest.mark.parametrize(("shape", "kernel", "padding", "stride", "dilation"), CASES[:4])
def test_gradients_against_finite_differences(shape, kernel, padding, stride, dilation):
    x = RNG.standard_normal(shape)
    gradcheck(lambda v: F.sliding_window(v, kernel, padding, stride, dilation), x)
    oh, ow = out_cells(shape[2:], kernel, padding, stride, dilation)
    cols = RNG.standard_normal((*shape[:2], oh, ow, *kernel))
    gradcheck(lambda v: F.sliding_window_transpose(v, shape[2:], kernel, padding, stride,
                                                   dilation), cols)


def test_second_order_gradient_is_the_window_again():
    """Each op's gradient is the other, so the gradient of a gradient is the op itself."""
    x = RNG.standard_normal((1, 2, 5, 4))
    gradcheck(lambda v: mg.grad(F.sum(F.sliding_window(v, 2, 1, 1, 1) ** 2), [v])[0], x)


def _torch_layout(cols):
    """MegEngine's (N, C, OH, OW, WH, WW) as PyTorch's (N, C*WH*WW, OH*OW)."""
    n, c, oh, ow, wh, ww = cols.shape
    return cols.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * wh * ww, oh * ow)


@pytest.mark.parametrize(("shape", "kernel", "padding", "stride", "dilation"), CASES)
def test_forward_and_gradients_match_torch_unfold_fold(shape, kernel, padding, stride,
                                                       dilation):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal(shape)
    oh, ow = out_cells(shape[2:], kernel, padding, stride, dilation)
    seed = RNG.standard_normal((*shape[:2], oh, ow, *kernel))
    tx = torch.tensor(x, requires_grad=True)
    tcols = torch.nn.functional.unfold(tx, kernel, dilation, padding, stride)
    (tcols * torch.tensor(_torch_layout(seed))).sum().backward()
    g = mg.Graph()
    v = g.input("x", shape, np.float64)
    cols = F.sliding_window(v, kernel, padding, stride, dilation)
    (dx,) = mg.grad(F.sum(cols * g.const(seed)), [v])
    got_cols, got_dx = mg.compile([cols, dx]).run({"x": x})
    np.testing.assert_allclose(_torch_layout(got_cols), tcols.detach().numpy(), rtol=0, atol=0)
    np.testing.assert_allclose(got_dx, tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    folded = torch.nn.functional.fold(torch.tensor(_torch_layout(seed)), shape[2:], kernel,
                                      dilation, padding, stride)
    got = F.sliding_window_transpose(mg.tensor(seed, dtype=np.float64), shape[2:], kernel,
                                     padding, stride, dilation)
    np.testing.assert_allclose(got.numpy(), folded.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("call", "words"), [
    (lambda: F.sliding_window(mg.tensor(np.zeros((2, 3, 4), np.float32)), 2), "4-D"),
    (lambda: F.sliding_window(mg.tensor(np.zeros((1, 1, 2, 2), np.float32)), 3), "does not fit"),
    (lambda: F.sliding_window(mg.tensor(np.zeros((1, 1, 4, 4), np.float32)), 2, stride=0),
     "stride must be a pair of ints >= 1"),
    (lambda: F.sliding_window(mg.tensor(np.zeros((1, 1, 4, 4), np.float32)), (2, 2, 2)),
     "kernel_size must be an int or a pair"),
    (lambda: F.sliding_window(mg.tensor(np.zeros((1, 1, 4, 4), np.int32)), 2), "int32"),
    (lambda: F.sliding_window_transpose(mg.tensor(np.zeros((1, 1, 3, 3, 2, 2), np.float32)),
                                        (5, 5), 2), "does not match output_size"),
    (lambda: F.sliding_window_transpose(mg.tensor(np.zeros((1, 1, 3, 3), np.float32)),
                                        (4, 4), 2), "6-D"),
])
def test_bad_input_is_a_clear_op_error(call, words):
    with pytest.raises(OpError, match="sliding_window") as info:
        call()
    assert words in str(info.value)


def test_model_file_round_trip_bitwise(tmp_path):
    assert OP_VERSIONS["sliding_window"] == OP_VERSIONS["sliding_window_transpose"] == 1
    g = mg.Graph()
    x = g.input("x", (2, 3, 7, 6))
    cols = F.sliding_window(x, (3, 2), (1, 0), (2, 1), (1, 2))
    back = F.sliding_window_transpose(cols * cols, (7, 6), (3, 2), (1, 0), (2, 1), (1, 2))
    (dx,) = mg.grad(F.sum(back), [x])
    plan = mg.compile([cols, back, dx])
    mg.save(plan, tmp_path / "m.mgm")
    data = RNG.standard_normal((2, 3, 7, 6)).astype(np.float32)
    for got, want in zip(mg.load(tmp_path / "m.mgm").run([data]), plan.run({"x": data})):
        assert got.tobytes() == want.tobytes()


def test_megengine_module_classes():
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    cols = mg.nn.SlidingWindow(3, padding=1)(mg.tensor(x))
    back = mg.nn.SlidingWindowTranspose((5, 5), 3, padding=1)(cols)
    np.testing.assert_array_equal(back.numpy(), transpose_reference(
        cols.numpy(), (5, 5), (3, 3), (1, 1), (1, 1), (1, 1)))



THREADED = {  # op -> (inputs, the function over them)
    "matinv": ([RNG.standard_normal((7, 5, 5)) + 5 * np.eye(5)], F.matinv),
    "sliding_window": ([RNG.standard_normal((3, 2, 9, 7))],
                       lambda v: F.sliding_window(v, (3, 2), 1, (2, 1), (1, 2))),
    "sliding_window_transpose": (
        [RNG.standard_normal((3, 2, 5, 7, 3, 2))],
        lambda v: F.sliding_window_transpose(v, (9, 7), (3, 2), 1, (2, 1), (1, 2))),
}


@pytest.mark.parametrize("op", sorted(THREADED))
def test_the_same_bits_on_one_two_and_three_threads(op, monkeypatch):
    """Each thread takes whole rows (matrices): no result depends on the split."""
    arrays, fn = THREADED[op]
    results = [run_at(fn, arrays, threads, monkeypatch)[0] for threads in (1, 2, 3)]
    for got in results[1:]:
        assert got.tobytes() == results[0].tobytes()
