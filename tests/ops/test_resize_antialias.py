"""resize's antialias filter (ops/resize.py, _kernels/resize_antialias.pxi) and
F.vision.interpolate(antialias=True): against PyTorch's antialiased bilinear and bicubic
(forward and gradients, float32 and float64, down and up, sizes and scale factors), finite
differences, ONNX's reference and ONNX Runtime through import and export (opset 18), threads,
the model file, and the errors of bad input."""
import json
import zipfile

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph._kernels import parallel
from mgegraph.ir.errors import OpError
from mgegraph.ops.builder import apply
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)
FLOATS = (np.float32, np.float64)
TARGETS = [{"size": (4, 3)}, {"size": (5, 9)}, {"size": (1, 1)}, {"size": (20, 7)},
           {"scale_factor": 0.3}, {"scale_factor": (0.55, 0.8)}, {"scale_factor": 1.7}]


def tol(dtype):
    return {"rtol": 1e-5, "atol": 2e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def resize(v, size, mode="linear", **attrs):
    return apply("resize", (v,), size=size, mode=mode, **attrs)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_matches_torch_forward_and_gradient(mode, target, dtype):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 3, 13, 11)).astype(dtype)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.interpolate(tx, mode=mode, antialias=True, **target)
    dy = RNG.standard_normal(tuple(ty.shape)).astype(dtype)
    ty.backward(torch.from_numpy(dy))

    g = mg.Graph()
    vx = g.input("x", x.shape, x.dtype)
    y = F.vision.interpolate(vx, mode=mode, antialias=True, **target)
    (dx,) = mg.grad(F.sum(y * g.const(dy)), [vx])
    got_y, got_dx = mg.compile([y, dx]).run({"x": x})
    assert got_y.dtype == dtype and got_y.shape == tuple(ty.shape)
    np.testing.assert_allclose(got_y, ty.detach().numpy(), **tol(dtype))
    np.testing.assert_allclose(got_dx, tx.grad.numpy(), **tol(dtype))


def test_eager_matches_torch_on_a_large_downscale():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((1, 2, 97, 61))
    got = F.vision.interpolate(mg.tensor(x, dtype="float64"), size=(6, 5), antialias=True).numpy()
    want = torch.nn.functional.interpolate(torch.tensor(x), size=(6, 5), mode="bilinear",
                                           antialias=True).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode,edges", [("linear", False), ("cubic", False), ("cubic", True)])
def test_gradient_matches_finite_differences(mode, edges):
    x = RNG.standard_normal((1, 2, 9, 7))
    gradcheck(lambda v: resize(v, (4, 3), mode, antialias=True, exclude_outside=edges), x)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("edges", [False, True])
def test_upscaling_is_the_plain_filter(mode, edges):
    # antialias widens only a downscaled axis: at a scale of 1 or more it is the plain filter
    x = RNG.standard_normal((2, 3, 5, 4))
    g = mg.Graph()
    vx = g.input("x", x.shape, x.dtype)
    got, want = mg.compile([resize(vx, (11, 4), mode, antialias=True, exclude_outside=edges),
                            resize(vx, (11, 4), mode, exclude_outside=edges)]).run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dtype", FLOATS)
def test_one_two_and_three_threads_give_the_same_bits(dtype, monkeypatch):
    x = RNG.standard_normal((3, 2, 23, 17)).astype(dtype)
    x.flags.writeable = False
    outs = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        g = mg.Graph()
        vx = g.input("x", x.shape, x.dtype)
        loss = F.sum(resize(vx, (5, 6), "cubic", antialias=True) ** 2)
        plan = mg.compile([loss, *mg.grad(loss, [vx])], optimize=0)
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            outs.append([a.tobytes() for a in plan.run({"x": x})])
    assert outs[0] == outs[1] == outs[2]


