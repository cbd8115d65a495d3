"""Every path that computes an elementwise op gives bitwise the same result: the unfused kernels
(optimize=0), the fused kernel (the op inside a fused group) and, for relu, the GEMM and conv
epilogues. Checked on the values where implementations part ways: signed zeros, infinities, NaN,
the smallest subnormal, the largest float, and the points where exp, tanh, erf and the clamps
switch form. The special values themselves are NumPy's (elementwise_table.py, NOTE)."""
import itertools

import numpy as np
import pytest

import mgegraph as mg
from mgegraph.ops import elementwise_table as TABLE
from mgegraph.ops.fused import FUSABLE_OPS

DTYPES = [np.float32, np.float64]
PARAMS = {"leaky_relu": {"negative_slope": 0.1}, "clip": {"lower": -1.5, "upper": 2.5},
          "hardsigmoid": {"alpha": 0.2, "beta": 0.5}, "celu": {"alpha": 0.7},
          "shrink": {"lambd": 1.5, "bias": 0.25}}
FLOAT_UNARY = [op.name for op in TABLE.OPS if op.kind == "unary" and np.float32 in op.dtypes]
FLOAT_BINARY = [op.name for op in TABLE.OPS if op.kind == "binary" and np.float32 in op.dtypes]


def special_values(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    # where exp clamps and flushes, tanh and erf change formula, the clamps of clip, relu6 and
    # hardswish bite, and float32 erf's polynomial hands over
    switches = [88.72283935546875, 88.7, 89.0, -87.3, -103.9, -104.0, -105.0, 709.78, 710.0,
                -745.0, -746.0, 7.90531110763549805, 7.9, 8.0, 0.3, 0.0004, 0.5, 1.5, 2.5, 3.0,
                6.0, 1e-30, 20.0]
    values = [0.0, np.inf, np.nan, info.smallest_subnormal, info.tiny, info.max, 1.0, *switches]
    with np.errstate(over="ignore"):
        return np.array(values + [-v for v in values], dtype)


def same_bits(a, b) -> bool:
    """Equal as floats, NaN equal to NaN (whatever its payload), and zeros of the same sign."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
        return False
    number = ~np.isnan(a)
    return np.array_equal(np.signbit(a[number]), np.signbit(b[number]))


def _node(g, name, inputs, attrs=None):
    (out,) = g.add_node(name, tuple(inputs), PARAMS.get(name, {}) if attrs is None
                        else attrs).outputs
    return out


def unfused(name, arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([_node(g, name, xs)], optimize=0).run(_feeds(arrays))
    return out


def fused(name, arrays):
    # a group needs two members: the op, and a negation that reads it (both are outputs)
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    y = _node(g, name, xs)
    plan = mg.compile([y, _node(g, "neg", [y])], optimize=["fuse"])
    assert "fused_elementwise" in str(plan)
    out, _ = plan.run(_feeds(arrays))
    return out


def _feeds(arrays):
    return {f"x{i}": a for i, a in enumerate(arrays)}


def pairs(dtype):
    v = special_values(dtype)
    x, y = np.array(list(itertools.product(v, v)), dtype).T
    return x, y


def reference(name, arrays):
    entry = TABLE.BY_NAME[name]
    with np.errstate(all="ignore"):
        attrs = {**entry.defaults, **PARAMS.get(name, {})}
        return entry.numpy(*(a.astype(np.float64) for a in arrays),
                           *(attrs[p] for p in entry.params))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FLOAT_UNARY)
def test_unary_fused_and_unfused_agree_bitwise(name, dtype):
    x = special_values(dtype)
    with np.errstate(all="ignore"):
        one = unfused(name, [x])
        if name in FUSABLE_OPS:
            assert same_bits(fused(name, [x]), one)
    # NaN where NumPy's reference has NaN, and nowhere else
    np.testing.assert_array_equal(np.isnan(one), np.isnan(reference(name, [x])), err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FLOAT_BINARY)
def test_binary_fused_and_unfused_agree_bitwise(name, dtype):
    x, y = pairs(dtype)
    with np.errstate(all="ignore"):
        one = unfused(name, [x, y])
        assert same_bits(fused(name, [x, y]), one)
    if name != "pow":  # libm's pow and NumPy's differ on NaN ** 0 and 1 ** NaN (both 1)
        np.testing.assert_array_equal(np.isnan(one), np.isnan(reference(name, [x, y])),
                                      err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", TABLE.COMPARE)
def test_comparisons_in_the_fused_kernel_agree_with_the_compare_kernel(name, dtype):
    # comparisons stay out of fusion groups (they give bool), but the fused kernel runs them as
    # 1.0 or 0.0 for where: the same truth on every pair
    from mgegraph._kernels.lowering.fused import run
    from mgegraph.ops.fused_program import Program

    x, y = pairs(dtype)
    code = [("load", 0, 0), ("load", 1, 1), (name, 2, 0, 1), ("store", 0, 2)]
    (got,) = run(Program([x.shape, y.shape], x.shape, dtype, code), [x, y])
    np.testing.assert_array_equal(got, unfused(name, [x, y]).astype(dtype))
    np.testing.assert_array_equal(got, getattr(np, name)(x, y).astype(dtype))


# -- the decisions, on every path ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("path", [unfused, fused])
def test_special_values_are_numpys(path, dtype):
    nan, inf = np.nan, np.inf
    x = np.array([nan, -0.0, 0.0, -inf, 2.0], dtype)
    cases = {"relu": [nan, 0.0, 0.0, 0.0, 2.0], "abs": [nan, 0.0, 0.0, inf, 2.0],
             "sign": [nan, 0.0, 0.0, -1.0, 1.0], "clip": [nan, -0.0, 0.0, -1.5, 2.0]}
    for name, want in cases.items():
        assert same_bits(path(name, [x]), np.array(want, dtype)), name
        assert same_bits(np.array(want, dtype), reference(name, [x]).astype(dtype)), name
    a = np.array([nan, 1.0, -0.0, 0.0], dtype)
    b = np.array([1.0, nan, 0.0, -0.0], dtype)
    for name, want in (("maximum", [nan, nan, 0.0, -0.0]), ("minimum", [nan, nan, 0.0, -0.0])):
        # NaN from either side; on a tie of zeros, the second operand (np.maximum's choice)
        assert same_bits(path(name, [a, b]), np.array(want, dtype)), name
        assert same_bits(getattr(np, name)(a, b), np.array(want, dtype)), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_composites_are_their_compositions(dtype):
    # silu is x * sigmoid(x) and hardswish x * clip(x + 3, 0, 6) / 6 in the table, so the op is
    # bitwise the graph of its parts
    x = special_values(dtype)
    g = mg.Graph()
    v = g.input("x", x.shape, dtype)
    three, six = g.const(np.asarray(3, dtype)), g.const(np.asarray(6, dtype))
    relu6 = _node(g, "clip", [_node(g, "add", [v, three])], {"lower": 0.0, "upper": 6.0})
    parts = [_node(g, "mul", [v, _node(g, "sigmoid", [v])]),
             _node(g, "div", [_node(g, "mul", [v, relu6]), six])]
    with np.errstate(all="ignore"):
        silu, hardswish = mg.compile(parts, optimize=0).run({"x": x})
        assert same_bits(unfused("silu", [x]), silu)
        assert same_bits(unfused("hardswish", [x]), hardswish)


# -- the epilogue's relu ---------------------------------------------------------------------------
def _epilogue_pair(build, arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    y = _node(g, "relu", [build(g, *xs)])
    fused_plan = mg.compile([y], optimize=["epilogue"])
    assert "activation=relu" in str(fused_plan)
    with np.errstate(all="ignore"):
        return fused_plan.run(_feeds(arrays))[0], mg.compile([y], optimize=0).run(
            _feeds(arrays))[0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_relu_epilogue_is_relu_bitwise(dtype):
    # a (n, 1) x (1, 1) GEMM by 1.0 is the input itself, special values and all; the bias -0.0
    # changes no value (x + -0.0 is x, -0.0 included)
    x = special_values(dtype)[:, None]
    w, b = np.ones((1, 1), dtype), np.array([-0.0], dtype)

    def build(g, xv, wv, bv):
        return _node(g, "add", [_node(g, "linear", [xv, wv]), bv])

    with_epilogue, separate = _epilogue_pair(build, [x, w, b])
    assert same_bits(with_epilogue, separate)
    assert same_bits(separate, unfused("relu", [x]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_relu_epilogue_is_relu_bitwise(dtype):
    x = special_values(dtype).reshape(1, 1, 2, -1)
    w, b = np.ones((1, 1, 1, 1), dtype), np.array([-0.0], dtype)

    def build(g, xv, wv, bv):
        return _node(g, "conv2d", [xv, wv, bv], {"stride": (1, 1), "padding": (0, 0),
                                                 "dilation": (1, 1), "groups": 1})

    with_epilogue, separate = _epilogue_pair(build, [x, w, b])
    assert same_bits(with_epilogue, separate)
    assert same_bits(separate, unfused("relu", [x]))
