"""csrc_cuda/quantized.cu(h) and mgegraph/cuda/kernels/quantized.py: NVRTC compiles the add and
the rendered conv and linear kernels (dp4a in their PTX), and the plain host emulation
(host_emu.h) gives tests/quant_reference.py's integers bit for bit: int8 and uint8 inputs,
per-channel weights with nonzero zero points, K not a multiple of 4, bias, relu, int32 results,
saturation at both ends (of the output and of the int32 accumulator), strides, dilation,
groups and depthwise, broadcasting adds; and a whole quantized plan at its planned offsets."""
import re

import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    cpu_result,
    emulate,
    emulate_rendered,
    nvrtc_compile,
    ptx_of,
    rendered_launch,
)
from quant_reference import quantized_add, quantized_conv2d, quantized_linear

import mgegraph as mg
from mgegraph.backend import unregister_backend
from mgegraph.cuda import CSRC
from mgegraph.cuda.backend import CudaBackend
from mgegraph.cuda.kernels import quantized as family
from mgegraph.cuda.render import module
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.kernel_abi import quantized as abi
from mgegraph.ops import quantized as Q
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import MAX_WINDOW

RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def _ints(dtype, shape, rng) -> np.ndarray:
    lo, hi = RANGES[np.dtype(dtype).name]
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _node(op, arrays, quants, **attrs):
    """The node of ``op`` over graph inputs shaped like ``arrays`` with quantizations
    ``quants`` (None for a plain int32 bias)."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype, q) for i, (a, q) in enumerate(zip(arrays, quants))]
    return getattr(Q, op)(*xs, **attrs).node


def _emulated(node, arrays) -> np.ndarray:
    """The node's output by its CUDA kernel on the host: a rendered kernel's text (its tables
    baked in) or quantized.cu's add."""
    if node.op.name == "quantized_add":
        return emulate(family, node, arrays, fibers=False)[0]
    return emulate_rendered(family, node, arrays)


def _same(node, arrays, want, cpu=True) -> np.ndarray:
    """The emulated CUDA kernel's output, asserted equal to ``want`` (the reference's) and to
    the CPU kernel's."""
    got = _emulated(node, arrays)
    np.testing.assert_array_equal(got, want)
    if cpu:
        np.testing.assert_array_equal(cpu_result(node, arrays)[0], want)
    return got


def _reference(fn, node, arrays):
    quants = [v.type.quant for v in node.inputs]
    bias = arrays[2] if len(arrays) == 3 else None
    return fn(arrays[0], quants[0], arrays[1], quants[1], bias, **node.attr)


