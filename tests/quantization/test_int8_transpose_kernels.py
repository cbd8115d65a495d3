"""The int8 transposed convolution and batched matmul (ops/quantized.py) on the CPU's int8 GEMM
(_kernels/quantized.pyx, qgemm.pyx's conv_transpose_run, qconv.h's col2im) against the NumPy
int64 references of tests/quant_reference.py, bitwise: odd sizes, strides 1-3, padding,
output_padding, dilation, groups, zero points, both storage types, per-channel weights, bias,
relu, saturation, every instruction-set variant this CPU runs, one and two threads. The
reference's accumulator is checked against PyTorch's float64 transposed convolution first."""
import numpy as np
import pytest
import quant_reference as ref
from threadpoolctl import threadpool_limits

import mgegraph as mg
from mgegraph._kernels import qgemm
from mgegraph.ir.errors import OpError
from mgegraph.ir.quant import QuantParams, per_tensor
from mgegraph.ops import quantized as Q

RANGES = {"int8": (-128, 128), "uint8": (0, 256)}
ISAS = qgemm.available_isas()


@pytest.fixture(params=ISAS)
def isa(request):
    before = qgemm.set_int8_isa(request.param)
    yield request.param
    qgemm.set_int8_isa(before)


def _ints(rng, shape, dtype):
    return rng.integers(*RANGES[dtype], shape).astype(dtype)


def _zero_point(rng, dtype):
    lo, hi = RANGES[dtype]
    return int(rng.integers(lo + 20, hi - 20))


def _requant(out_dtype, relu, out_scale=0.9):
    return {"out_dtype": out_dtype, "out_scale": None if out_dtype == "int32" else out_scale,
            "out_zero_point": {"int8": -3, "uint8": 117, "int32": 0}[out_dtype], "relu": relu}


def _run(build, feeds):
    g = mg.Graph()
    return mg.compile([build(g)]).run(feeds)[0]


# ---- the transposed convolution ---------------------------------------------------------------

TRANSPOSED = ref.CONV_TRANSPOSE_CASES


def _transposed_operands(case, x_dtype, w_dtype, per_channel, seed):
    x_shape, (per_group, kh, kw), stride, padding, output_padding, dilation, groups = case
    rng = np.random.default_rng(seed)
    out = per_group * groups
    x = _ints(rng, x_shape, x_dtype)
    xp = per_tensor(0.04, _zero_point(rng, x_dtype))
    w = _ints(rng, (x_shape[1], per_group, kh, kw), w_dtype)
    if per_channel:
        wp = QuantParams(tuple(rng.uniform(0.002, 0.02, out)),
                         tuple(_zero_point(rng, w_dtype) for _ in range(out)), 1)
    else:
        wp = per_tensor(0.01, _zero_point(rng, w_dtype))
    bias = rng.integers(-5000, 5000, out).astype(np.int32)
    geometry = {"stride": stride, "padding": padding, "output_padding": output_padding,
                "dilation": dilation, "groups": groups}
    return x, xp, w, wp, bias, geometry


def test_the_reference_is_torchs_transposed_convolution():
    torch = pytest.importorskip("torch")
    for seed, case in enumerate(TRANSPOSED):
        x, xp, w, wp, _, geo = _transposed_operands(case, "uint8", "int8", False, seed)
        acc = ref._accumulate_conv_transpose(x, xp.zero_point, w, wp.zero_points, **geo)
        want = torch.nn.functional.conv_transpose2d(
            torch.from_numpy(x.astype(np.float64) - xp.zero_point),
            torch.from_numpy(w.astype(np.float64) - wp.zero_point), None, geo["stride"],
            geo["padding"], geo["output_padding"], geo["groups"], geo["dilation"])
        np.testing.assert_array_equal(acc, want.numpy().astype(np.int64), err_msg=str(case))


def _check_transposed(case, x_dtype, w_dtype, out_dtype, relu, per_channel, with_bias=True,
                      out_scale=0.9, seed=0):
    x, xp, w, wp, bias, geo = _transposed_operands(case, x_dtype, w_dtype, per_channel, seed)
    bias = bias if with_bias else None
    attrs = {**geo, **_requant(out_dtype, relu, out_scale)}

    def build(g):
        inputs = [g.input("x", x.shape, x_dtype, quant=xp), g.const(w, quant=wp)]
        return Q.quantized_conv_transpose2d(*inputs, *([] if bias is None else
                                                       [g.const(bias)]), **attrs)
    want = ref.quantized_conv_transpose2d(x, xp, w, wp, bias, **attrs)
    got = _run(build, {"x": x})
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want, err_msg=str(case))
    return want


@pytest.mark.parametrize("case", TRANSPOSED)
@pytest.mark.parametrize("x_dtype, w_dtype, out_dtype, relu, per_channel", [
    ("uint8", "int8", "int8", False, False), ("int8", "uint8", "uint8", True, False),
    ("int8", "int8", "int32", False, False), ("uint8", "uint8", "uint8", True, True)])
def test_transposed_matches_the_reference(case, x_dtype, w_dtype, out_dtype, relu,
                                          per_channel):
    if per_channel and case[-1] != 1:
        pytest.skip("a per-channel weight takes groups 1")
    _check_transposed(case, x_dtype, w_dtype, out_dtype, relu, per_channel,
                      seed=len(str(case)) + len(x_dtype))


