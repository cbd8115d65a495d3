"""Every way the CPU can run a convolution or a product (``OpImpl.candidates``, among which
``compile(tune=...)`` chooses) gives the right values: each candidate launch of a one-node graph
runs through the backend's launcher on the same inputs, against a NumPy reference; the rules'
way is one of the candidates, the candidates' ways are distinct, and one path on different
thread counts gives the same bits."""

import numpy as np
import pytest
from test_conv import backward_data_ref, backward_filter_ref, conv_ref
from threadpoolctl import threadpool_limits
from threads import fresh_thread_openmp

import mgegraph as mg
from mgegraph._kernels import blas_select, parallel
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering.threads import thread_choices
from mgegraph.backend import get_backend
from mgegraph.host_memory import aligned_empty
from mgegraph.ops.conv import pack_weight_array

CPU = get_backend("cpu")


@pytest.fixture(autouse=True, scope="module")
def blas_as_chosen():
    """The BLAS routed as mgegraph routes it at start (blas_select.select): whether the GEMM
    kernels split a GEMM among their own threads (blas_table.splits_gemms) decides the bits of
    the BLAS ways, and a test that routes the BLAS anew may leave it otherwise."""
    blas_select.select(blas_select.choice().name)


@pytest.fixture(autouse=True)
def fresh_threads():
    with fresh_thread_openmp():
        yield


def rng():
    """The same inputs whatever tests ran before (the bits compared depend on them)."""
    return np.random.default_rng(11)


def node_of(op, arrays, **attrs):
    """A node of ``op`` over graph inputs shaped like ``arrays``."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return g.add_node(op, xs, attrs)


def aligned(array) -> np.ndarray:
    copy = aligned_empty(array.shape, array.dtype)
    copy[...] = array
    return copy


def run_way(node, launch, arrays, in_place=False) -> np.ndarray:
    """The node's output by ``launch``: output and workspace start as NaN bytes, so an element
    left unwritten, or a workspace cell read before it is written, shows. ``in_place``: the
    output is input 0's buffer (addmm, as the memory planner gives it)."""
    impl = CPU.impl(node.op.name)
    kernel = CPU.kernel(node.op.name, impl.dispatch_dtype(node))
    inputs = [aligned(a) for a in arrays]
    out = inputs[0] if in_place else aligned_empty(node.outputs[0].shape, node.outputs[0].dtype)
    if not in_place:
        out.view(np.uint8)[...] = 0xFF
    workspace = ()
    if launch.workspace:
        workspace = (aligned_empty((launch.workspace,), np.uint8),)
        workspace[0][...] = 0xFF
    status = CPU.launcher(kernel, launch, len(inputs), False)((*inputs, out, *workspace))
    assert status == 0, f"{node.op.name} by {launch.path!r}: kernel status {status}"
    return out


def check_ways(node, arrays, expected, scale, in_place=False) -> dict[str, np.ndarray]:
    """Run every candidate of ``node`` and check it; ``scale`` bounds the sum of a result's
    products' magnitudes (a float's rounding error is a few ulps of it)."""
    impl = CPU.impl(node.op.name)
    rules, candidates = impl.lower(node), impl.candidates(node)
    paths = [c.path for c in candidates]
    assert len(set(paths)) == len(paths), f"a way offered twice: {paths}"
    assert rules.path in paths, f"the rules' {rules.path!r} is not among {paths}"
    assert candidates[paths.index(rules.path)] == rules  # that way's launch is the rules' one
    float32 = node.outputs[0].dtype == np.float32
    tol = {"rtol": 1e-4, "atol": 1e-6 * scale} if float32 else {"rtol": 1e-10,
                                                                 "atol": 1e-13 * scale}
    outs = {c.path: run_way(node, c, arrays, in_place) for c in candidates}
    for path, out in outs.items():
        np.testing.assert_allclose(out, expected, **tol, err_msg=f"{node.op.name} by {path}")
    same_bits_on_every_thread_count(outs)
    return outs


class ThreadBitsDiffer(AssertionError):
    """One path gave other bits on another thread count."""


# The paths that are the package's own kernels: the same bits on every thread count, each
# output element summed by one thread in one order. The others cut their GEMMs by the threads
# (Winograd's tile blocks, backward filter's channels, the BLAS path's column blocks), and the
# BLAS rounds an element by the call's shape: within the tolerance of every way, not bitwise.
BITWISE_ACROSS_THREADS = {"blocked", "gather", "gather packed", "tiles"}