def _conv_case(rng, x_dtype, w_dtype, *, cin=3, cout=5, size=(7, 6), k=(3, 3), groups=1,
               per_channel_w=True, bias=True):
    x = _ints(x_dtype, (2, cin, *size), rng)
    w = _ints(w_dtype, (cout, cin // groups, *k), rng)
    zx = 3 if x_dtype == np.int8 else 131
    xq = per_tensor(0.05, zx)
    if per_channel_w:
        zws = rng.integers(-5, 6, cout) + (0 if w_dtype == np.int8 else 128)
        wq = per_channel(rng.uniform(0.002, 0.02, cout), zws, 0)
    else:
        wq = per_tensor(0.01, 0 if w_dtype == np.int8 else 120)
    arrays, quants = [x, w], [xq, wq]
    if bias:
        arrays.append(rng.integers(-3000, 3000, cout).astype(np.int32))
        quants.append(None)
    return arrays, quants


CONV_GEOMETRIES = [
    {"stride": 2, "padding": 1},
    {"padding": (2, 1), "dilation": 2},
    {"stride": (1, 2), "padding": 0, "dilation": (2, 1)},
]


@pytest.mark.parametrize("x_dtype", (np.int8, np.uint8))
@pytest.mark.parametrize("w_dtype", (np.int8, np.uint8))
@pytest.mark.parametrize("geometry", CONV_GEOMETRIES)
def test_conv_is_the_reference(x_dtype, w_dtype, geometry):
    rng = np.random.default_rng(0)
    arrays, quants = _conv_case(rng, x_dtype, w_dtype)  # K = 27: not a multiple of 4
    node = _node("quantized_conv2d", arrays, quants, **geometry, out_scale=0.4,
                 out_zero_point=-7, relu=True)
    _same(node, arrays, _reference(quantized_conv2d, node, arrays))


@pytest.mark.parametrize("out", [
    {"out_dtype": "uint8", "out_scale": 0.3, "out_zero_point": 128},
    {"out_dtype": "int8", "out_scale": 0.01, "out_zero_point": 0},   # saturates both ways
    {"out_dtype": "int32"},
])
def test_conv_outputs_groups_and_depthwise(out):
    rng = np.random.default_rng(1)
    for groups, cin, cout in ((2, 4, 6), (6, 6, 6)):  # grouped, then depthwise
        arrays, quants = _conv_case(rng, np.uint8, np.int8, cin=cin, cout=cout, groups=groups)
        node = _node("quantized_conv2d", arrays, quants, padding=1, stride=2, groups=groups,
                     **out)
        want = _same(node, arrays, _reference(quantized_conv2d, node, arrays))
        if out["out_dtype"] == "int8":
            assert want.min() == -128 and want.max() == 127


def test_conv_per_tensor_weights_without_bias():
    rng = np.random.default_rng(2)
    arrays, quants = _conv_case(rng, np.int8, np.uint8, per_channel_w=False, bias=False)
    node = _node("quantized_conv2d", arrays, quants, padding=1, out_scale=0.2)
    _same(node, arrays, _reference(quantized_conv2d, node, arrays))


def test_wide_layers_take_their_tables_from_the_text():
    """300 per-channel multipliers and zero points: far beyond MgArgs' 8 floats."""
    rng = np.random.default_rng(3)
    arrays, quants = _conv_case(rng, np.int8, np.int8, cin=8, cout=300, size=(3, 3), k=(1, 1))
    node = _node("quantized_conv2d", arrays, quants, out_scale=0.05, out_zero_point=2)
    _same(node, arrays, _reference(quantized_conv2d, node, arrays))


def _linear_case(rng, x_dtype, k, shape=(2, 3), n=7):
    x = _ints(x_dtype, (*shape, k), rng)
    w = _ints(np.int8, (n, k), rng)
    xq = per_tensor(0.1, 128 if x_dtype == np.uint8 else -4)
    wq = per_channel(rng.uniform(0.001, 0.01, n), rng.integers(-3, 4, n), 0)
    return [x, w, rng.integers(-500, 500, n).astype(np.int32)], [xq, wq, None]


@pytest.mark.parametrize("x_dtype", (np.int8, np.uint8))
@pytest.mark.parametrize("k", (13, 16))  # bytes one at a time; whole words
@pytest.mark.parametrize("out", [
    {"out_dtype": "int8", "out_scale": 0.2, "out_zero_point": 5, "relu": True},
    {"out_dtype": "uint8", "out_scale": 0.05, "out_zero_point": 100},
    {"out_dtype": "int32"},
])
def test_linear_is_the_reference(x_dtype, k, out):
    arrays, quants = _linear_case(np.random.default_rng(4), x_dtype, k)
    node = _node("quantized_linear", arrays, quants, **out)
    _same(node, arrays, _reference(quantized_linear, node, arrays))


def _long_sums():
    """The longest window the rule takes, K = 33025. Row 0 of x is its zero point: every centred
    product is 0, while the stored bytes' products sum to 33025 * (-128 * -128). Row 1 gives
    centred sums of -128 * 255 * K and 255 * 255 * K, the second just inside int32, which its
    bias pushes past the end: the bias is added modulo 2^32."""
    k = MAX_WINDOW
    x = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8)])
    w = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8)])
    bias = np.array([-40000, 40000], np.int32)
    quants = [per_tensor(0.1, -128), per_channel([0.01, 0.01], [0, -128], 0), None]
    return _node("quantized_linear", [x, w, bias], quants, out_dtype="int32"), [x, w, bias]


