"""Every elementwise op's meaning, written once: the table the op registry, the CPU kernels and
any later renderer (CUDA) all read.

An entry gives the op's name, kind (unary, binary, compare), the dtypes it is defined for, its
FLOPs per element, its gradient rule, its NumPy reference, and its scalar definition ``expr``: a
C expression over ``x`` (and ``y`` for binary ops) and the op's attribute parameters ``p`` and
``q``, in a subset of syntax that is valid Cython and valid C or CUDA alike: identifiers,
numeric literals, ``+ - * /``, one comparison, parentheses, and calls of

- helper functions ``m_*`` (HELPERS below; the CPU defines them in _kernels/scalar.pxd, a GPU
  backend in its own header), and
- table ops defined above the caller, with their parameters as extra arguments
  (``clip(x + 3, 0, 6)``): a composite op is its composition, at no cost after inlining.

There are no ternaries (``m_select(c, a, b)`` instead) and no ``**``. A renderer casts every
literal to the element type, so ``0.5 * x`` stays in float32 for float32 data. ``/`` divides
floats only (C divides integers by truncation, Cython in Python's way), so an op defined for
integers either avoids it or gives ``int_expr``, its definition for integer dtypes.

Adding an op is one entry here (and a helper in _kernels/scalar.pxd when it needs a new one):
setup.py renders the table into the CPU kernels' scalar functions (_kernels/ew_codegen.py), and
mgegraph.ops.elementwise registers the op and its public function.

This module imports nothing but NumPy and the standard library, so the build can load it by path.

>>> BY_NAME["silu"].expr
'x * sigmoid(x)'
"""
from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

FLOAT = (np.dtype(np.float32), np.dtype(np.float64))
NUMERIC = FLOAT + (np.dtype(np.int32), np.dtype(np.int64))
ALL = NUMERIC + (np.dtype(np.bool_),)
# uint8, int8, int16: the integer ops run them as NumPy does (wrapping); the others refuse them
SMALL_INTS = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int16))
WITH_SMALL_INTS = NUMERIC + SMALL_INTS
KINDS = ("unary", "binary", "compare")

# The helper functions expressions may call, and what each computes; every one is defined for
# the dtypes of the ops that call it. Special values follow NumPy (see the NOTE below).
HELPERS = {
    "m_exp": "e^x (float)", "m_log": "natural log (float)", "m_log1p": "log(1 + x) (float)",
    "m_expm1": "e^x - 1, precise near 0 (float)",
    "m_tanh": "tanh (float)", "m_erf": "the error function (float)",
    "m_sqrt": "square root (float)", "m_sin": "sine (float)", "m_cos": "cosine (float)",
    "m_floor": "round down (float)", "m_ceil": "round up (float)",
    # libm's on the CPU, CUDA's on a GPU (as m_sin): within their ulp bounds, not bitwise
    "m_tan": "tangent (float)", "m_asin": "arcsine, NaN outside [-1, 1] (float)",
    "m_acos": "arccosine, NaN outside [-1, 1] (float)", "m_atan": "arctangent (float)",
    "m_sinh": "hyperbolic sine (float)", "m_cosh": "hyperbolic cosine (float)",
    "m_asinh": "inverse hyperbolic sine (float)",
    "m_acosh": "inverse hyperbolic cosine, NaN below 1 (float)",
    "m_atanh": "inverse hyperbolic tangent: +-inf at +-1, NaN outside [-1, 1] (float)",
    "m_atan2": "m_atan2(y, x): the angle of the point (x, y) in [-pi, pi], C's atan2 (float)",
    "m_round": "to the nearest integer, halves away from zero, -0 kept (C's round, float)",
    "m_rint": "to the nearest integer, halves to even, -0 kept (C's rint, float)",
    "m_pow": "x^y; for integers by squaring, wrapping on overflow as NumPy; 0 for a negative "
             "exponent, which the kernels refuse before (NumPy raises)",
    "m_abs": "|x|, +0 for -0; abs(INT_MIN) is INT_MIN (wraps, as NumPy)", "m_relu": "max(x, 0): NaN stays NaN, -0 gives +0",
    "m_sign": "-1, 0 or 1; +0 for -0, NaN stays NaN",
    "m_max": "the larger, NaN if either is; y on a tie (+0 and -0)",
    "m_min": "the smaller, NaN if either is; y on a tie",
    "m_clamp": "min(max(x, lo), hi) as np.clip: hi wherever lo > hi; NaN stays NaN",
    "m_select": "m_select(c, a, b): a where c else b, both evaluated (a blend, no branch)",
    "m_floor_div": "floor(x / y) as NumPy computes it, from fmod: 1 // 0.1 is 9 (float)",
    "m_mod": "x - floor(x / y) y with the sign of y, as Python's % (float)",
    "m_floor_div_int": "Python's // on integers; 0 for a zero divisor, INT_MIN // -1 is INT_MIN "
                       "(NumPy's results; C would trap)",
    "m_mod_int": "Python's % on integers; 0 for a zero divisor and for -1 (NumPy's results)",
    "m_neg_int": "-x on integers, wrapping: -INT_MIN is INT_MIN (NumPy's result)",
    "m_add_int": "x + y on integers, wrapping on overflow (NumPy's result; C leaves it undefined)",
    "m_sub_int": "x - y on integers, wrapping on overflow",
    "m_mul_int": "x * y on integers, wrapping on overflow",
}

