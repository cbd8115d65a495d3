"""The CUDA driver API, thinly: one device's primary context, one stream, memory, modules,
launches and CUDA graphs, through cuda-python (``cuda.bindings.driver``).

Design: every function here is a line or two over a driver call, checked; the logic (what to
allocate, which kernels to launch with which arguments) lives in pure, tested functions
(backend.py, abi.py, geometry.py), since this file runs only where a GPU is.

>>> probe() is None or "cuda" in probe().lower() or "gpu" in probe().lower()
True
"""
from __future__ import annotations

import ctypes
import weakref

import numpy as np

from .abi import MgArgs
from .errors import DeviceUnavailableError
from .kernel import Step
from .nvrtc import version

EXTRA = "pip install 'mgegraph[cuda]'"


def probe() -> str | None:
    """Why CUDA cannot run here, or None: the extra, the driver, a GPU (checked in that order)."""
    try:
        from cuda.bindings import driver, nvrtc  # lazy: optional dependency  # noqa: F401
    except ImportError:
        return f"the CUDA backend needs the 'cuda' extra (cuda-python and NVRTC): {EXTRA}"
    try:
        _check(driver.cuInit(0), "cuInit")
        count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception as exc:  # noqa: BLE001  no libcuda (DynamicLibNotFoundError), no device
        return f"the 'cuda' extra is installed but no NVIDIA driver or GPU is usable here ({exc})"
    if count == 0:
        return "the 'cuda' extra is installed but no CUDA GPU is visible here"
    return None


def device_count() -> int:
    """How many CUDA GPUs the driver sees (after ``probe`` said it can run)."""
    d = _driver()
    _check(d.cuInit(0), "cuInit")
    return _check(d.cuDeviceGetCount(), "cuDeviceGetCount")


def _driver():
    from cuda.bindings import driver  # lazy: optional dependency (the cuda extra)
    return driver


def _check(result, what: str):
    """The value of a driver call's (status, value...) tuple; a DeviceUnavailableError naming
    the call when the status is not CUDA_SUCCESS."""
    driver = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise DeviceUnavailableError(f"CUDA {what} failed: {name.decode() if name else err}")
    return values[0] if len(values) == 1 else tuple(values) if values else None