def test_long_sums_are_exact_and_the_bias_wraps_as_the_reference():
    """The partial sums move to int64 every chunk, so none wraps; the bias adds modulo 2^32."""
    node, arrays = _long_sums()
    got = _same(node, arrays, _reference(quantized_linear, node, arrays), cpu=False)
    sums = np.array([[0, 0], [-128 * 255 * MAX_WINDOW, 255 * 255 * MAX_WINDOW]], np.int64)
    wrapped = (sums + arrays[2]).astype(np.uint32).view(np.int32)
    assert wrapped[1, 1] != sums[1, 1] + arrays[2][1]  # past 2^31 - 1: wrapped
    np.testing.assert_array_equal(got, wrapped)


def test_the_cpu_kernel_gives_the_long_sums_too():
    node, arrays = _long_sums()
    np.testing.assert_array_equal(cpu_result(node, arrays)[0],
                                  _reference(quantized_linear, node, arrays))


@pytest.mark.parametrize("shapes", [((3, 1, 5), (4, 5)), ((2, 3), (2, 3)), ((1,), (2, 7))])
@pytest.mark.parametrize("dtypes", [(np.int8, np.uint8, "uint8"), (np.uint8, np.int8, "int8")])
@pytest.mark.parametrize("relu", (False, True))
def test_add_is_the_reference(shapes, dtypes, relu):
    rng = np.random.default_rng(5)
    a, b = _ints(dtypes[0], shapes[0], rng), _ints(dtypes[1], shapes[1], rng)
    # scale ratios of 0.5 make halves: rint's ties go to even
    quants = [per_tensor(0.5, 7), per_tensor(0.25, 130 if dtypes[1] == np.uint8 else -2)]
    node = _node("quantized_add", [a, b], quants, out_dtype=dtypes[2], out_scale=1.0,
                 out_zero_point=3 if dtypes[2] == "int8" else 128, relu=relu)
    _same(node, [a, b], quantized_add(a, quants[0], b, quants[1], **node.attr))


def test_add_saturates_both_ways():
    a = np.array([[-128, 127, 0, 1]], np.int8)
    b = np.array([[-128, 127, 0, -1]], np.int8)
    quants = [per_tensor(1.0), per_tensor(1.0)]
    node = _node("quantized_add", [a, b], quants, out_scale=0.5)
    got = _same(node, [a, b], quantized_add(a, quants[0], b, quants[1], **node.attr))
    assert got.tolist() == [[-128, 127, 0, 0]]


def test_equal_tables_share_a_kernel_and_different_ones_do_not():
    rng = np.random.default_rng(6)
    arrays, quants = _conv_case(rng, np.int8, np.int8)
    texts = []
    for out_scale in (0.4, 0.4, 0.5):
        node = _node("quantized_conv2d", arrays, quants, padding=1, out_scale=out_scale)
        texts.append(rendered_launch(family, node)[1])
    assert texts[0] == texts[1] != texts[2]


@pytest.mark.parametrize("source, block", [("quantized.cuh", "QCONV_FIELDS"),
                                           ("quantized.cu", "QADD_FIELDS")])
def test_the_kernels_read_the_cpus_parameter_blocks(source, block):
    """The field list each kernel's comment gives (the order its indices follow) is the shared
    block's."""
    text = (CSRC / source).read_text()
    listed = re.search(r"// ints: [^\[]*\[([^\]]*)\]", text).group(1)
    names = [re.sub(r"\[.*", "", f.strip(" /\n")) for f in listed.split(",")]
    assert tuple(names[:len(abi.FIELDS[block])]) == abi.FIELDS[block]


def test_the_storage_codes_are_the_cpus():
    text = (CSRC / "quantized.cuh").read_text()
    codes = {k.lower(): int(v) for k, v in re.findall(r"#define MG_Q_(INT8|UINT8|INT32) (\d+)",
                                                      text)}
    assert codes == abi.CODES


