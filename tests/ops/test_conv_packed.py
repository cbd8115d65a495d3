"""conv2d_pack_weight and conv2d_packed (the CPU's gather tiles on weights packed once, made by
the prepack pass): the layout, and the convolution against the NumPy reference on every
instruction set and tile width this CPU runs, over the batch-spanning tiles, threads and the
epilogue; mismatched layouts are refused."""
import numpy as np
import pytest
from test_conv import conv_ref, pair

import mgegraph as mg
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.ops.conv import pack_weight_array, packed_weight_shape

RNG = np.random.default_rng(7)
WIDTHS = sorted({(isa, ch) for isa in K.blocked_isas() for ch in K.packed_channels(isa)})


def pack_loop(w, groups, block):
    """The layout by its definition: packed[g, b, k, r] = w[g * ocg + b * block + r, k]."""
    oc, ocg = w.shape[0], w.shape[0] // groups
    flat = w.reshape(oc, -1)
    out = np.zeros(packed_weight_shape(w.shape, groups, block), w.dtype)
    for g in range(groups):
        for o in range(ocg):
            out[g, o // block, :, o % block] = flat[g * ocg + o]
    return out


@pytest.mark.parametrize("shape,groups,block", [((50, 3, 3, 3), 1, 48), ((64, 8, 1, 1), 1, 32),
                                                ((12, 2, 3, 2), 3, 8), ((16, 4, 3, 3), 1, 16)])
def test_pack_weight_lays_out_blocks_of_output_channels(shape, groups, block):
    w = RNG.standard_normal(shape).astype(np.float32)
    want = pack_loop(w, groups, block)
    np.testing.assert_array_equal(pack_weight_array(w, groups, block), want)
    g = mg.Graph()
    (out,) = g.add_node("conv2d_pack_weight", (g.input("w", shape),),
                        {"groups": groups, "block": block}).outputs
    (got,) = mg.compile([out]).run({"w": w})
    np.testing.assert_array_equal(got, want)


def packed_conv(x_shape, w, bias, relu, isa, block, **attrs):
    """A plan of conv2d_packed reading x and the weights packed by blocks of ``block``."""
    g = mg.Graph()
    x = g.input("x", x_shape)
    inputs = [x, g.const(pack_weight_array(w, 1, block))]
    if bias is not None:
        inputs.append(g.const(bias))
    attrs = {**attrs, "out_channels": w.shape[0], "kernel_size": w.shape[2:],
             "activation": "relu" if relu else "none"}
    (y,) = g.add_node("conv2d_packed", tuple(inputs), attrs).outputs
    return mg.compile([y], memory="debug")


CASES = [
    # x shape, weight shape, stride, padding, dilation
    ((1, 64, 7, 7), (96, 64, 3, 3), 1, 1, 1),      # whole blocks of 48 and 32; 7-cell tiles
    ((1, 40, 14, 14), (50, 40, 3, 3), 2, 1, 1),    # 7x7 at stride 2
    ((3, 5, 9, 11), (40, 5, 3, 3), 2, 1, 1),       # padding channels, odd planes, a batch
    ((8, 16, 2, 2), (33, 16, 3, 3), 1, 1, 1),      # 2x2 planes: tiles span images
    ((2, 24, 10, 10), (32, 24, 1, 1), 2, 0, 1),    # a 1x1 skip at stride 2
    ((1, 7, 12, 9), (50, 7, 3, 3), (1, 2), 2, 2),  # dilated, unequal strides
    ((2, 3, 15, 15), (32, 3, 7, 7), 3, 3, 1),      # a 7x7 window
    ((0, 8, 5, 5), (32, 8, 3, 3), 1, 1, 1),        # an empty batch
    # 1x1 of 1x1 planes, a GEMM of rows (rows_call): short tiles, padding channels, one row
    ((13, 70, 1, 1), (70, 70, 1, 1), 1, 0, 1),
    ((130, 300, 1, 1), (100, 300, 1, 1), 1, 0, 1),
    ((1, 5, 1, 1), (40, 5, 1, 1), 1, 0, 1),
    ((0, 5, 1, 1), (40, 5, 1, 1), 1, 0, 1),
]


@pytest.mark.parametrize("isa,block", WIDTHS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_conv_matches_numpy(case, isa, block, threads, monkeypatch):
    xs, ws, stride, padding, dilation = case
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: threads)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    for bias, relu in ((None, False), (b, True)):
        plan = packed_conv(xs, w, bias, relu, isa, block, stride=pair(stride),
                           padding=pair(padding), dilation=pair(dilation))
        (first,), (second,) = plan.run({"x": x}), plan.run({"x": x})  # debug memory: NaN
        np.testing.assert_array_equal(first, second)                  # if read unwritten
        want = conv_ref(x, w, bias, stride, padding, dilation, 1)
        np.testing.assert_allclose(first, np.maximum(want, 0) if relu else want,
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,padding", [
    ((5, 32, 6, 6), (80, 32, 3, 3), 1),
    ((50, 32, 1, 1), (80, 32, 1, 1), 0),  # rows: 2 blocks, so the rows split among threads
])
def test_packed_conv_gives_the_same_bits_on_one_and_two_threads(x_shape, w_shape, padding,
                                                                monkeypatch):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    isa = K.blocked_isas()[-1]
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(lowering, "_threads", lambda batch, flops, n=threads: n)
        plan = packed_conv(x.shape, w, None, False, isa, K.packed_channels(isa)[0],
                           padding=pair(padding))
        outs.append(plan.run({"x": x})[0])
    np.testing.assert_array_equal(*outs)


