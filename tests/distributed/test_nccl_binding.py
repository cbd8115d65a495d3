"""NCCL's binding (mgegraph/distributed/nccl.py) without a GPU: the real library from the
nvidia-nccl-cu12 wheel (its version, error strings and unique ids need no driver), the dtype
table against the wheel's nccl.h, refusals by name, the argument order of every call and the
wait's abort on a recording fake, init_process_group's backend choice, and the unique id sent
over MPI to 2 processes."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from ml_dtypes import bfloat16
from mpi_jobs import _env, reports
from nccl_fake import HANDLE, FakeNccl

import mgegraph.distributed as dist
from mgegraph.distributed import group, nccl


def _real():
    try:
        return nccl.library()
    except nccl.NcclError as exc:
        pytest.skip(str(exc))


def _header() -> str:
    _real()
    paths = [Path(p).parents[1] / "include" / "nccl.h" for p in nccl.candidates()[:-1]]
    if not paths or not paths[0].exists():
        pytest.skip("NCCL's header is not beside the loaded library (not the wheel's)")
    return paths[0].read_text()


# -- the real library ------------------------------------------------------------------------
def test_importing_mgegraph_and_the_distributed_package_never_loads_nccl():
    code = "import mgegraph, mgegraph.distributed, mgegraph.cuda; " \
           "print('libnccl' in open('/proc/self/maps').read())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=120, check=True)
    assert done.stdout.strip() == "False"


def test_the_real_library_gives_its_version_error_strings_and_unique_ids():
    _real()
    major, minor, patch = nccl.version()
    header = _header()
    assert f"#define NCCL_MAJOR {major}" in header and f"#define NCCL_MINOR {minor}" in header
    assert nccl.captures()  # the wheel is far past 2.9.6
    assert nccl.error_string(0) == "no error"
    assert "remote process exited" in nccl.error_string(6)
    first, second = nccl.unique_id(), nccl.unique_id()
    assert len(first) == nccl.UNIQUE_ID_BYTES and first != second and any(first)


def test_without_a_gpu_making_a_communicator_fails_with_ncclS_own_message():
    _real()
    from mgegraph.cuda import unavailable_reason
    if unavailable_reason() is None:
        pytest.skip("a GPU is here: tests/cuda/test_nccl_device.py makes communicators")
    with pytest.raises(nccl.NcclError, match=r"rank 0 alone: NCCL's ncclCommInitRank "
                                             r"returned 1 \(unhandled cuda error"):
        nccl.init_rank(nccl.unique_id(), 1, 0, "rank 0 alone")


def test_the_dtype_table_is_ncclS_enum():
    header = _header()
    enum = {name: int(v) for name, v in re.findall(r"\b(nccl\w+)\s*=\s*(\d+)", header)}
    names = {np.int8: "ncclInt8", np.uint8: "ncclUint8", np.int32: "ncclInt32",
             np.int64: "ncclInt64", np.float16: "ncclFloat16", np.float32: "ncclFloat32",
             np.float64: "ncclFloat64", bfloat16: "ncclBfloat16"}
    assert {np.dtype(d): enum[n] for d, n in names.items()} == nccl.DTYPES
    assert enum["ncclSum"] == nccl.SUM and enum["ncclInProgress"] == nccl.IN_PROGRESS


@pytest.mark.parametrize("dtype", [np.bool_, np.int16])
def test_dtypes_nccl_lacks_are_refused_by_name(dtype):
    with pytest.raises(nccl.NcclError, match=rf"all_reduce: NCCL has no {np.dtype(dtype)}"):
        nccl.nccl_dtype(dtype, "all_reduce")


def test_without_the_library_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(nccl, "candidates", lambda: ["/nonexistent/libnccl.so.2"])
    nccl.library.cache_clear()
    try:
        with pytest.raises(nccl.NcclError, match=r"pip install nvidia-nccl-cu12"):
            nccl.library()
    finally:
        nccl.library.cache_clear()


# -- on a recording fake ---------------------------------------------------------------------
@pytest.fixture
def fake(monkeypatch):
    log = []
    lib = FakeNccl(log)
    monkeypatch.setattr(nccl, "library", lambda: lib)
    return lib


def _comm(timeout=5.0):
    return nccl.NcclCommunicator(HANDLE, 1, 2, "0,1", 0, timeout)


def test_every_call_passes_its_arguments_in_ncclS_order(fake):
    comm = _comm()
    comm.all_reduce(0x100, 0x200, 10, np.float64, 0x51)
    comm.broadcast(0x100, 0x100, 3, np.int16, 0x51, root=1)   # bytes: any dtype moves
    comm.all_gather(0x100, 0x400, 5, np.float32, 0x52)
    comm.reduce_scatter(0x400, 0x100, 5, np.int32, 0x52)
    with nccl.grouped():
        comm.all_reduce(0x100, 0x100, 1, np.int64, 0x51)
    assert fake.log == [
        ("ncclAllReduce", 0x100, 0x200, 10, 8, 0, HANDLE, 0x51),
        ("ncclBroadcast", 0x100, 0x100, 6, 1, 1, HANDLE, 0x51),
        ("ncclAllGather", 0x100, 0x400, 20, 1, HANDLE, 0x52),
        ("ncclReduceScatter", 0x400, 0x100, 5, 2, 0, HANDLE, 0x52),
        ("ncclGroupStart",), ("ncclAllReduce", 0x100, 0x100, 1, 4, 0, HANDLE, 0x51),
        ("ncclGroupEnd",)]


def test_a_wait_that_never_completes_aborts_within_the_timeout(fake):
    comm = _comm(timeout=0.1)
    began = time.monotonic()
    with pytest.raises(dist.CollectiveTimeout, match=r"the step on rank 1 of group \[0,1\] "
                                                    r"\(cuda:0\): waited 0.1 s"):
        comm.wait(lambda: False, "the step")
    assert time.monotonic() - began < 2.0
    assert fake.log.count(("ncclCommAbort", HANDLE)) == 1
    with pytest.raises(nccl.NcclError, match="aborted by an earlier failure"):
        comm.all_reduce(0, 0, 1, np.float32, 0)


def test_an_asynchronous_error_aborts_at_once_with_ncclS_string(fake):
    fake.async_error = 6
    with pytest.raises(nccl.NcclError, match=r"rank 1 .*NCCL reported remote process exited"):
        _comm(timeout=60).wait(lambda: False, "the step")
    assert ("ncclCommAbort", HANDLE) in fake.log


def test_a_failing_call_raises_with_ncclS_string(fake, monkeypatch):
    monkeypatch.setattr(FakeNccl, "ncclAllReduce", lambda self, *a: 4, raising=False)
    with pytest.raises(nccl.NcclError, match=r"all_reduce on rank 1 of group \[0,1\] .*"
                                             r"ncclAllReduce returned 4"):
        _comm().all_reduce(0, 0, 1, np.float32, 0)


def test_init_process_group_knows_ncclS_spelling(monkeypatch):
    monkeypatch.setattr(group, "_job", None)
    with pytest.raises(dist.DistributedError, match=r"\('auto', 'mpi', 'nccl'\).*'gloo'"):
        dist.init_process_group(backend="gloo")
    monkeypatch.setattr(nccl, "candidates", lambda: ["/nonexistent/libnccl.so.2"])
    nccl.library.cache_clear()
    try:
        with pytest.raises(nccl.NcclError, match="pip install nvidia-nccl-cu12"):
            dist.init_process_group(backend="nccl")
    finally:
        nccl.library.cache_clear()
    assert group._job is None


# -- over MPI --------------------------------------------------------------------------------
def test_rank_0s_unique_id_reaches_every_rank_over_mpi():
    _real()
    found = reports("nccl_unique_id.py", 2, timeout=300)
    assert found[0]["uid"] == found[1]["uid"] and len(found[0]["uid"]) == 2 * 128
    assert all(r["backend"] == "nccl" for r in found)
    from mgegraph.cuda import unavailable_reason
    if unavailable_reason() is not None:  # no GPU: each rank names itself and NCCL's error
        for r in found:
            assert f"rank {r['rank']}'s NCCL communicator" in r["made"]
            assert "ncclCommInitRank returned 1" in r["made"]
