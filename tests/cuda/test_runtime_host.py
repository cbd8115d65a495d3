"""The CUDA executable (mgegraph/cuda/runtime.py) run on the host: a fake Device whose memory is
host memory and whose launches run the host build of the rendered kernels (host_emu), so the
runtime's logic (staging feeds and outputs, initial values, shared weights kept on the device,
uploads after host writes, fetch, CUDA-graph capture and replay, debug poisoning) is tested
without a GPU. Only the driver calls themselves (driver.py, a line each) wait for one."""
import ctypes

import host_emu
import numpy as np
import pytest
from graphs import failing_cases
from kernel_checks import FIBER_EMU

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.cuda import CSRC, DeviceUnavailableError
from mgegraph.cuda.backend import CudaBackend
from mgegraph.planner.passes.prologue import written


class FakeDevice:
    """Device's interface over host memory; counts what the runtime asked for."""

    arch = "sm_90"

    def __init__(self):
        self.blocks, self.launches, self.capturing, self.replays = {}, 0, None, 0
        self.uploads = 0

    def alloc(self, nbytes):
        if not nbytes:
            return 0
        raw = np.full(nbytes + 256, 0xAB, np.uint8)  # garbage, as cuMemAlloc's memory
        address = raw.ctypes.data + (-raw.ctypes.data % 256)
        self.blocks[address] = raw
        return address

    def free(self, ptr):
        self.blocks.pop(ptr, None)

    def pinned(self, nbytes):
        return np.zeros(max(nbytes, 1), np.uint8)[:nbytes]

    def to_device(self, dst, src):
        self.uploads += 1
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def to_host(self, dst, src):
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)

    def copy(self, dst, src, nbytes):
        ctypes.memmove(dst, src, nbytes)

    def memset(self, dst, byte, nbytes):
        if self.capturing is not None:  # on a capturing stream a memset is a node of the graph
            self.capturing.append((self.memset, (dst, byte, nbytes)))
            return
        ctypes.memset(dst, byte, nbytes)

    def activate(self):
        pass

    def synchronize(self):
        pass

    def function(self, module, entry):
        return module, entry

    def launch(self, function, step, args):
        if self.capturing is not None:
            self.capturing.append((self.launch, (function, step, args)))
            return
        self.launches += 1
        lib, entry = function
        kernel = ctypes.cast(getattr(lib, entry), ctypes.c_void_p)
        lib.mg_emu_launch(kernel, ctypes.byref(args), (ctypes.c_uint * 3)(*step.grid),
                          (ctypes.c_uint * 3)(*step.block))

    def begin_capture(self):
        self.capturing = []

    def end_capture(self):
        graph, self.capturing = self.capturing, None
        return graph

    def replay(self, graph):
        self.replays += 1
        for operation, arguments in graph:
            operation(*arguments)


class HostBackend(CudaBackend):
    """The CUDA backend with the fake device; rendered modules built by g++ (host_emu), the
    hand-written ones with the fiber emulation (kernel_checks.FIBER_EMU)."""

    def __init__(self):
        super().__init__(device=0, name="cuda-host")
        self.fake = FakeDevice()

    def gpu(self):
        return self.fake

    def module(self, source, text=None, extra=()):
        if text is None:  # a hand-written csrc_cuda/ source: through the fiber emulation
            return host_emu.build(FIBER_EMU.read_text() + (CSRC / source).read_text())
        return host_emu.build(text)


@pytest.fixture
def device():
    mg.register_backend("cuda-host", HostBackend)
    yield "cuda-host"
    mg.backend.unregister_backend("cuda-host")


def _graph(shared=True):
    g = mg.Graph()
    x = g.input("x", (5, 7), "float32")
    w = g.param("w", np.linspace(-1, 1, 7).astype(np.float32), share=shared)
    h = F.tanh(x * w) + 1.0
    g.assign(w, w * 0.5 + 0.25)
    return g, w, [F.sigmoid(h) * h, F.astype(h, "int32")]


def _feeds(seed):
    return {"x": np.random.default_rng(seed).standard_normal((5, 7)).astype(np.float32)}


