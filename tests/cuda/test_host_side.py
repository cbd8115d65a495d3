"""The CUDA backend's host side, without a GPU: MgArgs against what g++ and NVRTC compute for
mg_abi.cuh, launch geometry, the disk cache, the device memory layout against the CPU plan's
offsets, the launches of a plan, and the errors where CUDA cannot run."""
import ctypes
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.cuda import CSRC, DeviceUnavailableError, abi, geometry
from mgegraph.cuda.backend import CudaBackend
from mgegraph.cuda.cache import DiskCache, default_dir, key
from mgegraph.cuda.launches import persistent_layout, plan_calls, slot_addresses
from mgegraph.plan import Role


# -- MgArgs ----------------------------------------------------------------------------------------
def _layout_program() -> str:
    fields = ", ".join(f'offsetof(MgArgs, {f}) == {o}' for f, o in abi.field_offsets().items())
    return fields


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_mgargs_matches_what_gxx_computes_for_the_header(tmp_path):
    src = tmp_path / "layout.cpp"
    prints = " ".join(f'printf("{f} %zu\\n", offsetof(MgArgs, {f}));' for f in abi.field_offsets())
    src.write_text('#include <cstdio>\n#include <cstddef>\n#include "mg_abi.cuh"\n'
                   f'int main() {{ printf("size %zu\\n", sizeof(MgArgs)); {prints} }}\n')
    subprocess.run(["g++", "-I", str(CSRC.resolve()), str(src), "-o", str(tmp_path / "a")],
                   check=True)
    out = subprocess.run([str(tmp_path / "a")], capture_output=True, text=True,
                         check=True).stdout
    got = dict(line.split() for line in out.splitlines())
    assert int(got.pop("size")) == ctypes.sizeof(abi.MgArgs) == 744
    assert {k: int(v) for k, v in got.items()} == abi.field_offsets()


@pytest.mark.nvrtc
def test_mgargs_matches_what_nvrtc_computes_for_the_header():
    from mgegraph.cuda.nvrtc import nvrtc_compile
    asserts = "\n".join(f"static_assert(__builtin_offsetof(MgArgs, {f}) == {o}, \"{f}\");"
                        for f, o in abi.field_offsets().items())
    size = f"static_assert(sizeof(MgArgs) == {ctypes.sizeof(abi.MgArgs)}, \"size\");"
    text = f'#include "mg_abi.cuh"\n{asserts}\n{size}\n'
    compiled = nvrtc_compile(text, "layout.cu", ("-std=c++17", f"-I{CSRC.resolve()}",
                                                 "--gpu-architecture=compute_80"))
    assert compiled.log.strip() == ""
    with pytest.raises(mg.KernelError, match="ints"):  # a wrong offset fails: the check bites
        nvrtc_compile(text.replace("== 128", "== 136"), "layout.cu",
                      ("-std=c++17", f"-I{CSRC.resolve()}", "--gpu-architecture=compute_80"))


def test_nvrtc_output_is_read_into_a_fresh_writable_buffer():
    from mgegraph.cuda.nvrtc import _read

    class FakeNvrtc:  # what NVRTC's C side does: writes the whole buffer it is given
        @staticmethod
        def nvrtcGetProgramLogSize(prog):
            return 0, 1

        @staticmethod
        def nvrtcGetProgramLog(prog, buf):
            memoryview(buf)[:] = b"\0"  # raises for an immutable (possibly shared) bytes
            return (0,)

    FakeNvrtc.nvrtcResult = type("R", (), {"NVRTC_SUCCESS": 0})
    assert _read(FakeNvrtc, None, FakeNvrtc.nvrtcGetProgramLogSize,
                 FakeNvrtc.nvrtcGetProgramLog) == ""
    assert b" "[0] == 32


