"""The int8 transposed convolution and batched matmul on weights packed once
(planner/passes/prepack_quantized.py, ops/quantized_pack.py): the pass's graph before and after,
the NumPy pack bitwise the kernel's, the packed plan's outputs bitwise the unpacked plan's (and
the int64 reference's) at one and two threads, on int8 and uint8, per tensor and per channel,
a const weight packed by the pass and a param's by the prologue (repacked after a write), a
weight an assign writes and a batched ``a`` left unpacked, and the packed plans through the
model file."""
import io
import json
import zipfile

import numpy as np
import pytest
import quant_reference as ref
from threadpoolctl import threadpool_limits

import mgegraph as mg
from mgegraph._kernels import qgemm
from mgegraph.ir.errors import OpError
from mgegraph.ir.quant import QuantParams, per_tensor
from mgegraph.ops import quantized as Q
from mgegraph.ops.builder import apply
from mgegraph.ops.quantized_pack import (
    gemm_rows,
    pack_transposed_weight_array,
    pack_weight_array,
    packed_size,
)
from mgegraph.planner.passes.pipeline import LEVELS
from mgegraph.planner.passes.prepack_quantized import prepack_quantized
from mgegraph.weight_writes import written

RANGES = {"int8": (-128, 128), "uint8": (0, 256)}
UNPACKED = [p for p in LEVELS[1] if p != "prepack"]
# x shape, (out/groups, kh, kw), stride, padding, output_padding, dilation, groups
TRANSPOSED = [
    ((2, 64, 9, 9), (8, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),  # the U-Net's up-sampling
    ((1, 6, 5, 4), (2, 3, 2), (3, 2), (1, 0), (2, 1), (1, 1), 3),   # groups, stride 3
    ((2, 7, 6, 5), (4, 3, 3), (2, 3), (2, 1), (1, 0), (2, 2), 1),   # dilation with stride
    ((1, 70, 2, 3), (9, 3, 3), (2, 2), (1, 1), (0, 1), (1, 1), 1),  # K 70, a GEMV's columns
]


def _ints(rng, shape, dtype):
    return rng.integers(*RANGES[dtype], shape).astype(dtype)


def _zero_point(rng, dtype):
    lo, hi = RANGES[dtype]
    return int(rng.integers(lo + 20, hi - 20))


def _weight_params(rng, dtype, channels, axis, per_channel):
    if not per_channel:
        return per_tensor(0.01, _zero_point(rng, dtype))
    return QuantParams(tuple(rng.uniform(0.002, 0.02, channels)),
                       tuple(_zero_point(rng, dtype) for _ in range(channels)), axis)


def _requant(out_dtype, relu=False, out_scale=0.9):
    return {"out_dtype": out_dtype, "out_scale": None if out_dtype == "int32" else out_scale,
            "out_zero_point": {"int8": -3, "uint8": 117, "int32": 0}[out_dtype], "relu": relu}


def _weight(g, w, wp, kind):
    return g.const(w, quant=wp) if kind == "const" else g.param("w", w, share=True, quant=wp)


def _ops(plan):
    return [i.op for i in plan.instructions]


def _both(build, feeds, threads=None):
    """The packed plan's and the unpacked plan's outputs (compiled and run at ``threads``)."""
    g = mg.Graph()
    y = build(g)
    with threadpool_limits(threads, user_api="openmp"):
        packed, unpacked = mg.compile([y]), mg.compile([y], optimize=UNPACKED)
        assert not any(op.endswith("_packed") for op in _ops(unpacked))
        return packed, packed.run(feeds)[0], unpacked.run(feeds)[0]


# ---- the transposed convolution ---------------------------------------------------------------

def _transposed(case, x_dtype, w_dtype, per_channel, seed):
    x_shape, (per_group, kh, kw), stride, padding, output_padding, dilation, groups = case
    rng = np.random.default_rng(seed)
    x = _ints(rng, x_shape, x_dtype)
    xp = per_tensor(0.04, _zero_point(rng, x_dtype))
    w = _ints(rng, (x_shape[1], per_group, kh, kw), w_dtype)
    wp = _weight_params(rng, w_dtype, per_group * groups, 1, per_channel)
    bias = rng.integers(-5000, 5000, per_group * groups).astype(np.int32)
    geometry = {"stride": stride, "padding": padding, "output_padding": output_padding,
                "dilation": dilation, "groups": groups}
    return x, xp, w, wp, bias, geometry


def _transposed_graph(g, x, xp, w, wp, bias, attrs, kind="const"):
    return Q.quantized_conv_transpose2d(g.input("x", x.shape, x.dtype.name, quant=xp),
                                        _weight(g, w, wp, kind),
                                        *([] if bias is None else [g.const(bias)]), **attrs)


def test_the_pass_packs_a_const_transposed_weight_and_keeps_the_bias_an_input():
    x, xp, w, wp, bias, geo = _transposed(TRANSPOSED[0], "uint8", "int8", True, 1)
    g = mg.Graph()
    y = _transposed_graph(g, x, xp, w, wp, bias, {**geo, **_requant("int8")})
    before = [n.op.name for n in g.nodes]
    done = prepack_quantized(g, [y])
    after = [n.op.name for n in done.graph.nodes if n.outputs[0].id in
             {v.id for v in done.outputs[0].node.inputs} | {done.outputs[0].id}]
    assert before == ["input", "const", "const", "quantized_conv_transpose2d"]
    assert after == ["input", "const", "const", "quantized_conv_transpose2d_packed"]
    assert done.stats == {"int8 packed": 1}
    node = done.outputs[0].node
    packed, kept_bias = (done.graph.values[v.id] for v in node.inputs[1:])
    np.testing.assert_array_equal(kept_bias, bias)
    np.testing.assert_array_equal(packed, pack_transposed_weight_array(
        w, wp.zero_points, 1, xp.zero_point, "uint8"))
    assert node.attr["weight_shape"] == w.shape and node.attr["weight_scales"] == wp.scales
    assert node.outputs[0].type == y.type


@pytest.mark.parametrize("w_dtype, x_dtype, groups", [
    ("int8", "int8", 1), ("uint8", "uint8", 2), ("uint8", "int8", 1), ("int8", "uint8", 3)])
def test_the_numpy_transposed_pack_is_the_kernels_bytes(w_dtype, x_dtype, groups):
    rng = np.random.default_rng(groups)
    w = _ints(rng, (6 * groups, 5, 3, 2), w_dtype)
    wp = _weight_params(rng, w_dtype, 5, 1, groups == 1)
    g = mg.Graph()
    packed = apply("quantized_pack_transposed_weight",
                   (g.input("w", w.shape, w_dtype, quant=wp),), groups=groups,
                   x_zero_point=7, x_dtype=x_dtype)
    got = mg.compile([packed], optimize=0).run({"w": w})[0]
    want = pack_transposed_weight_array(w, wp.zero_points, groups, 7, x_dtype)
    rows, k = gemm_rows("quantized_conv_transpose2d", w.shape, groups)
    assert (rows, k) == (5 * 6 * groups, 6) and want.nbytes == packed_size(rows, k, groups)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", TRANSPOSED)
@pytest.mark.parametrize("x_dtype, w_dtype, out_dtype, per_channel, kind", [
    ("uint8", "int8", "int8", False, "const"), ("int8", "uint8", "uint8", True, "param"),
    ("int8", "int8", "int32", True, "const"), ("uint8", "uint8", "uint8", False, "param")])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_transposed_is_the_unpacked_bitwise(case, x_dtype, w_dtype, out_dtype,
                                                   per_channel, kind, threads):
    per_channel = per_channel and case[-1] == 1  # a per-channel weight takes groups 1
    x, xp, w, wp, bias, geo = _transposed(case, x_dtype, w_dtype, per_channel, len(str(case)))
    bias = None if kind == "param" and out_dtype == "uint8" else bias
    attrs = {**geo, **_requant(out_dtype, relu=out_dtype == "uint8")}
    plan, got, unpacked = _both(
        lambda g: _transposed_graph(g, x, xp, w, wp, bias, attrs, kind), {"x": x}, threads)
    # a param's pack runs in the prologue where it is at most twice the weight (k padded to
    # 64 in the GEMM's layout), else in the run, as quantized_pack_weight's
    assert _ops(plan)[-1:] == ["quantized_conv_transpose2d_packed"]
    if kind == "param":
        prologue = _ops(plan.prologue) if plan.prologue is not None else []
        assert (prologue + _ops(plan)).count("quantized_pack_transposed_weight") == 1
        fits = packed_size(*gemm_rows("quantized_conv_transpose2d", w.shape, case[-1]),
                           case[-1]) <= 2 * w.nbytes
        assert ("quantized_pack_transposed_weight" in prologue) == fits
    assert got.dtype == unpacked.dtype and got.shape == unpacked.shape
    np.testing.assert_array_equal(got, unpacked)
    np.testing.assert_array_equal(got, ref.quantized_conv_transpose2d(x, xp, w, wp, bias,
                                                                      **attrs))


@pytest.mark.parametrize("isa", qgemm.available_isas())
def test_every_variant_reads_the_transposed_pack(isa):
    before = qgemm.set_int8_isa(isa)
    try:
        x, xp, w, wp, bias, geo = _transposed(TRANSPOSED[1], "int8", "int8", False, 3)
        attrs = {**geo, **_requant("int8")}
        _, got, unpacked = _both(
            lambda g: _transposed_graph(g, x, xp, w, wp, bias, attrs), {"x": x})
    finally:
        qgemm.set_int8_isa(before)
    np.testing.assert_array_equal(got, unpacked)


def test_a_param_transposed_weight_is_repacked_after_a_write():
    x, xp, w, wp, bias, geo = _transposed(TRANSPOSED[0], "uint8", "int8", True, 4)
    attrs = {**geo, **_requant("int8")}
    g = mg.Graph()
    plan = mg.compile([_transposed_graph(g, x, xp, w, wp, bias, attrs, "param")])
    assert "quantized_pack_transposed_weight" in _ops(plan.prologue)
    np.testing.assert_array_equal(plan.run({"x": x})[0],
                                  ref.quantized_conv_transpose2d(x, xp, w, wp, bias, **attrs))
    w[...] = (-w.astype(np.int16)).clip(-128, 127)  # the shared param's array, written
    written(w)
    np.testing.assert_array_equal(plan.run({"x": x})[0],
                                  ref.quantized_conv_transpose2d(x, xp, w, wp, bias, **attrs))


def test_a_weight_an_assign_writes_stays_unpacked():
    # the pass alone: the CPU has no int8 assign to run such a plan with
    x, xp, w, wp, bias, geo = _transposed(TRANSPOSED[0], "uint8", "int8", False, 5)
    a = np.random.default_rng(5).integers(-128, 128, (1, 6, 16)).astype(np.int8)
    g = mg.Graph()
    wv, av = g.param("w", w, quant=wp), g.param("a", a, quant=per_tensor(0.01, 0))
    y = Q.quantized_conv_transpose2d(g.input("x", x.shape, "uint8", quant=xp), wv,
                                     g.const(bias), **geo, **_requant("int8"))
    z = Q.quantized_batch_matmul(av, g.input("b", (2, 16, 3), "uint8",
                                             quant=per_tensor(0.05, 120)), **_requant("int8"))
    assert prepack_quantized(g, [y, z]).stats == {"int8 packed": 2}
    g.assign(wv, apply("as_quantized", (g.const(-w),), **_as(wp)))
    g.assign(av, apply("as_quantized", (g.const(a // 2),), **_as(per_tensor(0.01, 0))))
    done = prepack_quantized(g, [y, z])
    assert not done.changed and done.stats == {"int8 packed": 0}


def _as(quant):
    return {"scales": quant.scales, "zero_points": quant.zero_points, "axis": quant.axis}


def test_the_packed_transposed_op_refuses_a_pack_made_for_another_input():
    x, xp, w, wp, _, geo = _transposed(TRANSPOSED[0], "uint8", "int8", False, 7)
    size = packed_size(*gemm_rows("quantized_conv_transpose2d", w.shape)) // 4
    common = {**geo, **_requant("int8"), "weight_shape": w.shape,
              "weight_scales": wp.scales, "x_dtype": "uint8"}
    for zero, length, words in ((xp.zero_point + 1, size, "packed for a uint8 input"),
                                (xp.zero_point, size - 1, "are int32")):
        g = mg.Graph()
        with pytest.raises(OpError, match=words):
            apply("quantized_conv_transpose2d_packed",
                  (g.input("x", x.shape, "uint8", quant=xp), g.const(np.zeros(length,
                                                                              np.int32))),
                  x_zero_point=zero, **common)
    g = mg.Graph()
    with pytest.raises(OpError, match="along axis 1 .* with groups 1"):
        apply("quantized_pack_transposed_weight",
              (g.input("w", (4, 3, 3, 3), "int8", quant=QuantParams((0.1,) * 4, (0,) * 4, 0)),),
              x_zero_point=0, x_dtype="int8")


# ---- the batched matmul -----------------------------------------------------------------------

BATCHED = [((1, 9, 13), (4, 13, 5)),     # a shared by every batch: packed
           ((1, 17, 70), (1, 70, 33)),   # one batch; K 70, 33 columns
           ((1, 4, 3), (2, 3, 50))]      # 50 columns: the tiles, not the GEMV


def _batched(shapes, a_dtype, b_dtype, per_channel, seed):
    rng = np.random.default_rng(seed)
    (a_shape, b_shape), n = shapes, shapes[0][1]
    a, b = _ints(rng, a_shape, a_dtype), _ints(rng, b_shape, b_dtype)
    ap = _weight_params(rng, a_dtype, n, 1, per_channel)
    bp = per_tensor(0.05, _zero_point(rng, b_dtype))
    return a, ap, b, bp, rng.integers(-3000, 3000, n).astype(np.int32)


def _batched_graph(g, a, ap, b, bp, bias, attrs, kind="const"):
    av = g.const(a, quant=ap) if kind == "const" else g.param("a", a, share=True, quant=ap)
    return Q.quantized_batch_matmul(av, g.input("b", b.shape, b.dtype.name, quant=bp),
                                    *([] if bias is None else [g.const(bias)]), **attrs)


@pytest.mark.parametrize("shapes", BATCHED)
@pytest.mark.parametrize("a_dtype, b_dtype, out_dtype, per_channel, kind", [
    ("int8", "uint8", "int8", False, "const"), ("uint8", "int8", "uint8", True, "param"),
    ("int8", "int8", "int32", True, "const"), ("uint8", "uint8", "int32", False, "param")])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_batch_matmul_is_the_unpacked_bitwise(shapes, a_dtype, b_dtype, out_dtype,
                                                     per_channel, kind, threads):
    a, ap, b, bp, bias = _batched(shapes, a_dtype, b_dtype, per_channel, len(str(shapes)))
    bias = None if kind == "param" and out_dtype == "int32" else bias
    attrs = _requant(out_dtype, relu=out_dtype == "uint8", out_scale=0.6)
    plan, got, unpacked = _both(lambda g: _batched_graph(g, a, ap, b, bp, bias, attrs, kind),
                                {"b": b}, threads)
    assert _ops(plan)[-1:] == ["quantized_batch_matmul_packed"]
    if kind == "param":
        prologue = _ops(plan.prologue) if plan.prologue is not None else []
        assert (prologue + _ops(plan)).count("quantized_pack_weight") == 1
    assert got.dtype == unpacked.dtype and got.shape == unpacked.shape
    np.testing.assert_array_equal(got, unpacked)
    np.testing.assert_array_equal(got, ref.quantized_batch_matmul(a, ap, b, bp, bias, **attrs))


def test_the_pass_packs_an_unbatched_a_with_its_bias_and_leaves_a_batched_one():
    a, ap, b, bp, bias = _batched(BATCHED[0], "int8", "uint8", True, 8)
    g = mg.Graph()
    y = _batched_graph(g, a, ap, b, bp, bias, _requant("int8"))
    done = prepack_quantized(g, [y])
    node = done.outputs[0].node
    assert node.op.name == "quantized_batch_matmul_packed"
    assert node.inputs[0].node.op.name == "input"  # b first, then the packed a
    np.testing.assert_array_equal(done.graph.values[node.inputs[1].id], pack_weight_array(
        a[0], ap.zero_points, bias, 1, bp.zero_point, "uint8"))
    assert node.outputs[0].type == y.type
    batched = np.concatenate([a, a])
    g = mg.Graph()
    y = _batched_graph(g, batched, ap, b[:2], bp, bias, _requant("int8"))
    assert not prepack_quantized(g, [y]).changed


def test_the_pack_op_refuses_a_3d_weight_with_a_batch():
    g = mg.Graph()
    with pytest.raises(OpError, match=r"\(1, n, k\)"):
        apply("quantized_pack_weight", (g.input("a", (2, 4, 3), "int8",
                                                quant=per_tensor(0.1, 0)),),
              x_zero_point=0, x_dtype="int8")


# ---- the model file ----------------------------------------------------------------------------

def _round_trip(plan):
    f = io.BytesIO()
    mg.save(plan, f)
    with zipfile.ZipFile(io.BytesIO(f.getvalue())) as zf:
        nodes = json.loads(zf.read("model.json"))["graph"]["nodes"]
    return mg.load(io.BytesIO(f.getvalue())), {n["op"]: n["version"] for n in nodes}


def _packed_pair(kind):
    """A transposed convolution and a batched matmul, their weights ``kind``, and their feeds
    and int64 references."""
    x, xp, w, wp, bias, geo = _transposed(TRANSPOSED[0], "int8", "uint8", True, 9)
    a, ap, b, bp, abias = _batched(BATCHED[0], "int8", "uint8", True, 10)
    attrs = {**geo, **_requant("uint8", relu=True)}
    g = mg.Graph()
    y = _transposed_graph(g, x, xp, w, wp, bias, attrs, kind)
    z = _batched_graph(g, a, ap, b, bp, abias, _requant("int32"), kind)
    want = [ref.quantized_conv_transpose2d(x, xp, w, wp, bias, **attrs),
            ref.quantized_batch_matmul(a, ap, b, bp, abias, **_requant("int32"))]
    return g, [y, z], {"x": x, "b": b}, want


def _check(plan, feeds, want):
    for got, expected in zip(plan.run(feeds), want):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("kind", ["const", "param"])
def test_a_packed_graph_round_trips_through_the_model_file(kind):
    g, outputs, feeds, want = _packed_pair(kind)
    done = prepack_quantized(g, outputs)
    plan = mg.compile(done.outputs, optimize=0)  # the packed graph is the plan's source
    packs = {"const": [], "param": ["quantized_pack_transposed_weight", "quantized_pack_weight"]}
    assert sorted(_ops(plan)) == sorted(packs[kind] + ["quantized_conv_transpose2d_packed",
                                                       "quantized_batch_matmul_packed"])
    loaded, versions = _round_trip(plan)
    assert versions["quantized_conv_transpose2d_packed"] == 1
    assert versions["quantized_batch_matmul_packed"] == 1
    if kind == "param":
        assert versions["quantized_pack_transposed_weight"] == 1
        assert versions["quantized_pack_weight"] == 2
    _check(plan, feeds, want)
    _check(loaded, feeds, want)


def test_a_saved_plan_is_packed_again_when_loaded():
    g, outputs, feeds, want = _packed_pair("param")
    loaded, _ = _round_trip(mg.compile(outputs))
    assert {"quantized_conv_transpose2d_packed", "quantized_batch_matmul_packed"} <= set(
        _ops(loaded.plan))
    _check(loaded, feeds, want)