# NOTE: special values are NumPy's, on every path (unfused, fused, GEMM epilogue):
# relu(x) = np.maximum(x, 0), so relu(NaN) is NaN and relu(-0.0) is +0.0 (np.maximum gives its
# second operand on a tie; PyTorch's relu also keeps NaN); maximum/minimum propagate NaN and
# give y on ties; sign(-0.0) = +0.0 and sign(NaN) = NaN; abs(-0.0) = +0.0; clip(NaN) = NaN and
# clip keeps -0.0 (np.clip).


@dataclass(frozen=True)
class Elementwise:
    """One elementwise op (see the module docstring for ``expr``).

    ``params`` names the attributes bound to ``p`` and ``q`` in order (``defaults`` gives those
    that have one; the others are required). ``grad`` is the gradient rule over the public
    functions ``f`` (mgegraph.ops.elementwise): for unary ops ``grad(f, x, y, g, attrs)`` with
    input, output and output gradient, returning the input's gradient; for binary ops
    ``grad(f, x, y, out, g)`` returning one per input (None: no gradient). ``numpy`` computes
    the op on NumPy arrays: ``numpy(x, *params)`` or ``numpy(x, y)``. ``fusable``: the fusion
    pass may put it in a fused group (comparisons, whose result is bool, never are).
    ``public``: mgegraph.functional gets a function of that name made from the entry.
    ``check(attrs)`` raises ValueError for parameters the op is not defined at.
    """

    name: str
    kind: str
    expr: str
    numpy: Callable
    dtypes: tuple = FLOAT
    flops: float = 1.0
    grad: Callable | None = None
    params: tuple[str, ...] = ()
    defaults: Mapping[str, float] = field(default_factory=dict)
    int_expr: str | None = None
    fusable: bool = True
    public: bool = True
    check: Callable | None = None

    @property
    def arity(self) -> int:
        return 1 if self.kind == "unary" else 2


# -- NumPy references (float64 in, the op's value out) --------------------------------------------
def _erf(x):
    from scipy.special import erf  # lazy: the build loads this module by path, NumPy alone
    return erf(x)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _softplus(x):
    return np.logaddexp(x, 0)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _hardswish(x):
    return x * np.clip(x + 3, 0, 6) / 6


# The activations of the table keep NaN, as relu does, where ONNX's reference formula would give
# 0 (thresholded_relu, shrink): PyTorch's threshold and shrinks keep it too.
def _elu(x, alpha):
    return np.where(x > 0, x, alpha * np.expm1(x))


def _celu(x, alpha):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x, alpha * np.expm1(x / alpha))


def _mish(x):
    return x * np.tanh(_softplus(x))


def _shrink(x, lambd, bias):
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, x * 0))


def _round_half_away(x):
    # C's round without the float rounding of floor(|x| + 0.5) (0.49999997 + 0.5 rounds to 1):
    # x - trunc(x) is exact
    with np.errstate(invalid="ignore"):
        t = np.trunc(x)
        return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