def test_weights_packed_for_other_tiles_are_refused():
    w = RNG.standard_normal((32, 4, 3, 3)).astype(np.float32)
    widths = {ch for isa in K.blocked_isas() for ch in K.packed_channels(isa)}
    odd = next(b for b in (7, 12, 24, 40) if b not in widths)
    with pytest.raises(mg.GraphError, match="conv2d_packed: weights packed by blocks") as err:
        packed_conv((1, 4, 8, 8), w, None, False, None, odd, padding=(1, 1))
    assert f"blocks of {odd}" in str(err.value)


def test_a_packed_weight_of_the_wrong_shape_is_an_op_error():
    g = mg.Graph()
    x = g.input("x", (1, 4, 8, 8))
    wp = g.input("wp", (1, 2, 36, 16))  # 40 output channels take 3 blocks of 16
    with pytest.raises(mg.OpError, match=r"by blocks of 16 channels has shape \(1, 3, 36, 16\)"):
        g.add_node("conv2d_packed", (x, wp), {"out_channels": 40, "kernel_size": (3, 3)})


@pytest.mark.parametrize("isa", K.blocked_isas())
@pytest.mark.parametrize("shape", [(1, 1, 7, 7), (1, 1, 20, 20), (20, 1, 1, 1)])
def test_results_go_out_bitwise_with_the_epilogue_on_odd_values(isa, shape, monkeypatch):
    # a 1x1 convolution of one channel by weights of 1 gives each cell's value in every output
    # channel (0 + x * 1: -0 becomes +0); the transpose out, 8 x 8 blocks and the rest, then
    # adds the bias (-0 among it) and relu keeps NaN and makes -0 +0: bitwise NumPy's
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    special = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, -1.5, 2.5, 1e-42], np.float32)
    x = RNG.standard_normal(shape).astype(np.float32)  # the last: rows_call's epilogue
    x.flat[:len(special)] = special
    oc = 37  # 8 x 8 blocks and 5 channels past them
    w = np.ones((oc, 1, 1, 1), np.float32)
    b = RNG.standard_normal(oc).astype(np.float32)
    b[3] = -0.0
    for ch in K.packed_channels(isa):
        for relu in (False, True):
            (y,) = packed_conv(x.shape, w, b, relu, isa, ch).run({"x": x})
            want = (np.float32(0) + x) + b.reshape(1, oc, 1, 1)
            if relu:
                want = np.where(want <= 0, np.float32(0), want)
            np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))
