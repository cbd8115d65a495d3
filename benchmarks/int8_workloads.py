"""int8 inference workloads against their float32 plans and ONNX Runtime's own quantization.

    python benchmarks/fresh_process.py --threads 1 2 --rounds 3 "mlp-int8 1" "mlp-int8 128"

mlp-int8: BENCHMARKS.md's mlp-infer MLP (784-1024-1024-10, ReLU) in int8. mgegraph's int8 plan
is built from the float weights as a post-training quantizer would: weights per output channel
(symmetric int8, max |w| / 127), the input int8 (max |x| / 127 of the calibration batch), the
ReLU outputs uint8 (max / 255), biases int32 in units of sx * sw, the logits an int32
accumulator dequantized. ONNX Runtime's int8 model is its ``quantize_static`` of the same MLP's
ONNX file (QDQ, per-channel weights, the same calibration batch). ``agreement`` prints the
top-1 agreement of each int8 model with the float one on the calibration batch.
"""
from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import numpy as np
import test_deploy
import workloads

import mgegraph as mg
from mgegraph.ir.quant import per_channel
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_linear

CALIBRATION_ROWS = 256


@functools.cache
def calibration() -> np.ndarray:
    return np.random.default_rng(workloads.SEED + 5).standard_normal(
        (CALIBRATION_ROWS, workloads.MLP_LAYERS[0]), dtype=np.float32)


def _float_activations(x):
    """The float MLP's input and each hidden layer's ReLU output on ``x``."""
    outs = [x]
    for w, b in workloads.mlp_weights()[:-1]:
        outs.append(np.maximum(outs[-1] @ w + b, 0))
    return outs


def mlp_int8_plan(batch: int):
    """The int8 MLP as a plan: float32 (batch, 784) in, float32 logits out."""
    ranges = [float(np.abs(a).max()) for a in _float_activations(calibration())]
    g = mg.Graph()
    x = g.input("x", (batch, workloads.MLP_LAYERS[0]), "float32")
    scale = ranges[0] / 127
    h = quantize(x, scale, 0, "int8")
    weights = workloads.mlp_weights()
    for k, (w, b) in enumerate(weights):
        wt = w.T  # (out, in)
        w_scales = np.maximum(np.abs(wt).max(axis=1), 1e-12) / 127
        wq = np.clip(np.rint(wt / w_scales[:, None]), -127, 127).astype(np.int8)
        bias = np.rint(b / (scale * w_scales)).astype(np.int32)
        wv = g.param(f"w{k}", wq, quant=per_channel(w_scales, None, 0))
        bv = g.param(f"b{k}", bias)
        if k == len(weights) - 1:
            h = dequantize(quantized_linear(h, wv, bv, out_dtype="int32"))
        else:
            out_scale = ranges[k + 1] / 255
            h = quantized_linear(h, wv, bv, out_dtype="uint8", out_scale=out_scale, relu=True)
            scale = out_scale
    return mg.compile([h])


@functools.cache
def ort_int8_model(batch: int) -> bytes:
    """ONNX Runtime's quantize_static of the MLP (QDQ, per-channel weights)."""
    from onnxruntime.quantization import (  # lazy: optional dependency (onnxruntime)
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            rows = calibration()
            self.batches = iter([{"x": rows[i:i + batch]}
                                 for i in range(0, len(rows) - batch + 1, batch)])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "mlp.onnx"), Path(tmp, "mlp_int8.onnx")
        src.write_bytes(test_deploy.mlp_onnx(batch))
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8)
        return dst.read_bytes()


def _ort_session(model: bytes, threads: int):
    import onnxruntime as ort  # lazy: optional dependency
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def mlp_int8_call(impl: str, workload: str):
    """One call of ``impl`` on a (batch, 784) input; checked against the float MLP first."""
    batch = int(workload.split()[-1])
    x = calibration()[:batch]
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    if impl == "mgegraph float":
        return workloads.mlp_infer(batch)["mgegraph plan.run"]
    if impl == "mgegraph int8":
        plan = mlp_int8_plan(batch)
        return functools.partial(plan.run, {"x": x})
    model = ort_int8_model(batch) if impl == "onnxruntime int8" else test_deploy.mlp_onnx(batch)
    session = _ort_session(model, threads)
    return functools.partial(session.run, None, {"x": x})


def agreement(batch: int = 128) -> dict[str, float]:
    """Top-1 agreement with the float MLP on the calibration rows, per int8 model."""
    x = calibration()[:batch]
    h = _float_activations(x)[-1]
    w, b = workloads.mlp_weights()[-1]
    want = (h @ w + b).argmax(axis=1)
    ours = mlp_int8_plan(batch).run({"x": x})[0].argmax(axis=1)
    ort = _ort_session(ort_int8_model(batch), 1).run(None, {"x": x})[0].argmax(axis=1)
    return {"mgegraph int8": float((ours == want).mean()), "onnxruntime int8":
            float((ort == want).mean())}


if __name__ == "__main__":
    print(agreement())
