"""The CUDA kernels of the int8 transposed convolution and batched matmul (csrc_cuda/
quantized.cuh's mg_qconv_transpose2d and mg_qbatch_matmul, rendered per instruction by
mgegraph/cuda/kernels/quantized.py): NVRTC compiles them to dp4a; host emulation (host_emu.h)
gives tests/quant_reference.py's integers and the CPU kernel's bit for bit on odd sizes:
strides 1-3, padding, output_padding, dilation, groups and depthwise, zero points, int8 and
uint8 operands, per-tensor and per-channel weights, bias or none, int8, uint8 and int32 results,
relu and saturation, a broadcast or batched a and b, the longest sums the rules allow; whole
plans at their planned offsets; and, on a GPU, the device's integers against the CPU's."""
import math

import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    cpu_result,
    emulate_rendered,
    rendered_launch,
    run_on_device,
    run_plan_emulated,
)
from quant_reference import CONV_TRANSPOSE_CASES, quantized_batch_matmul, quantized_conv_transpose2d

import mgegraph as mg
from mgegraph.backend import unregister_backend
from mgegraph.cuda.backend import CudaBackend
from mgegraph.cuda.kernels import quantized as family
from mgegraph.cuda.render import module
from mgegraph.ir.errors import OpError
from mgegraph.ir.quant import QuantParams, per_tensor
from mgegraph.ops import quantized as Q
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import MAX_WINDOW

RANGES = {"int8": (-128, 127), "uint8": (0, 255)}
REFERENCES = {"quantized_conv_transpose2d": quantized_conv_transpose2d,
              "quantized_batch_matmul": quantized_batch_matmul}


def _ints(rng, dtype, shape) -> np.ndarray:
    lo, hi = RANGES[np.dtype(dtype).name]
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _zero_point(rng, dtype) -> int:
    lo, hi = RANGES[np.dtype(dtype).name]
    return int(rng.integers(lo + 20, hi - 20))


def _requant(out_dtype: str, relu: bool = False, out_scale: float = 0.9) -> dict:
    if out_dtype == "int32":
        return {"out_dtype": "int32"}
    return {"out_dtype": out_dtype, "out_scale": out_scale,
            "out_zero_point": {"int8": -3, "uint8": 117}[out_dtype], "relu": relu}


def _node(op, arrays, quants, **attrs):
    """The node of ``op`` over graph inputs x0, x1, ... shaped like ``arrays``, quantized by
    ``quants`` (None: a plain int32 bias)."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype, q) for i, (a, q) in enumerate(zip(arrays, quants))]
    return getattr(Q, op)(*xs, **attrs).node


def _reference(node, arrays) -> np.ndarray:
    quants = [v.type.quant for v in node.inputs]
    bias = arrays[2] if len(arrays) == 3 else None
    return REFERENCES[node.op.name](arrays[0], quants[0], arrays[1], quants[1], bias,
                                    **node.attr)


def _same(node, arrays, cpu=True) -> np.ndarray:
    """The emulated CUDA kernel's output, asserted equal to the reference's and the CPU
    kernel's, and returned."""
    want = _reference(node, arrays)
    got = emulate_rendered(family, node, arrays)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if cpu:
        np.testing.assert_array_equal(cpu_result(node, arrays)[0], want)
    return got


def _weight_quant(rng, dtype, channels: int, axis: int, per_channel: bool) -> QuantParams:
    if not per_channel:
        return per_tensor(0.01, _zero_point(rng, dtype))
    zero_points = [_zero_point(rng, dtype) for _ in range(channels)]
    return QuantParams(tuple(rng.uniform(0.002, 0.02, channels)), tuple(zero_points), axis)


# ---- the transposed convolution ---------------------------------------------------------------

def _transposed(rng, x_shape, per_group, kernel, groups, *, x_dtype=np.uint8, w_dtype=np.int8,
                per_channel=False, bias=True):
    """(arrays, quants) of x (N, C_in, H, W), w (C_in, per_group, kh, kw) and the bias."""
    out = per_group * groups
    x = _ints(rng, x_dtype, x_shape)
    w = _ints(rng, w_dtype, (x_shape[1], per_group, *kernel))
    arrays = [x, w]
    quants = [per_tensor(0.05, _zero_point(rng, x_dtype)),
              _weight_quant(rng, w_dtype, out, 1, per_channel)]
    if bias:
        arrays.append(rng.integers(-3000, 3000, out).astype(np.int32))
        quants.append(None)
    return arrays, quants


TRANSPOSED = [*CONV_TRANSPOSE_CASES,
              # depthwise at stride 3 with output_padding: cells that no tap reaches
              ((1, 5, 3, 3), (1, 3, 3), (3, 3), (0, 0), (2, 2), (1, 1), 5)]