class Device:
    """One GPU (``index``): its primary context, made current on the calling thread by
    ``activate``, and one stream every copy and launch of mgegraph goes to."""

    def __init__(self, index: int):
        reason = probe()
        if reason:
            raise DeviceUnavailableError(f"device 'cuda:{index}': {reason}")
        d = _driver()
        count = _check(d.cuDeviceGetCount(), "cuDeviceGetCount")
        if not 0 <= index < count:
            raise DeviceUnavailableError(f"device 'cuda:{index}' asked for; this machine has "
                                         f"{count} CUDA GPU(s): cuda:0..cuda:{count - 1}")
        self.index = index
        self.device = _check(d.cuDeviceGet(index), "cuDeviceGet")
        self.context = _check(d.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self.activate()
        attr = d.CUdevice_attribute
        major = _check(d.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device), "cuDeviceGetAttribute")
        minor = _check(d.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device), "cuDeviceGetAttribute")
        self.arch = f"sm_{major}{minor}"
        self.stream = _check(d.cuStreamCreate(int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)),
                             "cuStreamCreate")

    def activate(self) -> None:
        _check(_driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    # -- memory ----------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        """Device memory (256-byte aligned, the driver's guarantee); 0 for no bytes."""
        return int(_check(_driver().cuMemAlloc(nbytes), "cuMemAlloc")) if nbytes else 0

    def free(self, ptr: int) -> None:
        if ptr:
            _driver().cuMemFree(ptr)

    def pinned(self, nbytes: int) -> np.ndarray:
        """Page-locked host memory as a uint8 array (copies from and to it run at full speed);
        freed when the array is."""
        d = _driver()
        ptr = _check(d.cuMemHostAlloc(max(nbytes, 1), 0), "cuMemHostAlloc")
        array = np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(int(ptr)))
        _Pinned.keep(array, int(ptr))
        return array[:nbytes]

    def to_device(self, dst: int, src: np.ndarray) -> None:
        if src.nbytes:
            _check(_driver().cuMemcpyHtoDAsync(dst, src.ctypes.data, src.nbytes, self.stream),
                   "cuMemcpyHtoDAsync")

    def to_host(self, dst: np.ndarray, src: int) -> None:
        if dst.nbytes:
            _check(_driver().cuMemcpyDtoHAsync(dst.ctypes.data, src, dst.nbytes, self.stream),
                   "cuMemcpyDtoHAsync")

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            _check(_driver().cuMemcpyDtoDAsync(dst, src, nbytes, self.stream),
                   "cuMemcpyDtoDAsync")

    def memset(self, dst: int, byte: int, nbytes: int) -> None:
        if nbytes:
            _check(_driver().cuMemsetD8Async(dst, byte, nbytes, self.stream), "cuMemsetD8Async")

    def synchronize(self) -> None:
        _check(_driver().cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    # -- streams and events: a collective's own stream, joined to the plan's by events -------
    def new_stream(self):
        """A second stream (non-blocking, as the plan's)."""
        d = _driver()
        return _check(d.cuStreamCreate(int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)),
                      "cuStreamCreate")

    def new_event(self):
        """An event for ordering streams only (no timing)."""
        d = _driver()
        return _check(d.cuEventCreate(int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)),
                      "cuEventCreate")

    def synchronize_stream(self, stream) -> None:
        """Wait for everything enqueued on ``stream`` (one made by ``new_stream``)."""
        _check(_driver().cuStreamSynchronize(stream), "cuStreamSynchronize")

    def destroy_stream(self, stream) -> None:
        _check(_driver().cuStreamDestroy(stream), "cuStreamDestroy")

    def destroy_event(self, event) -> None:
        _check(_driver().cuEventDestroy(event), "cuEventDestroy")

    def record(self, event, stream) -> None:
        _check(_driver().cuEventRecord(event, stream), "cuEventRecord")

    def wait_event(self, stream, event) -> None:
        """Work enqueued on ``stream`` from now on waits for ``event``."""
        _check(_driver().cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")

    def query(self, event) -> bool:
        """Whether the work before ``event`` has finished (never blocks)."""
        d = _driver()
        err = d.cuEventQuery(event)
        err = err[0] if isinstance(err, tuple) else err
        if err == d.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _check((err,), "cuEventQuery")
        return True

    # -- modules and launches --------------------------------------------------------------
    def load(self, cubin: bytes):
        """A module from a CUBIN; where the driver refuses it (a driver older than the NVRTC
        that made it), the error says both versions."""
        image = ctypes.create_string_buffer(cubin, len(cubin))
        try:
            return _check(_driver().cuModuleLoadData(ctypes.addressof(image)), "cuModuleLoadData")
        except DeviceUnavailableError as exc:
            driver = _check(_driver().cuDriverGetVersion(), "cuDriverGetVersion")
            raise DeviceUnavailableError(
                f"{exc}: the driver supports CUDA {driver // 1000}.{driver % 1000 // 10} and "
                f"the code was compiled by NVRTC {'.'.join(map(str, version()))} for {self.arch}; "
                "install an NVRTC wheel no newer than the driver (for a CUDA 12 driver: pip "
                "install nvidia-cuda-nvrtc-cu12)") from None

    def function(self, module, entry: str):
        return _check(_driver().cuModuleGetFunction(module, entry.encode()),
                      f"cuModuleGetFunction({entry})")

    def launch(self, function, step: Step, args: MgArgs) -> None:
        """One launch of ``function`` with ``args`` as its one by-value parameter."""
        params = (ctypes.c_void_p * 1)(ctypes.addressof(args))
        _check(_driver().cuLaunchKernel(function, *step.grid, *step.block, step.shared_bytes,
                                        self.stream, ctypes.addressof(params), 0),
               f"cuLaunchKernel({step.entry})")

    # -- CUDA graphs: a whole plan's launches recorded once, replayed by one call ------------
    def begin_capture(self) -> None:
        d = _driver()
        _check(d.cuStreamBeginCapture(self.stream,
                                      d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture")

    def end_capture(self):
        d = _driver()
        graph = _check(d.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        try:
            return _check(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        finally:  # the instance keeps what it needs of the graph
            d.cuGraphDestroy(graph)

    def replay(self, graph_exec) -> None:
        _check(_driver().cuGraphLaunch(graph_exec, self.stream), "cuGraphLaunch")

    def destroy_graph(self, graph_exec) -> None:
        _check(_driver().cuGraphExecDestroy(graph_exec), "cuGraphExecDestroy")


class _Pinned:
    """Frees pinned host memory when the array over it goes (weakref finalizers)."""

    @staticmethod
    def keep(array: np.ndarray, ptr: int) -> None:
        weakref.finalize(array, lambda: _driver().cuMemFreeHost(ptr))
