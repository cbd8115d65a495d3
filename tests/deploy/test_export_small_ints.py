"""The C runtime on the integers and bool, bitwise against the Python executor: the
small-integer plans the model-file tests save (uint8, int8, int16: wrapping arithmetic, casts,
comparisons, constant pads, transposes), every integer table op on the values where C and NumPy
part ways (overflow, division by zero and by -1, INT_MIN), every cast between the blob's dtypes
(NaN, infinities, out of range), the pads' four modes and the strided copies of each element
size; and the new parameter blocks refused when corrupt."""
from __future__ import annotations

import itertools
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import export_c
from mgegraph.ir.types import short_name
from mgegraph.ops import elementwise_table as TABLE

from .cbuild import (
    SANITIZE,
    assert_refused,
    blob_calls,
    cc,
    exported_run,
    fuzz_blob,
    make,
    model_run,
    patched,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
import test_small_ints_file as small_ints_file  # noqa: E402  the model-file tests' plans

INTS = [np.uint8, np.int8, np.int16, np.int32, np.int64]
# what the blob holds: every dtype a cast may read or write in the C runtime
BLOB_DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8, np.int16, np.bool_]


def edge_values(dtype) -> np.ndarray:
    """The integers where C and NumPy part ways: the ends, around zero, -1, and a spread."""
    info = np.iinfo(dtype)
    values = [info.min, info.min + 1, info.max, info.max - 1, 0, 1, 2, 3, 7, info.max // 2]
    values += [v for v in (-1, -2, -7, info.min // 2) if info.min < 0]
    values += list(np.random.default_rng(0).integers(info.min, info.max, 8, endpoint=True))
    return np.array(values, dtype)


def assert_bitwise(got, want):
    assert len(got) == len(want)
    for k, (c, w) in enumerate(zip(got, want)):
        assert c.dtype == w.dtype and c.shape == w.shape, (k, c.dtype, w.dtype)
        assert c.tobytes() == w.tobytes(), (k, c, w)


def _small_feeds(dt):
    info = np.iinfo(dt)
    x = np.random.default_rng(1).integers(info.min, info.max, (3, 5), endpoint=True).astype(dt)
    x[0, :3] = (info.min, info.max, 0)
    return {"x": x}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dt", small_ints_file.SMALL, ids=lambda d: np.dtype(d).name)
def test_the_model_files_small_int_plans_are_bitwise(tmp_path, dt, threads):
    cc()
    plan, _ = small_ints_file.small_plan(dt)
    kernels = {i.kernel.split("_")[0] for i in plan.instructions}
    assert {"binary", "cast", "compare", "pad", "strided"} <= kernels, kernels
    feeds = _small_feeds(dt)
    assert_bitwise(exported_run(tmp_path, plan, feeds, threads), plan.run(feeds))


def test_a_small_int_plan_builds_for_aarch64_and_agrees(tmp_path):
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu):
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user)")
    plan, _ = small_ints_file.small_plan(np.int16)
    feeds = _small_feeds(np.int16)
    feeds["x"][1, :2] = (-32768, 32767)
    got = exported_run(tmp_path, plan, feeds, compiler=cross, cflags="-O2 -static",
                       runner=[qemu])
    assert_bitwise(got, plan.run(feeds))


def _ops(kind, dtype):
    return [op.name for op in TABLE.OPS if op.kind == kind and np.dtype(dtype) in op.dtypes]


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_every_integer_table_op_is_bitwise(tmp_path, dtype):
    # unary, binary (pow aside: below) and comparisons, unfused, over every pair of edge values
    cc()
    v = edge_values(dtype)
    x, y = (np.ascontiguousarray(a) for a in np.array(list(itertools.product(v, v)), dtype).T)
    g = mg.Graph()
    xv, yv = g.input("x", x.shape, x.dtype), g.input("y", y.shape, y.dtype)
    unary = _ops("unary", dtype)
    binary = [n for n in _ops("binary", dtype) if n != "pow"] + _ops("compare", dtype)
    params = {"clip": {"lower": -3.0, "upper": 100.0}}
    outs = [g.add_node(n, (xv,), params.get(n, {})).outputs[0] for n in unary]
    outs += [g.add_node(n, (xv, yv), {}).outputs[0] for n in binary]
    plan = mg.compile(outs, optimize=0)
    feeds = {"x": x, "y": y}
    with np.errstate(all="ignore"):
        want = plan.run(feeds)
    assert_bitwise(exported_run(tmp_path, plan, feeds), want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int64],
                         ids=lambda d: np.dtype(d).name)
def test_integer_powers_wrap_and_a_negative_exponent_fails_as_in_python(tmp_path, dtype):
    cc()
    x = edge_values(dtype)
    exponents = np.arange(len(x), dtype=dtype) % 9
    g = mg.Graph()
    xv, yv = g.input("x", x.shape, x.dtype), g.input("y", x.shape, x.dtype)
    plan = mg.compile([g.add_node("pow", (xv, yv), {}).outputs[0]], optimize=0)
    feeds = {"x": x, "y": exponents}
    assert_bitwise(exported_run(tmp_path, plan, feeds), plan.run(feeds))
    if np.iinfo(dtype).min < 0:
        feeds["y"] = exponents.copy()
        feeds["y"][3] = -1
        with pytest.raises(mg.KernelError, match="negative"):
            plan.run(feeds)
        done, _ = model_run(tmp_path / "out", feeds, ["x", "y"])
        assert done.returncode == 1 and "failed with status 4" in done.stderr, done.stderr


