"""csrc_cuda/softmax.cu and mgegraph/cuda/kernels/softmax.py: NVRTC compiles, the launch
geometry, the host emulation (a thread per column) against the CPU kernels, and (marker cuda)
the ops on a device against the CPU backend."""
import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    assert_close,
    cpu_result,
    cuda_launch,
    emulate,
    node_of,
    nvrtc_compile,
    ptx_of,
    run_on_device,
)

from mgegraph.cuda.abi import STATUS, decode
from mgegraph.cuda.kernels import softmax as family

FLOATS = (np.float32, np.float64)


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("softmax.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_ptx_has_every_entry(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    for name in family.KERNELS:
        assert f".entry mg_{name}(" in ptx
    assert ".entry mg_cross_entropy_f32_total(" in ptx and "shfl.sync.bfly" in ptx


def _logits(dtype, shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape) * 3
    return x.astype(dtype)


def _labels(n_classes, shape, dtype, seed=1):
    return np.random.default_rng(seed).integers(0, n_classes, shape).astype(dtype)


def _tol(dtype):
    # exp and log are the host's here, as the CPU kernel's: only the order of sums differs
    return 1e-6 if dtype == np.float32 else 1e-13


@pytest.mark.nvrtc
@pytest.mark.parametrize("op", ("softmax", "log_softmax"))
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,axis", [((6, 10), 1), ((6, 10), 0), ((3, 5, 4), 1),
                                         ((7,), 0), ((2, 0, 3), 2)])
def test_softmax_matches_cpu(op, dtype, shape, axis):
    x = _logits(dtype, shape)
    if x.size:
        x.flat[3] = np.nan  # spreads over its column, as on the CPU
    node = node_of(op, [x], axis=axis)
    assert_close(emulate(family, node, [x])[0], cpu_result(node, [x])[0], rtol=_tol(dtype))


def _ce_case(dtype, shape, label_dtype, with_logits):
    pred = _logits(dtype, shape)
    if not with_logits:  # probabilities along axis 1
        e = np.exp(pred - pred.max(axis=1, keepdims=True))
        pred = (e / e.sum(axis=1, keepdims=True)).astype(dtype)
    label_shape = shape[:1] + shape[2:]
    return pred, _labels(shape[1], label_shape, label_dtype)


@pytest.mark.nvrtc
@pytest.mark.parametrize("reduction", ("none", "mean", "sum"))
@pytest.mark.parametrize("with_logits", (True, False))
@pytest.mark.parametrize("smooth", (0.0, 0.1))
@pytest.mark.parametrize("shape", ((8, 5), (3, 4, 6)))
@pytest.mark.parametrize("dtype,label_dtype", [(np.float32, np.int32), (np.float64, np.int64)])
def test_cross_entropy_and_gradient_match_cpu(reduction, with_logits, smooth, shape, dtype,
                                              label_dtype):
    pred, label = _ce_case(dtype, shape, label_dtype, with_logits)
    attrs = {"axis": 1, "with_logits": with_logits, "label_smooth": smooth,
             "reduction": reduction}
    node = node_of("cross_entropy", [pred, label], **attrs)
    loss = cpu_result(node, [pred, label])[0]
    assert_close(emulate(family, node, [pred, label])[0], loss, rtol=_tol(dtype))
    dloss = np.linspace(0.5, 1.5, loss.size).astype(dtype).reshape(loss.shape)
    back = node_of("cross_entropy_backward", [pred, label, dloss], **attrs)
    assert_close(emulate(family, back, [pred, label, dloss])[0],
                 cpu_result(back, [pred, label, dloss])[0], rtol=_tol(dtype))


@pytest.mark.nvrtc
def test_a_label_out_of_range_gives_nan_and_fails_the_run():
    # the CPU kernel refuses it with a status; a GPU kernel cannot stop, so its loss is NaN and
    # it reports the CPU's status in the status word (the run raises the CPU's KernelError)
    pred, label = _logits(np.float32, (4, 3)), np.array([0, 3, 1, 2], np.int32)
    node = node_of("cross_entropy", [pred, label], reduction="none")
    (loss,), word = emulate(family, node, [pred, label], status=True)
    assert np.isnan(loss[1]) and np.isfinite(loss[[0, 2, 3]]).all()
    assert decode(word) == (0, STATUS["INDEX_OUT_OF_RANGE"])


@pytest.mark.nvrtc
def test_mean_of_no_samples_is_nan():
    pred, label = np.zeros((0, 3), np.float32), np.zeros((0,), np.int32)
    node = node_of("cross_entropy", [pred, label])
    assert np.isnan(emulate(family, node, [pred, label])[0])


def test_geometry():
    x = np.zeros((1000, 64), np.float32)
    launch, _, (step,) = cuda_launch(family, node_of("softmax", [x], axis=1))
    assert step.block == (32, 8, 1) and launch.workspace == 0
    _, _, (step,) = cuda_launch(family, node_of("softmax", [x], axis=0))
    assert step.block == (1, 256, 1)  # a thread per column: loads coalesce
    label = np.zeros(1000, np.int32)
    launch, _, steps = cuda_launch(family, node_of("cross_entropy", [x, label]))
    assert [s.entry for s in steps] == ["mg_cross_entropy_f32", "mg_cross_entropy_f32_total"]
    assert launch.workspace == 8 * 1000
    launch, _, steps = cuda_launch(family, node_of("cross_entropy", [x, label],
                                                   reduction="none"))
    assert len(steps) == 1 and launch.workspace == 0


@pytest.mark.cuda
@pytest.mark.parametrize("op", ("softmax", "log_softmax"))
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,axis", [((300, 1000), 1), ((64, 10), 1), ((50, 70), 0),
                                         ((4, 9000), 1)])
def test_softmax_on_device(op, dtype, shape, axis):
    x = _logits(dtype, shape)
    node = node_of(op, [x], axis=axis)
    assert_close(run_on_device(node, [x])[0], cpu_result(node, [x])[0], rtol=1e-5, atol=1e-7)


@pytest.mark.cuda
@pytest.mark.parametrize("reduction", ("none", "mean"))
@pytest.mark.parametrize("with_logits", (True, False))
@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_on_device(reduction, with_logits, dtype):
    pred, label = _ce_case(dtype, (512, 100), np.int64, with_logits)
    attrs = {"with_logits": with_logits, "label_smooth": 0.1, "reduction": reduction}
    node = node_of("cross_entropy", [pred, label], **attrs)
    loss = cpu_result(node, [pred, label])[0]
    assert_close(run_on_device(node, [pred, label])[0], loss, rtol=1e-5)
    dloss = np.ones_like(loss)
    back = node_of("cross_entropy_backward", [pred, label, dloss], **attrs)
    assert_close(run_on_device(back, [pred, label, dloss])[0],
                 cpu_result(back, [pred, label, dloss])[0], rtol=1e-5, atol=1e-8)