@pytest.mark.parametrize("case", TRANSPOSED)
@pytest.mark.parametrize("dtypes", [(np.uint8, np.int8), (np.int8, np.uint8)])
def test_transposed_conv_is_the_reference(case, dtypes):
    x_shape, (per_group, kh, kw), stride, padding, output_padding, dilation, groups = case
    rng = np.random.default_rng(sum(x_shape) + per_group)
    arrays, quants = _transposed(rng, x_shape, per_group, (kh, kw), groups, x_dtype=dtypes[0],
                                 w_dtype=dtypes[1], per_channel=groups == 1)
    node = _node("quantized_conv_transpose2d", arrays, quants, stride=stride, padding=padding,
                 output_padding=output_padding, dilation=dilation, groups=groups,
                 **_requant("int8" if dtypes[0] == np.uint8 else "uint8", relu=True))
    _same(node, arrays)


@pytest.mark.parametrize("out", ["int8", "uint8", "int32"])
@pytest.mark.parametrize("per_channel", (False, True))
def test_transposed_conv_outputs_and_weights(out, per_channel):
    """Each result type, per-tensor and per-channel weights (axis 1), no bias; zero points at
    the storage's middle and a small output scale saturate the 8-bit results at both ends."""
    rng = np.random.default_rng(11)
    arrays, _ = _transposed(rng, (2, 6, 5, 3), 7, (3, 2), 1, bias=False)
    scales = tuple(rng.uniform(0.005, 0.02, 7))
    quants = [per_tensor(0.05, 128), QuantParams(scales, (0, 1, -1, 2, -2, 0, 3), 1)
              if per_channel else per_tensor(0.01, 0)]
    node = _node("quantized_conv_transpose2d", arrays, quants, stride=2, padding=(1, 0),
                 output_padding=(1, 1), **_requant(out, out_scale=0.05))
    got = _same(node, arrays)
    if out != "int32":
        lo, hi = RANGES[out]
        assert got.min() == lo and got.max() == hi


def test_transposed_conv_longest_sums_and_the_bias_wrap():
    """An output of a 2x2 kernel at stride 1 sums C_in * 4 products: the most the rule allows.
    x and w at opposite ends make the largest centred sum, whose bias carries it past int32's
    end: added modulo 2^32, as the reference and the CPU add it."""
    c_in = MAX_WINDOW // 4
    x = np.full((1, c_in, 2, 2), 255, np.uint8)
    w = np.full((c_in, 1, 2, 2), -128, np.int8)
    quants = [per_tensor(0.1, 0), per_tensor(0.01, 127), None]
    arrays = [x, w, np.array([-(2 ** 31) + 5], np.int32)]
    node = _node("quantized_conv_transpose2d", arrays, quants, out_dtype="int32")
    got = _same(node, arrays)
    centre = 255 * -255 * 4 * c_in - 2 ** 31 + 5
    assert got[0, 0, 1, 1] == (centre + 2 ** 32)  # wrapped to a positive int32


# ---- the batched matmul -----------------------------------------------------------------------

def _batched(rng, a_shape, b_shape, *, a_dtype=np.int8, b_dtype=np.uint8, per_row=True,
             bias=True):
    """(arrays, quants) of a (batch or 1, rows, depth), b (batch or 1, depth, cols), the bias."""
    arrays = [_ints(rng, a_dtype, a_shape), _ints(rng, b_dtype, b_shape)]
    quants = [_weight_quant(rng, a_dtype, a_shape[1], 1, per_row),
              per_tensor(0.04, _zero_point(rng, b_dtype))]
    if bias:
        arrays.append(rng.integers(-2000, 2000, a_shape[1]).astype(np.int32))
        quants.append(None)
    return arrays, quants


BATCHED = [  # a shape, b shape
    ((3, 5, 7), (3, 7, 6)),     # both batched, depth 7: bytes one at a time
    ((1, 6, 9), (4, 9, 5)),     # a broadcast over the batch (weights, as BatchMatMulActivation)
    ((3, 4, 8), (1, 8, 3)),     # b broadcast
    ((2, 9, 16), (2, 16, 1)),   # one column: a word at a time
    ((2, 3, 13), (1, 13, 1)),   # one column of an odd depth
    ((1, 1, 33), (1, 33, 70)),  # one row
]


