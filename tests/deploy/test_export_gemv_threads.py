"""The C runtime's small products on the Python executor's threads rule (grain.h): an MLP's
single rows (gemv_row.h, split by parts of k or by columns) and few-row GEMMs (the panel tiles)
give the same bits at 1, 2 and 3 threads, the single rows the executor's bits, and each product
runs on the threads its work pays for, no more (a build with -DMGR_PROFILE counts them)."""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph._kernels import linalg, parallel
from mgegraph._kernels.lowering import matmul as lowering
from mgegraph.deploy import export_c
from mgegraph.deploy.kernels import CONTRACTED
from mgegraph.ops.builder import apply

from .cbuild import blob_calls, cc, make, model_run
from .test_export_gemm_packed import bits, fma_order

LAYERS = (784, 1024, 1024, 10)  # mlp-infer's (benchmarks/workloads.py)


def mlp(batch: int, seed: int = 0):
    """mlp-infer's network (x @ w + b, relu between) at ``batch`` rows: the plan, its feeds, its
    weights."""
    rng = np.random.default_rng(seed)
    weights = [((rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32),
                (rng.standard_normal(o) * 0.1).astype(np.float32))
               for i, o in zip(LAYERS[:-1], LAYERS[1:])]
    g = mg.Graph()
    h = g.input("x", (batch, LAYERS[0]), "float32")
    for k, (w, b) in enumerate(weights):
        h = h @ g.param(f"w{k}", w) + g.param(f"b{k}", b)
        if k < len(weights) - 1:
            h = F.relu(h)
    x = rng.standard_normal((batch, LAYERS[0]), dtype=np.float32)
    return mg.compile([h], freeze=True), {"x": x}, weights


def fma_mlp(x, weights):
    """The MLP by the panel tiles' order (each element summed over k from zero by FMAs), the
    bias add and relu in float32 as the fused loops do."""
    h = x
    for k, (w, b) in enumerate(weights):
        h = (fma_order(h, w) + b).astype(np.float32)
        if k < len(weights) - 1:
            h = np.maximum(h, np.float32(0))
    return h


@pytest.mark.parametrize("batch", [1, 2, 7])
def test_mlp_same_bits_at_1_2_3_threads(tmp_path, batch):
    plan, feeds, weights = mlp(batch)
    want = runtime.load(_saved(tmp_path, plan)).run(feeds)[0]
    exported = export_c(plan, tmp_path / "c")
    make(exported.directory)
    outs = []
    for threads in (1, 2, 3):
        done, got = model_run(exported.directory, feeds, exported.input_names,
                              options=["--threads", str(threads)])
        assert done.returncode == 0, done.stderr
        outs.append(got[0])
    for got in outs[1:]:
        np.testing.assert_array_equal(bits(got), bits(outs[0]))
    if batch == 1 or all(_on_tiles(ins) for ins in plan.instructions if ins.op == "matmul"):
        # a single row: gemv_row.h's loops in both; more: the executor's gather tiles (AVX-512)
        np.testing.assert_array_equal(bits(outs[0]), bits(want))
    else:  # the executor's BLAS rounds otherwise; the C runtime's tiles sum in the FMA order
        np.testing.assert_array_equal(bits(outs[0]), bits(fma_mlp(feeds["x"], weights)))
        np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-5)


def _saved(tmp_path, plan):
    path = tmp_path / "model.mgm"
    mg.save(plan, path)
    return path


def _on_tiles(ins) -> bool:
    m, n, k, ta, tb = ins.ints[:5]
    return lowering.tiles_rule(np.float32, m, n, k, bool(tb), bool(ta))


