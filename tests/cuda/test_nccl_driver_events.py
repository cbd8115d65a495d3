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
    d.CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
    d.CUevent_flags = types.SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)
    d.CUresult = types.SimpleNamespace(CUDA_SUCCESS=ok, CUDA_ERROR_NOT_READY=600)
    for name, result in {"cuEventCreate": (ok, "event"), "cuEventRecord": (ok,),
                         "cuStreamWaitEvent": (ok,), "cuEventDestroy": (ok,),
                         "cuStreamDestroy": (ok,), "cuStreamBeginCapture": (ok,),
                         "cuStreamEndCapture": (ok, "graph"), "cuGraphDestroy": (ok,),
                         "cuGraphInstantiate": (ok, "graph_exec"), "cuGraphExecDestroy": (ok,),
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


def test_what_a_closed_plan_gives_back(install):
    d = install(_with_events(fake_driver(count=1), ready=True))
    device = driver.Device(0)
    device.begin_capture()
    graph_exec = device.end_capture()
    del d.calls[:]
    device.synchronize_stream("stream2")
    device.destroy_event("event")
    device.destroy_stream("stream2")
    device.destroy_graph(graph_exec)
    assert d.calls == [("cuStreamSynchronize", ("stream2",)), ("cuEventDestroy", ("event",)),
                       ("cuStreamDestroy", ("stream2",)), ("cuGraphExecDestroy", ("graph_exec",))]


def test_the_captured_graph_is_destroyed_once_instantiated(install):
    d = install(_with_events(fake_driver(count=1), ready=True))
    device = driver.Device(0)
    device.begin_capture()
    del d.calls[:]
    assert device.end_capture() == "graph_exec"
    assert [c[0] for c in d.calls] == ["cuStreamEndCapture", "cuGraphInstantiate",
                                      "cuGraphDestroy"]
    assert d.calls[-1] == ("cuGraphDestroy", ("graph",))