@pytest.mark.nvrtc
def test_an_empty_nvrtc_log_leaves_the_interpreters_shared_bytes_alone():
    # once seen: reading an empty log into b" " * 1 wrote NUL into CPython's cached b" "
    # (a subprocess, so a regression cannot break the other tests)
    code = ("from mgegraph.cuda.nvrtc import nvrtc_compile\n"
            "c = nvrtc_compile('__global__ void k() {}', 'k.cu',\n"
            "                  ['--gpu-architecture=compute_80'])\n"
            "assert c.log.strip() == '', c.log\n"
            "assert b' '[0] == 32 and ' '.encode()[0] == 32, b' '\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pack_fills_the_fields_and_refuses_what_does_not_fit():
    args = abi.pack([0x1000, 0, 0x3000], (7, -1, 2**62), (0.5, -np.inf))
    assert list(args.bufs[:3]) == [0x1000, None, 0x3000]
    assert list(args.ints[:3]) == [7, -1, 2**62] and args.ints[3] == 0
    assert args.floats[1] == -np.inf
    assert (args.n_bufs, args.n_ints, args.n_floats) == (3, 3, 2)
    with pytest.raises(ValueError, match="at most 64 ints"):
        abi.pack([], range(65), ())
    with pytest.raises(ValueError, match="at most 8 floats"):
        abi.pack([], (), [0.0] * 9)


# -- launch geometry -------------------------------------------------------------------------------
@pytest.mark.parametrize("n, per, grid", [(1, 1, 1), (256, 1, 1), (257, 1, 2), (1024, 4, 1),
                                          (1025, 4, 2), (4 << 20, 4, 4096), (1 << 40, 1, 4096)])
def test_grid_stride_geometry(n, per, grid):
    step = geometry.grid_stride(n, per, "mg_k")
    assert step.grid == (grid, 1, 1) and step.block == (256, 1, 1) and step.entry == "mg_k"
    # every element is reached: the threads times the stride loop cover n
    assert grid * 256 * per >= min(n, grid * 256 * per)


def test_an_empty_output_launches_nothing():
    assert geometry.grid_stride(0) is None
    assert geometry.vector_width(4, True) == 4 and geometry.vector_width(8, True) == 2
    assert geometry.vector_width(4, False) == 1


# -- the disk cache --------------------------------------------------------------------------------
def test_cache_hit_miss_and_corrupted_entry(tmp_path):
    cache = DiskCache(tmp_path)
    assert cache.get("a") is None and cache.misses == 1
    cache.put("a", b"payload")
    assert cache.get("a") == b"payload" and cache.hits == 1
    path = cache.path("a")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit in the payload
    path.write_bytes(bytes(data))
    assert cache.get("a") is None and cache.corrupt == 1 and not path.exists()
    path.write_bytes(b"short")  # truncated below its checksum
    assert cache.get("a") is None and cache.corrupt == 2
    assert not list(tmp_path.glob(".tmp-*"))  # writes leave no temporary behind


def test_cache_key_changes_with_every_input():
    base = ("src", {"scalar.cuh": "x"}, "sm_90", (13, 0), ("-std=c++17",))
    k = key(*base)
    for i, other in enumerate(("src2", {"scalar.cuh": "y"}, "sm_80", (13, 1),
                               ("-std=c++17", "--fmad=false"))):
        changed = list(base)
        changed[i] = other
        assert key(*changed) != k
    assert key(*base) == k


def test_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MGEGRAPH_CUDA_CACHE", str(tmp_path / "c"))
    assert default_dir() == tmp_path / "c"
    monkeypatch.delenv("MGEGRAPH_CUDA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_dir() == tmp_path / "mgegraph" / "cuda"


@pytest.mark.nvrtc
def test_a_second_compile_compiles_nothing_and_a_corrupted_entry_is_rebuilt(tmp_path):
    from mgegraph.cuda.nvrtc import Compiler
    text = '#include "mg_abi.cuh"\nextern "C" __global__ void mg_k(const MgArgs a) {}\n'
    first = Compiler("sm_90", DiskCache(tmp_path))
    module = first.compile(text, "k.cu")
    assert first.compiled == 1 and module.cubin
    second = Compiler("sm_90", DiskCache(tmp_path))  # a new process: only the disk is shared
    assert second.compile(text, "k.cu") == module and second.compiled == 0
    assert second.cache.hits == 1
    other_arch = Compiler("sm_80", DiskCache(tmp_path))
    other_arch.compile(text, "k.cu")
    assert other_arch.compiled == 1  # the architecture is part of the key
    second.compile(text, "k.cu", ("--fmad=false",))
    assert second.compiled == 1  # so are the options
    (entry,) = [p for p in tmp_path.iterdir() if p.read_bytes()[32:] == module.to_bytes()]
    entry.write_bytes(entry.read_bytes()[:-7])
    third = Compiler("sm_90", DiskCache(tmp_path))
    assert third.compile(text, "k.cu") == module
    assert third.compiled == 1 and third.cache.corrupt == 1


# -- device memory: the CPU plan's offsets ---------------------------------------------------------
@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-layout", lambda: CudaBackend(device=None))
    yield "cuda-layout"
    mg.backend.unregister_backend("cuda-layout")


def _elementwise_graph():
    g = mg.Graph()
    x = g.input("x", (8, 33), "float32")
    w = g.param("w", np.ones(33, np.float32))
    h = F.relu(x * w + 1.0)
    y = F.tanh(h) * F.exp(-h) + F.astype(F.astype(h, "int32"), "float32")
    g.assign(w, w * 0.5)
    return [y, F.sigmoid(y) - h]


@pytest.mark.parametrize("memory", [None, "no_reuse", "greedy_by_size"])
def test_the_arena_layout_is_the_cpu_plans(planner, memory):
    # same lowerings (optimize=0: no fused group, whose CPU lowering asks for a workspace the
    # GPU does not need), same alignment: the planner places every buffer as on the CPU
    outputs = _elementwise_graph()
    cuda = mg.compile(outputs, device=planner, optimize=0, memory=memory)
    cpu = mg.compile(outputs, device="cpu", optimize=0, memory=memory)
    assert cuda.arena_bytes == cpu.arena_bytes
    assert [(s.offset, s.role, s.alias, s.view_offset) for s in cuda.slots] == \
        [(s.offset, s.role, s.alias, s.view_offset) for s in cpu.slots]
    assert [i.ints for i in cuda.instructions] == [i.ints for i in cpu.instructions]


def test_device_addresses_are_the_planned_offsets(planner):
    plan = mg.compile(_elementwise_graph(), device=planner)
    offsets, total = persistent_layout(plan)
    arena, persistent = 0x7000_0000_0000, 0x7100_0000_0000
    address = slot_addresses(plan, arena, persistent, offsets)
    for slot in plan.slots:
        if slot.offset is not None:
            assert address[slot.index] == arena + slot.offset
        elif slot.alias is not None:
            assert address[slot.index] == address[slot.alias] + slot.view_offset
        else:
            assert slot.role in (Role.INPUT, Role.PARAM, Role.CONST, Role.OUTPUT)
            assert address[slot.index] % 256 == 0
    spans = sorted((offsets[s], offsets[s] + plan.slots[s].nbytes) for s in offsets)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # no two overlap
    assert total >= spans[-1][1] and total % 256 == 0


def test_the_launches_of_a_plan(planner):
    plan = mg.compile(_elementwise_graph(), device=planner)
    backend = mg.backend.get_backend(planner)
    calls, texts = plan_calls(plan, backend)
    assert [c.index for c in calls] == list(range(len(plan.instructions)))
    assert all(c.source is None for c in calls)  # all rendered: one module per plan
    assert all(f" {c.step.entry}(" in "".join(texts) for c in calls)
    for call in calls:
        ins = plan.instructions[call.index]
        assert call.slots == ins.buffers
        n = int(np.prod(plan.slots[ins.outputs[0]].type.shape))
        assert call.step.grid[0] * call.step.block[0] * 4 >= min(n, 4096 * 256)


# -- where CUDA cannot run -------------------------------------------------------------------------
def test_without_a_gpu_compile_says_what_is_missing_and_devices_leaves_cuda_out():
    from mgegraph.cuda import unavailable_reason
    reason = unavailable_reason()
    if reason is None:
        pytest.skip("this machine has a usable GPU")
    assert "cuda" not in mg.devices() and "cpu" in mg.devices()
    g = mg.Graph()
    y = g.input("x", (3,)) * 2.0
    for device in ("cuda", "cuda:1"):
        with pytest.raises(DeviceUnavailableError, match="is not available: .*") as info:
            mg.compile([y], device=device)
        assert ("'cuda' extra" in str(info.value)) and (
            "pip install" in str(info.value) or "no NVIDIA driver or GPU" in str(info.value))
    with pytest.raises(mg.GraphError, match="must be a number"):
        mg.compile([y], device="cuda:one")


def test_without_the_extra_the_error_names_the_extra():
    # a fresh interpreter in which cuda-python cannot be imported
    code = ("import sys; sys.modules['cuda'] = None; sys.modules['cuda.bindings'] = None\n"
            "import mgegraph as mg\n"
            "assert 'cuda' not in mg.devices()\n"
            "g = mg.Graph(); y = g.input('x', (3,)) * 2.0\n"
            "try:\n    mg.compile([y], device='cuda')\n"
            "except mg.GraphError as e:\n    print(type(e).__name__, e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parents[2], env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("DeviceUnavailableError device 'cuda:0' is not available: "
                                  "the CUDA backend needs the 'cuda' extra")
    assert "pip install 'mgegraph[cuda]'" in done.stdout


def test_importing_mgegraph_imports_no_cuda_library():
    code = ("import sys, mgegraph, mgegraph.cuda, mgegraph.cuda.backend\n"
            "print(sorted(m for m in sys.modules if m.startswith('cuda')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_cuda_sources_ship_with_the_package():
    # mgegraph/cuda/csrc is the package's view of csrc_cuda/ (pyproject's package-data)
    import tomllib
    root = Path(__file__).resolve().parents[2]
    assert CSRC.resolve() == (root / "csrc_cuda").resolve()
    data = tomllib.loads((root / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]["mgegraph.cuda"]
    shipped = {p.name for g in globs for p in (root / "mgegraph" / "cuda").glob(g)}
    assert shipped == {p.name for p in (root / "csrc_cuda").iterdir()
                       if p.suffix in (".cu", ".cuh", ".h")}
    assert "mg_abi.cuh" in shipped and "scalar.cuh" in shipped


def test_cuda_check_says_why_it_cannot_run_here():
    from mgegraph.cuda import unavailable_reason
    reason = unavailable_reason()
    if reason is None:
        pytest.skip("this machine has a usable GPU: cuda_check would run for minutes")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "cuda_check.py")],
                          capture_output=True, text=True, check=False, cwd=root)
    assert done.returncode == 2, done.stderr
    assert done.stdout.startswith("cuda_check: no GPU run here: ") and reason in done.stdout


def test_a_debug_plan_poisons_each_dead_value_after_its_last_reader(planner):
    from mgegraph.cuda.runtime import poison_after
    from mgegraph.plan import dead_values
    plan = mg.compile(_elementwise_graph(), device=planner, memory="debug", optimize=0)
    calls, _ = plan_calls(plan, mg.backend.get_backend(planner))
    offsets, _ = persistent_layout(plan)
    address = slot_addresses(plan, 0x1000, 0x9000_0000, offsets)
    after = poison_after(plan, calls, address)
    dead = dead_values(plan)
    assert sum(len(spans) for spans in after.values()) == len(dead) > 0
    for step, slot in dead:
        (k,) = [k for k, spans in after.items() if (address[slot], plan.slots[slot].nbytes)
                in spans and calls[k].index == step]
        assert slot in plan.instructions[step].inputs  # poisoned after its last reader ...
        assert all(slot not in c.slots for c in calls[k + 1:])  # ... which no later launch reads


def test_fused_offsets_are_32_bit_below_2_to_the_31_elements():
    from mgegraph.cuda import render
    from mgegraph.ops.fused_program import Program
    code = [("load", 0, 0), ("load", 1, 1), ("sub", 2, 0, 1), ("store", 0, 2)]
    small = render.fused_kernel(Program([(4, 8), (4, 1)], (4, 8), "float32", code))[1]
    assert "(((unsigned)i / 8u) % 4u) * 1u" in small and "LL)" not in small.split("n = ")[1]
    shape = (2 ** 16, 2 ** 15 + 1)
    big = render.fused_kernel(Program([shape, shape[1:]], shape, "float32", code))[1]
    assert "in1[(i % 32769LL) * 1LL]" in big