# -- the threads each product runs on --------------------------------------------------------
# (m, k, n): single rows whose matrices take 3.1, 2.3, 1 MiB and 40 KB (the rule's 3, 2, 1 and 1
# threads), and GEMMs of 7 rows of 14.7 and 0.9 MFLOP (3 and 1 threads): each has more parts
# (columns, parts of k, panels) than threads, so only the rule holds the count down
PRODUCTS = ((1, 784, 1024), (1, 600, 1024), (1, 512, 512), (1, 1024, 10), (7, 1024, 1024),
            (7, 256, 256))


def products_plan():
    """One instruction per product of PRODUCTS, each x @ w on its own input and weight."""
    rng = np.random.default_rng(3)
    g = mg.Graph()
    outs, feeds = [], {}
    for i, (m, k, n) in enumerate(PRODUCTS):
        x = g.input(f"x{i}", (m, k), "float32")
        outs.append(x @ g.param(f"w{i}", rng.standard_normal((k, n), dtype=np.float32)))
        feeds[f"x{i}"] = rng.standard_normal((m, k), dtype=np.float32)
    return mg.compile(outs, freeze=True), feeds


def profiled_library(directory):
    """The export in ``directory`` as a shared library built with -DMGR_PROFILE (its
    mgr_instruction_parts), with the Makefile's contraction flags."""
    sources = ["mgr_runtime.c", "mgr_threads.c", "model_kernels.c",
               *sorted(str(p.relative_to(directory)) for p in directory.glob("kernels/*.c"))]
    contract = lambda s: "-ffp-contract=fast" if s in CONTRACTED else "-ffp-contract=off"  # noqa: E731
    objects = []
    for source in sources:
        objects.append(source.replace("/", "_")[:-2] + ".prof.o")
        subprocess.run([cc(), "-O2", "-std=gnu11", contract(source), "-DMGR_PROFILE", "-fPIC",
                        "-pthread", "-I", ".", "-I", "kernels", "-c", source, "-o", objects[-1]],
                       cwd=directory, check=True, capture_output=True, timeout=300)
    subprocess.run([cc(), "-shared", "-o", "libprofiled.so", *objects, "-lm", "-pthread"],
                   cwd=directory, check=True, capture_output=True, timeout=300)
    return ctypes.CDLL(str(directory / "libprofiled.so"))


def parts_per_instruction(lib, directory, inputs, threads) -> list:
    """Each instruction's most threads in one run at ``threads`` (mgr_instruction_parts)."""
    lib.mgr_load_file.restype = ctypes.c_void_p
    lib.mgr_load_file.argtypes = [ctypes.c_char_p]
    lib.mgr_set_input.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                  ctypes.c_size_t]
    lib.mgr_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.mgr_run.argtypes = [ctypes.c_void_p]
    lib.mgr_free.argtypes = [ctypes.c_void_p]
    lib.mgr_instruction_parts.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    model = lib.mgr_load_file(str(directory / "model.mgr").encode())
    assert model
    try:
        for i, x in enumerate(inputs):
            assert lib.mgr_set_input(model, i, x.ctypes.data, x.nbytes) == 0
        assert lib.mgr_set_threads(model, threads) == 0
        assert lib.mgr_run(model) == 0
        return [lib.mgr_instruction_parts(model, i) for i in range(len(blob_calls(
            (directory / "model.mgr").read_bytes())))]
    finally:
        lib.mgr_free(model)


def rule(m, n, k, threads) -> int:
    """grain.h's threads for a float32 product, from the constants the executor reads."""
    work = n * k * 4 // parallel.GRAIN_BYTES if m == 1 else 2 * m * n * k // parallel.GRAIN_FLOPS
    return max(1, min(threads, work))


