"""The driver calls a CUDA plan's collectives add (mgegraph/cuda/driver.py): a second stream,
events without timing, a record, a stream waiting for an event, and a query that never blocks,
against test_driver_fake's recording fake of ``cuda.bindings.driver``."""
import sys
import types

import pytest
from test_driver_fake import CUresult, fake_driver

from mgegraph.cuda import driver


@pytest.fixture
def install(monkeypatch):
    """Put the fake driver ``d`` where driver.py imports it from."""
    def put(d):
        package = types.SimpleNamespace(driver=d, nvrtc=types.ModuleType("nvrtc"))
        for name, module in (("cuda", types.ModuleType("cuda")), ("cuda.bindings", package),
                             ("cuda.bindings.driver", d), ("cuda.bindings.nvrtc", package.nvrtc)):
            monkeypatch.setitem(sys.modules, name, module)
        return d
    return put


def _with_events(d, ready: bool):
    ok = CUresult.CUDA_SUCCESS
    d.CUevent_flags = types.SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)
    d.CUresult = types.SimpleNamespace(CUDA_SUCCESS=ok, CUDA_ERROR_NOT_READY=600)
    for name, result in {"cuEventCreate": (ok, "event"), "cuEventRecord": (ok,),
                         "cuStreamWaitEvent": (ok,),
                         "cuEventQuery": (ok if ready else 600,)}.items():
        setattr(d, name, lambda *args, name=name, result=result: (d.calls.append((name, args)),
                                                                  result)[1])
    return d


def test_streams_and_events_for_a_collective(install):
    d = install(_with_events(fake_driver(count=1), ready=True))
    device = driver.Device(0)
    del d.calls[:]
    stream, event = device.new_stream(), device.new_event()
    device.record(event, device.stream)
    device.wait_event(stream, event)
    assert device.query(event)
    assert d.calls == [("cuStreamCreate", (1,)), ("cuEventCreate", (2,)),
                       ("cuEventRecord", ("event", "stream")),
                       ("cuStreamWaitEvent", ("stream", "event", 0)),
                       ("cuEventQuery", ("event",))]


def test_a_query_of_unfinished_work_says_so_without_waiting(install):
    install(_with_events(fake_driver(count=1), ready=False))
    assert not driver.Device(0).query("event")
