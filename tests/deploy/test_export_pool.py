"""The C runtime's thread pool (csrc/mgr_threads.c) under the ways a program uses it: two model
handles run from two threads at once, parallel_fors back to back (the workers taking the next
while they still poll, the caller taking parts no worker has started), more threads than CPUs
(no polling), and a fork after the pool started: every run the bits of one thread
(tests/deploy/pool_stress.c), also under ThreadSanitizer."""
from __future__ import annotations

import subprocess

import pytest

from mgegraph.deploy import export_c

from .cbuild import build_harness
from .test_export_gemv_threads import mlp

RUNS = 150  # per caller: two parallel_fors each (mlp-infer's single row, split at 2 threads)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("cflags", ["-O2", "-O1 -g -fsanitize=thread"], ids=["O2", "tsan"])
def test_two_callers_and_a_fork_get_the_bits_of_one_thread(tmp_path, cflags, threads):
    plan, _, _ = mlp(1)
    exported = export_c(plan, tmp_path / "c")
    stress = build_harness(exported.directory, "pool_stress", cflags)
    # (a child forked from threads under ThreadSanitizer may not start threads: no fork there)
    fork = [] if "thread" in cflags else ["fork"]
    done = subprocess.run([str(stress), str(exported.directory / "model.mgr"), str(RUNS),
                           str(threads), *fork], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0 and "Sanitizer" not in done.stderr, done.stdout + done.stderr
    lines = done.stdout.split("\n")
    assert lines.count(f"same {RUNS}") == 2, done.stdout
    assert ("child same" in lines) == bool(fork), done.stdout
