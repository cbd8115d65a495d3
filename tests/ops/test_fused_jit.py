"""Generated fused bodies (_kernels/fused_jit.py): the driver runs a body exactly for the program
it was made from, every op of the table gives the interpreter's bits through one, plans use them,
and a machine that cannot build them still runs every plan."""
import os

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import fused as K
from mgegraph._kernels import fused_jit as J
from mgegraph._kernels.lowering.fused import (
    JIT_ENV,
    JIT_MIN_ELEMENTS,
    decode,
    encode,
    kernel_name,
    run,
)
from mgegraph.ops.fused_program import BINARY, UNARY, Program

pytest.importorskip("Cython", reason="generated bodies are built with Cython")
RNG = np.random.default_rng(7)
SHAPE = (67, 61)  # odd, so blocks end inside rows


@pytest.fixture(autouse=True)
def jit_everything(monkeypatch, tmp_path_factory):
    monkeypatch.setenv(JIT_ENV, "all")
    monkeypatch.setenv(J.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "jit-cache"))


def body_for(program) -> int:
    address = J.kernel_for(kernel_name(program.dtype), encode(program)[0])
    assert address is not None, J.unavailable()
    return address


def bits(a):
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def assert_same_bits(got, want):
    # every number bit for bit; a NaN where the interpreter gives one, of whatever sign and
    # payload (IEEE 754 leaves them open: NaN * NaN keeps either operand's, and the C compiler
    # orders the operands of * and + as it likes, differently in the two loops)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        nan = np.isnan(w)
        np.testing.assert_array_equal(np.isnan(g), nan)
        np.testing.assert_array_equal(bits(g)[~nan], bits(w)[~nan])


def every_op_programs(dtype) -> list[tuple[Program, list]]:
    """Every unary op on x, every binary op and comparison on (x, a broadcast row) or (y, a
    broadcast scalar), where and const: one output per op, in programs of at most 32 outputs
    (a fused kernel writes at most 64)."""
    x = np.concatenate([RNG.standard_normal(SHAPE[0] * SHAPE[1] - 8) * 4,
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -88.5, 89.0]])
    x = x.reshape(SHAPE).astype(dtype)
    y = (np.abs(RNG.standard_normal(SHAPE)) + 0.5).astype(dtype)
    row = RNG.standard_normal((1, SHAPE[1])).astype(dtype)
    scalar = np.array([[1.75]], dtype)
    params = {"leaky_relu": (0, 0), "clip": (1, 2)}
    steps = [(name, 0, *params.get(name, (0, 0))) for name in sorted(UNARY)]
    steps += [(name, *((0, 2) if k % 2 else (1, 3))) for k, name in enumerate(sorted(BINARY))]
    steps.append(("where", 0, 1, 12))
    programs = []
    for first in range(0, len(steps), 32):
        code = [("load", 0, 0), ("load", 1, 1), ("load", 2, 2), ("load", 3, 3),
                ("const", 12, 2)]
        for out, (name, *operands) in enumerate(steps[first:first + 32]):
            # each result is stored at once, so results take turns in a few registers
            code += [(name, 4 + out % 8, *operands), ("store", out, 4 + out % 8)]
        programs.append((Program([SHAPE, SHAPE, (1, SHAPE[1]), (1, 1)], SHAPE, dtype, code,
                                 [0.1, -0.5, 1.5]), [x, y, row, scalar]))
    return programs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_op_gives_the_interpreters_bits(dtype):
    for program, inputs in every_op_programs(dtype):
        kernel = body_for(program)
        with np.errstate(all="ignore"):
            want = run(program, inputs, threads=1)
            for threads, block, stream in ((1, None, False), (2, 256, True), (3, 300, False)):
                got = run(program, inputs, threads=threads, block=block, stream=stream,
                          kernel=kernel)
                assert_same_bits(got, want)


def test_the_driver_runs_a_body_only_for_its_own_steps():
    # a body that adds one: seen where the driver runs it, absent where it must interpret
    program = Program([(1000,)], (1000,), np.float32, [("load", 0, 0), ("neg", 1, 0),
                                                       ("store", 0, 1)])
    other = Program([(1000,)], (1000,), np.float32, [("load", 0, 0), ("abs", 1, 0),
                                                     ("store", 0, 1)])
    source = J.render(decode(encode(program)[0]), "float").replace(
        "out0[e] = r1", "out0[e] = r1 + 1")
    tampered = J._load(source, K.DRIVERS["fused_f32"])
    assert tampered is not None, J.unavailable()
    x = RNG.standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(run(program, [x], kernel=tampered)[0], -x + 1)
    np.testing.assert_array_equal(run(other, [x], kernel=tampered)[0], np.abs(x))
    # a parameter block the kernel refuses is refused through the body too
    ints, floats, ws = encode(program)
    bad = list(ints)
    bad[-3] = 5  # the store reads a register no step wrote
    out, workspace = np.empty_like(x), np.empty(ws, np.uint8)
    assert K.call_kernel(tampered, [x, out, workspace], bad, floats) != 0


