"""Gradient rules of matmul, linear, conv2d and pooling against finite differences (float64),
the rules of their backward ops, and second-order checks through them."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops import conv as C
from mgegraph.ops.builder import apply
from mgegraph.ops.registry import get_op
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape)


def grad_ops(fn, *shapes):
    """The op names of the gradient nodes that mg.grad adds for ``fn``."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", s, "float64") for i, s in enumerate(shapes)]
    loss = F.sum(fn(*xs))
    before = len(g.nodes)
    grads = mg.grad(loss, xs)
    return [n.op.name for n in g.nodes[before:]], grads


# -- matmul ---------------------------------------------------------------------------------------
MATMUL_SHAPES = [
    # shapes of op(a), op(b)
    ((3, 4), (4, 2)), ((1, 4), (4, 1)), ((4, 1), (1, 3)),
    ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)),
    ((2, 3, 4), (4, 2)),                          # B shared by the batch: dB in one GEMM
    ((3, 4), (2, 4, 2)),                          # A shared by the batch
    ((2, 1, 2, 3), (3, 3, 2)),                    # both broadcast, size-1 batch dim
    ((1, 2, 3), (2, 3, 2)), ((2, 2, 3), (1, 3, 2)),
]


def stored(shape, flag):
    return shape[:-2] + shape[-2:][::-1] if flag and len(shape) >= 2 else shape


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_grad(sa, sb, ta, tb):
    a, b = rand(*stored(sa, ta)), rand(*stored(sb, tb))
    gradcheck(lambda x, y: F.matmul(x, y, transpose_a=ta, transpose_b=tb), a, b)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_matmul_grad_uses_transpose_flags_not_copies(ta, tb):
    ops, (da, db) = grad_ops(lambda x, y: F.matmul(x, y, transpose_a=ta, transpose_b=tb),
                             stored((2, 3, 4), ta), stored((4, 5), tb))
    assert "transpose" not in ops and ops.count("matmul") == 2
    assert da.shape == stored((2, 3, 4), ta) and db.shape == stored((4, 5), tb)


def test_matmul_grad_of_shared_b_needs_no_reduction():
    ops, (_, db) = grad_ops(lambda x, y: x @ y, (2, 3, 4), (4, 5))
    assert "sum" not in ops and db.node.op.name == "matmul" and db.shape == (4, 5)


def test_matmul_integer_inputs_get_no_gradient():
    g = mg.Graph()
    y = F.matmul(g.input("a", (2, 3), "int32"), g.input("b", (3, 2), "int32"))
    assert get_op("matmul").grad(y.node, (F.ones_like(y),)) == (None, None)


def test_matmul_hessian_vector_product():
    w = rand(4, 3)

    def hvp(x, v):
        (dx,) = mg.grad(F.sum(F.tanh(F.matmul(x, w)) ** 2), [x])
        return F.sum(dx * v)
    gradcheck(hvp, rand(2, 4), rand(2, 4), rtol=1e-5, atol=1e-6)


def test_matmul_second_order_through_both_operands():
    def hvp(a, b, v):
        (da,) = mg.grad(F.sum(F.sin(F.matmul(a, b, transpose_b=True))), [a])
        return F.sum(da * v)
    gradcheck(hvp, rand(2, 3, 4), rand(5, 4), rand(2, 3, 4), rtol=1e-5, atol=1e-6)


# -- linear ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("xshape", [(4,), (3, 4), (2, 3, 4), (1, 1, 4)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_grad(xshape, bias):
    x, w, b = rand(*xshape), rand(5, 4), rand(5)
    if bias:
        gradcheck(F.linear, x, w, b)
    else:
        gradcheck(F.linear, x, w)


def test_linear_weight_grad_is_one_gemm():
    ops, (_, dw, db) = grad_ops(F.linear, (2, 3, 4), (5, 4), (5,))
    assert ops.count("matmul") == 2 and "transpose" not in ops
    assert dw.node.op.name == "matmul" and dw.shape == (5, 4) and db.shape == (5,)


