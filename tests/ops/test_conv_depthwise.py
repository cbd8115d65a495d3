"""The depthwise path of conv2d (conv_depthwise.pxi): one input and one output channel per group,
against conv_ref (test_conv.py) and PyTorch, on odd sizes, strides, dilations and paddings, in
float32 and float64, with bias and relu, on one thread and two (the same bits); and the rule
that picks it."""
import numpy as np
import pytest
from test_conv import CONV_PATH_FIELD, conv_ref

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(0)

CASES = [  # x shape, kernel, stride, padding, dilation
    ((1, 192, 56, 56), (3, 3), 1, 1, 1),        # MobileNet-v2's, stride 1 and 2
    ((1, 192, 56, 56), (3, 3), 2, 1, 1),
    ((2, 5, 7, 9), (3, 3), 1, 0, 1),
    ((2, 3, 11, 6), (5, 3), (2, 3), (2, 1), 1),
    ((1, 4, 9, 10), (3, 3), 1, 2, 2),            # dilated 'same'
    ((1, 3, 4, 5), (3, 3), 1, 4, 1),             # padding wider than the kernel: border rows
    ((2, 2, 1, 7), (1, 3), 1, (0, 1), 1),        # one row
    ((1, 2, 5, 5), (1, 1), 2, 0, 1),             # 1x1 strided
]


def _plan(x, w, b, relu, **args):
    g = mg.Graph()
    ins = [g.input("x", x.shape, x.dtype), g.input("w", w.shape, w.dtype)]
    if b is not None:
        ins.append(g.input("b", b.shape, b.dtype))
    y = apply("conv2d", tuple(ins), stride=args["stride"], padding=args["padding"],
              dilation=args["dilation"], groups=x.shape[1],
              activation="relu" if relu else "none")
    # memory="debug" refills the dead workspace with NaN after each run: a padded border read
    # before it is written shows in the second run
    return mg.compile([y], optimize=0, memory="debug")


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _workspace(plan, ins):
    return 0 if ins.workspace is None else plan.slots[ins.workspace].nbytes


def _expected_workspace(xs, args, ins, itemsize):
    """At stride 1, per thread the zero-padded input plane and the output in rows of its
    width; at other strides none."""
    if args["stride"] != (1, 1):
        return 0
    (ph, pw), dh = args["padding"], args["dilation"][0]
    hp, wp = xs[2] + 2 * ph, xs[3] + 2 * pw
    oh = hp - dh * (ins.ints[K.CONV_FIELDS.index("kh")] - 1)
    return ins.ints[K.CONV_FIELDS.index("threads")] * (hp * wp + oh * wp) * itemsize


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias,relu", [(True, True), (False, False), (True, False)])
@pytest.mark.parametrize("xs,kernel,stride,padding,dilation", CASES)
def test_depthwise_matches_reference(xs, kernel, stride, padding, dilation, bias, relu, dtype):
    x = RNG.standard_normal(xs).astype(dtype)
    w = RNG.standard_normal((xs[1], 1, *kernel)).astype(dtype)
    b = RNG.standard_normal(xs[1]).astype(dtype) if bias else None
    args = {"stride": pair(stride), "padding": pair(padding), "dilation": pair(dilation)}
    plan = _plan(x, w, b, relu, **args)
    (ins,) = [i for i in plan.instructions if i.op == "conv2d"]
    assert ins.ints[CONV_PATH_FIELD] == K.CONV_PATHS["depthwise"]
    assert _workspace(plan, ins) == _expected_workspace(xs, args, ins, np.dtype(dtype).itemsize)
    feeds = {"x": x, "w": w, **({"b": b} if bias else {})}
    (out,) = plan.run(feeds)
    (again,) = plan.run(feeds)
    np.testing.assert_array_equal(out, again)
    want = conv_ref(x, w, b, stride, padding, dilation, xs[1])
    want = np.maximum(want, 0) if relu else want
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


def test_depthwise_matches_torch_and_any_thread_count():
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_limits
    x = RNG.standard_normal((1, 192, 28, 28)).astype(np.float32)
    w = RNG.standard_normal((192, 1, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(192).astype(np.float32)
    plan = _plan(x, w, b, False, stride=(2, 2), padding=(1, 1), dilation=(1, 1))
    (two,) = plan.run({"x": x, "w": w, "b": b})
    with threadpool_limits(limits=1):
        (one,) = _plan(x, w, b, False, stride=(2, 2), padding=(1, 1), dilation=(1, 1)).run(
            {"x": x, "w": w, "b": b})
    assert np.array_equal(one, two)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                      torch.from_numpy(b), stride=2, padding=1, groups=192)
    np.testing.assert_allclose(two, want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ws,groups,expected", [
    ((8, 1, 3, 3), 8, True),      # depthwise
    ((16, 1, 3, 3), 8, False),    # a channel multiplier of 2: two outputs per group
    ((8, 2, 3, 3), 4, False),     # grouped
])
def test_rule_takes_depthwise_for_one_channel_per_group(ws, groups, expected):
    g = mg.Graph()
    y = F.conv2d(g.input("x", (1, 8, 10, 10)), g.input("w", ws), padding=1, groups=groups)
    (ins,) = [i for i in mg.compile([y]).instructions if i.op == "conv2d"]
    assert (ins.ints[CONV_PATH_FIELD] == K.CONV_PATHS["depthwise"]) == expected
    paths = lowering.applicable_paths("conv2d", "float32", (3, 3), (1, 1), (1, 1), (1, 1),
                                      groups, ws[1], 10, ws[0] // groups)
    assert ("depthwise" in paths) == expected


def test_depthwise_gradient_through_the_path():
    from mgegraph.testing import gradcheck
    x, w, b = RNG.standard_normal((2, 3, 6, 5)), RNG.standard_normal((3, 1, 3, 3)), \
        RNG.standard_normal(3)
    gradcheck(lambda v, k, c: F.conv2d(v, k, c, stride=2, padding=1, groups=3), x, w, b)
