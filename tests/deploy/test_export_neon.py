"""The C runtime's NEON tiles on 64-bit ARM (gemm_tile.h's 8 x 8 GEMM tile, conv_tile.h's row
tile and gather tiles, gemv_row.h's 8-lane dots), cross-built and run under qemu-user: the
binary holds them and not the portable tiles, and every output is bitwise the x86 build's (the
same FMAs in the same order) on odd sizes and 1, 2 and 3 threads. One build per target for the
whole module: qemu is slow. Then the int8 GEMM's sdot forms (-march=armv8.2-a+dotprod): the
Python executor's integers."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import export_c
from mgegraph.deploy import kernels as DK

from .cbuild import cc, make, model_run
from .test_export_gemm_packed import bits, fma_order
from .test_export_int8 import MODELS, assert_bitwise, exported

CROSS, QEMU, NM = (shutil.which(tool) for tool in
                   ("aarch64-linux-gnu-gcc", "qemu-aarch64", "aarch64-linux-gnu-nm"))
NEON_TILES = {"mg_panel_tile_neon", "conv_tile_neon", "conv_gather_neon",
              "conv_gather_neon_narrow", "gemv_dots_neon"}
PORTABLE_TILES = {"mg_panel_tile_base", "conv_tile_base", "conv_gather_base"}


def odd_models(rng):
    """One plan of the kernels the NEON tiles run, sizes no multiple of their blocks: GEMMs on
    packed weights (linear; A transposed) and packed per call (both operands fed), a ResNet
    block (Winograd 3x3s, a 1x1 skip, a strided 3x3 on packed gather tiles), a gather
    convolution on fed weights, transposed convolutions on the tiles, by Winograd and on the
    GEMM, and an MLP at batch 3 and at batch 1 (the GEMV). Returns the plan, its feeds and the
    GEMMs' outputs in the FMA order (fma_order), first."""
    g = mg.Graph()
    feeds, values = {}, {}

    def fed(name, shape):
        feeds[name] = rng.standard_normal(shape, dtype=np.float32)
        return g.input(name, shape=shape, dtype="float32")

    def param(name, shape):
        values[name] = rng.standard_normal(shape, dtype=np.float32) * 0.2
        return g.param(name, values[name])

    outs = [F.linear(fed("x", (13, 301)), param("w1", (17, 301))),
            F.matmul(fed("xt", (257, 19)), param("w2", (257, 42)), transpose_a=True),
            F.matmul(fed("a", (11, 37)), fed("b", (37, 29)))]
    gemms = [fma_order(feeds["x"], values["w1"].T), fma_order(feeds["xt"].T, values["w2"]),
             fma_order(feeds["a"], feeds["b"])]
    img = fed("img", (1, 32, 9, 9))
    h = F.relu(F.conv2d(img, param("c1", (40, 32, 3, 3)), param("c1b", (40,)), padding=1))
    h = F.relu(F.conv2d(h, param("c2", (40, 40, 3, 3)), padding=1)
               + F.conv2d(img, param("skip", (40, 32, 1, 1))))
    outs.append(F.relu(F.conv2d(h, param("c3", (44, 40, 3, 3)), stride=2, padding=1)))
    outs.append(F.conv2d(fed("small", (2, 3, 17, 15)), fed("wf", (16, 3, 3, 3)), stride=2,
                         padding=1))
    # transposed convolutions on the row tiles' path, Winograd's and the GEMM's (the rules')
    outs.append(F.conv_transpose2d(fed("dy5", (2, 16, 16, 17)), param("t5", (16, 12, 5, 5)),
                                   param("t5b", (12,)), padding=2))
    outs.append(F.conv_transpose2d(fed("dy3", (1, 40, 9, 11)), param("t3", (40, 20, 3, 3)),
                                   padding=1))
    outs.append(F.conv_transpose2d(fed("dy2", (1, 24, 7, 9)), param("t2", (24, 11, 3, 3)),
                                   param("t2b", (11,)), stride=2, padding=1, output_padding=1))
    for batch in (3, 1):
        m = fed(f"m{batch}", (batch, 50))
        hidden = F.relu(F.linear(m, param(f"l1_{batch}", (70, 50)), param(f"b1_{batch}", (70,))))
        outs.append(F.linear(hidden, param(f"l2_{batch}", (10, 70))))
    return mg.compile(outs), feeds, gemms


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The plan, its feeds, the GEMMs' references and its export built for x86 (this machine)
    and for aarch64 (static, for qemu-user)."""
    if not (CROSS and QEMU and NM):
        pytest.skip("needs aarch64-linux-gnu-gcc, -nm and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user)")
    cc()
    plan, feeds, gemms = odd_models(np.random.default_rng(55))
    root = tmp_path_factory.mktemp("neon")
    x86, arm = export_c(plan, root / "x86"), export_c(plan, root / "arm")
    make(x86.directory)
    make(arm.directory, CROSS, "-O2 -static")
    return plan, feeds, gemms, x86, arm


def outputs(exported, feeds, threads, runner=()):
    done, got = model_run(exported.directory, feeds, exported.input_names, runner=runner,
                          options=["--threads", str(threads)])
    assert done.returncode == 0, done.stderr
    return got


def functions(exported) -> set:
    """The names of the functions in an aarch64 export's model_run (GCC's clone suffixes off)."""
    listed = subprocess.run([NM, str(exported.directory / "model_run")], check=True,
                            capture_output=True, text=True).stdout
    return {line.split()[-1].split(".")[0] for line in listed.splitlines() if line.strip()}


def test_the_aarch64_binary_holds_the_neon_tiles_and_not_the_portable_ones(builds):
    # the bits cannot tell the tiles apart (the portable tile contracts to the same FMAs), so
    # the symbols say which ran: the dispatch returns the NEON tiles alone, and the portable
    # ones are not even linked
    names = functions(builds[-1])
    assert NEON_TILES <= names and not PORTABLE_TILES & names


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_output_is_bitwise_the_x86_builds(builds, threads):
    plan, feeds, gemms, x86, arm = builds
    native, got = outputs(x86, feeds, threads), outputs(arm, feeds, threads, runner=[QEMU])
    assert len(got) == len(native) == len(plan.run(feeds))
    # the batch-1 MLP's GEMV sums a dot in 8 lanes on aarch64 as AVX2 does: AVX-512's 16
    # lanes add in another order
    exact = len(got) if DK.gemm_panel() == DK.GEMM_PANELS["avx2"] else len(got) - 1
    for k, (mine, theirs) in enumerate(zip(got[:exact], native)):
        assert np.array_equal(bits(mine), bits(theirs)), k
    for mine, want in zip(got, gemms):  # and the GEMMs are the FMA order's sums
        assert np.array_equal(bits(mine), bits(want))
    for mine, want in zip(got, plan.run(feeds)):  # the Python executor: BLAS, other sums
        np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-4)


# -- int8: the GEMM's tile and GEMV on ARMv8.2's sdot, where the build asks for it ----------
@pytest.mark.parametrize("model", ["digits", "mlp"])  # digits: the tile; mlp: the GEMV
def test_the_int8_sdot_tile_and_gemv_give_the_python_executors_integers(tmp_path, model):
    if not (CROSS and QEMU and NM):
        pytest.skip("needs aarch64-linux-gnu-gcc, -nm and qemu-aarch64")
    plan, feeds = MODELS[model]()
    out = exported(tmp_path, plan, compiler=CROSS,
                   cflags="-O2 -static -march=armv8.2-a+dotprod")
    assert {"qg_tile_sdot", "qg_gemv_sdot"} <= functions(out)
    assert_bitwise(out, plan, feeds, runner=[QEMU, "-cpu", "max"], options=["--threads", "3"])
