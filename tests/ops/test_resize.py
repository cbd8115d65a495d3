"""resize (F.vision.interpolate and ONNX Resize's full meaning) against PyTorch's F.interpolate
and ONNX's reference evaluator: every mode, coordinate transformation and nearest mode, odd
sizes, scale factors, float32 and float64, read-only inputs, one and two threads, bad input."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(7)
FLOATS = [np.float32, np.float64]
TORCH_MODES = [("nearest", None), ("bilinear", False), ("bilinear", True), ("bicubic", False),
               ("bicubic", True)]


def run(fn, *arrays, optimize=1):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)], optimize=optimize).run(
        {f"x{i}": a for i, a in enumerate(arrays)})
    return out


def tol(dtype):
    return {"rtol": 2e-5, "atol": 2e-5} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


def torch_interpolate(x, **kw):
    torch = pytest.importorskip("torch")
    return torch.nn.functional.interpolate(torch.from_numpy(x), **kw).numpy()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("mode", "align"), TORCH_MODES)
@pytest.mark.parametrize("size", [(11, 13), (3, 4), (5, 7), (1, 1), (1, 9), (17, 2)])
def test_interpolate_to_a_size_matches_torch(dtype, mode, align, size):
    x = RNG.standard_normal((2, 3, 5, 7)).astype(dtype)
    got = run(lambda v: F.vision.interpolate(v, size=size, mode=mode, align_corners=align), x)
    want = torch_interpolate(x, size=size, mode=mode, align_corners=align)
    np.testing.assert_allclose(got, want, **tol(dtype))


@pytest.mark.parametrize(("mode", "align"), TORCH_MODES)
@pytest.mark.parametrize("factor", [2, 0.5, 1.7, (3, 0.4), 1])
def test_interpolate_by_a_scale_factor_matches_torch(mode, align, factor):
    x = RNG.standard_normal((1, 2, 6, 9)).astype(np.float32)
    got = run(lambda v: F.vision.interpolate(v, scale_factor=factor, mode=mode,
                                             align_corners=align), x)
    want = torch_interpolate(x, scale_factor=factor, mode=mode, align_corners=align)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **tol(np.float32))


@pytest.mark.parametrize(("mode", "shape", "size"), [
    ("linear", (2, 3, 7), (12,)), ("linear", (1, 1, 9), (4,)), ("nearest", (2, 2, 5), (8,)),
    ("trilinear", (1, 2, 3, 4, 5), (5, 2, 7)), ("nearest", (1, 2, 3, 4, 5), (6, 3, 2))])
@pytest.mark.parametrize("align", [None, True])
def test_one_and_three_axes_match_torch(mode, shape, size, align):
    if mode == "nearest" and align:
        pytest.skip("align_corners is for the linear modes")
    x = RNG.standard_normal(shape)
    got = run(lambda v: F.vision.interpolate(v, size=size, mode=mode, align_corners=align), x)
    np.testing.assert_allclose(got, torch_interpolate(x, size=size, mode=mode,
                                                      align_corners=align), **tol(np.float64))


def test_nearest_reads_the_exact_floor_of_o_times_in_over_out():
    # the step in / out is applied as a product and one division, so an output landing on an
    # input cell exactly lands there; o / (out / in), ONNX's reference arithmetic, reads the cell
    # before at 84 of the 6,241 size pairs up to 79 (PyTorch's float32 scale at 32 of them:
    # 26 -> 22 among both), so PyTorch can differ from this exact index there
    wrong = []
    for n_in in range(1, 49):
        x = mg.Tensor(np.arange(n_in, dtype=np.float32).reshape(1, 1, n_in))
        for n_out in range(1, 49):
            got = F.vision.interpolate(x, size=n_out, mode="nearest").numpy()[0, 0]
            if not np.array_equal(got, np.minimum(np.arange(n_out) * n_in // n_out, n_in - 1)):
                wrong.append((n_in, n_out))
    assert wrong == []


def test_aliases_and_eager_mode():
    x = RNG.standard_normal((1, 1, 3, 4)).astype(np.float32)
    want = run(lambda v: F.vision.interpolate(v, scale_factor=2), x)
    assert F.nn.interpolate is F.vision.interpolate is F.interpolate
    np.testing.assert_array_equal(F.vision.interpolate(mg.Tensor(x), scale_factor=2).numpy(),
                                  want)


# -- ONNX Resize's meaning, against its reference evaluator ------------------------------------
def onnx_resize(x, sizes=None, scales=None, **attrs):
    onnx = pytest.importorskip("onnx")
    from onnx import helper  # lazy: optional dependency (onnx)
    from onnx.reference import ReferenceEvaluator  # lazy: optional dependency (onnx)
    if sizes is None:
        names = ["x", "", "scales"]
        inits = [helper.make_tensor("scales", onnx.TensorProto.FLOAT, [len(scales)], scales)]
    else:
        names = ["x", "", "", "sizes"]
        inits = [helper.make_tensor("sizes", onnx.TensorProto.INT64, [len(sizes)], sizes)]
    node = helper.make_node("Resize", names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", onnx.TensorProto.DOUBLE, x.shape)], [helper.make_tensor_value_info(
            "y", onnx.TensorProto.DOUBLE, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
          "asymmetric"]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize(("scales", "exclude"), [((0.6, 1.7), 0), ((2.0, 0.5), 1),
                                                 ((3.0, 1.25), 1), ((0.8, 0.6), 0)])
def test_linear_and_cubic_match_onnx_reference(coord, mode, scales, exclude):
    x = RNG.standard_normal((1, 2, 5, 6))
    scales = tuple(float(np.float32(s)) for s in scales)  # what an ONNX file holds
    sizes = tuple(int(np.floor(n * s)) for n, s in zip(x.shape[2:], scales))
    got = run(lambda v: apply("resize", (v,), size=sizes, scale=scales, mode=mode, coord=coord,
                              cubic_a=-0.5, exclude_outside=bool(exclude)), x)
    want = onnx_resize(x, scales=[1.0, 1.0, *scales], mode=mode, cubic_coeff_a=-0.5,
                       coordinate_transformation_mode=coord, exclude_outside=exclude)
    # the reference computes cubic weights in float32 (its cubic_coeff_a is a NumPy float32)
    close = 1e-12 if mode == "linear" else 2e-5
    np.testing.assert_allclose(got, want, rtol=close, atol=close)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("sizes", [(9, 4), (2, 13), (5, 6)])
def test_nearest_matches_onnx_reference(nearest_mode, coord, sizes):
    x = RNG.standard_normal((2, 1, 5, 6))
    got = run(lambda v: apply("resize", (v,), size=sizes, mode="nearest", coord=coord,
                              nearest_mode=nearest_mode), x)
    want = onnx_resize(x, sizes=[2, 1, *sizes], mode="nearest", nearest_mode=nearest_mode,
                       coordinate_transformation_mode=coord)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("nearest_mode", "want"), [("floor", [0, 0, 1, 1, 2, 2, 3, 3]),
                                                   ("round_prefer_floor", [0, 1, 1, 2, 2, 3, 3, 3])])
def test_tf_half_pixel_for_nearest_reads_x_plus_half_over_scale(nearest_mode, want):
    # opset 10-12's mode, gone from the reference evaluator: x = (o + 0.5) / scale, clamped
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    got = run(lambda v: apply("resize", (v,), size=(8,), mode="nearest",
                              coord="tf_half_pixel_for_nearest", nearest_mode=nearest_mode), x)
    np.testing.assert_array_equal(got[0], want)


# -- kernel contract: read-only inputs, dtypes, threads ---------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
def test_read_only_input_and_dtype_kept(dtype):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(dtype)
    x.flags.writeable = False
    out = run(lambda v: F.vision.interpolate(v, size=(7, 3), mode="bicubic"), x)
    assert out.dtype == dtype and out.shape == (2, 3, 7, 3)


@pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
@pytest.mark.parametrize("op", ["resize", "resize_backward"])
def test_one_and_two_threads_give_the_same_bits(op, monkeypatch):
    x = RNG.standard_normal((3, 5, 9, 11)).astype(np.float32)
    attrs = {"size": (9, 11), "mode": "cubic"} if op == "resize_backward" else {
        "size": (14, 6), "mode": "cubic"}
    if op == "resize_backward":
        attrs["input_size"] = (4, 7)
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        g = mg.Graph()
        v = g.input("x", x.shape, x.dtype)
        plan = mg.compile([apply(op, (v,), **attrs)], optimize=0)
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            outs.append(plan.run({"x": x})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_nan_propagates_to_the_outputs_that_read_it():
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 0, 0] = np.nan
    out = run(lambda v: F.vision.interpolate(v, size=(8, 8), mode="bilinear"), x)
    assert np.isnan(out[0, 0, 0, 0]) and not np.isnan(out[0, 0, 7, 7])


# -- bad input: clear errors naming the op ---------------------------------------------------------
@pytest.mark.parametrize(("call", "reason"), [
    (lambda v: F.vision.interpolate(v, size=(2, 2), mode="area"), "mode must be one of"),
    (lambda v: F.vision.interpolate(v, size=(2, 2), scale_factor=2), "exactly one of"),
    (lambda v: F.vision.interpolate(v), "exactly one of"),
    (lambda v: F.vision.interpolate(v, size=(2, 2, 2)), "size must be a positive number or 2"),
    (lambda v: F.vision.interpolate(v, size=(0, 2)), "size must be a positive"),
    (lambda v: F.vision.interpolate(v, scale_factor=0.1), "makes an empty output"),
    (lambda v: F.vision.interpolate(v, size=3, mode="nearest", align_corners=True),
     "not nearest"),
    (lambda v: F.vision.interpolate(v, size=3, mode="linear"), "takes a 3-D input"),
    (lambda v: F.vision.interpolate(v, size=3, mode="trilinear"), "takes a 5-D input"),
    (lambda v: apply("resize", (v,), size=(2, 2), coord="tf_crop_and_resize"),
     "coord must be one of"),
    (lambda v: apply("resize", (v,), size=(2, 2), scale=(2.0,)), "scale must be None or 2"),
    (lambda v: apply("resize", (v,), size=(1, 2, 2, 2)), "size must be 1 to 3"),
    (lambda v: apply("resize", (v,), size=(2, 2), scale=(0.5, 1.0)),
     "floor.length . scale., not to"),
    (lambda v: apply("resize_backward", (v,), size=(2, 2), input_size=(3, 3)),
     "trailing axes must be the resized size"),
])
def test_bad_arguments_are_refused_by_name(call, reason):
    g = mg.Graph()
    v = g.input("x", (1, 2, 5, 4), np.float32)
    with pytest.raises(mg.OpError, match=f"resize.*{reason}"):
        call(v)


def test_integer_input_is_refused():
    g = mg.Graph()
    with pytest.raises(mg.OpError, match="resize.*int32"):
        F.vision.interpolate(g.input("x", (1, 1, 2, 2), np.int32), size=(4, 4))


# -- pixel_shuffle / pixel_unshuffle: compositions ------------------------------------------------
@pytest.mark.parametrize(("shape", "r"), [((1, 8, 3, 5), 2), ((2, 9, 2, 1), 3), ((3, 4, 4), 1),
                                          ((2, 1, 27, 2, 2), 3)])
def test_pixel_shuffle_matches_torch_and_unshuffle_inverts_it(shape, r):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal(shape).astype(np.float32)
    got = run(lambda v: F.pixel_shuffle(v, r), x)
    np.testing.assert_array_equal(got, torch.nn.functional.pixel_shuffle(
        torch.from_numpy(x), r).numpy())
    back = run(lambda v: F.pixel_unshuffle(v, r), got)
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(back, torch.nn.functional.pixel_unshuffle(
        torch.from_numpy(got), r).numpy())


@pytest.mark.parametrize(("fn", "shape", "factor", "reason"), [
    (F.pixel_shuffle, (1, 6, 2, 2), 2, "multiple of upscale_factor"),
    (F.pixel_shuffle, (1, 4, 2, 2), 0, "int >= 1"),
    (F.pixel_unshuffle, (1, 1, 3, 4), 2, "multiples of downscale_factor"),
    (F.pixel_unshuffle, (4, 4), 2, r"\(..., C, H, W\)"),
])
def test_pixel_shuffle_refuses_bad_shapes(fn, shape, factor, reason):
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=f"pixel_.*{reason}"):
        fn(g.input("x", shape, np.float32), factor)


# -- the model file ------------------------------------------------------------------------------
def test_resize_and_its_gradient_round_trip_through_the_model_file(tmp_path):
    g = mg.Graph()
    v = g.input("x", (1, 2, 5, 4), np.float64)
    y = apply("resize", (v,), size=(3, 6), scale=(0.6, 1.5), mode="cubic", coord="asymmetric",
              cubic_a=-0.5, exclude_outside=True)
    (dx,) = mg.grad(F.sum(y * y), [v])
    plan = mg.compile([y, dx])
    x = RNG.standard_normal((1, 2, 5, 4))
    mg.save(plan, tmp_path / "m.mgm")
    loaded = mg.runtime.load(tmp_path / "m.mgm")
    for a, b in zip(plan.run({"x": x}), loaded.run({"x": x})):
        np.testing.assert_array_equal(a, b)
    assert {"resize", "resize_backward"} <= {n.op.name for n in plan.source.graph.nodes}