def _nonzero_alpha(attrs):
    if attrs["alpha"] == 0:
        raise ValueError("alpha must not be 0 (celu divides by it)")


# -- gradient rules --------------------------------------------------------------------------------
def _gelu_grad(f, x, y, g, a):
    cdf = 0.5 * (1.0 + f.erf(x * 0.7071067811865476))
    pdf = f.exp(-0.5 * f.square(x)) * 0.3989422804014327
    return g * (cdf + x * pdf)


def _gelu_tanh_grad(f, x, y, g, a):
    t = f.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
    d_inner = 0.7978845608028654 * (1.0 + 0.134145 * f.square(x))
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - f.square(t)) * d_inner)


def _hardswish_grad(f, x, y, g, a):
    # d/dx x relu6(x + 3) / 6: 0 below -3, 1 above 3, (2x + 3) / 6 between (PyTorch's rule)
    return g * f.where(x < -3.0, 0.0, f.where(x > 3.0, 1.0, x / 3.0 + 0.5))


def _elu_grad(f, x, y, g, a):
    return f.where(x > 0, g, g * a["alpha"] * f.exp(x))


def _selu_grad(f, x, y, g, a):
    return g * a["gamma"] * f.where(x > 0, 1.0, a["alpha"] * f.exp(x))


def _celu_grad(f, x, y, g, a):
    return f.where(x > 0, g, g * f.exp(x / a["alpha"]))


def _hardsigmoid_grad(f, x, y, g, a):
    # alpha inside the ramp, 0 where it is clamped (PyTorch's: open at both ends)
    return f.where(y > 0.0, f.where(y < 1.0, g * a["alpha"], 0.0), 0.0)


def _mish_grad(f, x, y, g, a):
    t = f.tanh(f.softplus(x))
    return g * (t + x * (1.0 - t * t) * f.sigmoid(x))


def _shrink_grad(f, x, y, g, a):
    return f.where(x < -a["lambd"], g, f.where(x > a["lambd"], g, 0.0))


def _prelu_grad(f, x, y, out, g):
    return f.where(x > 0, g, g * y), f.where(x > 0, 0.0, g * x)


def _pow_grad(f, x, y, out, g):
    safe_log = f.log(f.where(x > 0, x, 1.0))
    return g * y * x ** (y - 1.0), g * out * safe_log


def _atan2_grad(f, y, x, out, g):
    # d/dy atan2(y, x) = x / r^2, d/dx = -y / r^2
    r2 = x * x + y * y
    return g * x / r2, -g * y / r2


def _zero(f, x, y, g, a):
    return g * 0.0


def _unary(name, expr, numpy, dtypes=FLOAT, flops=1.0, grad=None, **kw):
    return Elementwise(name, "unary", expr, numpy, dtypes, flops, grad, **kw)


def _binary(name, expr, numpy, dtypes=NUMERIC, flops=1.0, grad=None, **kw):
    return Elementwise(name, "binary", expr, numpy, dtypes, flops, grad, **kw)


def _compare(name, expr, numpy):
    return Elementwise(name, "compare", expr, numpy, ALL + SMALL_INTS, 1.0, fusable=False)


