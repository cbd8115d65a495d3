"""op-overhead, mlp-infer, mlp-train and convnet-train (shared/BENCHMARKS.md)."""
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import workloads
from conftest import THREADS

IMPLS_OP = ["mgegraph plan.run", "mgegraph executor only", "numpy eager", "torch eager"]
LIMIT = workloads.GEMMS_ONLY
IMPLS_MLP = [LIMIT, "mgegraph plan.run", "mgegraph nn.Linear", "numpy eager", "torch eager"]
PEAK_KIND = "RSS high-water growth over 3 steps, one fresh process (peak_memory.py)"


@functools.cache
def built(name, *args):
    return getattr(workloads, name)(*args)


def run(benchmark, impls, impl):
    if impl not in impls:
        pytest.skip(f"{impl} is not installed")
    benchmark(impls[impl])


@functools.cache
def peak_memory(impl: str, workload: str) -> dict:
    """peak_memory.py's figures for one implementation, from a fresh process at this run's
    thread count (the steps' resident-set growth cannot be told apart inside this one)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "OMP_WAIT_POLICY": "PASSIVE"}
    script = Path(__file__).with_name("peak_memory.py")
    done = subprocess.run([sys.executable, str(script), impl, workload], env=env, check=False,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory_tags(impl: str, workload: str) -> dict:
    """The peak (and for mgegraph the arena) of a training step's implementation, if measured."""
    if impl == "mgegraph step":
        figures = peak_memory("mgegraph", workload)
        return {"arena_bytes": figures["arena"], "peak_bytes": figures["peak_growth"],
                "peak_kind": PEAK_KIND}
    if impl == "torch eager" and workloads._torch() is not None:
        return {"peak_bytes": peak_memory("torch", workload)["peak_growth"],
                "peak_kind": PEAK_KIND}
    return {}


def limit_tags(impl: str, what: str) -> dict:
    return {"role": "limit", "limit_what": what} if impl == LIMIT else {}


@pytest.mark.workload("op-overhead")
@pytest.mark.parametrize("impl", IMPLS_OP)
def test_op_overhead(benchmark, tag, impl):
    benchmark.group = f"op-overhead ({workloads.OP_CHAIN} ops, 16 elements)"
    tag(f"{workloads.OP_CHAIN} ops, 16 elements", impl, ops=workloads.OP_CHAIN)
    run(benchmark, built("op_overhead"), impl)


@pytest.mark.workload("mlp-infer")
@pytest.mark.parametrize("batch", [1, 128])
@pytest.mark.parametrize("impl", IMPLS_MLP)
def test_mlp_infer(benchmark, tag, impl, batch):
    benchmark.group = f"mlp-infer batch {batch}"
    kind = "GEMVs" if batch == 1 else "GEMMs"  # a row times a matrix is a gemv, as in mgegraph
    what = f"the 3 {kind} back to back through {workloads.blas_in_use()}, the BLAS in use"
    tag(f"batch {batch}", impl, **limit_tags(impl, what))
    run(benchmark, built("mlp_infer", batch), impl)


@pytest.mark.workload("mlp-train")
@pytest.mark.parametrize("impl", [LIMIT, "mgegraph step", workloads.STEP_O2, "numpy hand-written",
                                  "torch eager"])
def test_mlp_train(benchmark, tag, impl):
    benchmark.group = "mlp-train batch 128"
    what = f"the step's 8 GEMMs back to back through {workloads.blas_in_use()}, the BLAS in use"
    tag("batch 128", impl, **limit_tags(impl, what), **memory_tags(impl, "mlp-train"))
    run(benchmark, built("mlp_train"), impl)


@pytest.mark.workload("convnet-train")
@pytest.mark.parametrize("impl", ["torch eager", "mgegraph step", workloads.STEP_O2])
def test_convnet_train(benchmark, tag, impl):
    benchmark.group = "convnet-train batch 32"
    tag("batch 32", impl, **memory_tags(impl, "convnet-train"))
    run(benchmark, built("convnet_train"), impl)
