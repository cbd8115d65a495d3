"""op-overhead and mlp-infer (shared/BENCHMARKS.md)."""
import functools

import pytest

import workloads

IMPLS_OP = ["mgegraph plan.run", "mgegraph executor only", "numpy eager", "torch eager"]
IMPLS_MLP = ["gemms only (scipy blas)", "mgegraph plan.run", "numpy eager", "torch eager"]


@functools.cache
def built(name, *args):
    return getattr(workloads, name)(*args)


def run(benchmark, impls, impl):
    if impl not in impls:
        pytest.skip(f"{impl} is not installed")
    benchmark(impls[impl])


@pytest.mark.parametrize("impl", IMPLS_OP)
def test_op_overhead(benchmark, impl):
    benchmark.group = f"op-overhead ({workloads.OP_CHAIN} ops, 16 elements)"
    benchmark.extra_info["ops"] = workloads.OP_CHAIN
    run(benchmark, built("op_overhead"), impl)


@pytest.mark.parametrize("batch", [1, 128])
@pytest.mark.parametrize("impl", IMPLS_MLP)
def test_mlp_infer(benchmark, impl, batch):
    benchmark.group = f"mlp-infer batch {batch}"
    run(benchmark, built("mlp_infer", batch), impl)


@pytest.mark.parametrize("impl", ["gemms only (scipy blas)", "mgegraph step", "numpy hand-written",
                                  "torch eager"])
def test_mlp_train(benchmark, impl):
    benchmark.group = "mlp-train batch 128"
    run(benchmark, built("mlp_train"), impl)


@pytest.mark.parametrize("impl", ["torch eager", "mgegraph step"])
def test_convnet_train(benchmark, impl):
    benchmark.group = "convnet-train batch 32"
    run(benchmark, built("convnet_train"), impl)
