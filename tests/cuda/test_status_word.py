"""The status word (csrc_cuda/mg_abi.cuh: MgArgs.status and .index, mg_fail): a CUDA kernel
that meets what the CPU kernel of its op refuses (an integer pow by a negative exponent, an
index or a label out of range) records the CPU's status code there, and the first failure of a
run wins. Checked on the host emulation (host_emu.h, fiber_emu.h), kernel by kernel and for
whole plans; the runtime's side (zeroed per run, read back, KernelError) is in
test_runtime_host.py, the same on a GPU in test_device.py."""
import re

import numpy as np
import pytest
from graphs import failing_cases
from host_emu import have_compiler, run_on_host
from kernel_checks import emulate, node_of, run_plan_emulated

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import unregister_backend
from mgegraph.cuda import render
from mgegraph.cuda.abi import STATUS, decode, pack
from mgegraph.cuda.backend import CudaBackend
from mgegraph.cuda.kernel import Step
from mgegraph.cuda.kernels import movement, softmax
from mgegraph.ops.fused_program import Program

pytestmark = pytest.mark.skipif(not have_compiler(), reason="no g++ for the host emulation")
ROOT = mg.__file__.rsplit("/", 1)[0]
INDEX, POWER = STATUS["INDEX_OUT_OF_RANGE"], STATUS["NEGATIVE_POWER"]


def test_the_codes_are_the_cpu_kernels():
    with open(f"{ROOT}/_kernels/abi.pxd") as f:
        cpu = {k: int(v) for k, v in re.findall(r"KERNEL_(\w+) = (\d+)", f.read())}
    cpu.pop("OK")
    assert STATUS == cpu


def test_pack_and_decode():
    args = pack([0x10], (1,), (), status=0x2000, index=41)
    assert (args.status, args.index) == (0x2000, 41)
    assert pack([], (), ()).status is None  # no word: mg_fail does nothing
    assert decode(0) is None and decode((41 + 1) << 8 | POWER) == (41, POWER)


def _binary(op, dtype, x, z, index=0):
    entry, text = render.binary_kernel(op, dtype)
    y = np.zeros(x.shape, dtype)
    n = x.size
    word = run_on_host(render.module([text]), [Step(entry, (2, 1, 1), (4, 1, 1))],
                       [x, z, y], (0, 1, n, 1, 1), (), index=index)
    return y, word


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_pow_by_a_negative_exponent_fails(dtype):
    x = np.arange(-4, 13).astype(dtype)  # 17: the vector loop and the scalar tail
    y, word = _binary("pow", dtype, x, np.full(17, 2, dtype), index=3)
    assert word == 0 and np.array_equal(y, x * x)
    for at in (0, 16):  # in the vector loop, in the tail
        z = np.full(17, 2, dtype)
        z[at] = -1
        assert decode(_binary("pow", dtype, x, z, index=3)[1]) == (3, POWER)


def test_float_pow_and_other_integer_ops_never_fail():
    x = np.arange(1, 9, dtype=np.float32)
    assert _binary("pow", "float32", x, -x)[1] == 0
    i = np.arange(8, dtype=np.int32)
    assert _binary("sub", "int32", i, -i)[1] == 0


def _fused(dtype, exponent):
    code = [("load", 0, 0), ("load", 1, 1), ("pow", 2, 0, 1), ("add", 3, 2, 0), ("store", 0, 3)]
    entry, text = render.fused_kernel(Program([(9,), (9,)], (9,), dtype, code))
    x = np.arange(9).astype(dtype)
    y = np.zeros(9, dtype)
    word = run_on_host(render.module([text]), [Step(entry, (1, 1, 1), (2, 1, 1))],
                       [x, exponent.astype(dtype), y], index=7)
    return y, word


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_a_fused_program_with_integer_pow_fails_too(dtype):
    y, word = _fused(dtype, np.full(9, 3))
    assert word == 0 and np.array_equal(y, np.arange(9) ** 3 + np.arange(9))
    bad = np.full(9, 3)
    bad[5] = -2
    want = (7, POWER) if dtype != "float32" else None
    assert decode(_fused(dtype, bad)[1]) == want


INDEXING = [  # (op, arrays, attributes): each with a bad index; the good one is index 0
    ("take", [np.ones((3, 4), np.float32), np.array([0, -4], np.int64)], {"axis": 0}),
    ("gather", [np.ones((3, 4), np.float32), np.array([[0, 3, 0, 1]], np.int32)], {"axis": 0}),
    ("index_add", [np.ones((2, 4), np.float32), np.array([1, 3], np.int32)],
     {"axis": 0, "size": 3}),
    ("scatter_add", [np.ones((1, 4), np.float64), np.array([[0, -5, 0, 1]], np.int64)],
     {"axis": 0, "shape": (3, 4)}),
    ("one_hot", [np.array([0, 2, 3], np.int32)], {"num_classes": 3}),
]