def test_linear_hessian_vector_product_in_the_weight():
    x, b = rand(3, 4), rand(2)

    def hvp(w, v):
        (dw,) = mg.grad(F.sum(F.tanh(F.linear(x, w, b))), [w])
        return F.sum(dw * v)
    gradcheck(hvp, rand(2, 4), rand(2, 4), rtol=1e-5, atol=1e-6)


# -- conv2d ---------------------------------------------------------------------------------------
CONV_CASES = [
    # x shape, weight shape, stride, padding, dilation, groups
    ((2, 2, 4, 4), (3, 2, 3, 3), 1, 0, 1, 1),
    ((1, 2, 5, 4), (2, 2, 3, 2), (2, 1), (1, 0), 1, 1),   # stride and padding per axis
    ((1, 1, 6, 5), (2, 1, 2, 2), 2, 1, 1, 1),             # stride 2 leaves a row unread
    ((1, 2, 5, 5), (2, 2, 2, 2), 1, 1, 2, 1),             # dilation
    ((1, 4, 3, 3), (4, 2, 2, 2), 1, 1, 1, 2),             # groups
    ((2, 3, 3, 3), (3, 1, 3, 3), 1, 1, 1, 3),             # depthwise
    ((2, 3, 3, 2), (4, 3, 1, 1), 1, 0, 1, 1),             # 1x1: no im2col
    ((1, 2, 1, 1), (3, 2, 1, 1), 1, 0, 1, 1),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV_CASES)
def test_conv2d_grad(xs, ws, stride, padding, dilation, groups, bias):
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    if bias:
        gradcheck(lambda v, k, c: F.conv2d(v, k, c, **args), x, w, b)
    else:
        gradcheck(lambda v, k: F.conv2d(v, k, **args), x, w)


def test_conv2d_grad_grouped_weight_and_4d_bias():
    x, w, b = rand(1, 4, 3, 3), rand(2, 1, 2, 2, 2), rand(1, 2, 1, 1)
    dx, dw, db = gradcheck(lambda v, k, c: F.conv2d(v, k, c, padding=1, groups=2), x, w, b)
    assert dw.shape == w.shape and db.shape == b.shape


CONV_ATTRS = [((1, 1), (0, 0), (1, 1), 1), ((2, 1), (1, 1), (1, 2), 1), ((1, 1), (1, 0), (1, 1), 2)]


