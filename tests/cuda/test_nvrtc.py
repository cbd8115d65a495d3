"""NVRTC compiles (no GPU needed): every csrc_cuda/*.cu alone, every rendered elementwise kernel
and the fused groups of the test graphs and benchmark models, for sm_80 and sm_90, with an empty
log; what the PTX holds; CompileError's message.

The compiles go through the product's Compiler and the user's disk cache, so a second session
compiles nothing (the log is cached with the module and still checked)."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from graphs import fused_nodes, graphs

import mgegraph as mg
from mgegraph.cuda import CSRC, CompileError, render
from mgegraph.cuda.nvrtc import EXACT_OPTIONS, Compiler
from mgegraph.ops.fused import program_of

pytestmark = pytest.mark.nvrtc
ARCHS = ("sm_80", "sm_90")


@pytest.fixture(scope="session")
def compilers():
    return {arch: Compiler(arch) for arch in ARCHS}


@pytest.fixture(scope="session")
def rendered_compilers():
    """The rendered modules (hundreds of kernels) to a CUBIN for sm_90 and to PTX for
    compute_80: the same front end and optimiser for both, without running the sm_80 assembler
    over all of them (about half of an NVRTC call; the hand-written sources get both CUBINs)."""
    return {"sm_90": Compiler("sm_90"), "compute_80": Compiler("compute_80")}


def compile_both(compilers, text, name):
    """The module for each architecture, compiled in parallel (NVRTC releases the GIL)."""
    with ThreadPoolExecutor(len(compilers)) as pool:
        futures = {a: pool.submit(c.compile, text, name, EXACT_OPTIONS)
                   for a, c in compilers.items()}
        return {a: f.result() for a, f in futures.items()}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", sorted(p.name for p in CSRC.glob("*.cu")))
def test_every_cu_file_compiles_alone_without_warnings(compilers, source, arch):
    compiled = compilers[arch].compile_file(source)
    assert compiled.log.strip() == "", compiled.log
    assert compiled.cubin


@pytest.fixture(scope="session")
def elementwise(rendered_compilers):
    kernels = render.elementwise_kernels()
    module = render.module(kernels.values())
    return kernels, compile_both(rendered_compilers, module, "elementwise.cu")


def test_every_elementwise_kernel_compiles_without_warnings(elementwise):
    kernels, compiled = elementwise
    for arch, module in compiled.items():
        assert module.log.strip() == "", module.log
        for entry in kernels:
            assert f".entry {entry}(" in module.ptx, (arch, entry)


def test_contiguous_float32_kernels_load_16_bytes(elementwise):
    _kernels, compiled = elementwise
    ptx = _kernel_ptx(compiled["sm_90"].ptx, "mg_binary_add_f32")
    assert "ld.global.nc.v4.f32" in ptx or "ld.global.v4.f32" in ptx
    assert "st.global.v4.f32" in ptx


def _kernel_ptx(ptx: str, entry: str) -> str:
    start = ptx.index(f".entry {entry}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:end if end > 0 else None]


@pytest.fixture(scope="session")
def fused(rendered_compilers):
    """(name of graph -> its kernels' entries, the module of all of them per arch)."""
    entries, texts = {}, {}
    for name, make in graphs().items():
        for node in fused_nodes(make()):
            entry, text = render.fused_kernel(program_of(node), f"fused_elementwise in {name}")
            entries.setdefault(name, []).append(entry)
            texts[entry] = text
    return entries, compile_both(rendered_compilers, render.module(texts.values()), "fused.cu")


def test_the_fused_groups_of_every_test_graph_and_model_compile(fused):
    entries, compiled = fused
    assert {"fusion-chain", "mlp-train", "convnet-train"} <= entries.keys()
    for arch, module in compiled.items():
        assert module.log.strip() == "", module.log
        for name, names in entries.items():
            for entry in names:
                assert f".entry {entry}(" in module.ptx, (arch, name)


def test_the_fusion_chain_kernel_is_vectorised_without_local_memory(fused):
    entries, compiled = fused
    (entry,) = entries["fusion-chain"]
    ptx = _kernel_ptx(compiled["sm_90"].ptx, entry)
    assert "ld.global.nc.v4.f32" in ptx or "ld.global.v4.f32" in ptx
    assert "st.global.v4.f32" in ptx
    assert ".local" not in ptx and "fma.rn" not in ptx  # no spills; no contraction (the CPU's)


def test_a_compile_error_shows_the_line_and_the_op(compilers):
    (node,) = fused_nodes(graphs()["fusion-chain"]())
    _, text = render.fused_kernel(program_of(node), "fused_elementwise at model.py:12")
    broken = render.module([text.replace("ew_tanh(", "ew_tanhh(")])
    with pytest.raises(CompileError) as info:
        compilers["sm_90"].compile(broken, "rendered.cu", EXACT_OPTIONS)
    message = str(info.value)
    assert "fused_elementwise at model.py:12" in message
    assert "ew_tanhh(" in message and "rendered.cu:" in message
    assert "ew_tanhh" in info.value.log


@pytest.fixture(scope="module")
def planner():
    """``device="cuda-plan"``: the CUDA backend without a device (plans, renders, no runs)."""
    from mgegraph.cuda.backend import CudaBackend
    mg.register_backend("cuda-plan", lambda: CudaBackend(device=None))
    yield "cuda-plan"
    mg.backend.unregister_backend("cuda-plan")


@pytest.mark.parametrize("name", ["mlp-train", "convnet-train", "fusion-chain"])
def test_every_launch_of_a_model_plan_names_a_kernel_its_module_defines(planner, name,
                                                                        compilers,
                                                                        rendered_compilers):
    from mgegraph.cuda.launches import plan_calls, rendered_source
    plan = mg.compile(graphs()[name](), device=planner)
    calls, texts = plan_calls(plan, mg.backend.get_backend(planner))
    assert calls
    rendered = rendered_compilers["sm_90"].compile(rendered_source(texts), "rendered.cu",
                                                   EXACT_OPTIONS) if texts else None
    for call in calls:
        module = rendered if call.source is None else compilers["sm_90"].compile_file(call.source)
        assert f".entry {call.step.entry}(" in module.ptx, (call.source, call.step.entry)
        assert all(g >= 1 for g in call.step.grid) and 1 <= np.prod(call.step.block) <= 1024