@pytest.mark.parametrize("op, arrays, attrs", INDEXING, ids=[c[0] for c in INDEXING])
def test_an_index_out_of_range_fails(op, arrays, attrs):
    node = node_of(op, arrays, **attrs)
    assert decode(emulate(movement, node, arrays, fibers=False, status=True)[1]) == (0, INDEX)
    good = [np.zeros_like(a) if a.dtype.kind == "i" else a for a in arrays]
    assert emulate(movement, node, good, fibers=False, status=True)[1] == 0


@pytest.mark.parametrize("op", ["cross_entropy", "cross_entropy_backward"])
@pytest.mark.parametrize("label", [-1, 3])
def test_a_label_out_of_range_fails(op, label):
    pred = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, label, 1, 2], np.int32)
    arrays = [pred, labels] + ([np.ones((), np.float32)] if op != "cross_entropy" else [])
    node = node_of(op, arrays, reduction="mean")
    assert decode(emulate(softmax, node, arrays, status=True)[1]) == (0, INDEX)
    arrays[1] = np.array([0, 2, 1, 2], np.int32)
    assert emulate(softmax, node, arrays, status=True)[1] == 0


@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-status-plan", lambda: CudaBackend(device=None))
    yield "cuda-status-plan"
    unregister_backend("cuda-status-plan")


@pytest.mark.parametrize("name", list(failing_cases()))
def test_whole_plans_raise_the_cpus_error(planner, name):
    outputs, good, bad = failing_cases()[name]
    cpu = mg.compile(outputs, device="cpu", optimize=0)
    plan = mg.compile(outputs, device=planner, optimize=0)
    backend = mg.backend.get_backend(planner)
    with pytest.raises(mg.KernelError) as want:
        cpu.run(bad)
    with pytest.raises(mg.KernelError) as got:
        run_plan_emulated(plan, backend, bad)
    assert str(got.value) == str(want.value)
    for a, b in zip(cpu.run(good), run_plan_emulated(plan, backend, good), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_the_first_failing_instruction_wins(planner):
    g = mg.Graph()
    i, k = g.input("i", (3,), "int32"), g.input("k", (2,), "int32")
    rows = F.take(g.input("t", (4, 6), "float32"), i, axis=0)
    late = F.one_hot(k, 3)  # fails too, later in the plan
    plan = mg.compile([rows, late], device=planner, optimize=0)
    ops = [ins.op for ins in plan.instructions]
    feeds = {"t": np.ones((4, 6), np.float32), "i": np.array([0, 9, 1], np.int32),
             "k": np.array([5, 0], np.int32)}
    first = min(ops.index("take"), ops.index("one_hot"))
    with pytest.raises(mg.KernelError, match=f"^{ops[first]} "):
        run_plan_emulated(plan, mg.backend.get_backend(planner), feeds)


def _entry_ptx(ptx: str, entry: str) -> str:
    start = ptx.index(f".entry {entry}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:end if end > 0 else None]


@pytest.mark.nvrtc
def test_the_device_code_records_failures_with_a_compare_and_swap():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra is not installed")
    from mgegraph.cuda.nvrtc import EXACT_OPTIONS, Compiler
    compiler = Compiler("compute_90")
    kernels = dict([render.binary_kernel("pow", "int64"), render.binary_kernel("pow", "float32"),
                    render.fused_kernel(Program([(9,), (9,)], (9,), "int32", [
                        ("load", 0, 0), ("load", 1, 1), ("pow", 2, 0, 1), ("store", 0, 2)]))])
    module = compiler.compile(render.module(kernels.values()), "status.cu", EXACT_OPTIONS)
    assert module.log.strip() == ""
    cas = {entry: "atom.global.cas.b64" in _entry_ptx(module.ptx, entry) for entry in kernels}
    assert cas == {e: not e.endswith("_f32") for e in kernels}
    for source, failing, clean in (
            ("movement.cu", ("take_f32", "gather_i64", "index_add_f32", "scatter_add_f64",
                             "one_hot_i64"), "fill_f32"),
            ("softmax.cu", ("cross_entropy_f32", "cross_entropy_backward_f64"), "softmax_f32")):
        ptx = compiler.compile_file(source).ptx
        for entry in failing:
            assert "atom.global.cas.b64" in _entry_ptx(ptx, f"mg_{entry}"), entry
        assert "atom.global.cas.b64" not in _entry_ptx(ptx, f"mg_{clean}")