@pytest.mark.parametrize("stride,padding,dilation,groups", CONV_ATTRS)
def test_conv2d_backward_data_grad(stride, padding, dilation, groups):
    conv = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    hw, w = (4, 3), rand(2, 2 // groups, 2, 2)
    dy_shape = F.conv2d(mg.Graph().input("x", (1, 2, *hw)), w, **conv).shape
    gradcheck(lambda k, dy: C.conv2d_backward_data(k, dy, hw, **conv), w, rand(*dy_shape))


@pytest.mark.parametrize("stride,padding,dilation,groups", CONV_ATTRS)
def test_conv2d_backward_filter_grad(stride, padding, dilation, groups):
    conv = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    x, kernel = rand(1, 2, 4, 3), (2, 2)
    dy_shape = F.conv2d(mg.Graph().input("x", x.shape), rand(2, 2 // groups, *kernel),
                        **conv).shape
    gradcheck(lambda v, dy: C.conv2d_backward_filter(v, dy, kernel, **conv), x, rand(*dy_shape))


def test_conv2d_hessian_vector_product():
    b = rand(2)

    def hvp(x, w, v):
        (dx,) = mg.grad(F.sum(F.tanh(F.conv2d(x, w, b, stride=2, padding=1))), [x])
        return F.sum(dx * v)
    gradcheck(hvp, rand(1, 2, 4, 3), rand(2, 2, 2, 2), rand(1, 2, 4, 3), rtol=1e-5, atol=1e-6)


# -- pooling --------------------------------------------------------------------------------------
POOL_CASES = [
    # x shape, kernel, stride, padding
    ((1, 2, 4, 4), 2, 2, 0), ((1, 1, 5, 5), 3, 2, 1), ((2, 1, 4, 5), (2, 3), 1, (1, 1)),
    ((1, 1, 5, 4), 3, 1, 0), ((1, 2, 1, 1), 1, 1, 0),
]


@pytest.mark.parametrize("xs,kernel,stride,padding", POOL_CASES)
def test_max_pool2d_grad(xs, kernel, stride, padding):
    # distinct values far apart, so no finite-difference step changes a window's argmax
    x = RNG.permutation(np.prod(xs)).reshape(xs) * 0.1
    gradcheck(lambda v: F.max_pool2d(v, kernel, stride, padding), x)


@pytest.mark.parametrize("mode", ["average", "average_count_exclude_padding"])
@pytest.mark.parametrize("xs,kernel,stride,padding", POOL_CASES)
def test_avg_pool2d_grad(xs, kernel, stride, padding, mode):
    gradcheck(lambda v: F.avg_pool2d(v, kernel, stride, padding, mode=mode), rand(*xs))


@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("xs,oshp", [((1, 2, 5, 5), (2, 3)), ((1, 1, 3, 4), 1),
                                     ((2, 1, 2, 3), (3, 4))])   # windows overlap when growing
def test_adaptive_pool2d_grad(xs, oshp, kind):
    fn = F.adaptive_avg_pool2d if kind == "avg" else F.adaptive_max_pool2d
    x = RNG.permutation(np.prod(xs)).reshape(xs) * 0.1
    gradcheck(lambda v: fn(v, oshp), x)


def test_max_pool2d_grad_goes_to_the_first_max_of_a_tie():
    x = np.zeros((1, 1, 2, 4))
    x[0, 0, 1, 3] = -1.0
    g = mg.Graph()
    v = g.input("x", x.shape, "float64")
    (dx,) = mg.compile(mg.grad(F.sum(F.max_pool2d(v, 2, 1)), [v])).run({"x": x})
    np.testing.assert_array_equal(dx[0, 0], [[1, 1, 1, 0], [0, 0, 0, 0]])


WINDOW = {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}
ADAPTIVE = {"oshp": (2, 3)}


@pytest.mark.parametrize("prefix,attrs,oshp", [("", WINDOW, (3, 3)),
                                               ("adaptive_", ADAPTIVE, (2, 3))])
def test_max_pool2d_backward_and_select_grads(prefix, attrs, oshp):
    # linear in their second input; the first (x) gets none, as it only picks the cells
    x = RNG.permutation(50).reshape(1, 2, 5, 5) * 0.1
    bwd, sel = f"{prefix}max_pool2d_backward", f"{prefix}max_pool2d_select"
    gradcheck(lambda v, d: apply(bwd, (v, d), **attrs), x, rand(1, 2, *oshp), wrt=[1])
    gradcheck(lambda v, h: apply(sel, (v, h), **attrs), x, rand(*x.shape), wrt=[1])
    g = mg.Graph()
    out = apply(bwd, (g.input("x", x.shape, "float64"), g.input("d", (1, 2, *oshp), "float64")),
                **attrs)
    assert get_op(bwd).grad(out.node, (F.ones_like(out),))[0] is None


@pytest.mark.parametrize("prefix,attrs,oshp", [
    ("", {**WINDOW, "mode": "average"}, (3, 2)),
    ("", {**WINDOW, "mode": "average_count_exclude_padding"}, (3, 2)),
    ("adaptive_", ADAPTIVE, (2, 3))])
def test_avg_pool2d_backward_grad(prefix, attrs, oshp):
    bwd = f"{prefix}avg_pool2d_backward"
    gradcheck(lambda d: apply(bwd, (d,), input_hw=(5, 4), **attrs), rand(1, 2, *oshp))


@pytest.mark.parametrize("pool", [lambda v: F.max_pool2d(v, 2, 1),
                                  lambda v: F.avg_pool2d(v, 3, 2, 1),
                                  lambda v: F.adaptive_max_pool2d(v, (2, 2)),
                                  lambda v: F.adaptive_avg_pool2d(v, (2, 3))])
def test_pool_hessian_vector_product(pool):
    def hvp(x, v):
        (dx,) = mg.grad(F.sum(F.tanh(pool(x)) ** 2), [x])
        return F.sum(dx * v)
    x = RNG.permutation(24).reshape(1, 2, 3, 4) * 0.1
    gradcheck(hvp, x, rand(1, 2, 3, 4), rtol=1e-5, atol=1e-6)