def test_a_plan_runs_generated_bodies_with_the_same_bits(monkeypatch):
    def chain(x, b):
        return F.relu(x * 1.5 + b) - F.tanh(x) / (1.0 + F.exp(-x))

    def compiled():
        g = mg.Graph()
        x, b = g.input("x", (300, 257), "float32"), g.input("b", (257,), "float32")
        return mg.compile([chain(x, b)])

    feeds = {"x": RNG.standard_normal((300, 257)).astype(np.float32),
             "b": RNG.standard_normal(257).astype(np.float32)}
    monkeypatch.setenv(JIT_ENV, "off")
    off = compiled()
    want = off.run(feeds)[0]
    monkeypatch.setenv(JIT_ENV, "all")
    on = compiled()
    fused = {i for i, ins in enumerate(on.instructions) if ins.kernel.startswith("fused_")}
    assert fused and on.executable().generated == fused
    assert not off.executable().generated
    assert_same_bits([on.run(feeds)[0]], [want])


def test_auto_leaves_small_programs_to_the_interpreter(monkeypatch):
    monkeypatch.setenv(JIT_ENV, "auto")
    small = Program([(JIT_MIN_ELEMENTS - 1,)], (JIT_MIN_ELEMENTS - 1,), np.float32,
                    [("load", 0, 0), ("exp", 1, 0), ("store", 0, 1)])
    assert J.kernel_for("fused_f32", encode(small)[0]) is None
    monkeypatch.setenv(JIT_ENV, "off")
    assert J.kernel_for("fused_f32", encode(small)[0]) is None
    assert J.kernel_for("unary_f32", (0,)) is None  # not a fused kernel


def test_a_body_is_loaded_from_the_disk_cache_without_building(monkeypatch):
    program = Program([(5000,)], (5000,), np.float64, [("load", 0, 0), ("sqrt", 1, 0),
                                                       ("square", 2, 1), ("store", 0, 2)])
    first = body_for(program)
    monkeypatch.setattr(J, "_LOADED", {})  # as a new process: only the disk is shared

    def no_build(*args):
        raise AssertionError("built again instead of loaded from the cache")

    monkeypatch.setattr(J, "_build", no_build)
    second = body_for(program)
    assert second != first  # its own copy of the library
    x = np.abs(RNG.standard_normal(5000))
    assert_same_bits(run(program, [x], kernel=second), run(program, [x]))


def test_without_a_compiler_plans_interpret(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv(J.CACHE_ENV, str(tmp_path / "empty-cache"))
    g = mg.Graph()
    x = g.input("x", (4096,), "float32")
    plan = mg.compile([F.sigmoid(x) * x + 2.0])
    ins = next(i for i in plan.instructions if i.kernel.startswith("fused_"))
    assert J.kernel_for(ins.kernel, ins.ints) is None
    assert "cannot build fused bodies" in J.unavailable()
    xs = RNG.standard_normal(4096).astype(np.float32)
    np.testing.assert_allclose(plan.run({"x": xs})[0], xs / (1 + np.exp(-xs)) + 2.0,
                               rtol=1e-6)


def test_a_cached_library_that_does_not_load_is_dropped(monkeypatch, tmp_path):
    monkeypatch.setenv(J.CACHE_ENV, str(tmp_path))
    program = Program([(300,)], (300,), np.float32, [("load", 0, 0), ("floor", 1, 0),
                                                     ("store", 0, 1)])
    source = J.render(decode(encode(program)[0]), "float")
    name = J._key(source)
    J._cache().put(name, b"not a shared library")  # a valid entry whose payload will not load
    assert J._load(source, K.DRIVERS["fused_f32"]) is None
    assert "cannot load a fused body" in J.unavailable()
    assert not J._cache().path(name).exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_forked_child_runs_the_generated_bodies():
    # the child inherits the loaded library; its fused kernels run on one thread there
    g = mg.Graph()
    x = g.input("x", (70000,), "float32")
    plan = mg.compile([F.tanh(x) * 3.0 - F.exp(-x)])
    ins = next(i for i in plan.instructions if i.kernel.startswith("fused_"))
    assert J.kernel_for(ins.kernel, ins.ints) is not None
    feeds = {"x": RNG.standard_normal(70000).astype(np.float32)}
    want = plan.run(feeds)[0]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        try:
            same = np.array_equal(plan.run(feeds)[0], want)
        except BaseException:  # noqa: BLE001
            same = False
        os.write(write, b"1" if same else b"0")
        os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
