"""csrc_cuda/conv.cu's data gradient with the bias the epilogue pass gives it
(conv2d_backward_data's optional third input): the host emulation against the CPU kernel, and
against the kernel without the bias plus the bias added after (the same bits: the bias is added
to each finished sum)."""
import numpy as np
import pytest
from kernel_checks import assert_close, cpu_result, emulate, node_of

from mgegraph.cuda.kernels import conv as family

CASES = [  # (w (cout of the forward conv, cin / groups, kh, kw), dy, attributes)
    ((4, 3, 3, 3), (2, 4, 5, 6), dict(stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=1,
                                      input_hw=(10, 12))),
    ((6, 2, 2, 3), (1, 6, 4, 3), dict(stride=(1, 2), padding=(0, 1), dilation=(2, 1), groups=3,
                                      input_hw=(6, 5))),
]


def _arrays(ws, dys, attrs, dtype, bias_shape):
    rng = np.random.default_rng(36)
    c = ws[1] * attrs["groups"]
    bias = rng.standard_normal(c).astype(dtype).reshape(bias_shape(c))
    return [rng.standard_normal(ws).astype(dtype), rng.standard_normal(dys).astype(dtype), bias]


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("bias_shape", (lambda c: (c,), lambda c: (1, c, 1, 1)),
                         ids=["flat", "broadcast"])
@pytest.mark.parametrize("case", CASES)
def test_data_gradient_with_bias_matches_cpu(dtype, bias_shape, case):
    ws, dys, attrs = case
    arrays = _arrays(ws, dys, attrs, dtype, bias_shape)
    node = node_of("conv2d_backward_data", arrays, **attrs)
    got = emulate(family, node, arrays)[0]
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    assert_close(got, cpu_result(node, arrays)[0], **tol)
    plain = emulate(family, node_of("conv2d_backward_data", arrays[:2], **attrs), arrays[:2])[0]
    np.testing.assert_array_equal(got, plain + arrays[2].reshape(1, -1, 1, 1))
