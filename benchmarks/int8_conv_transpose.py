"""The int8 transposed convolution against the float32 one, on the U-Net's up-sampling shape
(vision_workloads' "conv-transpose 64->32": 64 -> 32 channels, 3x3, stride 2, padding 1,
output_padding 1, 32x32 -> 64x64, batch 1).

    python benchmarks/fresh_process.py --threads 1 2 --rounds 3 "conv-transpose-int8 64->32"
    python benchmarks/int8_conv_transpose.py     # in one process, interleaved: the ratios

"mgegraph float": the float32 plan (frozen, the kernels' ways by the rules). "mgegraph int8":
the int8 layer as it runs inside an int8 network, int8 in and int8 out: the weight per tensor
(symmetric, max |w| / 127), the input's scale max |x| / 127, the output's the float output's
max / 127, the bias int32 in units of input scale x weight scale; its weight packed once (the
prepack pass: quantized_conv_transpose2d_packed). "mgegraph int8 per call": the same layer
compiled without the prepack pass, the weight transposed and packed on every call.
"""
from __future__ import annotations

import functools
import statistics
import time

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.quant import per_tensor
from mgegraph.ops.quantized import quantized_conv_transpose2d
from mgegraph.planner.passes.pipeline import LEVELS

SHAPE, SEED = (1, 64, 32, 32), 0
GEOMETRY = {"stride": 2, "padding": 1, "output_padding": 1}
UNPACKED = [p for p in LEVELS[1] if p != "prepack"]


@functools.cache
def _float_layer():
    rng = np.random.default_rng(SEED)
    w = (rng.standard_normal((64, 32, 3, 3)) / np.sqrt(32 * 9)).astype(np.float32)
    b = (rng.standard_normal(32) / 3).astype(np.float32)
    x = np.random.default_rng(SEED + 1).standard_normal(SHAPE, dtype=np.float32)
    return x, w, b


def float_plan():
    x, w, b = _float_layer()
    g = mg.Graph()
    y = F.conv_transpose2d(g.input("x", SHAPE), g.param("w", w), g.param("b", b), **GEOMETRY)
    return mg.compile([y], freeze=True, tune="rules"), x


def int8_plan(packed: bool = True):
    """The int8 layer and its int8 input (the float input quantized); its weight packed once,
    or (``packed`` False) on every call."""
    x, w, b = _float_layer()
    sx, sw = float(np.abs(x).max()) / 127, float(np.abs(w).max()) / 127
    (y,) = float_plan()[0].run({"x": x})
    sy = float(np.abs(y).max()) / 127
    xq = np.clip(np.rint(x / sx), -128, 127).astype(np.int8)
    g = mg.Graph()
    out = quantized_conv_transpose2d(
        g.input("x", SHAPE, "int8", quant=per_tensor(sx)),
        g.param("w", np.clip(np.rint(w / sw), -127, 127).astype(np.int8), quant=per_tensor(sw)),
        g.param("b", np.rint(b / (sx * sw)).astype(np.int32)), **GEOMETRY, out_scale=sy)
    plan = mg.compile([out], freeze=True, tune="rules", optimize=1 if packed else UNPACKED)
    return plan, xq


IMPLS = {"mgegraph float": float_plan, "mgegraph int8": int8_plan,
         "mgegraph int8 per call": functools.partial(int8_plan, packed=False)}


def conv_transpose_int8_call(impl: str, workload: str):
    plan, x = IMPLS[impl]()
    return functools.partial(plan.run, {"x": x})


def interleaved(rounds: int = 25) -> dict[str, float]:
    """Median seconds of each way, the ways called alternately in this process (A, B, A, B...),
    so a loaded machine's changes fall on both alike."""
    calls = {impl: conv_transpose_int8_call(impl, "") for impl in IMPLS}
    times: dict[str, list[float]] = {impl: [] for impl in calls}
    for call in calls.values():  # warm: the arenas, the packed scratch's first touch
        call()
    for r in range(rounds):  # the order reversed every other round: no way always first
        for impl, call in (list(calls.items()) if r % 2 == 0 else list(calls.items())[::-1]):
            start = time.perf_counter()
            call()
            times[impl].append(time.perf_counter() - start)
    return {impl: statistics.median(t) for impl, t in times.items()}


if __name__ == "__main__":
    medians = interleaved()
    for impl, seconds in medians.items():
        print(f"{impl}: {seconds * 1e3:.3f} ms (median)")
    print(f"int8 / float32: {medians['mgegraph int8'] / medians['mgegraph float']:.2f}")
    print(f"int8 packed once / per call: "
          f"{medians['mgegraph int8'] / medians['mgegraph int8 per call']:.2f}")