@pytest.mark.parametrize("shapes", BATCHED)
@pytest.mark.parametrize("dtypes", [(np.int8, np.uint8), (np.uint8, np.int8)])
@pytest.mark.parametrize("out", ["int8", "uint8", "int32"])
def test_batch_matmul_is_the_reference(shapes, dtypes, out):
    rng = np.random.default_rng(sum(shapes[0]) + sum(shapes[1]))
    arrays, quants = _batched(rng, *shapes, a_dtype=dtypes[0], b_dtype=dtypes[1])
    node = _node("quantized_batch_matmul", arrays, quants,
                 **_requant(out, relu=out == "uint8", out_scale=0.3))
    _same(node, arrays)


def test_batch_matmul_per_tensor_without_bias_saturates():
    rng = np.random.default_rng(12)
    arrays, quants = _batched(rng, (2, 5, 11), (2, 11, 4), per_row=False, bias=False)
    node = _node("quantized_batch_matmul", arrays, quants, **_requant("int8", out_scale=0.01))
    got = _same(node, arrays)
    assert got.min() == -128 and got.max() == 127


def test_batch_matmul_longest_sums_and_the_bias_wrap():
    """Depth MAX_WINDOW, one column (the word path) and two (bytes one at a time): row 0 of a
    is its zero point (every centred product 0, while the stored bytes' are not); row 1 the
    largest centred sum, its bias carrying it past int32's end."""
    k = MAX_WINDOW
    a = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8)])[None]
    quants = [QuantParams((0.01, 0.01), (-128, -128), 1), per_tensor(0.1, 0), None]
    bias = np.array([7, 40000], np.int32)
    for cols in (1, 2):
        b = np.full((1, k, cols), 255, np.uint8)
        node = _node("quantized_batch_matmul", [a, b, bias], quants, out_dtype="int32")
        got = _same(node, [a, b, bias], cpu=cols == 1)  # one CPU run of the long sums is enough
        top = 255 * 255 * k + 40000
        assert (got[0, 0] == 7).all() and (got[0, 1] == top - 2 ** 32).all()


def test_the_batch_matmul_is_dispatched_by_b_and_reads_a_rows_tables():
    """b (the activation) names the entry; a's per-row multipliers and zero points are the
    text's tables, one per row."""
    rng = np.random.default_rng(13)
    arrays, quants = _batched(rng, (1, 5, 4), (2, 4, 3), a_dtype=np.uint8, b_dtype=np.int8)
    node = _node("quantized_batch_matmul", arrays, quants, **_requant("int8"))
    launch, text, (step,) = rendered_launch(family, node)
    assert step.entry.startswith("mg_quantized_batch_matmul_i8_")
    assert "mg_qbatch_matmul(" in text and launch.floats == ()
    zero_points = ", ".join(str(z - 128) for z in quants[0].zero_points)  # uint8 a: shifted
    assert f"_zw[] = {{{zero_points}}}" in text
    assert math.prod(step.grid) * math.prod(step.block) >= 2 * 5 * 3


# ---- NVRTC ------------------------------------------------------------------------------------

def _module() -> str:
    """A plan module of both kernels, each operand type, as the runtime compiles it."""
    rng = np.random.default_rng(14)
    texts = []
    for dtypes in ((np.uint8, np.int8), (np.int8, np.uint8)):
        arrays, quants = _transposed(rng, (1, 4, 3, 3), 2, (3, 3), 1, x_dtype=dtypes[0],
                                     w_dtype=dtypes[1])
        texts.append(rendered_launch(family, _node(
            "quantized_conv_transpose2d", arrays, quants, stride=2, **_requant("int8")))[1])
        arrays, quants = _batched(rng, (1, 3, 8), (2, 8, 5), a_dtype=dtypes[1],
                                  b_dtype=dtypes[0])
        texts.append(rendered_launch(family, _node(
            "quantized_batch_matmul", arrays, quants, out_dtype="int32"))[1])
    return module(texts)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_the_int8_transposed_and_batched_kernels_compile_to_dp4a(arch):
    from mgegraph.cuda import CSRC
    from mgegraph.cuda.nvrtc import BASE_OPTIONS, EXACT_OPTIONS, nvrtc_compile
    compiled = nvrtc_compile(_module(), "rendered.cu", (
        *BASE_OPTIONS, f"-I{CSRC.resolve()}", f"--gpu-architecture={arch}", *EXACT_OPTIONS))
    assert "warning" not in compiled.log.lower(), compiled.log
    assert compiled.ptx.count(".entry") == 4
    assert "dp4a.s32.s32" in compiled.ptx
    assert ".shared" not in compiled.ptx and "fma.rn.f32" not in compiled.ptx


# ---- whole plans ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-int8-transpose-plan", lambda: CudaBackend(device=None))
    yield "cuda-int8-transpose-plan"
    unregister_backend("cuda-int8-transpose-plan")


