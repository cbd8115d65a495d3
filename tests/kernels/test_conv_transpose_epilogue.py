"""The transposed convolution's bias inside its kernel: the epilogue pass gives the per-channel
add after conv2d_backward_data to it as a third input (weight, grad, bias). Every CPU way of the
op with the bias gives the bits of the way without it plus a separate add (the bias is added to
each finished sum), the pass's plans the unoptimised graph's bits, on 1, 2 and 3 threads; what
must not fold does not; the op's gradient with the bias; the model file (version 2 of the op)
and ONNX's ConvTranspose with B."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.ir.errors import OpError
from mgegraph.ops.builder import apply
from mgegraph.ops.conv import conv2d_backward_data
from mgegraph.ops.conv_api import transposed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
from test_conv import backward_data_ref  # noqa: E402
from test_kernel_ways import CPU, node_of, run_way  # noqa: E402
from test_model_file import first, members, refused, with_json  # noqa: E402

FIELD = {name: i for i, name in enumerate(K.CONV_FIELDS)}

# (x, the transposed convolution's weight (C_in, C_out / groups, kh, kw), its arguments): the
# U-Net's two layers (3x3 and 2x2 at stride 2) scaled down, stride 1 (the tiles, Winograd), a
# 1x1 (the direct GEMM), groups with an odd output
CASES = [
    ((2, 8, 5, 7), (8, 6, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ((1, 16, 6, 6), (16, 8, 2, 2), {"stride": 2}),
    ((2, 8, 9, 7), (8, 10, 3, 3), {"padding": 1}),
    ((2, 6, 5, 4), (6, 5, 1, 1), {}),
    ((1, 6, 5, 5), (6, 3, 3, 3), {"stride": (2, 3), "padding": 1, "groups": 2, "dilation": 2}),
]
IDS = ["3x3-stride-2", "2x2-stride-2", "stride-1", "1x1", "grouped"]


def _arrays(xs, ws, options, dtype, seed=54):
    rng = np.random.default_rng(seed)
    c = ws[1] * options.get("groups", 1)
    return (rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype),
            rng.standard_normal(c).astype(dtype))


def _graph(xs, ws, options, dtype, arrays):
    """The layer with its bias as a separate add after the kernel, as an imported or hand-built
    graph may have it: the form the epilogue pass folds."""
    g = mg.Graph()
    x = g.input("x", xs, dtype)
    _, w, b = arrays
    y = F.conv_transpose2d(x, g.param("w", w), **options)
    return y + F.reshape(g.param("b", b), (1, -1, 1, 1))


def test_conv_transpose2d_gives_its_bias_to_the_kernel_unless_it_crops():
    g = mg.Graph()
    x, w, b = g.input("x", (1, 4, 5, 5)), g.input("w", (4, 3, 3, 3)), g.input("b", (3,))
    y = F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)
    assert y.node.op.name == "conv2d_backward_data" and y.node.inputs[2] is b
    # ONNX's asymmetric pads crop the kernel's output before the bias: a separate add
    cropped = transposed(x, w, b, (1, 1), ((0, 1), (0, 1)), (6, 6), (1, 1), 1)
    assert cropped.shape == (1, 3, 6, 6) and cropped.node.op.name == "add"


def _data_attrs(xs, ws, options, dtype) -> dict:
    """The attributes of the conv2d_backward_data node conv_transpose2d makes."""
    g = mg.Graph()
    F.conv_transpose2d(g.input("x", xs, dtype), g.input("w", ws, dtype), **options)
    (data,) = [n for n in g.nodes if n.op.name == "conv2d_backward_data"]
    return data.attr


# -- the kernel's every way ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_way_adds_the_bias_as_a_separate_add_would(case, dtype):
    xs, ws, options = case
    x, w, b = _arrays(xs, ws, options, dtype)
    attrs = _data_attrs(xs, ws, options, dtype)
    for shape in ((b.size,), (1, b.size, 1, 1)):
        bias = b.reshape(shape)
        plain = node_of("conv2d_backward_data", [w, x], **attrs)
        biased = node_of("conv2d_backward_data", [w, x, bias], **attrs)
        ways = CPU.impl(plain.op.name).candidates(plain)
        with_bias = CPU.impl(biased.op.name).candidates(biased)
        assert [c.path for c in ways] == [c.path for c in with_bias]
        for way, way_bias in zip(ways, with_bias):
            assert way_bias.ints[FIELD["has_bias"]] == 1 and way.ints[FIELD["has_bias"]] == 0
            want = run_way(plain, way, [w, x]) + bias.reshape(1, -1, 1, 1)
            got = run_way(biased, way_bias, [w, x, bias])
            assert got.tobytes() == want.tobytes(), f"{way.path}: bits differ from the add"


def test_the_ways_cover_the_gemm_and_tile_paths():
    seen = set()
    for xs, ws, options in CASES:
        x, w, b = _arrays(xs, ws, options, np.float32)
        node = node_of("conv2d_backward_data", [w, x, b],
                       **_data_attrs(xs, ws, options, np.float32))
        seen |= {c.path.split(", ")[0] for c in CPU.impl(node.op.name).candidates(node)}
    assert {"im2col", "direct"} <= seen and seen & {"blocked", "gather", "winograd"}


# The strided data path (W^T dy, then col2im row by row of dx, the bias as each row completes; at
# stride 2, three neighbouring taps of a row in one loop of pairs: add_triple): the U-Net's 3x3
# layer, 5- and 7-wide kernels (a triple and a pair; two triples and one tap, at padding that
# cuts into the loops' ends), stride 3 with dilation and groups, rows no window reaches
STRIDED = [
    ((1, 64, 32, 32), (64, 32, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ((1, 8, 6, 9), (8, 16, 5, 5), {"stride": 2, "padding": 2}),
    ((2, 3, 6, 5), (3, 4, 3, 7), {"stride": (1, 2), "padding": (1, 3), "output_padding": (0, 1)}),
    ((2, 6, 7, 9), (6, 64, 3, 3), {"stride": 3, "dilation": 2, "groups": 2, "padding": 1}),
    ((1, 4, 5, 5), (4, 8, 2, 2), {"stride": 3, "padding": (0, 1), "output_padding": 2}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", STRIDED, ids=["unet-3x3", "5x5", "3x7", "stride-3",
                                                "untouched-rows"])
def test_the_strided_path_matches_numpy_on_1_2_3_threads(case, dtype, monkeypatch):
    xs, ws, options = case
    x, w, b = _arrays(xs, ws, options, dtype)
    attrs = _data_attrs(xs, ws, options, dtype)
    node = node_of("conv2d_backward_data", [w, x, b], **attrs)
    want = backward_data_ref(w.astype(np.float64), x.astype(np.float64), attrs["input_hw"],
                             attrs["stride"], attrs["padding"], attrs["dilation"],
                             attrs["groups"]) + b.reshape(1, -1, 1, 1)
    scale = float(np.abs(x).max() * np.abs(w).max() * ws[0] * ws[2] * ws[3])
    tol = 1e-6 if dtype == np.float32 else 1e-14
    for threads in (1, 2, 3):  # (the BLAS may round a thread's chunk of channels otherwise)
        monkeypatch.setattr(lowering, "_threads", lambda batch, flops, t=threads: t)
        launch = CPU.impl(node.op.name).lower(node)
        assert launch.path == f"im2col, {threads} thread" + ("s" if threads > 1 else "")
        got = run_way(node, launch, [w, x, b])
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


# -- the pass -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_pass_folds_the_bias_and_keeps_the_bits(case, dtype, monkeypatch):
    xs, ws, options = case
    arrays = _arrays(xs, ws, options, dtype)
    y = _graph(xs, ws, options, dtype, arrays)
    feeds = {"x": arrays[0]}
    (want,) = mg.compile([y], optimize=0).run(feeds)
    plan = mg.compile([y])
    (ins,) = plan.instructions
    assert ins.op == "conv2d_backward_data" and ins.ints[FIELD["has_bias"]] == 1
    assert "conv2d_backward_data+add" in plan.passes_report()
    (got,) = plan.run(feeds)
    assert got.tobytes() == want.tobytes()
    for threads in (2, 3):  # the plan's threads split the channels; no cell's sum changes
        monkeypatch.setattr(lowering, "_threads", lambda batch, flops, t=threads: t)
        threaded = mg.compile([y])
        assert threaded.instructions[0].ints[FIELD["threads"]] == threads
        if ins.choice is None or not ins.choice.path.startswith(("im2col", "direct")):
            assert threaded.run(feeds)[0].tobytes() == want.tobytes()
        else:  # the BLAS rounds by the chunk's shape: within rounding, not bitwise
            np.testing.assert_allclose(threaded.run(feeds)[0], want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", CASES[:2], ids=IDS[:2])
def test_the_folded_layer_matches_pytorch(case):
    torch = pytest.importorskip("torch")
    xs, ws, options = case
    x, w, b = _arrays(xs, ws, options, np.float32)
    (got,) = mg.compile([_graph(xs, ws, options, np.float32, (x, w, b))]).run({"x": x})
    want = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w),
                                                torch.from_numpy(b), **options).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _data(g, x, w):
    """conv2d_backward_data of ``x`` by ``w`` at stride 2 into the size the graph's uses
    want: (10, 12) from 5x6, (7, 9) from 4x5."""
    hw = (10, 12) if x.shape[2:] == (5, 6) else (7, 9)
    return conv2d_backward_data(w, x, hw, stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                                groups=1)


def _plan_and_folds(outputs):
    plan = mg.compile(outputs)
    biased = [i for i in plan.instructions
              if i.op == "conv2d_backward_data" and i.ints[FIELD["has_bias"]]]
    return plan, biased


def test_what_must_not_fold_stays_apart():
    rng = np.random.default_rng(5)
    g = mg.Graph()
    x = g.input("x", (1, 4, 5, 6))
    w = g.param("w", rng.standard_normal((4, 12, 3, 3), dtype=np.float32))
    b = g.param("b", rng.standard_normal((1, 12, 1, 1), dtype=np.float32))
    row = g.param("row", rng.standard_normal(12, dtype=np.float32))  # along W, not channels
    b64 = g.param("b64", rng.standard_normal((1, 12, 1, 1)))
    y = _data(g, x, w)
    cases = {"a second use": [y + b, y], "along the last axis": [y + row],
             "another dtype": [y + b64]}
    feeds = {"x": rng.standard_normal((1, 4, 5, 6), dtype=np.float32)}
    for name, outputs in cases.items():
        plan, biased = _plan_and_folds(outputs)
        assert not biased, name
        for got, want in zip(plan.run(feeds), mg.compile(outputs, optimize=0).run(feeds)):
            assert got.tobytes() == want.tobytes(), name
    plan, biased = _plan_and_folds([F.relu(y + b)])  # the add folds, the relu stays after it
    assert len(biased) == 1 and len(plan.instructions) == 2
    (want,) = mg.compile([F.relu(y + b)], optimize=0).run(feeds)
    assert plan.run(feeds)[0].tobytes() == want.tobytes()


# -- the op's rule, gradient, model file and ONNX ------------------------------------------------
ATTRS = {"stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "groups": 1,
         "input_hw": (7, 9)}


def _biased_graph(bias_shape=(3,), dtype="float32"):
    rng = np.random.default_rng(8)
    g = mg.Graph()
    dy = g.input("dy", (2, 4, 4, 5), dtype)
    w = g.param("w", rng.standard_normal((4, 3, 3, 3)).astype(dtype))
    b = g.param("b", rng.standard_normal(bias_shape).astype(dtype))
    return g, dy, w, b, apply("conv2d_backward_data", (w, dy, b), **ATTRS)


def test_a_bias_of_the_wrong_shape_is_refused_by_name():
    g = mg.Graph()
    dy, w = g.input("dy", (2, 4, 4, 5)), g.input("w", (4, 3, 3, 3))
    for shape in ((4,), (1, 3, 1, 2), (3, 1)):
        with pytest.raises(OpError, match=r"conv2d_backward_data.*bias must have shape \(3,\)"):
            apply("conv2d_backward_data", (w, dy, g.input(f"b{len(shape)}", shape)), **ATTRS)


def test_the_gradient_with_the_bias_matches_finite_differences():
    g, dy, w, b, y = _biased_graph(dtype="float64")
    r = np.random.default_rng(9).standard_normal(y.shape)
    loss = F.sum(y * g.param("r", r))
    plan = mg.compile([loss, *mg.grad(loss, [w, dy, b])])
    dy0 = np.random.default_rng(10).standard_normal(dy.shape)
    _, gw, gdy, gb = plan.run({"dy": dy0})
    np.testing.assert_allclose(gb, r.sum(axis=(0, 2, 3)), rtol=1e-12)
    eps = 1e-6
    for k in [(1, 2, 0, 3), (0, 0, 3, 4)]:
        up, down = dy0.copy(), dy0.copy()
        up[k] += eps
        down[k] -= eps
        numeric = (plan.run({"dy": up})[0] - plan.run({"dy": down})[0]) / (2 * eps)
        np.testing.assert_allclose(gdy[k], numeric, rtol=1e-6)
    # the weight's gradient: the one without the bias (the bias adds no term to it)
    plain = F.sum(_data(g, dy, w) * g.param("r2", r))
    (want_gw,) = mg.compile(mg.grad(plain, [w])).run({"dy": dy0})
    np.testing.assert_allclose(gw, want_gw, rtol=1e-12, atol=1e-12)
    # a (1, C, 1, 1) bias's gradient has its shape
    _, dy2, _, b2, y2 = _biased_graph(bias_shape=(1, 3, 1, 1), dtype="float64")
    (gb2,) = mg.compile(mg.grad(F.sum(y2 * 2.0), [b2])).run({"dy": dy0})
    np.testing.assert_allclose(gb2, np.full((1, 3, 1, 1), 2.0 * 2 * 7 * 9))


def test_the_model_file_writes_the_bias_as_version_2(tmp_path):
    g, dy, w, b, y = _biased_graph()
    plan = mg.compile([y], optimize=0)
    mg.save(plan, tmp_path / "m.mgm")
    data = (tmp_path / "m.mgm").read_bytes()
    node = first(json.loads(members(data)["model.json"]), "conv2d_backward_data")
    assert node["version"] == 2 and len(node["inputs"]) == 3
    feeds = np.random.default_rng(1).standard_normal((2, 4, 4, 5)).astype(np.float32)
    assert mg.load(tmp_path / "m.mgm").run([feeds])[0].tobytes() == \
        plan.run({"dy": feeds})[0].tobytes()
    refused(tmp_path, with_json(data, lambda d: first(d, "conv2d_backward_data").update(
        version=1)), "bias input needs version 2")
    plain = mg.compile([_data(g, dy, w)], optimize=0)
    mg.save(plain, tmp_path / "p.mgm")
    node = first(json.loads(members((tmp_path / "p.mgm").read_bytes())["model.json"]),
                 "conv2d_backward_data")
    assert node["version"] == 1


@pytest.mark.parametrize("bias_shape", [(3,), (1, 3, 1, 1)])
def test_onnx_writes_the_bias_as_convtranspose_b(tmp_path, bias_shape):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    g, dy, w, b, y = _biased_graph(bias_shape)
    mg.onnx.export((g, [y]), tmp_path / "m.onnx")
    model = onnx.load(tmp_path / "m.onnx")
    (node,) = [n for n in model.graph.node if n.op_type == "ConvTranspose"]
    assert len(node.input) == 3
    feeds = np.random.default_rng(2).standard_normal((2, 4, 4, 5)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: feeds})
    np.testing.assert_allclose(got, mg.compile([y]).run({"dy": feeds})[0], rtol=1e-5, atol=1e-5)