@pytest.mark.parametrize("memory", [None, "debug"])
def test_runs_equal_the_cpus_including_the_weight_updates(device, memory):
    g, w, outputs = _graph()
    w_cpu = g.values[w.id].copy()
    cpu = mg.compile(outputs, device="cpu", optimize=1, memory=memory)
    cuda = mg.compile(outputs, device=device, optimize=1, memory=memory)
    cpu_runs = []
    for seed in range(4):  # the CPU plan updates the shared w in place: run it on a copy
        g.values[w.id][...] = w_cpu
        cpu_runs.append(cpu.run(_feeds(seed)))
        w_cpu = g.values[w.id].copy()
    g.values[w.id][...] = np.linspace(-1, 1, 7).astype(np.float32)
    written(g.values[w.id])
    for seed in range(4):
        for a, b in zip(cpu_runs[seed], cuda.run(_feeds(seed))):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    ex = cuda.executable()
    assert ex.device.replays == 3  # the first run launches; the second captures and replays


def test_weights_stay_on_the_device_until_fetched(device):
    from mgegraph.cuda import fetch
    g, w, outputs = _graph()
    plan = mg.compile(outputs, device=device)
    w0 = g.values[w.id].copy()
    plan.run(_feeds(0))
    plan.run(_feeds(1))
    np.testing.assert_array_equal(g.values[w.id], w0)  # the host array is not touched ...
    fetch(g.values[w.id])
    np.testing.assert_allclose(g.values[w.id], (w0 * 0.5 + 0.25) * 0.5 + 0.25)  # ... until now


def test_a_host_write_of_a_shared_weight_is_uploaded_before_the_next_run(device):
    g, w, outputs = _graph()
    plan = mg.compile(outputs, device=device)
    plan.run(_feeds(0))
    uploads = plan.executable().device.uploads
    plan.run(_feeds(0))
    assert plan.executable().device.uploads == uploads + 1  # the feed only
    g.values[w.id][...] = 0.0
    written(g.values[w.id])  # what Parameter.value = ..., load_state_dict and optimisers do
    y, _ = plan.run(_feeds(0))
    h = np.tanh(_feeds(0)["x"] * 0.0) + 1.0
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-h)) * h, rtol=1e-6)


def test_a_second_plan_sharing_the_weights_sees_the_firsts_updates(device):
    _g, _w, outputs = _graph()
    train = mg.compile(outputs, device=device)
    predict = mg.compile([outputs[0]], device=device)  # no assign: reads w only
    predict.run(_feeds(0))
    train.run(_feeds(0))  # w on train's device copy is now w * 0.5 + 0.25
    (y,) = predict.run(_feeds(2))
    (cpu,) = mg.compile([outputs[0]], device="cpu").run(_feeds(2))
    np.testing.assert_allclose(cpu, y, rtol=1e-6)  # the CPU reads the host array: fetched


def test_without_graphs_every_run_launches(device):
    _g, _w, outputs = _graph()
    plan = mg.compile(outputs, device=device)
    ex = plan.executable()
    ex.use_graph = False
    for seed in range(3):
        plan.run(_feeds(seed))
    assert ex.device.replays == 0 and ex.device.launches == 3 * len(ex.calls)


def test_check_numerics_names_the_instruction(device):
    g = mg.Graph()
    x = g.input("x", (4,), "float32")
    plan = mg.compile([F.log(x) * 2.0], device=device, check_numerics=True, optimize=0)
    with pytest.raises(mg.NumericsError, match=r"instruction 0 \(log"):
        plan.run({"x": np.array([1, 0, 2, 3], np.float32)})
    with pytest.raises(mg.FeedError):
        plan.run({"x": np.ones(3, np.float32)})


def test_a_planning_backend_has_no_device():
    with pytest.raises(DeviceUnavailableError, match="planning only"):
        CudaBackend(device=None).gpu()


