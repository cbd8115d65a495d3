"""The embedding op (ops/sequence.py) on CUDA: take's kernel family (csrc_cuda/movement.cu) runs
it, in the plain host emulation, bitwise as the CPU kernel."""
import numpy as np
import pytest
from kernel_checks import cpu_result, emulate, node_of

from mgegraph.cuda.kernels import movement as family


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_is_bitwise_the_cpu_kernel(dtype, padding_idx):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((5, 7)).astype(dtype)
    ids = np.array([[3, 0, 4], [1, 3, 3]], np.int64)
    node = node_of("embedding", [weight, ids], padding_idx=padding_idx)
    got, want = emulate(family, node, [weight, ids], fibers=False), cpu_result(node,
                                                                               [weight, ids])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(want[0], weight[ids])
