"""pad's non-constant modes (edge/replicate, reflect, wrap) and their gradient (pad_backward:
every padded element adds into the input element it copies) against NumPy's np.pad, PyTorch's
F.pad (replicate, reflect, circular) and finite differences; every dtype, pads wider than the
axis, read-only inputs, and the refusals."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(13)
MODES = ["edge", "reflect", "wrap"]
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]
WIDTHS = [((3, 4), ((1, 2), (0, 3))), ((4,), ((6, 7),)), ((1, 3), ((2, 2), (1, 1))),
          ((2, 3, 4, 5), ((0, 0), (1, 0), (2, 1), (4, 9))), ((2, 2), ((0, 0), (0, 0)))]


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def sample(shape, dtype):
    if dtype == np.bool_:
        return RNG.random(shape) > 0.5
    return (RNG.standard_normal(shape) * 50).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("shape", "width"), WIDTHS)
def test_pad_matches_numpy(dtype, mode, shape, width):
    a = sample(shape, dtype)
    a.flags.writeable = False
    np.testing.assert_array_equal(run(lambda v: F.pad(v, width, mode=mode), a),
                                  np.pad(a, width, mode=mode))


TORCH_MODES = {"edge": "replicate", "reflect": "reflect", "wrap": "circular"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pads", [(1, 2, 3, 0), (0, 0, 2, 2), (3, 3, 3, 3)])
def test_pad_and_its_gradient_match_torch(mode, pads):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 3, 4, 5))
    dy_shape = (2, 3, 4 + pads[2] + pads[3], 5 + pads[0] + pads[1])
    dy = RNG.standard_normal(dy_shape)
    width = ((0, 0), (0, 0), (pads[2], pads[3]), (pads[0], pads[1]))  # torch: last axis first
    g = mg.Graph()
    v = g.input("x", x.shape, np.float64)
    y = F.pad(v, width, mode=mode)
    (dx,) = mg.compile(mg.grad(F.sum(y * g.const(dy)), [v])).run({"x": x})
    t = torch.from_numpy(x).requires_grad_()
    ty = torch.nn.functional.pad(t, pads, mode=TORCH_MODES[mode])
    ty.backward(torch.from_numpy(dy))
    np.testing.assert_array_equal(run(lambda u: F.pad(u, width, mode=mode), x),
                                  ty.detach().numpy())
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("shape", "width"), WIDTHS[:4])
def test_pad_grad_against_finite_differences(mode, shape, width):
    gradcheck(lambda v: F.pad(v, width, mode=mode), RNG.standard_normal(shape))


@pytest.mark.parametrize("mode", MODES)
def test_pad_backward_grad_is_pad(mode):
    width = ((1, 2), (3, 0))
    gradcheck(lambda d: apply("pad_backward", (d,), pad_width=width, mode=mode),
              RNG.standard_normal((5, 6)))


def test_replicate_is_edge_and_modes_are_refused_by_name():
    a = sample((3, 3), np.float32)
    np.testing.assert_array_equal(run(lambda v: F.pad(v, 1, mode="replicate"), a),
                                  np.pad(a, 1, mode="edge"))
    g = mg.Graph()
    v = g.input("x", (0, 2), np.float32)
    with pytest.raises(mg.OpError, match="pad.*wrap padding cannot extend an empty axis"):
        F.pad(v, 1, mode="wrap")
    with pytest.raises(mg.OpError, match="pad.*mode must be one of.*wrap"):
        F.pad(v, 1, mode="symmetric")