def test_state_dict_and_save_bring_the_devices_weights_home(device, tmp_path):
    """A module whose weights a CUDA plan updates: state_dict() and mg.save read the
    device's values (through backend.on_host_read), not the host's stale copy."""
    from mgegraph import nn

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(np.linspace(-1, 1, 7).astype(np.float32))

    model = Scale()
    g = mg.Graph()
    x, w = g.input("x", (5, 7), "float32"), g.bind(model.w)
    g.assign(w, w * 0.5 + 0.25)
    plan = mg.compile([F.tanh(x * w)], device=device)
    start = model.w.value.copy()
    plan.run(_feeds(0))
    np.testing.assert_array_equal(model.w.value, start)  # the update lives on the device
    np.testing.assert_allclose(model.state_dict()["w"], start * 0.5 + 0.25)
    plan.run(_feeds(1))
    mg.save(model.state_dict(), tmp_path / "w.mgm")
    np.testing.assert_allclose(mg.load(tmp_path / "w.mgm")["w"],
                               (start * 0.5 + 0.25) * 0.5 + 0.25)


# -- the status word: a kernel's failure raises the CPU's KernelError ----------------------------
def _same_outputs(cpu, cuda):
    for a, b in zip(cpu, cuda, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", list(failing_cases()))
def test_a_failing_kernel_raises_the_cpus_error_and_the_next_run_works(device, name):
    outputs, good, bad = failing_cases()[name]
    cpu = mg.compile(outputs, device="cpu", optimize=0)
    cuda = mg.compile(outputs, device=device, optimize=0)
    with pytest.raises(mg.KernelError) as want:
        cpu.run(bad)
    for _ in range(2):  # launched one by one, then captured as a graph and replayed
        _same_outputs(cpu.run(good), cuda.run(good))  # the word was zeroed in between
        with pytest.raises(mg.KernelError) as got:
            cuda.run(bad)
        assert str(got.value) == str(want.value)  # op, kernel, the user's line, the words
    _same_outputs(cpu.run(good), cuda.run(good))
    assert cuda.executable().device.replays == 4


def _two_failures():
    g = mg.Graph()
    t, i = g.input("t", (4, 6), "float32"), g.input("i", (3,), "int32")
    a, b = g.input("a", (5,), "int32"), g.input("b", (5,), "int32")
    rows = F.take(t, i, axis=0)
    return [F.pow(a, b), rows * 2.0], {
        "t": np.ones((4, 6), np.float32), "i": np.array([0, 9, 1], np.int32),
        "a": np.arange(5, dtype=np.int32), "b": np.array([1, -2, 0, 1, 1], np.int32)}


def test_the_first_failing_instruction_is_reported(device):
    outputs, feeds = _two_failures()
    cpu = mg.compile(outputs, device="cpu", optimize=0)
    cuda = mg.compile(outputs, device=device, optimize=0)
    with pytest.raises(mg.KernelError) as want:
        cpu.run(feeds)
    first = next(ins.op for ins in cuda.instructions if ins.op in ("pow", "take"))
    assert str(want.value).startswith(first)
    for _ in range(3):  # launched, captured, replayed: the later failure never overwrites
        with pytest.raises(mg.KernelError) as got:
            cuda.run(feeds)
        assert str(got.value) == str(want.value)


def test_check_numerics_reports_the_kernels_failure_before_its_nan(device):
    outputs, good, bad = failing_cases()["cross_entropy_none"]
    plan = mg.compile(outputs, device=device, check_numerics=True, optimize=0)
    with pytest.raises(mg.KernelError, match="an index is out of range"):
        plan.run(bad)  # the loss it wrote is NaN: the kernel's own error comes first
    assert np.isfinite(plan.run(good)[0]).all()


def test_launch_alone_raises_too(device):
    outputs, good, bad = failing_cases()["take"]
    plan = mg.compile(outputs, device=device, optimize=0)
    plan.run(good)
    ex = plan.executable()
    ex.launch()
    with pytest.raises(mg.KernelError):
        plan.run(bad)
    with pytest.raises(mg.KernelError, match="an index is out of range"):
        ex.launch()  # the device still holds the bad indices
