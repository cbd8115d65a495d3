"""Starting the processes of a job: ``launcher`` (MegEngine's decorator) and ``launch`` (the
``mgegraph launch -n N script.py`` command), both through MPI's ``mpiexec``.

>>> @dist.launcher(n_gpus=2)
... def worker(scale):
...     return dist.get_rank() * scale
>>> worker(10)          # in a script run with plain python: two processes
[0, 10]

Design: a decorated function called in a process that mpiexec did not start runs in N new ones,
started as ``mpiexec -n N python -c <run a rank> <folder>``: the folder holds
the function's name, its module (a script's file, run again under the name ``__mp_main__`` as
multiprocessing's spawn does, so its ``if __name__ == "__main__":`` block stays quiet) and the
pickled arguments; each rank writes its result there, and the call returns them in rank order.
Called in a process mpiexec started, it joins the job and runs the function here.
"""
from __future__ import annotations

import functools
import importlib
import os
import pickle
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import communicator
from ..communicator import DistributedError
from .group import FAILURE_FOLDER_ENV, get_rank, init_process_group, is_distributed


def mpiexec() -> str:
    """The ``mpiexec`` of this Python's environment (the mpich wheel's), else the one on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        raise DistributedError("mgegraph.distributed starts processes with mpiexec, which was "
                               "not found: pip install 'mgegraph[distributed]' (mpi4py and the "
                               "mpich wheel, which brings mpiexec)")
    return found


def launch(n: int, command: list[str], timeout: float | None = None) -> int:
    """Run ``command`` (a Python script and its arguments) in ``n`` processes through mpiexec;
    their exit status (that of mpiexec). ``timeout``: seconds the whole job may take.

    >>> launch(2, ["train.py", "--epochs", "3"])
    """
    _check_count("launch", n)
    argv = [mpiexec(), "-n", str(n), sys.executable, *command]
    with tempfile.TemporaryDirectory(prefix="mgegraph-failures-") as failures:
        env = {**os.environ, FAILURE_FOLDER_ENV: failures}
        try:
            with subprocess.Popen(argv, env=env) as job:
                try:
                    return job.wait(timeout=timeout)
                except subprocess.TimeoutExpired as exc:
                    stop(job)
                    raise DistributedError(f"launch: the job ran past its timeout of "
                                           f"{timeout:g} s and was stopped ({' '.join(argv)})"
                                           ) from exc
        finally:
            _print_failures(Path(failures))


def _print_failures(folder: Path) -> None:
    """Pass on the errors the job's ranks reported (group's ``_abort_on_uncaught``)."""
    for report in sorted(folder.glob("rank-*.txt")):
        sys.stderr.write(report.read_text(errors="replace"))
    sys.stderr.flush()


def stop(job: subprocess.Popen) -> None:
    """End an mpiexec and its ranks: SIGTERM first, on which mpiexec ends the ranks it started
    (a SIGKILL would leave them running), SIGKILL if it has not ended within 10 s."""
    job.terminate()
    try:
        job.wait(timeout=10)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()


def _check_count(what: str, n) -> None:
    if type(n) is not int or n < 1:
        raise DistributedError(f"{what}: the number of processes must be an int >= 1, got "
                               f"{n!r}")


class launcher:  # MegEngine's name for a decorator, lower case
    """Run the decorated function in ``n_gpus`` (or ``world_size``) processes, each with its
    process group initialised; the call returns their results in rank order (in a process
    mpiexec already started: this rank's). MegEngine's ``master_ip``, ``port``, ``rank_start``,
    ``device_type`` and ``backend`` are accepted; MPI's launcher places the processes.
    ``timeout``: seconds a collective waits for the other ranks.

    >>> @dist.launcher(n_gpus=4)
    ... def train(): ...
    """

    def __new__(cls, *args, **kwargs):
        if not args or not callable(args[0]):  # @launcher(n_gpus=2): the decorator itself
            return functools.partial(cls, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, func, n_gpus: int | None = None, world_size: int | None = None,
                 rank_start: int = 0, master_ip: str = "localhost", port: int = 0,
                 device_type: str = "xpu", backend: str = "auto", *, timeout: float = 300.0):
        self.func, self.timeout = func, timeout
        self.n = world_size or n_gpus or os.cpu_count() or 1
        _check_count("launcher", self.n)
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        if communicator.launched_by_mpiexec():
            if not is_distributed():
                init_process_group(timeout=self.timeout)
            return self.func(*args, **kwargs)
        with tempfile.TemporaryDirectory(prefix="mgegraph-launch-") as folder:
            _write(Path(folder) / "call.pkl", _call_of(self.func, args, kwargs, self.timeout))
            status = launch(self.n, ["-c", _RANK_MAIN, folder])
            if status != 0:
                raise DistributedError(f"launcher: {self.func.__qualname__} failed in a process "
                                       f"of {self.n} (exit status {status}; its error is printed "
                                       "above)")
            return [_read(Path(folder) / f"result-{rank}.pkl") for rank in range(self.n)]


# what each process runs (not ``-m`` this module: the module would then exist twice, as
# ``__main__`` and under its name, and a decorated function found in the script would not be
# an instance of the ``launcher`` class the entry point knows)
_RANK_MAIN = f"import sys; from {__name__} import _run_rank; _run_rank(sys.argv[1])"


def _call_of(func, args, kwargs, timeout) -> dict:
    module = func.__module__
    script = getattr(sys.modules.get(module), "__file__", None) if module in (
        "__main__", "__mp_main__") else None
    return {"module": module, "script": script, "qualname": func.__qualname__, "args": args,
            "kwargs": kwargs, "timeout": timeout}


def _function(call: dict):
    """The function ``call`` names, found again in this process (its launcher's own)."""
    if call["script"] is not None:
        sys.path.insert(0, str(Path(call["script"]).parent))
        space = runpy.run_path(call["script"], run_name="__mp_main__")
    else:
        space = vars(importlib.import_module(call["module"]))
    found = space[call["qualname"].split(".")[0]]
    for part in call["qualname"].split(".")[1:]:
        found = getattr(found, part)
    return found.func if isinstance(found, launcher) else found


def _write(path: Path, value) -> None:
    path.write_bytes(pickle.dumps(value))


def _read(path: Path):
    return pickle.loads(path.read_bytes())  # this job's own processes wrote it


def _run_rank(folder: str) -> None:
    call = _read(Path(folder) / "call.pkl")
    init_process_group(timeout=call["timeout"])
    result = _function(call)(*call["args"], **call["kwargs"])
    _write(Path(folder) / f"result-{get_rank()}.pkl", result)