def _cast_values(src) -> np.ndarray:
    if np.dtype(src).kind == "f":
        return np.array([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 127.9, 128.0, -129.0, 255.7, 256.0,
                         300.7, -300.7, 32767.5, 32768.0, -32769.0, 2147483520.0, 2.2e9, -2.2e9,
                         9.3e18, -9.3e18, 1e30, np.inf, -np.inf, np.nan], src)
    if np.dtype(src) == np.bool_:
        return np.array([True, False, True], np.bool_)
    return edge_values(src)


@pytest.mark.parametrize("src", BLOB_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_cast_between_the_blobs_dtypes_is_bitwise(tmp_path, src):
    # NaN, infinities and out-of-range floats to integers as NumPy on x86 (scalar.h's
    # float_to_i32/_i64, the small integers its low bits), to bool as != 0
    cc()
    x = _cast_values(src)
    g = mg.Graph()
    xv = g.input("x", x.shape, x.dtype)
    targets = [d for d in BLOB_DTYPES if d != src]
    plan = mg.compile([xv.astype(d) for d in targets], optimize=0)
    assert {i.kernel for i in plan.instructions} == {f"cast_{short_name(x.dtype)}"}
    with np.errstate(all="ignore"):
        want = plan.run({"x": x})
    assert_bitwise(exported_run(tmp_path, plan, {"x": x}), want)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int16, np.uint8, np.bool_],
                         ids=lambda d: np.dtype(d).name)
def test_pads_and_strided_copies_of_every_element_size_are_bitwise(tmp_path, dtype):
    cc()
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 5, 3)) * 50).astype(dtype)
    g = mg.Graph()
    xv = g.input("x", x.shape, x.dtype)
    outs = [F.pad(xv, ((1, 2), (0, 0), (2, 1)), constant_value=1),
            F.pad(xv, ((3, 1), (2, 0), (0, 0)), mode="edge"),
            F.pad(xv, ((0, 5), (4, 1), (2, 2)), mode="reflect"),
            F.pad(xv, ((2, 7), (0, 0), (4, 3)), mode="wrap"),
            F.transpose(xv, (2, 0, 1)), xv[::-1, 1:4, ::2],
            F.broadcast_to(xv[:, :1], (4, 3, 3)), F.concat([xv, xv[:, :2]], axis=1)]
    plan = mg.compile(outs, optimize=0)
    kernels = {i.kernel.rsplit("_", 1)[0] for i in plan.instructions}
    assert {"pad", "strided", "concat"} <= kernels, kernels
    assert_bitwise(exported_run(tmp_path, plan, {"x": x}), plan.run({"x": x}))


# -- the new parameter blocks: refused when corrupt, never run ------------------------------
def test_corrupt_pad_strided_and_generated_blocks_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan, _ = small_ints_file.small_plan(np.int16)
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    calls = {name: ints for name, ints, _ in blob_calls(blob)}
    pad, strided = calls["pad_i16"], calls["strided_i16"]
    ndim = struct.unpack_from("<q", blob, pad + 8)[0]  # Pad: mode, ndim, fill_bits, ...
    out_shape, in_shape, before, strides = (pad + 8 * (3 + k * ndim) for k in range(4))
    cases = {
        "pad mode": (patched(blob, pad, 4), "a mode past wrap"),
        "pad ndim": (patched(blob, pad + 8, 9), "ndim"),
        "pad out shape": (patched(blob, out_shape, 1 << 20), "reaches past y"),
        "pad in shape": (patched(blob, in_shape, 9), "reach past x"),
        "pad stride": (patched(blob, strides, 1 << 30), "reach past x"),
        "pad negative stride": (patched(blob, strides + 8, -1), "negative"),
        "pad width": (patched(blob, before, -(1 << 50)), "past 2^40"),
        "pad empty edge": (patched(patched(blob, in_shape, 0), pad, 1), "pad an empty input"),
        "strided offset": (patched(blob, strided + 8 * 5, 29), "reaches past x"),
        "strided dtype": (_as_uint8(blob, "strided_i16"), "not of the kernel's dtype"),
        "generated dtype": (_as_uint8(blob, "fused_0"), "size and dtype"),
    }
    feeds = _small_feeds(np.int16)
    got = assert_refused(exported.directory, cases, feeds, ["x"])
    assert_bitwise(got, plan.run(feeds))
    fuzz_blob(exported.directory, seeds=[5], count=500)


def _as_uint8(blob: bytes, kernel: str) -> bytes:
    """``blob`` with the first buffer of ``kernel``'s first call, an int16 tensor, retyped as
    uint8 of as many elements (its tensor record's fields 3 and 4: nbytes, dtype;
    docs/c_runtime.md): the record is whole, the kernel's check must see the dtype."""
    field = lambda i: struct.unpack_from("<q", blob, 8 * i)[0]  # noqa: E731
    names = [blob[field(5) + 32 * k:field(5) + 32 * (k + 1)].rstrip(b"\0").decode()
             for k in range(field(4))]
    for i in range(field(8)):
        index, refs_at = struct.unpack_from("<2q", blob, field(9) + 64 * i)
        if names[index] == kernel:
            record = field(7) + 128 * struct.unpack_from("<q", blob, field(11) + 8 * refs_at)[0]
            nbytes = struct.unpack_from("<q", blob, record + 8 * 3)[0]
            return patched(patched(blob, record + 8 * 3, nbytes // 2), record + 8 * 4, 4)
    raise AssertionError(f"no call of {kernel}")