def same_bits_on_every_thread_count(outs: dict[str, np.ndarray]) -> None:
    """The ways of one of the package's own tile paths ("gather" of "gather, 2 threads") on
    different thread counts give the same bits: a measured choice of threads changes no bit
    of their results (mgegraph/tuning.py)."""
    by_path: dict[str, list[str]] = {}
    for path in outs:
        by_path.setdefault(path.split(", ")[0], []).append(path)
    for name, same in by_path.items():
        if name not in BITWISE_ACROSS_THREADS:
            continue
        for other in same[1:]:
            if not np.array_equal(outs[other], outs[same[0]], equal_nan=True):
                differ = np.count_nonzero(outs[other] != outs[same[0]])
                raise ThreadBitsDiffer(f"{other!r} differs from {same[0]!r} in {differ} of "
                                       f"{outs[other].size} elements")


def test_thread_choices_run_from_one_to_every_thread():
    # on more than one thread (this machine's 2 cores) the same-bits checks compare counts
    choices = thread_choices()
    assert choices[0] == 1 and choices[-1] == parallel.max_threads()
    assert list(choices) == sorted(set(choices))


# -- convolutions ---------------------------------------------------------------------------------
def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_attrs(stride, padding, dilation, groups):
    return {"stride": pair(stride), "padding": pair(padding), "dilation": pair(dilation),
            "groups": groups}


CONV_CASES = [
    # x shape, weight shape, stride, padding, dilation, groups
    ((1, 16, 12, 12), (16, 16, 3, 3), 1, 1, 1, 1),
    ((3, 16, 12, 12), (16, 16, 3, 3), 1, 1, 1, 1),
    ((1, 64, 14, 14), (64, 64, 3, 3), 1, 1, 1, 1),
    ((3, 64, 14, 14), (64, 64, 3, 3), 1, 1, 1, 1),
    ((1, 3, 32, 32), (16, 3, 7, 7), 2, 3, 1, 1),       # a stem: 7x7 stride 2 from RGB
    ((2, 8, 13, 13), (16, 8, 3, 3), 2, 1, 1, 1),       # 3x3 stride 2
    ((2, 8, 7, 9), (12, 8, 1, 1), 1, 0, 1, 1),         # 1x1: the direct GEMM only
    ((2, 8, 9, 9), (12, 8, 1, 1), 2, 0, 1, 1),         # 1x1 stride 2
    ((2, 8, 10, 10), (12, 4, 3, 3), 1, 1, 1, 2),       # groups
    ((2, 8, 10, 10), (8, 1, 3, 3), 1, 1, 1, 8),        # depthwise
    ((2, 6, 12, 12), (8, 6, 3, 3), 1, 2, 2, 1),        # dilated
    ((2, 6, 11, 11), (10, 6, 5, 5), 1, 2, 1, 1),       # 5x5
    ((3, 32, 2, 2), (32, 32, 3, 3), 1, 1, 1, 1),       # a tiny plane
]
CONV_IDS = [f"{xs}{ws}s{s}p{p}d{d}g{g}" for xs, ws, s, p, d, g in CONV_CASES]


def out_hw(xs, ws, stride, padding, dilation):
    return tuple((h + 2 * p - d * (k - 1) - 1) // s + 1 for h, k, s, p, d in
                 zip(xs[2:], ws[2:], pair(stride), pair(padding), pair(dilation)))


def magnitude(a, b, terms) -> float:
    return float(np.abs(a).max() * np.abs(b).max() * terms) + 1.0