def _units(m, n, k, gemv_split) -> int:
    """The parts a product can be cut into (past the threads' count for PRODUCTS' GEMMs)."""
    if m > 1:
        return 1 << 30
    return linalg.gemv_parts(k) if gemv_split else -(-n // 16)


def test_products_wake_only_the_threads_their_work_pays_for(tmp_path):
    plan, feeds = products_plan()
    exported = export_c(plan, tmp_path / "c")
    directory = exported.directory
    lib = profiled_library(directory)
    inputs = [np.ascontiguousarray(feeds[name]) for name in exported.input_names]
    blob = (directory / "model.mgr").read_bytes()
    calls = [(name, np.frombuffer(blob, "<i8", 9, at)) for name, at, _ in blob_calls(blob)]
    assert sorted(tuple(int(v) for v in ints[[0, 2, 1]]) for name, ints in calls
                  if name.startswith("matmul")) == sorted(PRODUCTS)
    for threads in (1, 2, 3):
        parts = parts_per_instruction(lib, directory, inputs, threads)
        for (name, ints), got in zip(calls, parts):
            if not name.startswith("matmul"):
                continue
            m, n, k, split = int(ints[0]), int(ints[1]), int(ints[2]), bool(ints[7])
            want = min(rule(m, n, k, threads), _units(m, n, k, split))
            assert got == want, (name, (m, k, n), threads, got, want)


def test_products_threads_are_the_executors(tmp_path):
    """At the threads this process runs (up to 2), each product's threads are those the
    executor's plan packed into its block (the lowering's gemm_threads), cut as it cuts them."""
    threads = min(2, parallel.max_threads())
    plan, feeds = products_plan()
    exported = export_c(plan, tmp_path / "c")
    lib = profiled_library(exported.directory)
    inputs = [np.ascontiguousarray(feeds[name]) for name in exported.input_names]
    parts = parts_per_instruction(lib, exported.directory, inputs, threads)
    products = [(i, ins) for i, ins in enumerate(plan.instructions) if ins.op == "matmul"]
    assert len(products) == len(PRODUCTS)
    for i, ins in products:
        m, n, k = ins.ints[:3]
        planned, split = ins.ints[5], ins.ints[7]
        assert planned == lowering.gemm_threads(np.float32, m, n, k)
        assert parts[i] == min(planned, threads, _units(m, n, k, split)), (m, k, n)


# (kernel, input shape): tiny work on one thread whatever the model's count, and a pooling of
# 12.8 MB moved on every thread there is (one per MiB)
SMALL_WORK = (("pool2d_f32", (2, 8, 16, 16)), ("group_norm_f32", (2, 8, 64)),
              ("pool2d_f32", (4, 64, 112, 112)))


def small_work_plan():
    rng = np.random.default_rng(5)
    g = mg.Graph()
    outs, feeds = [], {}
    for i, (kernel, shape) in enumerate(SMALL_WORK):
        x = g.input(f"x{i}", shape, "float32")
        feeds[f"x{i}"] = rng.standard_normal(shape, dtype=np.float32)
        if kernel == "pool2d_f32":
            outs.append(F.max_pool2d(x, 2, 2))
        else:
            w, b = (g.param(f"{n}{i}", rng.standard_normal(shape[1], dtype=np.float32))
                    for n in "wb")
            outs.append(apply("group_norm", (x, w, b), groups=4, activation="none"))
    return mg.compile(outs, freeze=True), feeds


def test_pooling_and_group_norm_wake_threads_by_the_bytes_they_move(tmp_path):
    plan, feeds = small_work_plan()
    exported = export_c(plan, tmp_path / "c")
    lib = profiled_library(exported.directory)
    inputs = [np.ascontiguousarray(feeds[name]) for name in exported.input_names]
    kernels = [ins.kernel for ins in plan.instructions]
    assert kernels == [kernel for kernel, _ in SMALL_WORK]
    for threads in (1, 2, 3):
        parts = parts_per_instruction(lib, exported.directory, inputs, threads)
        for ins, got in zip(plan.instructions, parts):
            moved = sum(plan.slots[s].type.nbytes for s in (*ins.inputs, *ins.outputs))
            want = max(1, min(threads, moved // parallel.GRAIN_BYTES))
            assert got == want, (ins.kernel, threads, moved, got, want)
