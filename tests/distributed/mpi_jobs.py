"""Running a rank program of ``ranks/`` under ``mpiexec -n N`` for a test: each job has a
timeout, its ranks print one JSON line each (``report`` in ``ranks/common.py``), and a machine
where MPI cannot start skips the test with the reason."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RANKS = Path(__file__).resolve().parent / "ranks"


def _env() -> dict:
    # one thread per rank: the ranks share this machine's cores with each other
    path = os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                MKL_NUM_THREADS="1")


@functools.cache
def mpi_problem() -> str | None:
    """Why MPI jobs cannot run here (None: they can)."""
    try:
        from mgegraph.distributed.launcher import mpiexec
        command = [mpiexec(), "-n", "2", sys.executable, "-c",
                   "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"]
    except Exception as exc:  # noqa: BLE001 - any reason is the skip's reason
        return str(exc)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=_env(),
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mpiexec did not start two processes: {exc}"
    if done.returncode != 0:
        return f"mpiexec -n 2 failed: {(done.stderr or done.stdout)[-500:]}"
    return None


def need_mpi() -> None:
    problem = mpi_problem()
    if problem:
        pytest.skip(f"MPI cannot start here: {problem}")


@functools.cache
def run(program: str, n: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``mpiexec -n n python ranks/<program> args``, its output captured (cached: several tests
    read one job's reports); a job past ``timeout`` is stopped, ranks and all, and fails."""
    need_mpi()
    from mgegraph.distributed.launcher import mpiexec, stop
    command = [mpiexec(), "-n", str(n), sys.executable, str(RANKS / program), *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_env(), cwd=ROOT) as job:
        try:
            out, err = job.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(job)
            pytest.fail(f"{program} on {n} ranks ran past {timeout} s")
    return subprocess.CompletedProcess(command, job.returncode, out, err)


def reports(program: str, n: int, *args: str, timeout: float = 300) -> list[dict]:
    """Each rank's report (in rank order) of a job that must succeed."""
    done = run(program, n, *args, timeout=timeout)
    assert done.returncode == 0, f"{program} on {n} ranks failed:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    # mpiexec forwards each rank's lines whole, but two may arrive on one line
    decoder = json.JSONDecoder()
    found = [decoder.raw_decode(part)[0] for part in done.stdout.split("REPORT ")[1:]]
    assert sorted(r["rank"] for r in found) == list(range(n)), done.stdout[-3000:]
    return sorted(found, key=lambda r: r["rank"])