# Order matters twice: an op may call only ops above it, and the CPU's op codes follow it
# (unary ops first, then binary, then comparisons).
OPS: tuple[Elementwise, ...] = (
    _unary("copy", "x", lambda x: x, NUMERIC, 0.0, lambda f, x, y, g, a: g,
           fusable=False, public=False),
    # Integer expressions wrap on overflow as NumPy does, through helpers that compute in
    # unsigned arithmetic: C leaves signed overflow undefined (and INT_MIN // -1 traps)
    _unary("neg", "-x", np.negative, WITH_SMALL_INTS, 1.0, lambda f, x, y, g, a: -g,
           int_expr="m_neg_int(x)"),
    _unary("abs", "m_abs(x)", np.abs, WITH_SMALL_INTS, 1.0, lambda f, x, y, g, a: g * f.sign(x)),
    _unary("square", "x * x", np.square, WITH_SMALL_INTS, 1.0,
           lambda f, x, y, g, a: g * (2.0 * x), int_expr="m_mul_int(x, x)"),
    _unary("relu", "m_relu(x)", lambda x: np.maximum(x, 0), WITH_SMALL_INTS, 1.0,
           lambda f, x, y, g, a: f.relu_backward(y, g)),
    _unary("sign", "m_sign(x)", np.sign, WITH_SMALL_INTS, 1.0, _zero),
    _unary("clip", "m_clamp(x, p, q)", np.clip, NUMERIC, 2.0,
           lambda f, x, y, g, a: f.where(x < a["lower"], 0.0, f.where(x > a["upper"], 0.0, g)),
           params=("lower", "upper")),
    _unary("exp", "m_exp(x)", np.exp, FLOAT, 8.0, lambda f, x, y, g, a: g * y),
    _unary("log", "m_log(x)", np.log, FLOAT, 8.0, lambda f, x, y, g, a: g / x),
    _unary("log1p", "m_log1p(x)", np.log1p, FLOAT, 8.0,
           lambda f, x, y, g, a: g / (x + 1.0)),
    _unary("sqrt", "m_sqrt(x)", np.sqrt, FLOAT, 4.0, lambda f, x, y, g, a: g * 0.5 / y),
    _unary("rsqrt", "1 / m_sqrt(x)", lambda x: 1 / np.sqrt(x), FLOAT, 5.0,
           lambda f, x, y, g, a: g * -0.5 * y * y * y),
    _unary("reciprocal", "1 / x", lambda x: 1 / x, FLOAT, 1.0,
           lambda f, x, y, g, a: -g * y * y),
    _unary("sin", "m_sin(x)", np.sin, FLOAT, 8.0, lambda f, x, y, g, a: g * f.cos(x)),
    _unary("cos", "m_cos(x)", np.cos, FLOAT, 8.0, lambda f, x, y, g, a: -g * f.sin(x)),
    _unary("tanh", "m_tanh(x)", np.tanh, FLOAT, 8.0,
           lambda f, x, y, g, a: g * (1.0 - y * y)),
    _unary("sigmoid", "1 / (1 + m_exp(-x))", _sigmoid, FLOAT, 10.0,
           lambda f, x, y, g, a: g * y * (1.0 - y)),
    _unary("silu", "x * sigmoid(x)", lambda x: x * _sigmoid(x), FLOAT, 11.0,
           lambda f, x, y, g, a: g * (f.sigmoid(x) * (1.0 + x * (1.0 - f.sigmoid(x))))),
    # relu(x) + log1p(exp(-|x|)) never overflows
    _unary("softplus", "relu(x) + log1p(exp(-abs(x)))", _softplus, FLOAT, 17.0,
           lambda f, x, y, g, a: g * f.sigmoid(x)),
    _unary("erf", "m_erf(x)", _erf, FLOAT, 10.0,
           lambda f, x, y, g, a: g * 1.1283791670955126 * f.exp(-f.square(x))),
    _unary("gelu", "0.5 * x * (1 + erf(x * 0.7071067811865476))",
           lambda x: 0.5 * x * (1 + _erf(x * 0.7071067811865476)), FLOAT, 12.0, _gelu_grad),
    _unary("gelu_tanh", "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))",
           _gelu_tanh, FLOAT, 14.0, _gelu_tanh_grad, public=False),
    _unary("hardswish", "x * clip(x + 3, 0, 6) / 6", _hardswish, FLOAT, 4.0, _hardswish_grad),
    _unary("floor", "m_floor(x)", np.floor, FLOAT, 1.0, _zero),
    _unary("ceil", "m_ceil(x)", np.ceil, FLOAT, 1.0, _zero),
    _unary("leaky_relu", "m_select(x > 0, x, x * p)",
           lambda x, slope: np.where(x > 0, x, x * slope), FLOAT, 2.0,
           lambda f, x, y, g, a: f.where(x > 0, g, g * a["negative_slope"]),
           params=("negative_slope",), defaults={"negative_slope": 0.01}),
    # the activations: ONNX's names for the parameters (p, q), PyTorch's defaults
    _unary("elu", "m_select(x > 0, x, p * m_expm1(x))", _elu, FLOAT, 10.0, _elu_grad,
           params=("alpha",), defaults={"alpha": 1.0}),
    _unary("selu", "q * elu(x, p)", lambda x, alpha, gamma: gamma * _elu(x, alpha), FLOAT,
           11.0, _selu_grad, params=("alpha", "gamma"),
           defaults={"alpha": 1.6732632423543772, "gamma": 1.0507009873554805}),
    _unary("celu", "m_select(x > 0, x, p * m_expm1(x / p))", _celu, FLOAT, 11.0, _celu_grad,
           params=("alpha",), defaults={"alpha": 1.0}, check=_nonzero_alpha),
    _unary("softsign", "x / (1 + m_abs(x))", lambda x: x / (1 + np.abs(x)), FLOAT, 3.0,
           lambda f, x, y, g, a: g / f.square(1.0 + f.abs(x))),
    # two meanings by their parameters: ONNX's HardSigmoid (0.2, 0.5), PyTorch's (1/6, 1/2)
    _unary("hardsigmoid", "m_clamp(x * p + q, 0, 1)",
           lambda x, alpha, beta: np.clip(x * alpha + beta, 0, 1), FLOAT, 4.0,
           _hardsigmoid_grad, params=("alpha", "beta")),
    _unary("mish", "x * m_tanh(softplus(x))", _mish, FLOAT, 26.0, _mish_grad),
    # -softplus(-x): log(sigmoid(x)) without its underflow to log(0) below -88 (float32)
    _unary("logsigmoid", "-softplus(-x)", lambda x: -_softplus(-x), FLOAT, 18.0,
           lambda f, x, y, g, a: g * f.sigmoid(-x)),
    _unary("thresholded_relu", "m_select(x <= p, 0, x)",
           lambda x, alpha: np.where(x <= alpha, 0, x), FLOAT, 1.0,
           lambda f, x, y, g, a: f.where(x > a["alpha"], g, 0.0),
           params=("alpha",), defaults={"alpha": 1.0}),
    # ONNX's Shrink; softshrink is shrink(l, l), hardshrink shrink(l, 0). Between the bounds
    # x * 0: zero with x's sign (PyTorch's softshrink), NaN for NaN
    _unary("shrink", "m_select(x < -p, x + q, m_select(x > p, x - q, x * 0))", _shrink, FLOAT,
           3.0, _shrink_grad, params=("lambd", "bias"), defaults={"lambd": 0.5, "bias": 0.0}),
    # trigonometric and hyperbolic functions and their inverses (MegEngine's F. names); outside
    # an inverse's domain NaN, at atanh's ends +-inf, as NumPy
    _unary("tan", "m_tan(x)", np.tan, FLOAT, 8.0, lambda f, x, y, g, a: g * (1.0 + y * y)),
    _unary("asin", "m_asin(x)", np.arcsin, FLOAT, 8.0,
           lambda f, x, y, g, a: g * f.rsqrt(1.0 - x * x)),
    _unary("acos", "m_acos(x)", np.arccos, FLOAT, 8.0,
           lambda f, x, y, g, a: -g * f.rsqrt(1.0 - x * x)),
    _unary("atan", "m_atan(x)", np.arctan, FLOAT, 8.0,
           lambda f, x, y, g, a: g / (1.0 + x * x)),
    _unary("sinh", "m_sinh(x)", np.sinh, FLOAT, 8.0, lambda f, x, y, g, a: g * f.cosh(x)),
    _unary("cosh", "m_cosh(x)", np.cosh, FLOAT, 8.0, lambda f, x, y, g, a: g * f.sinh(x)),
    _unary("asinh", "m_asinh(x)", np.arcsinh, FLOAT, 8.0,
           lambda f, x, y, g, a: g * f.rsqrt(x * x + 1.0)),
    _unary("acosh", "m_acosh(x)", np.arccosh, FLOAT, 8.0,
           lambda f, x, y, g, a: g * f.rsqrt(x * x - 1.0)),
    _unary("atanh", "m_atanh(x)", np.arctanh, FLOAT, 8.0,
           lambda f, x, y, g, a: g / (1.0 - x * x)),
    # two roundings: MegEngine's F.round (C's round: halves away from zero) and ONNX's Round,
    # NumPy's and PyTorch's (halves to even); they differ only at halves (2.5: 3 and 2)
    _unary("round", "m_round(x)", _round_half_away, FLOAT, 1.0, _zero),
    _unary("round_half_even", "m_rint(x)", np.rint, FLOAT, 1.0, _zero),
    _binary("add", "x + y", np.add, WITH_SMALL_INTS, 1.0, lambda f, x, y, out, g: (g, g),
            int_expr="m_add_int(x, y)"),
    _binary("sub", "x - y", np.subtract, WITH_SMALL_INTS, 1.0, lambda f, x, y, out, g: (g, -g),
            int_expr="m_sub_int(x, y)"),
    _binary("mul", "x * y", np.multiply, WITH_SMALL_INTS, 1.0,
            lambda f, x, y, out, g: (g * y, g * x), int_expr="m_mul_int(x, y)"),
    _binary("div", "x / y", np.divide, FLOAT, 1.0,
            lambda f, x, y, out, g: (g / y, -g * out / y)),
    _binary("pow", "m_pow(x, y)", np.power, WITH_SMALL_INTS, 8.0, _pow_grad),
    _binary("maximum", "m_max(x, y)", np.maximum, WITH_SMALL_INTS, 1.0,
            lambda f, x, y, out, g: (f.where(x >= y, g, 0.0), f.where(x >= y, 0.0, g))),
    _binary("minimum", "m_min(x, y)", np.minimum, WITH_SMALL_INTS, 1.0,
            lambda f, x, y, out, g: (f.where(x <= y, g, 0.0), f.where(x <= y, 0.0, g))),
    _binary("floor_div", "m_floor_div(x, y)", np.floor_divide, WITH_SMALL_INTS, 1.0,
            lambda f, x, y, out, g: (None, None), int_expr="m_floor_div_int(x, y)"),
    _binary("mod", "m_mod(x, y)", np.mod, WITH_SMALL_INTS, 1.0,
            lambda f, x, y, out, g: (g, -g * f.floor_div(x, y)), int_expr="m_mod_int(x, y)"),
    # relu_backward(y, g) = g where relu's output y > 0: d/dg is the same mask, d/dy is zero
    # almost everywhere
    _binary("relu_backward", "m_select(x > 0, y, 0)", lambda y, g: np.where(y > 0, g, 0),
            FLOAT, 1.0, lambda f, y, g, out, gg: (None, f.relu_backward(y, gg)), public=False),
    # prelu(x, slope): leaky_relu with the slope a tensor (broadcast, per channel)
    _binary("prelu", "m_select(x > 0, x, x * y)", lambda x, y: np.where(x > 0, x, x * y), FLOAT,
            2.0, _prelu_grad),
    # atan2(y, x): the angle of the point (x, y), C's and NumPy's argument order
    _binary("atan2", "m_atan2(x, y)", np.arctan2, FLOAT, 10.0, _atan2_grad),
    _compare("equal", "x == y", np.equal),
    _compare("not_equal", "x != y", np.not_equal),
    _compare("less", "x < y", np.less),
    _compare("less_equal", "x <= y", np.less_equal),
    _compare("greater", "x > y", np.greater),
    _compare("greater_equal", "x >= y", np.greater_equal),
)
BY_NAME: dict[str, Elementwise] = {op.name: op for op in OPS}
UNARY = tuple(op.name for op in OPS if op.kind == "unary")
BINARY = tuple(op.name for op in OPS if op.kind == "binary")
COMPARE = tuple(op.name for op in OPS if op.kind == "compare")


