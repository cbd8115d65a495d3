"""quantize and dequantize inside fused elementwise groups (planner/passes/fuse.py, the fused
op's rule in ops/fused.py, the kernel's integer steps in _kernels/fused_body.pxi): a mixed
int8/float graph fuses at its boundaries into one kernel whose integers and floats are bitwise
those of the unfused quantize and dequantize kernels, on odd sizes and at any thread count; a
NaN met by a fused quantize fails the run as the unfused one does; per-channel quantization and
float64 stay unfused; malformed programs are refused by the op's rule."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph._kernels.lowering import fused as lowering
from mgegraph.functional import relu
from mgegraph.ir.errors import KernelError, OpError
from mgegraph.ir.quant import per_tensor
from mgegraph.ops.fused_program import Program, evaluate_numpy
from mgegraph.ops.quantize import dequantize, quantize


def _ints(shape, dtype, seed):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


def _plans(build, feeds):
    """The graph built by ``build(g)`` compiled unfused and fused: (ops of the fused plan, the
    unfused results, the fused ones)."""
    results = []
    for optimize in (0, 2):
        g = mg.Graph()
        plan = mg.compile(build(g), optimize=optimize)
        results.append(plan.run(feeds))
    ops = [ins.op for ins in plan.instructions]
    return ops, results[0], results[1]


def _same(unfused, fused):
    for a, b in zip(unfused, fused):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("storage, zps", [(np.int8, (-3, 5, 1)), (np.uint8, (128, 120, 131))])
@pytest.mark.parametrize("shape", [(7,), (3, 37), (2, 5, 129)])
def test_an_int8_add_and_relu_is_one_kernel_of_the_same_integers(storage, zps, shape):
    a, b = _ints(shape, storage, 0), _ints(shape, storage, 1)
    dtype = np.dtype(storage).name

    def build(g):
        qa = g.input("a", shape, storage, per_tensor(0.0625, zps[0]))
        qb = g.input("b", shape, storage, per_tensor(0.1037, zps[1]))
        # b weighted by 0.5: an add of the two alone is the QDQ pass's quantized_add instead
        return [quantize(relu(dequantize(qa) + dequantize(qb) * 0.5), 0.0871, zps[2], dtype)]

    ops, unfused, fused = _plans(build, {"a": a, "b": b})
    assert ops == ["fused_elementwise"]
    _same(unfused, fused)
    assert fused[0].dtype == storage and not (fused[0] == unfused[0] + 1).all()


def test_dequantize_then_scale_and_shift_is_one_kernel():
    q = _ints((4, 33), np.int8, 2)
    gamma = np.random.default_rng(3).normal(size=(33,)).astype(np.float32)

    def build(g):
        x = g.input("q", q.shape, np.int8, per_tensor(0.037, 7))
        return [dequantize(x) * g.input("gamma", (33,)) + 0.25]

    ops, unfused, fused = _plans(build, {"q": q, "gamma": gamma})
    assert ops == ["fused_elementwise"]
    _same(unfused, fused)


def test_a_requantisation_with_both_results_wanted():
    # the int8 result and a float one read outside: two outputs of one program, ties included
    x = (np.arange(-40, 41, dtype=np.float32) * 0.25).reshape(1, 81)
    x[0, :3] = [1e9, -1e9, 0.5]

    def build(g):
        v = g.input("x", x.shape) * 2.0
        q = quantize(v, 0.5, 3, "int8")
        return [q, dequantize(q) - v]

    ops, unfused, fused = _plans(build, {"x": x})
    assert ops == ["fused_elementwise"]
    _same(unfused, fused)


@pytest.mark.parametrize("threads", (1, 2, 3))
def test_threads_give_the_same_integers(threads):
    prog = Program([(5000,), (5000,)], (5000,), "float32",
                   [("load", 0, 0, 1), ("dequantize", 1, 0, 0, 1), ("load", 2, 1),
                    ("mul", 3, 1, 2), ("quantize_uint8", 4, 3, 2, 3), ("store", 0, 4, 2)],
                   [0.05, -2.0, 0.2, 128.0])
    q = _ints((5000,), np.int8, 4)
    w = np.random.default_rng(5).normal(size=5000).astype(np.float32) * 3
    (got,) = lowering.run(prog, [q, w], threads=threads, block=256)
    (want,) = evaluate_numpy(prog, [q, w])
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)


def test_a_nan_fails_the_fused_run_as_the_unfused_one():
    x = np.array([1.0, 0.0, 2.0], np.float32)
    g = mg.Graph()
    v = g.input("x", (3,))
    plan = mg.compile([quantize(v / v, 0.5, 0, "int8")])  # 0 / 0: NaN
    assert [ins.op for ins in plan.instructions] == ["fused_elementwise"]
    with pytest.raises(KernelError, match="NaN"):
        plan.run({"x": x})
    with pytest.raises(RuntimeError, match="status 5"):
        lowering.run(Program([(3,)], (3,), "float32",
                             [("load", 0, 0), ("quantize_int8", 1, 0, 0, 1),
                              ("store", 0, 1, 1)], [0.5, 0.0]), [x * np.nan], threads=1)


def test_per_channel_and_float64_stay_unfused():
    def build(g):
        x = g.input("x", (3, 8))
        y = g.input("y", (3, 8), np.float64)
        per_channel = quantize(relu(x), [0.1, 0.2, 0.3], 0, "int8", axis=0)
        wide = quantize(relu(y), 0.1, 0, "int8")
        return [per_channel, wide]

    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(3, 8)
    ops, unfused, fused = _plans(build, {"x": x, "y": x.astype(np.float64)})
    assert "fused_elementwise" not in ops and ops.count("quantize") == 2
    _same(unfused, fused)


def _fused_node(g, inputs, code, constants, dtype="float32", n_outputs=1):
    return g.add_node("fused_elementwise", inputs,
                      {"code": tuple(code), "constants": constants, "shape": inputs[0].shape,
                       "dtype": dtype, "n_outputs": n_outputs})


@pytest.mark.parametrize("code, constants, message", [
    ([("load", 0, 0, 1), ("exp", 1, 0), ("store", 0, 1)], (), "not dequantized with its own"),
    ([("load", 0, 0, 1), ("dequantize", 1, 0, 0, 1), ("store", 0, 1)], (0.5, 3.0),
     "not dequantized with its own"),
    ([("load", 0, 0, 2), ("dequantize", 1, 0, 0, 1), ("store", 0, 1)], (0.25, 3.0),
     "loads it as quantized uint8"),
    ([("load", 0, 0, 1), ("dequantize", 1, 0, 0, 1), ("store", 0, 1, 1)], (0.25, 3.0),
     "stored from a quantize step to it, not from dequantize"),
    ([("load", 0, 0, 1), ("dequantize", 1, 0, 0, 1), ("store", 0, 1, 7)], (0.25, 3.0),
     "storage 7 is not one of"),
    ([("load", 0, 0, 1), ("dequantize", 1, 0, 0, 1), ("load", 2, 0), ("add", 3, 1, 2),
      ("store", 0, 3)], (0.25, 3.0), "loads an input as two dtypes"),
    ([("load", 0, 0, 1), ("dequantize", 1, 0, 0, 1), ("quantize_uint8", 2, 1, 0, 2),
      ("store", 0, 2, 2)], (0.25, 3.0, 300.0), "zero point 300 is outside"),
])
def test_the_rule_refuses_malformed_quantized_programs(code, constants, message):
    g = mg.Graph()
    q = g.input("q", (4,), np.int8, per_tensor(0.25, 3))
    with pytest.raises(OpError, match=message):
        _fused_node(g, [q], code, constants)


def test_the_rule_types_a_quantized_output_and_refuses_float64():
    g = mg.Graph()
    x = g.input("x", (4,))
    code = [("load", 0, 0), ("quantize_uint8", 1, 0, 0, 1), ("store", 0, 1, 2)]
    (y,) = _fused_node(g, [x], code, (0.5, 128.0)).outputs
    assert str(y.type) == "qu8(0.5,128)[4]"
    wide = g.input("w", (4,), np.float64)
    with pytest.raises(OpError, match="float32 programs only"):
        _fused_node(g, [wide], code, (0.5, 128.0), dtype="float64")


def test_a_quantized_program_gets_no_generated_body(monkeypatch):
    from mgegraph._kernels import fused_jit
    monkeypatch.setenv(lowering.JIT_ENV, "all")  # every other program would get one
    prog = Program([(64,)], (64,), "float32",
                   [("load", 0, 0, 1), ("dequantize", 1, 0, 0, 1), ("exp", 2, 1),
                    ("store", 0, 2)], [0.1, 3.0])
    ints, _, _ = lowering.encode(prog)
    assert lowering.decode(ints).quantized
    assert fused_jit.kernel_for("fused_f32", ints) is None