# -- NVRTC ------------------------------------------------------------------------------------
def _rendered_module() -> str:
    """The plan module of one conv and one linear kernel, as the runtime compiles it."""
    rng = np.random.default_rng(7)
    texts = []
    for op, (arrays, quants) in (("quantized_conv2d", _conv_case(rng, np.uint8, np.int8)),
                                 ("quantized_linear", _linear_case(rng, np.int8, 13))):
        texts.append(rendered_launch(family, _node(op, arrays, quants, out_scale=0.1))[1])
    return module(texts)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_the_add_compiles(arch):
    result, log, _ = nvrtc_compile("quantized.cu", arch)
    assert result == 0, log


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_rendered_conv_and_linear_compile_to_dp4a(arch):
    from mgegraph.cuda.nvrtc import BASE_OPTIONS, EXACT_OPTIONS, nvrtc_compile
    compiled = nvrtc_compile(_rendered_module(), "rendered.cu", (
        *BASE_OPTIONS, f"-I{CSRC.resolve()}", f"--gpu-architecture={arch}", *EXACT_OPTIONS))
    assert "warning" not in compiled.log.lower(), compiled.log
    assert "dp4a.s32.s32" in compiled.ptx
    assert ".shared" not in compiled.ptx and "fma.rn.f32" not in compiled.ptx


@pytest.mark.nvrtc
def test_the_add_has_no_fused_multiply_add():
    ptx = ptx_of(nvrtc_compile("quantized.cu", "sm_90")[2])
    assert "fma.rn.f32" not in ptx and "mul.rn.f32" in ptx


# -- a whole plan -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-quantized-plan", lambda: CudaBackend(device=None))
    yield "cuda-quantized-plan"
    unregister_backend("cuda-quantized-plan")


def test_a_quantized_plan_runs_at_its_offsets(planner):
    """quantize, conv (per-channel weights, bias, relu), add, linear, dequantize: planned by
    the CUDA backend and run on the host, every step the reference's."""
    from kernel_checks import run_plan_emulated
    rng = np.random.default_rng(8)
    (_, w, bias), (_, wq, _) = _conv_case(rng, np.int8, np.int8, cin=4, cout=6)
    wl = _ints(np.int8, (3, 6 * 4 * 3), rng)
    wlq = per_tensor(0.02, 1)
    g = mg.Graph()
    x = g.input("x", (2, 4, 7, 6), "float32")
    wv, wlv = g.input("w", w.shape, "int8", wq), g.input("wl", wl.shape, "int8", wlq)
    xq = quantize(x, 0.05, 3, "int8")
    h = Q.quantized_conv2d(xq, wv, g.input("b", bias.shape, "int32"), padding=1, stride=2,
                           out_scale=0.3, out_zero_point=-5, relu=True)
    s = Q.quantized_add(h, h, out_scale=0.5, out_zero_point=2)
    y = Q.quantized_linear(s.reshape((2, -1)), wlv, out_dtype="int32")
    out = dequantize(y, "float32")
    feeds = {"x": rng.standard_normal((2, 4, 7, 6)).astype(np.float32), "w": w, "b": bias,
             "wl": wl}
    plan = mg.compile([out], device=planner, optimize=0)
    (got,) = run_plan_emulated(plan, CudaBackend(device=None), feeds)

    xi = np.clip(np.rint(feeds["x"] / np.float32(0.05)) + 3, -128, 127).astype(np.int8)
    hi = quantized_conv2d(xi, xq.type.quant, w, wq, bias, **h.node.attr)
    si = quantized_add(hi, h.type.quant, hi, h.type.quant, **s.node.attr)
    yi = quantized_linear(si.reshape(2, -1), s.type.quant, wl, wlq, **y.node.attr)
    np.testing.assert_array_equal(got, yi.astype(np.float32) * np.float32(y.type.quant.scale))
    np.testing.assert_array_equal(got, mg.compile([out], optimize=0).run(feeds)[0])
