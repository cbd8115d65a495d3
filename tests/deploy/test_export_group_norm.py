"""Group norm's forward in the C runtime, bitwise against the Python executor: both run
group_norm.h's gn_forward_f32 (the model-file test's plan, odd sizes, each epilogue activation,
a constant group, |mean| >> std, NaN; 1 and 2 threads; aarch64's plain loops under qemu
against x86's vector ones), and its parameter block refused when corrupt."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import mgegraph as mg
from mgegraph.deploy import ExportError, export_c
from mgegraph.ops.builder import apply

from .cbuild import (
    SANITIZE,
    assert_refused,
    blob_calls,
    cc,
    exported_run,
    fuzz_blob,
    make,
    patched,
)


def group_norm_plan(shape=(2, 4, 3), groups=2, activation="relu"):
    """The group norm model-file test's plan (tests/io/test_group_norm_model_file.py)."""
    g = mg.Graph()
    x, w = g.input("x", shape), g.input("w", (shape[1],))
    b = g.input("b", (shape[1],))
    return mg.compile([apply("group_norm", (x, w, b), groups=groups, activation=activation)])


def feeds_for(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape, dtype=np.float32)
    x[0, 0] = 3.0                                   # a constant channel (a constant group of 1)
    if shape[0] > 1:
        x[1] = x[1] * np.float32(1e-3) + np.float32(3e4)  # |mean| >> std
    return {"x": x, "w": rng.uniform(-2, 2, shape[1]).astype(np.float32),
            "b": rng.standard_normal(shape[1], dtype=np.float32)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape, groups, activation", [
    ((2, 4, 3), 2, "relu"),              # the model-file test's plan
    ((3, 6, 5, 7), 3, "none"),           # odd inner sizes: the vector loops' tails
    ((2, 12, 33), 4, "relu6"),
    ((4, 8, 9, 9), 8, "relu"),           # one channel a group
    ((1, 5, 0), 5, "none"),              # empty groups
])
def test_group_norm_is_bitwise_the_python_plan(tmp_path, shape, groups, activation, threads):
    cc()
    plan = group_norm_plan(shape, groups, activation)
    feeds = feeds_for(shape)
    if feeds["x"].size:
        feeds["x"].reshape(-1)[5] = np.nan      # its group all NaN, the others untouched
    (got,) = exported_run(tmp_path, plan, feeds, threads)
    (want,) = plan.run(feeds)
    assert got.tobytes() == want.tobytes()


def test_group_norm_builds_for_aarch64_and_agrees(tmp_path):
    # aarch64 runs the plain loops, x86 the AVX2/AVX-512 ones: the same bits by design
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    plan = group_norm_plan((2, 12, 33), 4, "relu6")
    feeds = feeds_for((2, 12, 33), seed=3)
    (got,) = exported_run(tmp_path, plan, feeds, compiler=cross, cflags="-O2 -static",
                       runner=[qemu])
    assert got.tobytes() == plan.run(feeds)[0].tobytes()


def test_group_norm_training_is_refused_by_name(tmp_path):
    g = mg.Graph()
    x, w = g.input("x", (2, 4, 3)), g.input("w", (4,))
    (dx,) = mg.grad(mg.functional.sum(apply("group_norm", (x, w, w), groups=2)), [x])
    with pytest.raises(ExportError, match=r"group_norm_backward_f32 \(op group_norm_backward\)"):
        export_c(mg.compile([dx]), tmp_path / "out")


def test_corrupt_group_norm_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan = group_norm_plan((2, 6, 5), 3, "relu")
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    at = next(ints for name, ints, _ in blob_calls(blob) if name == "group_norm_f32")
    batch, channels, inner, groups, activation = 0, 1, 2, 3, 4  # kernel_abi/norm.py's FIELDS
    cases = {
        "groups": (patched(blob, at + 8 * groups, 4), "positive divisor"),
        "no groups": (patched(blob, at + 8 * groups, 0), "positive divisor"),
        "activation": (patched(blob, at + 8 * activation, 3), "activation past"),
        "batch": (patched(blob, at + 8 * batch, 3), "reaches past x"),
        "inner huge": (patched(blob, at + 8 * inner, 1 << 61), "no loop this runtime bounds"),
        "channels": (patched(blob, at + 8 * channels, 12), "reaches past"),
        "negative": (patched(blob, at + 8 * inner, -1), "negative"),
    }
    feeds = feeds_for((2, 6, 5), seed=4)
    (got,) = assert_refused(exported.directory, cases, feeds, exported.input_names)
    assert got.tobytes() == plan.run(feeds)[0].tobytes()
    fuzz_blob(exported.directory, seeds=[5], count=300)
