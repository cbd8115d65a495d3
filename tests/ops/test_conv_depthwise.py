"""The depthwise path of conv2d (conv_depthwise.pxi): one input and one output channel per group,
against conv_ref (test_conv.py) and PyTorch, on odd sizes, strides, dilations and paddings, in
float32 and float64, with bias and the epilogue's activations, on one thread and two (the same
bits), on every instruction set this CPU runs (dw3.h's 3x3 planes); and the rule that picks
it."""
import numpy as np
import pytest
from test_conv import CONV_PATH_FIELD, conv_ref

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels import parallel
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
    # dw3.h's 3x3 planes: rows of whole vectors and a last one overlapping, rows narrower than
    # a vector (half vectors, then cell by cell), 1x1 images, odd sizes at stride 2, padding 0
    # to 2, row strides and row dilation; column dilation takes the tap loops
    ((1, 7, 13, 37), (3, 3), 2, 1, 1),
    ((2, 3, 1, 1), (3, 3), 1, 1, 1),
    ((1, 3, 1, 1), (3, 3), 2, 1, 1),
    ((2, 4, 9, 21), (3, 3), 1, 0, 1),
    ((1, 5, 15, 45), (3, 3), 2, 2, 1),
    ((1, 6, 10, 10), (3, 3), 1, 1, 1),
    ((1, 6, 7, 7), (3, 3), 1, 1, 1),
    ((1, 3, 8, 5), (3, 3), 2, 0, 1),
    ((1, 3, 10, 17), (3, 3), (3, 2), 1, (2, 1)),
    ((1, 2, 6, 40), (3, 3), (1, 2), (0, 2), 1),
    ((1, 2, 12, 33), (3, 3), 2, 1, (1, 2)),
]
ACTIVATIONS = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0),
               "relu6": lambda v: np.clip(v, 0, 6)}


def _plan(x, w, b, activation, **args):
    g = mg.Graph()
    ins = [g.input("x", x.shape, x.dtype), g.input("w", w.shape, w.dtype)]
    if b is not None:
        ins.append(g.input("b", b.shape, b.dtype))
    y = apply("conv2d", tuple(ins), stride=args["stride"], padding=args["padding"],
              dilation=args["dilation"], groups=x.shape[1],
              activation=activation)
    # memory="debug" refills the dead workspace with NaN after each run: a padded border read
    # before it is written shows in the second run
    return mg.compile([y], optimize=0, memory="debug")


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _workspace(plan, ins):
    return 0 if ins.workspace is None else plan.slots[ins.workspace].nbytes


def _expected_workspace(xs, args, ins, itemsize):
    """Per thread: a 3x3 kernel at column stride 1 or 2 without column dilation, the
    zero-padded input plane (at column stride 2 its two halves, each rows of ceil(wp / 2));
    otherwise at stride 1 the padded plane and the output in rows of its width; at other
    strides none."""
    (ph, pw), (dh, dw), (sh, sw) = args["padding"], args["dilation"], args["stride"]
    hp, wp = xs[2] + 2 * ph, xs[3] + 2 * pw
    threads = ins.ints[K.CONV_FIELDS.index("threads")]
    kernel = tuple(ins.ints[K.CONV_FIELDS.index(f)] for f in ("kh", "kw"))
    if kernel == (3, 3) and sw in (1, 2) and dw == 1:
        return threads * hp * (2 * -(-wp // 2) if sw == 2 else wp) * itemsize
    if (sh, sw) != (1, 1):
        return 0
    oh = hp - dh * (kernel[0] - 1)
    return threads * (hp * wp + oh * wp) * itemsize


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias,activation", [(True, "relu"), (False, "none"), (True, "none"),
                                             (True, "relu6"), (False, "relu6")])
@pytest.mark.parametrize("xs,kernel,stride,padding,dilation", CASES)
def test_depthwise_matches_reference(xs, kernel, stride, padding, dilation, bias, activation,
                                     dtype):
    x = 3 * RNG.standard_normal(xs).astype(dtype)  # beyond relu6's 6 too
    w = RNG.standard_normal((xs[1], 1, *kernel)).astype(dtype)
    b = RNG.standard_normal(xs[1]).astype(dtype) if bias else None
    args = {"stride": pair(stride), "padding": pair(padding), "dilation": pair(dilation)}
    plan = _plan(x, w, b, activation, **args)
    (ins,) = [i for i in plan.instructions if i.op == "conv2d"]
    assert ins.ints[CONV_PATH_FIELD] == K.CONV_PATHS["depthwise"]
    assert _workspace(plan, ins) == _expected_workspace(xs, args, ins, np.dtype(dtype).itemsize)
    feeds = {"x": x, "w": w, **({"b": b} if bias else {})}
    (out,) = plan.run(feeds)
    (again,) = plan.run(feeds)
    np.testing.assert_array_equal(out, again)
    want = ACTIVATIONS[activation](conv_ref(x, w, b, stride, padding, dilation, xs[1]))
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


