"""grid_sample over volumes (the grid_sample3d ops of ops/vision.py, the volume sampler of
_kernels/vision_sample3d.pxi): forward and both gradients against PyTorch's 5-D grid_sample in
every mode, padding and alignment, against finite differences; points that are not finite,
odd sizes, threads, the model file, ONNX GridSample over volumes (import and export at opset
20) against ONNX Runtime, and the errors of bad input."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph._kernels import parallel
from mgegraph.ir.errors import OpError
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)
FLOATS = (np.float32, np.float64)
MODES = [(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection")
         for a in (False, True)]


def tol(dtype):
    return {"rtol": 1e-5, "atol": 2e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def _volume_and_grid(dtype, x_shape=(2, 3, 4, 5, 3), cells=(3, 2, 4), spread=1.3):
    x = RNG.standard_normal(x_shape).astype(dtype)
    grid = RNG.uniform(-spread, spread, (x_shape[0], *cells, 3)).astype(dtype)
    return x, grid


def _torch_sample(torch, x, grid, mode, padding, aligned, dy=None):
    tx, tg = (torch.tensor(a, requires_grad=True) for a in (x, grid))
    ty = torch.nn.functional.grid_sample(tx, tg, mode, padding, aligned)
    if dy is None:
        return ty.detach().numpy()
    ty.backward(torch.from_numpy(dy))
    return ty.detach().numpy(), tx.grad.numpy(), tg.grad.numpy()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode,padding,aligned", MODES)
def test_matches_torch_forward_and_gradients(mode, padding, aligned, dtype):
    torch = pytest.importorskip("torch")
    x, grid = _volume_and_grid(dtype)
    dy = RNG.standard_normal((2, 3, 3, 2, 4)).astype(dtype)
    g = mg.Graph()
    vx, vg = g.input("x", x.shape, x.dtype), g.input("grid", grid.shape, grid.dtype)
    y = F.vision.grid_sample(vx, vg, mode, padding, aligned)
    dx, dgrid = mg.grad(F.sum(y * g.const(dy)), [vx, vg])
    got = mg.compile([y, dx, dgrid]).run({"x": x, "grid": grid})
    want = _torch_sample(torch, x, grid, mode, padding, aligned, dy)
    assert [a.shape for a in got] == [a.shape for a in want]
    for a, b in zip(got, want):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, **tol(dtype))


@pytest.mark.parametrize("mode,padding,aligned", [("bilinear", "zeros", False),
                                                  ("bilinear", "border", True),
                                                  ("bilinear", "reflection", False),
                                                  ("nearest", "zeros", True)])
def test_gradients_match_finite_differences(mode, padding, aligned):
    # points kept off the cells' edges, where the interpolation has a kink
    x = RNG.standard_normal((1, 2, 3, 4, 3))
    grid = RNG.uniform(-1.2, 1.2, (1, 2, 2, 3, 3))
    wrt = [0] if mode == "nearest" else [0, 1]
    gradcheck(lambda v, p: F.vision.grid_sample(v, p, mode, padding, aligned), x, grid, wrt=wrt)


def test_odd_sizes_single_voxels_and_many_channels():
    torch = pytest.importorskip("torch")
    for x_shape, cells in (((1, 1, 1, 1, 1), (2, 1, 3)), ((3, 7, 1, 5, 2), (1, 1, 1)),
                           ((1, 2, 2, 1, 9), (5, 3, 1))):
        x, grid = _volume_and_grid(np.float64, x_shape, cells)
        for mode, padding, aligned in MODES:
            got = F.vision.grid_sample(mg.tensor(x, dtype="float64"),
                                       mg.tensor(grid, dtype="float64"), mode, padding,
                                       aligned).numpy()
            want = _torch_sample(torch, x, grid, mode, padding, aligned)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_points_that_are_not_finite():
    # as the 2-D op: a NaN point has no voxel to read, so it reads the zeros of the padding
    # (PyTorch's result there depends on how its clamps meet NaN); an infinite one does too,
    # unless border padding clamps it onto the edge
    x, grid = _volume_and_grid(np.float64, (1, 2, 3, 3, 3), (1, 1, 3))
    grid[0, 0, 0, 0] = (np.nan, 0.1, 0.2)
    grid[0, 0, 0, 1] = (0.1, 0.3, np.inf)
    for mode, padding, aligned in MODES:
        got = F.vision.grid_sample(mg.tensor(x), mg.tensor(grid), mode, padding,
                                   aligned).numpy()
        assert (got[..., 0] == 0).all() and (got[..., 2] != 0).all()
        assert (got[..., 1] != 0).all() if padding == "border" else (got[..., 1] == 0).all()


@pytest.mark.parametrize("dtype", FLOATS)
def test_one_two_and_three_threads_give_the_same_bits(dtype, monkeypatch):
    feeds = dict(zip(("x", "grid"), _volume_and_grid(dtype, (2, 3, 5, 4, 6), (3, 4, 2))))
    for a in feeds.values():
        a.flags.writeable = False
    outs = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        g = mg.Graph()
        x, grid = (g.input(k, a.shape, a.dtype) for k, a in feeds.items())
        loss = F.sum(F.vision.grid_sample(x, grid, "bilinear", "reflection") ** 2)
        plan = mg.compile([loss, *mg.grad(loss, [x, grid])], optimize=0)
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            outs.append([a.tobytes() for a in plan.run(feeds)])
    assert outs[0] == outs[1] == outs[2]


def test_round_trips_through_the_model_file(tmp_path):
    g = mg.Graph()
    x, grid = g.input("x", (2, 3, 4, 5, 3), "float32"), g.input("grid", (2, 3, 2, 4, 3),
                                                                  "float32")
    loss = F.sum(F.vision.grid_sample(x, grid, "nearest", "border", True) ** 2
                 + F.vision.grid_sample(x, grid) ** 2)
    plan = mg.compile([loss, *mg.grad(loss, [x, grid])])
    assert {"grid_sample3d", "grid_sample3d_backward_data", "grid_sample3d_backward_grid"} \
        <= {ins.op for ins in plan.instructions}
    mg.save(plan, tmp_path / "volume.mgm")
    feeds = dict(zip(("x", "grid"), _volume_and_grid(np.float32)))
    for got, want in zip(runtime.load(tmp_path / "volume.mgm").run(feeds), plan.run(feeds)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("make,message", [
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 3, 3, 3), "float32"),
                                    g.input("p", (1, 2, 2, 2, 3), "float32"), "bicubic"),
     r"grid_sample3d.*'bicubic' samples 2-D images only"),
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 3, 3, 3), "float32"),
                                    g.input("p", (1, 2, 2, 2, 2), "float32")),
     r"grid_sample3d.*grid must be \(N, OD, OH, OW, 3\).*\(1, 2, 2, 2, 2\)"),
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 3, 3, 3), "float32"),
                                    g.input("p", (2, 2, 2, 2, 3), "float32")),
     r"grid_sample3d.*grid has batch 2, the input 1"),
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 0, 3, 3), "float32"),
                                    g.input("p", (1, 2, 2, 2, 3), "float32")),
     r"grid_sample3d.*empty volume"),
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 3, 3, 3), "int32"),
                                    g.input("p", (1, 2, 2, 2, 3), "int32")),
     r"grid_sample3d.*int32"),
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 3, 3, 3), "float32"),
                                    g.input("p", (1, 2, 2, 2, 3), "float32"), "bilinear",
                                    "mirror"),
     r"grid_sample3d.*padding_mode must be one of"),
])
def test_bad_input_names_the_op_and_types(make, message):
    with pytest.raises(OpError, match=message) as caught:
        make(mg.Graph())
    assert "test_grid_sample3d.py" in str(caught.value)  # the user's line


# -- ONNX: GridSample over volumes is opset 20's ----------------------------------------------
def _onnx_model(mode, padding, aligned, x_shape, grid_shape):
    from onnx import helper  # lazy: optional dependency (onnx)
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                            padding_mode=padding, align_corners=int(aligned))
    graph = helper.make_graph([node], "volume", [
        helper.make_tensor_value_info("x", 1, list(x_shape)),
        helper.make_tensor_value_info("grid", 1, list(grid_shape))],
        [helper.make_tensor_value_info("y", 1, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("mode,padding,aligned", [("linear", "zeros", False),
                                                  ("nearest", "reflection", True),
                                                  ("linear", "border", True)])
def test_onnx_import_and_export_match_onnx_runtime(mode, padding, aligned):
    pytest.importorskip("onnx.helper")
    ort = pytest.importorskip("onnxruntime")
    import mgegraph.onnx as mo  # lazy: optional dependency (onnx)
    x, grid = _volume_and_grid(np.float32)
    m = _onnx_model(mode, padding, aligned, x.shape, grid.shape)
    feeds = {"x": x, "grid": grid}
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    imported = mo.import_model(m)
    (got,) = imported.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    again = mo.export(imported, opset=20)
    assert [n.op_type for n in again.graph.node] == ["GridSample"]
    session = ort.InferenceSession(again.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, feeds)
    np.testing.assert_allclose(theirs, got, rtol=1e-5, atol=2e-5)


def test_onnx_export_before_opset_20_and_cubic_import_are_refused():
    pytest.importorskip("onnx.helper")
    import mgegraph.onnx as mo  # lazy: optional dependency (onnx)
    imported = mo.import_model(_onnx_model("linear", "zeros", False, (1, 1, 2, 2, 2),
                                           (1, 1, 1, 1, 3)))
    with pytest.raises(mo.OnnxExportError, match="5-D inputs from opset 20.*opset 17"):
        mo.export(imported, opset=17)
    with pytest.raises(mo.OnnxImportError, match="bicubic' samples 2-D images only"):
        mo.import_model(_onnx_model("cubic", "zeros", False, (1, 1, 2, 2, 2), (1, 1, 1, 1, 3)))
