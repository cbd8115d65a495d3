"""mgegraph/cuda/driver.py against a fake ``cuda.bindings.driver`` that records its calls: the
probe's three reasons, a Device's setup, the copies, and a launch that hands the driver the
address of an array holding the address of the packed MgArgs (the one by-value parameter)."""
import ctypes
import enum
import sys
import types

import numpy as np
import pytest

from mgegraph.cuda import DeviceUnavailableError, abi, driver
from mgegraph.cuda.kernel import Step


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1


def fake_driver(count=1, init_error=None):
    calls = []
    d = types.SimpleNamespace(CUresult=CUresult, calls=calls)
    d.CUdevice_attribute = types.SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor")
    d.CUstream_flags = types.SimpleNamespace(CU_STREAM_NON_BLOCKING=1)

    def record(name, result):
        def call(*args):
            calls.append((name, args))
            return result(*args) if callable(result) else result
        return call

    def init(flags):
        if init_error:
            raise init_error
        return (CUresult.CUDA_SUCCESS,)

    ok = CUresult.CUDA_SUCCESS
    for name, result in {
            "cuInit": init, "cuDeviceGetCount": (ok, count), "cuDeviceGet": (ok, "dev"),
            "cuDevicePrimaryCtxRetain": (ok, "ctx"), "cuCtxSetCurrent": (ok,),
            "cuDeviceGetAttribute": lambda attr, dev: (ok, 9 if attr == "major" else 0),
            "cuStreamCreate": (ok, "stream"), "cuMemAlloc": (ok, 0x7000),
            "cuMemcpyHtoDAsync": (ok,), "cuMemcpyDtoHAsync": (ok,),
            "cuLaunchKernel": (ok,), "cuStreamSynchronize": (ok,),
            "cuGetErrorName": (ok, b"CUDA_ERROR_INVALID_VALUE"),
            "cuModuleGetFunction": (CUresult.CUDA_ERROR_INVALID_VALUE, None)}.items():
        setattr(d, name, record(name, result))
    return d


@pytest.fixture
def install(monkeypatch):
    def put(d):
        package = types.ModuleType("cuda.bindings")
        package.driver, package.nvrtc = d, types.ModuleType("cuda.bindings.nvrtc")
        monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
        monkeypatch.setitem(sys.modules, "cuda.bindings", package)
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", d)
        monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", package.nvrtc)
        return d
    return put


def test_the_probe_names_what_is_missing(install, monkeypatch):
    install(fake_driver(count=1))
    assert driver.probe() is None
    install(fake_driver(count=0))
    assert "no CUDA GPU is visible" in driver.probe()
    install(fake_driver(init_error=OSError("libcuda.so: not found")))
    assert "no NVIDIA driver or GPU is usable here (libcuda.so: not found)" in driver.probe()
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    assert "needs the 'cuda' extra" in driver.probe()


def test_a_device_sets_up_its_context_stream_and_architecture(install):
    d = install(fake_driver(count=2))
    device = driver.Device(1)
    assert device.arch == "sm_90"
    names = [name for name, _ in d.calls]
    assert names.index("cuDevicePrimaryCtxRetain") < names.index("cuCtxSetCurrent") \
        < names.index("cuStreamCreate")
    assert ("cuDeviceGet", (1,)) in d.calls and ("cuStreamCreate", (1,)) in d.calls
    with pytest.raises(DeviceUnavailableError, match=r"'cuda:2' asked for; this machine has 2"):
        driver.Device(2)


def test_copies_and_a_launch_pass_addresses(install):
    d = install(fake_driver())
    device = driver.Device(0)
    host = np.arange(4, dtype=np.float32)
    device.to_device(0x7000, host)
    device.to_host(host, 0x7000)
    assert ("cuMemcpyHtoDAsync", (0x7000, host.ctypes.data, 16, "stream")) in d.calls
    assert ("cuMemcpyDtoHAsync", (host.ctypes.data, 0x7000, 16, "stream")) in d.calls
    args = abi.pack([0x7000], (4,), ())
    seen = {}

    def launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        pointer = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))[0]
        seen["n_ints"] = abi.MgArgs.from_address(pointer).ints[0]
        seen["geometry"] = (gx, gy, gz, bx, by, bz, shared, stream, extra)
        return (CUresult.CUDA_SUCCESS,)

    d.cuLaunchKernel = launch
    device.launch("fn", Step("mg_k", (3, 1, 1), (256, 1, 1), 128), args)
    assert seen == {"n_ints": 4, "geometry": (3, 1, 1, 256, 1, 1, 128, "stream", 0)}


def test_a_failed_call_names_the_call_and_the_error(install):
    install(fake_driver())
    device = driver.Device(0)
    with pytest.raises(DeviceUnavailableError,
                       match=r"CUDA cuModuleGetFunction\(mg_k\) failed: CUDA_ERROR_INVALID_VALUE"):
        device.function("module", "mg_k")