def conv_problem(op, case, dtype, bias_relu=False):
    """(node, its input arrays, the float64 reference, the magnitude of its sums) of ``op`` on
    the convolution ``case``; ``bias_relu``: conv2d's with a bias and relu."""
    xs, ws, stride, padding, dilation, groups = case
    conv, r = conv_attrs(stride, padding, dilation, groups), rng()
    x, w = r.standard_normal(xs).astype(dtype), r.standard_normal(ws).astype(dtype)
    dy = r.standard_normal((xs[0], ws[0], *out_hw(xs, ws, stride, padding, dilation)))
    dy = dy.astype(dtype)
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    if op == "conv2d_backward_data":
        ref = backward_data_ref(w64, dy64, xs[2:], stride, padding, dilation, groups)
        node = node_of(op, (w, dy), input_hw=xs[2:], **conv)
        return node, (w, dy), ref, magnitude(w, dy, ws[0] // groups * ws[2] * ws[3])
    if op == "conv2d_backward_filter":
        ref = backward_filter_ref(x64, dy64, ws[2:], stride, padding, dilation, groups)
        node = node_of(op, (x, dy), kernel_size=ws[2:], **conv)
        return node, (x, dy), ref, magnitude(x, dy, xs[0] * dy.shape[2] * dy.shape[3])
    b = r.standard_normal(ws[0]).astype(dtype) if bias_relu else None
    ref = conv_ref(x64, w64, b, stride, padding, dilation, groups)
    arrays = (x, w) if b is None else (x, w, b)
    node = node_of(op, arrays, **conv, activation="relu" if bias_relu else "none")
    return (node, arrays, np.maximum(ref, 0) if bias_relu else ref,
            magnitude(x, w, ws[1] * ws[2] * ws[3]) + (0 if b is None else np.abs(b).max()))


def conv_params(ops, indices=None):
    indices = range(len(CONV_CASES)) if indices is None else indices
    return [pytest.param(op, CONV_CASES[i], id=f"{op}-{CONV_IDS[i]}") for op in ops
            for i in indices]


def test_a_1x1_convolution_on_its_own_input_has_the_direct_and_pointwise_paths_only():
    # stride 1, no padding: the input is its own im2col matrix (the direct GEMM), or the
    # pointwise tiles read it in place
    outs = check_ways(*conv_problem("conv2d", CONV_CASES[6], np.float32))
    assert {path.split(", ")[0] for path in outs} == {"direct", "pointwise"}


@pytest.mark.parametrize("bias_relu", [False, True], ids=["plain", "bias-relu"])
@pytest.mark.parametrize("op,case", conv_params(["conv2d"]))
def test_every_way_of_conv2d(op, case, bias_relu):
    check_ways(*conv_problem(op, case, np.float32, bias_relu))


@pytest.mark.parametrize("op,case", conv_params(["conv2d_backward_data",
                                                 "conv2d_backward_filter"]))
def test_every_way_of_the_backward_convolutions(op, case):
    check_ways(*conv_problem(op, case, np.float32))


@pytest.mark.parametrize("op,case", conv_params(["conv2d", "conv2d_backward_data",
                                                 "conv2d_backward_filter"], (1, 5, 8, 11)))
def test_every_way_in_float64(op, case):
    outs = check_ways(*conv_problem(op, case, np.float64))
    assert not any(p.startswith(("winograd", "blocked", "gather")) for p in outs)  # float32's


PACKED_CASES = [
    # x shape, out channels, kernel, stride, padding
    ((1, 3, 32, 32), 64, 7, 2, 3),
    ((2, 32, 14, 14), 64, 3, 2, 1),
    ((1, 40, 7, 7), 72, 3, 1, 1),   # channels padded up to a whole block
    ((2, 64, 8, 8), 32, 1, 2, 0),
]


@pytest.mark.parametrize("bias_relu", [False, True], ids=["plain", "bias-relu"])
@pytest.mark.parametrize("block", K.packed_channels(K.blocked_isas()[-1]))
@pytest.mark.parametrize("case", PACKED_CASES, ids=[str(c) for c in PACKED_CASES])
def test_every_way_of_conv2d_packed(case, block, bias_relu):
    (xs, oc, k, stride, padding), r = case, rng()
    x = r.standard_normal(xs).astype(np.float32)
    w = r.standard_normal((oc, xs[1], k, k)).astype(np.float32)
    b = r.standard_normal(oc).astype(np.float32)
    arrays = (x, pack_weight_array(w, 1, block), *((b,) if bias_relu else ()))
    node = node_of("conv2d_packed", arrays, **conv_attrs(stride, padding, 1, 1),
                   activation="relu" if bias_relu else "none", out_channels=oc,
                   kernel_size=(k, k))
    ref = conv_ref(x.astype(np.float64), w.astype(np.float64), b if bias_relu else None, stride,
                   padding, 1, 1)
    outs = check_ways(node, arrays, np.maximum(ref, 0) if bias_relu else ref,
                      magnitude(x, w, xs[1] * k * k))
    assert sorted(outs) == sorted(f"gather packed, {t} thread{'s' * (t > 1)}"
                                  for t in thread_choices())


def test_the_prepack_pass_makes_the_conv2d_packed_built_above():
    # what a frozen inference plan runs: one of the launches the packed cases check
    r = rng()
    x, w = r.standard_normal((2, 32, 14, 14)), r.standard_normal((64, 32, 3, 3))
    x, w = x.astype(np.float32), w.astype(np.float32)
    g = mg.Graph()
    y = g.add_node("conv2d", (g.input("x", x.shape, x.dtype), g.param("w", w)),
                   conv_attrs(2, 1, 1, 1)).outputs[0]
    plan = mg.compile([y], optimize=1, freeze=True)
    packed = [i for i in plan.instructions if i.op == "conv2d_packed"]
    if not packed:
        pytest.skip("the prepack pass packs no weight on this CPU")
    (ins,) = packed
    block = plan.slots[ins.inputs[1]].type.shape[-1]
    node = node_of("conv2d_packed", (x, pack_weight_array(w, 1, block)), **conv_attrs(2, 1, 1, 1),
                   out_channels=64, kernel_size=(3, 3))
    assert (ins.ints, ins.choice.path) in {(c.ints, c.path) for c in
                                           CPU.impl("conv2d_packed").candidates(node)}
    (out,) = plan.run({"x": x})
    np.testing.assert_allclose(out, conv_ref(x.astype(np.float64), w.astype(np.float64), None,
                                             2, 1, 1, 1), rtol=1e-4, atol=1e-4)


# -- products -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias_relu", [False, True], ids=["plain", "bias-relu"])
@pytest.mark.parametrize("m,n,k", [(1, 70, 300), (1, 96, 3000), (3, 70, 300), (8, 96, 200),
                                   (64, 70, 300), (64, 130, 40)])
def test_every_way_of_linear(m, n, k, bias_relu, dtype):
    r = rng()
    x = r.standard_normal((m, k)).astype(dtype)
    w, b = r.standard_normal((n, k)).astype(dtype), r.standard_normal(n).astype(dtype)
    arrays = (x, w, b) if bias_relu else (x, w)
    node = node_of("linear", arrays, activation="relu" if bias_relu else "none")
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    ref = np.maximum(ref + b, 0) if bias_relu else ref
    check_ways(node, arrays, ref, magnitude(x, w, k))


MATMUL_CASES = [
    # a shape, b shape, transpose_a, transpose_b
    ((1, 3000), (3000, 70), False, False),     # a single row: the BLAS split over k too
    ((5, 300), (300, 96), False, False),
    ((64, 200), (200, 130), False, False),
    ((64, 200), (130, 200), False, True),
    ((200, 64), (200, 130), True, False),
    ((4, 6, 50), (4, 50, 70), False, False),   # batched
    ((3, 8, 40), (40, 66), False, False),      # batches sharing b: one tall GEMM
    ((2, 1, 40, 12), (3, 70, 40), True, True),  # broadcast batches, both transposed
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", [pytest.param(c, id=str(c)) for c in MATMUL_CASES])
def test_every_way_of_matmul(case, dtype):
    (a_shape, b_shape, ta, tb), r = case, rng()
    a = r.standard_normal(a_shape).astype(dtype)
    b = r.standard_normal(b_shape).astype(dtype)
    node = node_of("matmul", (a, b), transpose_a=ta, transpose_b=tb)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.matmul(np.swapaxes(a64, -1, -2) if ta else a64, np.swapaxes(b64, -1, -2) if tb
                    else b64)
    check_ways(node, (a, b), ref, magnitude(a, b, a_shape[-2] if ta else a_shape[-1]))


def test_the_rules_way_is_a_candidate_whatever_the_threads():
    a, b = np.zeros((64, 500), np.float32), np.zeros((500, 100), np.float32)
    node, impl = node_of("matmul", (a, b), transpose_a=False, transpose_b=False), CPU.impl("matmul")
    with threadpool_limits(limits=4, user_api="openmp"):  # a 4-core machine's count
        if parallel.max_threads() != 4:
            pytest.skip("OpenMP's thread count could not be set")
        assert impl.lower(node).path in [c.path for c in impl.candidates(node)]


def test_integer_matmul_has_one_way():
    r = rng()
    a = r.integers(-5, 6, (6, 40)).astype(np.int32)
    b = r.integers(-5, 6, (40, 70)).astype(np.int32)
    node = node_of("matmul", (a, b), transpose_a=False, transpose_b=False)
    impl = CPU.impl("matmul")
    (only,) = impl.candidates(node)
    assert only == impl.lower(node) and only.path == ""
    np.testing.assert_array_equal(run_way(node, only, (a, b)), a @ b)


@pytest.mark.parametrize("in_place", [False, True], ids=["apart", "in-place"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n,k,tb,scaled", [(1, 70, 3000, False, False),
                                             (8, 70, 30, False, True),
                                             (64, 130, 200, True, False),
                                             (40, 96, 64, False, True)])
def test_every_way_of_addmm(m, n, k, tb, scaled, dtype, in_place):
    r = rng()
    c = r.standard_normal((m, n)).astype(dtype)
    a = r.standard_normal((m, k)).astype(dtype)
    b = r.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    scale = np.full((1,), -0.5, dtype)
    arrays = (c, a, b, scale) if scaled else (c, a, b)
    node = node_of("addmm", arrays, transpose_a=False, transpose_b=tb, alpha=0.25)
    product = a.astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    ref = c + 0.25 * (-0.5 if scaled else 1.0) * product
    check_ways(node, arrays, ref, magnitude(a, b, k) + np.abs(c).max(), in_place)