def test_depthwise_matches_torch_and_any_thread_count():
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_limits
    x = RNG.standard_normal((1, 192, 28, 28)).astype(np.float32)
    w = RNG.standard_normal((192, 1, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(192).astype(np.float32)
    plan = _plan(x, w, b, "none", stride=(2, 2), padding=(1, 1), dilation=(1, 1))
    (two,) = plan.run({"x": x, "w": w, "b": b})
    with threadpool_limits(limits=1):
        (one,) = _plan(x, w, b, "none", stride=(2, 2), padding=(1, 1), dilation=(1, 1)).run(
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


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 1), (2, 0), (1, 2)])
@pytest.mark.parametrize("isa", K.blocked_isas())
def test_3x3_planes_on_each_instruction_set(isa, stride, padding, monkeypatch):
    """dw3.h's build for each instruction set this CPU runs, against PyTorch: widths of whole
    vectors, a last one overlapping, half vectors and single cells for every width."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    for width in (1, 3, 5, 8, 11, 16, 19, 33, 56):
        x = 3 * RNG.standard_normal((1, 4, 6, width)).astype(np.float32)
        w = RNG.standard_normal((4, 1, 3, 3)).astype(np.float32)
        b = RNG.standard_normal(4).astype(np.float32)
        args = {"stride": pair(stride), "padding": pair(padding), "dilation": (1, 1)}
        if (width + 2 * padding - 3) < 0:
            continue
        plan = _plan(x, w, b, "relu6", **args)
        (ins,) = [i for i in plan.instructions if i.op == "conv2d"]
        assert ins.ints[K.CONV_FIELDS.index("isa")] == K.BLOCKED_ISAS[isa]
        (out,) = plan.run({"x": x, "w": w, "b": b})
        want = torch.nn.functional.relu6(torch.nn.functional.conv2d(
            torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=stride,
            padding=padding, groups=4)).numpy()
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_relu6_epilogue_keeps_nan_and_signed_zero_as_clip():
    """The fused relu6 is bitwise clip(x, 0, 6): NaN stays NaN, -0 stays -0, as the unfused
    plan's clip node gives."""
    x = np.zeros((1, 2, 5, 20), np.float32)
    x[0, 0, 2, 3] = np.nan
    w = np.zeros((2, 1, 3, 3), np.float32)
    w[:, 0, 1, 1] = -1.0  # -1 * +0 = -0, and +0 + -0 = +0: the sum of taps is +0 ...
    w[1, 0, 0, 0] = 7.0
    b = np.array([-0.0, 0.5], np.float32)  # ... and + (-0) keeps it +0; 0.5 stays in range
    x[0, 1] = np.linspace(-2, 2, 100).reshape(5, 20)
    for args in ({"stride": (1, 1)}, {"stride": (2, 2)}):
        plan = _plan(x, w, b, "relu6", padding=(1, 1), dilation=(1, 1), **args)
        g = mg.Graph()
        y = F.relu6(F.conv2d(g.input("x", x.shape), g.input("w", w.shape),
                             g.input("b", b.shape), padding=1, groups=2, **args))
        unfused = mg.compile([y], optimize=0)
        feeds = {"x": x, "w": w, "b": b}
        (got,), (want,) = plan.run(feeds), unfused.run(feeds)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert np.isnan(got).any()


@pytest.mark.parametrize("xs,stride,threads", [
    ((1, 192, 28, 28), 1, 2),   # 1.2 MB moved, 2.7 MFLOP: split by its bytes
    ((1, 192, 56, 56), 2, 2),
    ((1, 8, 10, 10), 1, 1),     # too little to pay for the fork
])
def test_depthwise_threads_follow_the_bytes_it_moves(xs, stride, threads):
    g = mg.Graph()
    y = F.conv2d(g.input("x", xs), g.input("w", (xs[1], 1, 3, 3)), stride=stride, padding=1,
                 groups=xs[1])
    (ins,) = [i for i in mg.compile([y]).instructions if i.op == "conv2d"]
    assert ins.ints[CONV_PATH_FIELD] == K.CONV_PATHS["depthwise"]
    assert ins.ints[K.CONV_FIELDS.index("threads")] == min(threads, parallel.max_threads())
