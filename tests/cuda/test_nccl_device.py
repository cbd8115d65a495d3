"""NCCL on a GPU (marker cuda; skipped here without one, with the reason): a communicator of one
rank (NCCL refuses two ranks on one GPU) whose collectives give back their input, and a
compile_train_step plan on device="cuda" whose buckets go through that real communicator,
against the same step on the CPU, over several steps (the later ones replay the CUDA graph
with the NCCL calls captured in it)."""
import copy
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed"))  # nccl_fake.py
from nccl_fake import pretend_two_ranks  # noqa: E402

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph import optim
from mgegraph.cuda import collective as cuda_collective
from mgegraph.cuda import fetch
from mgegraph.demo import mlp
from mgegraph.distributed import nccl

pytestmark = pytest.mark.cuda


def _alone(key: str, device: int, timeout: float = 60.0) -> nccl.NcclCommunicator:
    handle = nccl.init_rank(nccl.unique_id(), 1, 0, f"rank 0 alone on cuda:{device}")
    return nccl.NcclCommunicator(handle, 0, 1, key, device, timeout)


def test_a_one_rank_communicators_collectives_give_back_the_input():
    from mgegraph.cuda.driver import Device
    device = Device(0)
    comm = _alone("0", 0)
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    src, dst = device.alloc(x.nbytes), device.alloc(x.nbytes)
    device.to_device(src, x)
    done = device.new_event()
    for call in (comm.all_reduce, comm.broadcast, comm.all_gather, comm.reduce_scatter):
        device.memset(dst, 0, x.nbytes)
        call(src, dst, x.size, np.float32, device.stream)
        device.record(done, device.stream)
        comm.wait(lambda: device.query(done), call.__name__)
        out = np.empty_like(x)
        device.to_host(out, dst)
        device.synchronize()
        np.testing.assert_array_equal(out, x, err_msg=call.__name__)
    comm.destroy()


@pytest.fixture
def two_rank_job(monkeypatch):
    """A job that believes it has two ranks (rank 0 here; no MPI), whose CUDA plans reduce over
    a real one-rank NCCL communicator: NCCL's sum is each value itself, and the mean halves it,
    as the CPU plan of the same job does (its group has no MPI communicator: the value)."""
    pretend_two_ranks(monkeypatch, timeout=60)
    cuda_collective.install_communicators(_alone)


def test_a_data_parallel_step_on_cuda_equals_the_cpus(two_rank_job):
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 64)).astype(np.float32),
                rng.integers(0, 10, 8).astype(np.int32)) for _ in range(4)]
    models = [mlp(), None]
    models[1] = copy.deepcopy(models[0])
    steps = [mg.compile_train_step(m, F.cross_entropy, optim.SGD(m.parameters(), 0.1,
                                                                 momentum=0.9),
                                   batches[0], device=device,
                                   all_reduce=dist.AllReduce(bucket_mb=0.02))
             for m, device in zip(models, ("cuda", "cpu"))]
    assert sum(ins.op == "all_reduce_start" for ins in steps[0].plan.instructions) >= 2
    for batch in batches:
        losses = [step(*batch) for step in steps]
        np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    fetch(*[p.value for p in models[0].parameters()])
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        np.testing.assert_allclose(p.value, q.value, rtol=1e-4, atol=1e-6)