@pytest.mark.parametrize("case", [TRANSPOSED[1], TRANSPOSED[3], TRANSPOSED[7]])
def test_every_variant_gives_the_same_integers(isa, case):
    _check_transposed(case, "int8", "int8", "int8", False, False, seed=5)
    _check_transposed(case, "uint8", "uint8", "int32", False, False, with_bias=False, seed=6)


def test_transposed_saturates_and_threads_agree():
    """A layer large enough to be planned on two threads, and the same on one; a small output
    scale saturates both ends."""
    case = ((2, 32, 12, 12), (16, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1)
    want = _check_transposed(case, "uint8", "int8", "int8", False, False, out_scale=0.05)
    assert (want == -128).any() and (want == 127).any()
    with threadpool_limits(1, user_api="openmp"):
        _check_transposed(case, "uint8", "int8", "int8", False, False, out_scale=0.05)


# ---- the batched matmul -----------------------------------------------------------------------

BATCHED = [  # a shape, b shape
    ((3, 5, 7), (3, 7, 6)),
    ((1, 9, 13), (4, 13, 5)),      # a shared by every batch (its weights packed once)
    ((2, 17, 70), (1, 70, 33)),    # b shared; K 70, 33 columns
    ((2, 4, 3), (2, 3, 50)),       # 50 columns: the tiles, not the GEMV
]


@pytest.mark.parametrize("shapes", BATCHED)
@pytest.mark.parametrize("a_dtype, b_dtype, out_dtype, relu, per_channel", [
    ("int8", "uint8", "int8", False, False), ("uint8", "int8", "uint8", True, True),
    ("int8", "int8", "int32", False, True)])
def test_batch_matmul_matches_the_reference(isa, shapes, a_dtype, b_dtype, out_dtype, relu,
                                            per_channel):
    rng = np.random.default_rng(len(str(shapes)) + len(a_dtype))
    a_shape, b_shape = shapes
    n = a_shape[1]
    a, b = _ints(rng, a_shape, a_dtype), _ints(rng, b_shape, b_dtype)
    if per_channel:
        ap = QuantParams(tuple(rng.uniform(0.002, 0.02, n)),
                         tuple(_zero_point(rng, a_dtype) for _ in range(n)), 1)
    else:
        ap = per_tensor(0.01, _zero_point(rng, a_dtype))
    bp = per_tensor(0.05, _zero_point(rng, b_dtype))
    bias = rng.integers(-3000, 3000, n).astype(np.int32)
    attrs = _requant(out_dtype, relu, 0.6)

    def build(g):
        return Q.quantized_batch_matmul(g.const(a, quant=ap),
                                        g.input("b", b.shape, b_dtype, quant=bp),
                                        g.const(bias), **attrs)
    want = ref.quantized_batch_matmul(a, ap, b, bp, bias, **attrs)
    got = _run(build, {"b": b})
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


# ---- the rules' refusals ----------------------------------------------------------------------

def _refused(build, *words):
    with pytest.raises((OpError, ValueError, TypeError)) as info:
        build(mg.Graph())
    for word in words:
        assert word in str(info.value)


def test_the_rules_refuse_bad_operands():
    xp, wp = per_tensor(0.1, 3), per_tensor(0.02)
    w = np.zeros((4, 3, 3, 3), np.int8)

    def x(g, shape=(1, 4, 5, 5), dtype="int8", quant=xp):
        return g.input("x", shape, dtype, quant=quant)
    _refused(lambda g: Q.quantized_conv_transpose2d(x(g, (1, 5, 5, 5)), g.const(w, quant=wp),
                                                    out_scale=1.0), "quantized_conv_transpose2d",
             "channels")
    _refused(lambda g: Q.quantized_conv_transpose2d(x(g), g.const(w, quant=wp), stride=2,
                                                    output_padding=2, out_scale=1.0),
             "output_padding")
    per_ch = QuantParams((0.1,) * 6, (0,) * 6, 1)
    _refused(lambda g: Q.quantized_conv_transpose2d(
        x(g), g.const(np.zeros((4, 6, 3, 3), np.int8), quant=per_ch), groups=2, out_scale=1.0),
        "per-channel")
    _refused(lambda g: Q.quantized_conv_transpose2d(x(g), g.const(w.astype(np.float32)),
                                                    out_scale=1.0), "quantized")
    _refused(lambda g: Q.quantized_conv_transpose2d(
        x(g, (1, 4000, 2, 2)), g.const(np.zeros((4000, 1, 3, 3), np.int8), quant=wp),
        out_scale=1.0), "overflow")
    _refused(lambda g: Q.quantized_conv_transpose2d(x(g), g.const(w, quant=wp),
                                                    g.const(np.zeros(5, np.int32)),
                                                    out_scale=1.0), "bias")
    a = np.zeros((2, 3, 4), np.int8)
    _refused(lambda g: Q.quantized_batch_matmul(g.const(a, quant=wp),
                                                x(g, (3, 4, 5), "uint8", per_tensor(0.1, 9)),
                                                out_scale=1.0), "batches")
    _refused(lambda g: Q.quantized_batch_matmul(g.const(a, quant=wp),
                                                x(g, (2, 5, 5), "uint8", per_tensor(0.1, 9)),
                                                out_scale=1.0), "columns")