# -- the expression subset -------------------------------------------------------------------------
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARES = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
             ast.NotEq: "!="}


def parse(expr: str) -> ast.expr:
    """``expr`` as a Python AST, which the subset shares with C; ValueError outside it.

    >>> type(parse("x * m_clamp(x + 3, 0, 6)")).__name__
    'BinOp'
    """
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"{expr!r} is not an expression: {exc.msg}") from None
    for node in ast.walk(tree):
        _check_node(node, expr)
    return tree


def _check_node(node, expr) -> None:
    ok = (isinstance(node, (ast.Name, ast.Load, ast.USub, *_BINOPS, *_COMPARES))
          or isinstance(node, ast.BinOp) and type(node.op) in _BINOPS
          or isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
          or isinstance(node, ast.Compare) and len(node.ops) == 1
          or isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords
          or isinstance(node, ast.Constant) and type(node.value) in (int, float))
    if not ok:
        raise ValueError(f"{expr!r}: {ast.unparse(node) if isinstance(node, ast.expr) else node}"
                         " is outside the expression subset shared by C and Cython")


def calls(expr: str) -> list[str]:
    """The functions ``expr`` calls (helpers and table ops), in order of first use."""
    names = [n.func.id for n in ast.walk(parse(expr)) if isinstance(n, ast.Call)]
    return list(dict.fromkeys(names))


