"""The compiler and the profiler reach a device through the Backend protocol alone: the
capabilities it declares, and the profiler's seam in mgegraph.backend."""
import subprocess
import sys

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import backend as B
from mgegraph.ir.errors import GraphError

from .reference import ReferenceBackend


class Bare:
    """A backend object that declares none of the optional capabilities."""

    name, alignment = "bare", 64


def test_a_backend_missing_a_capability_is_named_at_compile():
    B.register_backend("bare", Bare)
    try:
        with pytest.raises(GraphError, match="Bare does not declare fusion, runs_prologue, "
                                             "prepack, exact_accumulate, measurer, packed_blocks"):
            mg.compile([F.relu(mg.Graph().input("x", (2,)))], device="bare")
    finally:
        B.unregister_backend("bare")


def test_kernel_table_gives_the_optional_capabilities_their_defaults():
    backend = ReferenceBackend()
    B.check_backend(backend)
    assert (backend.runs_prologue, backend.prepack, backend.exact_accumulate) == \
        (False, None, None)


def test_a_backend_that_packs_weights_is_asked_through_the_protocol():
    asked = []

    class Packing(ReferenceBackend):
        name = "packing"

        def prepack(self, node):  # declared: the prepack pass asks, and packs nothing here
            asked.append(node.op.name)

    B.register_backend("packing", Packing)
    try:
        g = mg.Graph()
        x = g.input("x", (2, 3))
        w = g.param("w", np.ones((4, 3), np.float32))
        (y,) = mg.compile([F.linear(x, w)], device="packing").run(
            {"x": np.ones((2, 3), np.float32)})
    finally:
        B.unregister_backend("packing")
    assert asked == ["linear"] and y.tolist() == [[3.0] * 4] * 2


def test_profiling_is_the_active_profiles():
    assert B.profiling() == ()
    with mg.profile() as prof:
        assert B.profiling() == (prof,)
    assert B.profiling() == ()


def test_an_untimed_executable_runs_unseen_by_a_profile():
    B.register_backend("reference", ReferenceBackend)  # plans find their backend by its name
    try:
        g = mg.Graph()
        y = F.relu(g.input("x", (3,)))
        plan = mg.compile([y], device="reference")
        assert plan.executable().timed is False
        with mg.profile() as prof:
            (out,) = plan.run({"x": np.array([-1, 0, 2], np.float32)})
        assert out.tolist() == [0, 0, 2] and prof.runs == ()
    finally:
        B.unregister_backend("reference")


def test_the_cpu_backend_imports_no_tool():
    # the executable reaches the profiler through mgegraph.backend, not tools/ (a layer above)
    code = ("import sys, mgegraph._kernels.cpu; "
            "print(sorted(m for m in sys.modules if m.startswith('mgegraph.tools')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
