"""mgegraph.distributed on 2 and 4 processes of this machine: each test starts a rank program of
``ranks/`` with ``mpiexec -n N`` (a timeout on each job) and checks what the ranks report. A
machine where MPI cannot start skips them with the reason; the first tests need no MPI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from mpi_jobs import RANKS, ROOT, _env, need_mpi, reports, run

import mgegraph as mg
import mgegraph.distributed as dist
from mgegraph import communicator
from mgegraph.distributed import functional as DF


# -- without MPI ----------------------------------------------------------------------------
def test_importing_mgegraph_and_its_distributed_package_never_loads_mpi4py():
    code = "import sys, mgegraph, mgegraph.distributed, mgegraph.nn; print('mpi4py' in " \
           "sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=120, check=True)
    assert done.stdout.strip() == "False"


def test_without_mpi4py_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # an import of it now fails
    with pytest.raises(dist.DistributedError, match=r"pip install 'mgegraph\[distributed\]'"):
        communicator.load_mpi()


def test_a_job_of_several_processes_needs_mpiexec(monkeypatch):
    for name in communicator.LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(dist.DistributedError, match=r"not started by mpiexec; run `mpiexec -n "
                                                    r"4 python script.py`"):
        dist.init_process_group(world_size=4)
    assert not dist.is_distributed() and (dist.get_rank(), dist.get_world_size()) == (0, 1)


class _FakeClock:
    """time.monotonic advancing ``tick`` seconds per reading; records the waits' yields and
    sleeps in ``calls``."""

    def __init__(self, tick: float):
        self.now, self.tick, self.calls = 0.0, tick, []

    def monotonic(self) -> float:
        self.now += self.tick
        return self.now

    def sched_yield(self) -> None:
        self.calls.append(("yield", None))

    def sleep(self, seconds: float) -> None:
        self.calls.append(("sleep", seconds))


class _Request:
    """An MPI request whose Test() says done at its ``done_at``-th call."""

    def __init__(self, done_at: int):
        self.tests, self.done_at = 0, done_at

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        self.tests += 1
        return self.tests >= self.done_at


def test_a_wait_tests_back_to_back_for_its_spin_then_sleeps_then_times_out(monkeypatch):
    clock = _FakeClock(tick=communicator.WAIT_SPIN / 3.5)
    monkeypatch.setattr(communicator.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(communicator.time, "sleep", clock.sleep)
    monkeypatch.setattr(communicator.os, "sched_yield", clock.sched_yield)
    comm = communicator.Communicator(None, (0, 1), 0, timeout=communicator.WAIT_SPIN * 3)
    comm.wait(_Request(done_at=8), "all_reduce_sum")
    # 7 failed tests: 1, 2, 3 ticks after the start are within the spin (3.5 ticks), then
    # sleeps of 10 us doubling
    assert [kind for kind, _ in clock.calls] == ["yield"] * 3 + ["sleep"] * 4
    assert [s for _, s in clock.calls[3:]] == pytest.approx([0.0, 1e-5, 3e-5, 7e-5])
    clock.now, clock.calls = 0.0, []
    with pytest.raises(communicator.CollectiveTimeout, match=r"all_reduce_sum: rank 0 of "
                                                             r"group \[0,1\] waited 0.15 s"):
        comm.wait(_Request(done_at=10**6), "all_reduce_sum")
    assert [kind for kind, _ in clock.calls] == ["yield"] * 3 + ["sleep"] * 7


def test_the_plans_wait_kernel_spins_as_long_as_the_communicators_wait(monkeypatch):
    from mgegraph._kernels.lowering import collective as lowering
    from mgegraph.ir.graph import Graph
    from mgegraph.ops.collective import all_reduce

    monkeypatch.setitem(communicator._GROUPS, "0",
                        communicator.Communicator(None, (0,), 0, timeout=5.0))
    g = Graph()
    node = all_reduce(g.input("x", (3,), np.float32), group="0").node
    ints = lowering._lower(node).ints
    fields = lowering.FIELDS["COLLECTIVE_FIELDS"]
    assert ints[fields.index("spin_ns")] == int(communicator.WAIT_SPIN * 1e9) > 0
    assert ints[fields.index("timeout_ns")] == int(5.0 * 1e9)


def test_megengines_path_f_distributed_loads_the_collectives_on_first_use():
    code = "import sys, mgegraph.functional as F; before = 'mgegraph.distributed' in " \
           "sys.modules; print(before, F.distributed is __import__('mgegraph.distributed', " \
           "fromlist=['functional']).functional, 'mpi4py' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=120, check=True)
    assert done.stdout.split() == ["False", "True", "False"]


def test_collectives_and_the_callback_need_the_process_group():
    with pytest.raises(dist.DistributedError, match=r"call dist.init_process_group\(\) first"):
        DF.all_reduce_sum(mg.tensor(np.ones(3, np.float32)))
    with pytest.raises(dist.DistributedError, match=r"make_allreduce_cb needs the process"):
        dist.make_allreduce_cb("mean")
    with pytest.raises(mg.GraphError, match=r"SyncBatchNorm: group='world' must be"):
        mg.nn.SyncBatchNorm(4, group="world")


# -- the collectives ------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4])
def test_every_collective_matches_numpy_on_every_dtype_with_its_gradient(n):
    found = reports("collectives.py", n)
    # 10 dtypes x (reductions and movements) and the gradients: the root checks more
    assert all(r["checks"] >= 120 for r in found) and found[0]["checks"] > found[1]["checks"]
    errors = found[0]["errors"]
    assert "got i32[2] (use all_reduce_sum for integers" in errors["mean_of_ints"]
    assert f"does not split into {n} equal blocks" in errors["indivisible"]
    assert "axis 2 is out of range for f32[2,2]" in errors["bad_axis"]
    assert "needs a Tensor, got ndarray (at " in errors["not_tensor"]
    assert "needs a tensor with an axis" in errors["scalar_gather"]
    assert f"ranks must be distinct ints in [0, {n})" in errors["bad_group"]
    assert "already called" in errors["twice"]
    assert "all_reduce_sum: collectives cannot be traced yet" in errors["traced"]
    assert "reduce_sum has no gradient here" in errors["reduce_sum_gradient"]
    assert all("reduce_sum_gradient" not in r["errors"] for r in found[1:])  # only the root's


# -- training -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,n", [("mlp", 2), ("mlp", 4), ("cnn", 2)])
def test_data_parallel_training_matches_one_process_on_the_whole_batch(kind, n):
    for r in reports("train.py", n, kind):
        assert r["loss_gap"] < 1e-5 and r["weight_gap"] < 1e-5, r
        assert len(r["buckets"]) > 1, r  # the gradients travelled in several buckets
        assert sum(b[1] for b in r["buckets"]) == r["parameters"] - 4 * (kind == "cnn"), r


def test_on_root_without_a_process_group_just_runs_the_function(tmp_path):
    assert dist.on_root(mg.save, {"w": np.ones(2, np.float32)}, str(tmp_path / "c.mge")) is None
    assert list(mg.load(str(tmp_path / "c.mge"))) == ["w"]


def test_a_checkpoint_is_written_by_rank_0_alone_and_every_rank_waits_for_it(tmp_path):
    ranks = reports("checkpoint.py", 2, str(tmp_path))
    for r in ranks:
        # only rank 0 ran the writer, and no rank came back before the file was there
        assert r["ran_on"] == ["checkpoint.mge", "ran-on-0"] and r["exists_after"], r
        assert r["same"], r
    assert [r["result"] for r in ranks] == ["written", None]
    assert ranks[0]["error"] == "OSError: disk full"
    assert ranks[1]["error"].startswith("DistributedError: on_root('fail') failed on the root, "
                                        "rank 0: OSError: disk full"), ranks[1]


def test_sync_batch_norm_matches_batch_norm_on_the_whole_batch():
    for r in reports("sync_bn.py", 4):  # each rank a batch of another size
        assert r["flat"][0] < 1e-5 and r["image"][0] < 1e-5, r


# -- faults ---------------------------------------------------------------------------------
def _failed_job(mode: str) -> tuple[str, float]:
    start = time.monotonic()
    done = run("fault.py", 2, mode, timeout=120)
    elapsed = time.monotonic() - start
    assert done.returncode != 0, done.stdout
    assert "rank 0 finished" not in done.stdout and "rank 1 finished" not in done.stdout
    return done.stdout + done.stderr, elapsed


def test_a_rank_that_hangs_stops_the_others_at_their_collective_timeout():
    output, elapsed = _failed_job("hang")
    assert "CollectiveTimeout: make_allreduce_cb: rank 0 of group [0,1] " \
           "waited 2 s for the other ranks" in output
    assert elapsed < 100  # rank 1 sleeps 120 s: the abort ended it


@pytest.mark.parametrize("mode", ["mismatch", "traced"])
def test_ranks_with_different_models_are_refused_at_the_first_backward(mode):
    output, _ = _failed_job(mode)
    # whichever rank aborts first names itself first; the gradients in the order the walk
    # finished them: the second layer's bias (float32[2] on both), then its weight
    assert ("rank 0 has gradients #1 of 4 as float32[2, 2], rank 1 #1 of 4 as float32[2, 3]"
            in output or "rank 1 has gradients #1 of 4 as float32[2, 3], rank 0 #1 of 4 as "
            "float32[2, 2]" in output), output


def test_a_rank_that_skips_a_layer_later_is_refused_before_its_buckets_are_summed():
    output, _ = _failed_job("branch")
    # rank 1's second gradient is the first layer's weight, rank 0's the second layer's
    assert ("rank 0 has gradients #1 of 4 as float32[2, 2], rank 1 #1 of 2 as float32[2, 4]"
            in output or "rank 1 has gradients #1 of 2 as float32[2, 4], rank 0 #1 of 4 as "
            "float32[2, 2]" in output), output


# -- starting jobs --------------------------------------------------------------------------
def test_a_rank_that_raises_under_mgegraph_launch_stops_the_whole_job():
    need_mpi()
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mgegraph", "launch", "-n", "2", "--timeout",
                           "240", str(RANKS / "fault.py"), "raise"], capture_output=True,
                          text=True, timeout=300, env=_env(), cwd=ROOT, check=False)
    assert done.returncode != 0
    assert "rank 1 of 2 raised; aborting the job" in done.stderr
    assert "ValueError: rank 1 fails on purpose" in done.stderr
    assert "rank 0 finished" not in done.stdout
    assert time.monotonic() - start < 100  # not the 240 s of launch's own timeout


def test_the_launcher_decorator_runs_the_function_in_new_processes():
    need_mpi()
    done = subprocess.run([sys.executable, str(RANKS / "launched.py")], capture_output=True,
                          text=True, timeout=300, env=_env(), cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.split("RESULTS ", 1)[1])
    assert results == [{"rank": k, "size": 2, "value": 30.0} for k in range(2)]


def test_launch_refuses_a_bad_count_and_a_missing_script(capsys):
    from mgegraph.cli import main
    assert main(["launch", "-n", "0", "x.py"]) == 2
    assert main(["launch", "-n", "2", os.path.join(str(ROOT), "no-such-script.py")]) == 1
    assert "launch: no script" in capsys.readouterr().err


def test_a_job_past_launchs_timeout_is_stopped_ranks_and_all():
    need_mpi()
    marker = "time.sleep(61.25)"  # names these ranks in the process table
    start = time.monotonic()
    with pytest.raises(dist.DistributedError, match=r"ran past its timeout of 3 s"):
        dist.launch(2, ["-c", f"import time; {marker}"], timeout=3)
    assert time.monotonic() - start < 30
    table = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True,
                           check=True).stdout
    assert marker not in table  # mpiexec ended its ranks (a SIGKILL would have orphaned them)
