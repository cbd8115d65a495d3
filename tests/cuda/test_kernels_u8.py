"""The uint8 image kernels on CUDA: resize_u8 (csrc_cuda/resize.cu) and remap's sample_u8
(csrc_cuda/vision.cu), rounded by csrc_cuda/pixels_u8.cuh. NVRTC compiles them; the plain host
emulation (host_emu.h) gives the CPU kernels' bytes over every mode and border; a camera-frame
plan (uint8 warp, resize and normalize) emulated whole is the CPU plan's; (marker cuda) the
kernels on a device, where NVRTC may fuse a multiply and an add: within 1 of the CPU."""
import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    cpu_result,
    cuda_launch,
    emulate,
    node_of,
    nvrtc_compile,
    ptx_of,
    run_on_device,
    run_plan_emulated,
)

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import unregister_backend
from mgegraph.cuda.backend import CudaBackend
from mgegraph.cuda.kernels import resize, vision

RNG = np.random.default_rng(3)
RESIZE = [  # (input shape, attributes): the modes the public functions reach, and ONNX's
    ((2, 3, 5, 7), {"size": (11, 4), "mode": "linear"}),
    ((2, 3, 5, 7), {"size": (3, 13), "mode": "cubic", "coord": "align_corners"}),
    ((1, 2, 6, 5), {"size": (9, 2), "mode": "cubic", "cubic_a": -0.5, "exclude_outside": True,
                    "coord": "asymmetric"}),
    ((3, 7), {"size": (12,), "mode": "nearest", "nearest_mode": "round_prefer_ceil",
              "coord": "pytorch_half_pixel"}),
    ((1, 2, 3, 4, 5), {"size": (5, 2, 7), "mode": "linear", "scale": (5 / 3, 0.5, 1.5)}),
]
REMAP = [{"border_mode": b, "scalar": s, "interp_mode": i}
         for b, s, i in (("replicate", 0.0, "linear"), ("reflect", 0.0, "nearest"),
                         ("reflect_101", 0.0, "linear"), ("wrap", 0.0, "linear"),
                         ("constant", 300.0, "linear"), ("constant", 6.5, "nearest"))]


def frame(shape):
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def _same(family, node, arrays):
    got = emulate(family, node, arrays, fibers=False)
    for g, w in zip(got, cpu_result(node, arrays)):
        assert g.dtype == w.dtype == np.uint8
        np.testing.assert_array_equal(g, w)


@pytest.mark.nvrtc
@pytest.mark.parametrize(("source", "entry"), [("resize.cu", "mg_resize_u8"),
                                               ("vision.cu", "mg_sample_u8")])
def test_compiles_the_uint8_entries(source, entry):
    for arch in ARCHS:
        result, log, prog = nvrtc_compile(source, arch)
        assert result == 0, log
    assert f".entry {entry}(" in ptx_of(prog)


@pytest.mark.nvrtc
@pytest.mark.parametrize(("shape", "attrs"), RESIZE)
def test_resize_u8_is_bitwise_the_cpus(shape, attrs):
    x = frame(shape)
    _same(resize, node_of("resize", [x], **attrs), [x])


@pytest.mark.nvrtc
@pytest.mark.parametrize("attrs", REMAP)
def test_remap_u8_is_bitwise_the_cpus(attrs):
    x = frame((2, 3, 5, 6))
    xy = RNG.uniform(-8, 12, (2, 4, 3, 2)).astype(np.float32)
    xy[0, 0, 0] = (np.nan, 1.0)  # a point that is not finite
    _same(vision, node_of("remap", [x, xy], **attrs), [x, xy])


def test_steps_name_the_uint8_entries():
    x = frame((1, 3, 8, 8))
    _, _, (s,) = cuda_launch(resize, node_of("resize", [x], size=(4, 4)))
    assert s.entry == "mg_resize_u8"
    xy = np.zeros((1, 5, 5, 2), np.float32)
    _, _, (s,) = cuda_launch(vision, node_of("remap", [x, xy], border_mode="replicate",
                                             scalar=0.0, interp_mode="linear"))
    assert s.entry == "mg_sample_u8"


@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-u8-plan", lambda: CudaBackend(device=None))
    yield "cuda-u8-plan"
    unregister_backend("cuda-u8-plan")


def test_a_camera_frame_plan_emulated_is_the_cpus(planner):
    g = mg.Graph()
    frames = g.input("frame", (2, 12, 16, 3), np.uint8)
    mat = g.input("mat", (2, 2, 3), np.float32)  # a const would be folded on the device
    warped = F.vision.warp_affine(frames, mat, (10, 14), border_mode="reflect")
    small = F.vision.interpolate(F.transpose(warped, (0, 3, 1, 2)), size=(5, 7))
    out = F.vision.normalize(small, (120.0, 110.0, 100.0), (60.0, 50.0, 40.0), format="NCHW")
    feeds = {"frame": frame((2, 12, 16, 3)),
             "mat": np.array([[[0.9, 0.1, 1.0], [-0.1, 0.8, 2.0]]] * 2, np.float32)}
    want = mg.compile([small, out]).run(feeds)
    plan = mg.compile([small, out], device=planner)
    assert "fused_elementwise" in {ins.op for ins in plan.instructions}
    got = run_plan_emulated(plan, mg.backend.get_backend(planner), feeds)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.cuda
def test_uint8_kernels_on_device():
    x = frame((4, 3, 48, 64))
    xy = RNG.uniform(-3, 66, (4, 40, 30, 2)).astype(np.float32)
    for node, arrays in ((node_of("resize", [x], size=(37, 91), mode="cubic"), [x]),
                         (node_of("remap", [x, xy], border_mode="reflect", scalar=0.0,
                                  interp_mode="linear"), [x, xy])):
        got, want = run_on_device(node, arrays)[0], cpu_result(node, arrays)[0]
        assert got.dtype == np.uint8
        assert np.abs(got.astype(int) - want).max() <= 1 and np.mean(got == want) > 0.99