def _decoder(rng):
    """quantize, an up-sampling transposed convolution (per-channel weights, bias, relu), a
    batched matmul of weights over its rows (a broadcast), dequantize: (outputs, feeds)."""
    g = mg.Graph()
    x = g.input("x", (2, 3, 5, 4), "float32")
    wq = QuantParams(tuple(rng.uniform(0.005, 0.02, 4)), (0, 2, -1, 3), 1)
    w = g.input("w", (3, 4, 3, 3), "int8", wq)
    b = g.input("b", (4,), "int32")
    aq = QuantParams(tuple(rng.uniform(0.005, 0.02, 6)), tuple(range(-3, 3)), 1)
    a = g.input("a", (1, 6, 4 * 10), "int8", aq)
    xq = quantize(x, 0.05, 128, "uint8")
    y = Q.quantized_conv_transpose2d(xq, w, b, stride=2, padding=1, output_padding=1,
                                     out_scale=0.2, out_zero_point=-5, relu=True)
    rows = y.reshape((2, 4 * 10, 8))
    z = Q.quantized_batch_matmul(a, rows, out_scale=0.3, out_zero_point=4)
    feeds = {"x": rng.standard_normal((2, 3, 5, 4)).astype(np.float32),
             "w": _ints(rng, np.int8, (3, 4, 3, 3)),
             "b": rng.integers(-500, 500, 4).astype(np.int32),
             "a": _ints(rng, np.int8, (1, 6, 40))}
    return [dequantize(z, "float32"), dequantize(y, "float32")], feeds


@pytest.mark.parametrize("optimize", (0, 1))
def test_a_plan_of_both_runs_at_its_offsets(planner, optimize):
    """Planned by the CUDA backend (at level 1 too, whose prepack pass the CUDA target skips:
    it packs no weights) and run on the host: the CPU plan's numbers, bitwise."""
    rng = np.random.default_rng(15)
    outputs, feeds = _decoder(rng)
    plan = mg.compile(outputs, device=planner, optimize=optimize)
    kernels = {ins.kernel for ins in plan.instructions}
    assert {"quantized_conv_transpose2d_u8", "quantized_batch_matmul_i8"} <= kernels
    got = run_plan_emulated(plan, CudaBackend(device=None), feeds)
    want = mg.compile(outputs, optimize=optimize).run(feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_the_cpus_packed_forms_are_refused_by_name(planner):
    """The packed forms the CPU's prepack pass makes (quantized_pack_weight, then
    quantized_linear_packed) have no CUDA kernel: a graph holding them is refused at compile,
    naming the op, the device and the user's line."""
    g = mg.Graph()
    x = g.input("x", (2, 8), "uint8", per_tensor(0.1, 128))
    w = g.input("w", (3, 8), "int8", per_tensor(0.02, 0))
    zx = {"x_zero_point": 128, "x_dtype": "uint8"}
    (packed,) = g.add_node("quantized_pack_weight", [w], zx).outputs
    (y,) = g.add_node("quantized_linear_packed", [x, packed],
                      {"weight_shape": (3, 8), "weight_scales": (0.02,), **zx,
                       "out_scale": 0.5}).outputs
    with pytest.raises(OpError, match="does not run 'quantized_pack_weight'") as info:
        mg.compile([y], device=planner, optimize=0)
    assert "test_cuda_int8_transpose.py" in str(info.value)  # the user's line


# ---- on a GPU ---------------------------------------------------------------------------------

@pytest.mark.cuda
def test_on_device_the_cpus_integers():
    """Layer-sized cases on the device, bitwise the CPU kernels: a U-Net up-sampling and a
    grouped transposed convolution, a batched matmul of broadcast weights and a batched one."""
    rng = np.random.default_rng(16)
    cases = [
        ("quantized_conv_transpose2d", _transposed(rng, (2, 32, 17, 15), 16, (3, 3), 1,
                                                   per_channel=True),
         {"stride": 2, "padding": 1, "output_padding": 1, **_requant("int8", relu=True)}),
        ("quantized_conv_transpose2d", _transposed(rng, (1, 24, 9, 9), 4, (4, 4), 4,
                                                   x_dtype=np.int8, w_dtype=np.uint8),
         {"stride": 3, "padding": 2, "dilation": 2, **_requant("int32")}),
        ("quantized_batch_matmul", _batched(rng, (1, 64, 131), (8, 131, 96)),
         _requant("uint8", relu=True, out_scale=0.5)),
        ("quantized_batch_matmul", _batched(rng, (4, 33, 64), (4, 64, 1), b_dtype=np.int8),
         _requant("int32")),
    ]
    for op, (arrays, quants), attrs in cases:
        node = _node(op, arrays, quants, **attrs)
        np.testing.assert_array_equal(run_on_device(node, arrays)[0],
                                      cpu_result(node, arrays)[0])