def render(tree: ast.expr, literal: Callable[[str], str], call: Callable[[str, list], str]
           ) -> str:
    """The expression as source text, every operation parenthesised so C reads it as Python
    does; ``literal(text)`` renders a number (a renderer casts it to the element type) and
    ``call(name, args)`` a call.

    >>> render(parse("x * 0.5"), lambda t: f"(T){t}", lambda n, a: f"{n}({', '.join(a)})")
    '(x * (T)0.5)'
    """
    def walk(node):
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Constant):
            return literal(repr(node.value))
        if isinstance(node, ast.UnaryOp):
            return f"(-{walk(node.operand)})"
        if isinstance(node, ast.BinOp):
            return f"({walk(node.left)} {_BINOPS[type(node.op)]} {walk(node.right)})"
        if isinstance(node, ast.Compare):
            op = _COMPARES[type(node.ops[0])]
            return f"({walk(node.left)} {op} {walk(node.comparators[0])})"
        return call(node.func.id, [walk(a) for a in node.args])
    return walk(tree)


def check_table(ops=OPS, helpers=HELPERS) -> None:
    """ValueError naming the op unless every entry is well formed: a known kind, expressions in
    the subset over the op's own variables, calls of known helpers or of ops above it with the
    right number of arguments and dtypes covering the caller's, no ``/`` in an integer
    expression, and parameters that match the arity.

    >>> check_table()
    """
    seen: dict[str, Elementwise] = {}
    for op in ops:
        if op.kind not in KINDS or op.name in seen or op.name in helpers:
            raise ValueError(f"{op.name}: unknown kind {op.kind!r} or a repeated name")
        if len(op.params) > (2 if op.kind == "unary" else 0):
            raise ValueError(f"{op.name}: a {op.kind} op takes at most "
                             f"{2 if op.kind == 'unary' else 0} parameters")
        for expr, dtypes in _definitions(op):
            _check_expression(op, expr, dtypes, seen, helpers)
        seen[op.name] = op