def test_round_trips_through_the_model_file(tmp_path):
    g = mg.Graph()
    x = g.input("x", (2, 3, 13, 11), "float32")
    loss = F.sum(F.vision.interpolate(x, size=(4, 5), mode="bicubic", antialias=True) ** 2)
    plan = mg.compile([loss, *mg.grad(loss, [x])])
    mg.save(plan, tmp_path / "aa.mgm")
    feeds = {"x": RNG.standard_normal((2, 3, 13, 11)).astype(np.float32)}
    for got, want in zip(runtime.load(tmp_path / "aa.mgm").run(feeds), plan.run(feeds)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_a_model_file_from_before_antialias_loads_as_the_plain_filter(tmp_path):
    # files written before the attribute existed name no antialias: off, their old meaning,
    # which is why resize's model-file version stays 1
    g = mg.Graph()
    x = g.input("x", (1, 2, 9, 8), "float32")
    plan = mg.compile([F.vision.interpolate(x, size=(4, 3), mode="bicubic")])
    mg.save(plan, tmp_path / "new.mgm")
    with zipfile.ZipFile(tmp_path / "new.mgm") as z:
        members = {name: z.read(name) for name in z.namelist()}
    model = json.loads(members["model.json"])
    (node,) = [n for n in model["graph"]["nodes"] if n["op"] == "resize"]
    assert node["attrs"].pop("antialias") is False
    members["model.json"] = json.dumps(model).encode()
    with zipfile.ZipFile(tmp_path / "old.mgm", "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    feeds = {"x": RNG.standard_normal((1, 2, 9, 8)).astype(np.float32)}
    (got,) = runtime.load(tmp_path / "old.mgm").run(feeds)
    assert got.tobytes() == plan.run(feeds)[0].tobytes()


@pytest.mark.parametrize("make,message", [
    (lambda x: resize(x, (2, 2), "nearest", antialias=True),
     "resize.*antialias applies to the linear and cubic modes, not nearest"),
    (lambda x: resize(x, (2, 2), antialias=1), "resize.*antialias must be a bool, got 1"),
    (lambda x: F.vision.interpolate(x, size=(2, 2), mode="nearest", antialias=True),
     r"resize.*antialias takes the bilinear and bicubic modes.*'nearest'"),
    (lambda x: F.vision.interpolate(x, size=(2, 2), align_corners=True, antialias=True),
     "resize.*antialias with align_corners is not supported"),
])
def test_bad_input_names_the_op(make, message):
    g = mg.Graph()
    with pytest.raises(OpError, match=message) as caught:
        make(g.input("x", (1, 2, 6, 6), "float32"))
    assert "test_resize_antialias.py" in str(caught.value)  # the user's line


# -- ONNX Resize with antialias=1 (opset 18) --------------------------------------------------
def _onnx_resize(shape, scales=None, sizes=None, **attrs):
    from onnx import helper, numpy_helper  # lazy: optional dependency (onnx)
    inits, names = [], ["x", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "scales"))
        names.append("scales")
    else:
        inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
        names += ["", "sizes"]
    node = helper.make_node("Resize", names, ["y"], antialias=1, **attrs)
    graph = helper.make_graph([node], "aa", [helper.make_tensor_value_info("x", 1, list(shape))],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


ONNX_CASES = [
    ((1, 2, 9, 13), {"scales": (1, 1, 0.5, 0.3)}, {"mode": "linear"}),
    ((1, 2, 9, 13), {"sizes": (1, 2, 4, 5)}, {"mode": "cubic"}),
    ((2, 11), {"scales": (1, 0.45)}, {"mode": "cubic", "exclude_outside": 1}),
    ((1, 1, 7, 6, 9), {"sizes": (1, 1, 3, 6, 4)}, {"mode": "linear",
                                                   "coordinate_transformation_mode":
                                                       "pytorch_half_pixel"}),
    ((1, 3, 8, 8), {"scales": (1, 1, 0.6, 1.5)}, {"mode": "cubic", "cubic_coeff_a": -0.5}),
]


@pytest.mark.parametrize("shape,target,attrs", ONNX_CASES)
def test_onnx_import_matches_the_reference_and_exports_back(shape, target, attrs):
    pytest.importorskip("onnx.helper")
    from onnx.reference import ReferenceEvaluator  # lazy: optional dependency (onnx)

    import mgegraph.onnx as mo  # lazy: optional dependency (onnx)
    m = _onnx_resize(shape, **target, **attrs)
    x = RNG.standard_normal(shape).astype(np.float32)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    imported = mo.import_model(m)
    (got,) = imported.run({"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    again = mo.export(imported, opset=18)
    (back,) = ReferenceEvaluator(again).run(None, {"x": x})
    np.testing.assert_allclose(back, got, rtol=1e-5, atol=1e-5)


def test_onnx_antialias_of_nearest_is_refused():
    pytest.importorskip("onnx.helper")
    import mgegraph.onnx as mo  # lazy: optional dependency (onnx)
    m = _onnx_resize((1, 1, 6, 6), scales=(1, 1, 0.5, 0.5), mode="nearest")
    with pytest.raises(mo.OnnxImportError, match="Resize.*linear and cubic modes only"):
        mo.import_model(m)


def test_onnx_runtime_agrees_and_export_before_opset_18_is_refused():
    pytest.importorskip("onnx.helper")
    ort = pytest.importorskip("onnxruntime")
    import mgegraph.onnx as mo  # lazy: optional dependency (onnx)
    m = _onnx_resize((1, 2, 12, 10), scales=(1, 1, 0.4, 0.75), mode="linear")
    x = RNG.standard_normal((1, 2, 12, 10)).astype(np.float32)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    imported = mo.import_model(m)
    (got,) = imported.run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(mo.OnnxExportError, match="antialias from opset 18, not 17"):
        mo.export(imported, opset=17)