def _definitions(op):
    ints = tuple(d for d in op.dtypes if d.kind in "iub")
    if op.int_expr is None:
        return [(op.expr, op.dtypes)]
    floats = tuple(d for d in op.dtypes if d.kind == "f")
    return [(op.expr, floats), (op.int_expr, ints)]


def _check_expression(op, expr, dtypes, seen, helpers) -> None:
    tree = parse(expr)
    variables = {"x", "y"} if op.kind != "unary" else {"x", *("p", "q")[:len(op.params)]}
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in called and node.id not in variables:
            raise ValueError(f"{op.name}: {expr!r} reads {node.id!r}; it may read "
                             f"{sorted(variables)}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and \
                any(d.kind != "f" for d in dtypes):
            raise ValueError(f"{op.name}: {expr!r} divides, and C and Cython divide integers "
                             "differently; give int_expr for the integer dtypes")
        if isinstance(node, ast.Call):
            _check_call(op, node, dtypes, seen, helpers)


def _check_call(op, node, dtypes, seen, helpers) -> None:
    name = node.func.id
    if name in helpers:
        return
    callee = seen.get(name)
    if callee is None:
        raise ValueError(f"{op.name} calls {name!r}, which is neither a helper nor an op "
                         "defined above it")
    if callee.kind == "compare" or len(node.args) != callee.arity + len(callee.params):
        raise ValueError(f"{op.name} calls {name} with {len(node.args)} arguments; it takes "
                         f"{callee.arity + len(callee.params)} and gives a value")
    if not set(dtypes) <= set(callee.dtypes):
        raise ValueError(f"{op.name} calls {name}, which is not defined for all its dtypes")
