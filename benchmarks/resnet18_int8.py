"""ResNet-18 in int8: mgegraph's import of ONNX Runtime's own QDQ quantization against
mgegraph's float32 plan and ONNX Runtime running both files.

    python benchmarks/resnet18_int8.py                         # 1x3x224x224 and 8x3x64x64,
                                                               # threads 1 and 2, 3 rounds
    python benchmarks/resnet18_int8.py --shapes 1x32 --threads 1 --rounds 1 --runs 3  # a check
    python benchmarks/resnet18_int8.py --shapes 8x64 --reduce-range  # 7-bit weights, both

The model is benchmarks/test_deploy.py's ResNet-18 (models.py's, batch-norm statistics away
from 0 and 1), exported by mgegraph's ONNX exporter. ONNX Runtime's ``quant_pre_process``
folds its batch norms, then ``quantize_static`` writes the QDQ model: int8 activations, int8
weights per output channel, calibrated on ``CALIBRATION_BATCHES`` seeded random batches of
the timed shape. The four rows, each timed alone in a fresh process by
benchmarks/fresh_process.py (medians of the timed calls, then the median over rounds):
"mgegraph float" (the float file imported, ``freeze=True``), "mgegraph int8" (the QDQ file
imported: the QDQ folding pass makes its convolutions, adds and classifier int8 ops),
"onnxruntime float" and "onnxruntime int8" (the same two files). Before the times it prints
what the folding pass made and the top-1 agreement of each int8 model with mgegraph's float
plan on the calibration batches. The files are kept in the temporary directory, per shape.

``--reduce-range`` quantizes with ``reduce_range=True`` (weights within +-64, ONNX Runtime's
advice for x86 without VNNI) and both int8 rows run that file: mgegraph's packing proves such
weights in range for AVX2's vpmaddubsw tile (the workload is named ``resnet18-int8
reduce-range BATCHxSIZE``).
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from pathlib import Path

import fresh_process  # benchmarks/ is the script's folder, first on the path
import numpy as np

IMPLS = ("mgegraph float", "mgegraph int8", "onnxruntime float", "onnxruntime int8")
CALIBRATION_BATCHES = 4
SEED = 38


def shape_of(workload: str) -> tuple[int, int, int, int]:
    """``"resnet18-int8 8x64"`` -> (8, 3, 64, 64)."""
    batch, size = (int(v) for v in workload.split()[-1].split("x"))
    return batch, 3, size, size


@functools.cache
def calibration(shape) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED)
    return [rng.standard_normal(shape, dtype=np.float32) for _ in range(CALIBRATION_BATCHES)]


def reduce_range_of(workload: str) -> bool:
    """``"resnet18-int8 reduce-range 8x64"`` -> True: the int8 file of 7-bit weights."""
    return "reduce-range" in workload.split()


def files(shape, reduce_range: bool = False) -> tuple[Path, Path]:
    """The float and the QDQ int8 ONNX files of the shape, made on first use."""
    folder = Path(tempfile.gettempdir(), "mgegraph-resnet18-int8", "x".join(map(str, shape)))
    float_path = folder / "float.onnx"
    int8_path = folder / ("int8_reduce_range.onnx" if reduce_range else "int8.onnx")
    if not float_path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        _export_float(shape, float_path)
    if not int8_path.exists():
        _quantize(shape, float_path, folder / "prepared.onnx", int8_path, reduce_range)
    return float_path, int8_path


def _export_float(shape, path: Path) -> None:
    import test_deploy

    import mgegraph as mg
    x = np.zeros(shape, np.float32)
    mg.onnx.export(mg.compile_module(test_deploy.model(), (x,)), path, opset=17)


def _quantize(shape, float_path: Path, prepared: Path, int8_path: Path,
              reduce_range: bool) -> None:
    from onnxruntime.quantization import (  # lazy: optional dependency (onnxruntime)
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import (  # lazy: optional dependency
        quant_pre_process,
    )

    class Batches(CalibrationDataReader):
        def __init__(self, name):
            self.batches = iter([{name: b} for b in calibration(shape)])

        def get_next(self):
            return next(self.batches, None)

    quant_pre_process(str(float_path), str(prepared))
    quantize_static(str(prepared), str(int8_path), Batches(_input_name(float_path)),
                    quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=reduce_range,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


def _input_name(path: Path) -> str:
    import onnx  # lazy: optional dependency (onnx)
    return onnx.load(str(path), load_external_data=False).graph.input[0].name


def _session(path: Path, threads: int):
    import onnxruntime as ort  # lazy: optional dependency (onnxruntime)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def runner(impl: str, shape, reduce_range: bool = False):
    """``run(x) -> logits`` of one implementation."""
    float_path, int8_path = files(shape, reduce_range)
    path = int8_path if impl.endswith("int8") else float_path
    name = _input_name(path)
    if impl.startswith("mgegraph"):
        import mgegraph as mg
        plan = mg.onnx.import_model(path, freeze=True)
        return lambda x: plan.run({name: x})[0]
    session = _session(path, int(os.environ.get("OMP_NUM_THREADS", "1")))
    return lambda x: session.run(None, {name: x})[0]


def resnet18_int8_call(impl: str, workload: str):
    """One call of ``impl`` on the first calibration batch (fresh_process's protocol)."""
    shape = shape_of(workload)
    run, x = runner(impl, shape, reduce_range_of(workload)), calibration(shape)[0]
    return lambda: run(x)


def report(shape, reduce_range: bool = False) -> list[str]:
    """What the QDQ folding pass made of the int8 file, and each int8 model's top-1 agreement
    with mgegraph's float plan on the calibration batches."""
    import mgegraph as mg
    _, int8_path = files(shape, reduce_range)
    folded = dict(mg.onnx.import_model(int8_path, freeze=True).passes)["fold_qdq"]["folded"]
    batches = calibration(shape)
    want = [runner("mgegraph float", shape)(x).argmax(axis=1) for x in batches]
    lines = [f"{'x'.join(map(str, shape))}{' reduce_range' if reduce_range else ''}: "
             f"fold_qdq made {folded}"]
    for impl in ("mgegraph int8", "onnxruntime int8"):
        run = runner(impl, shape, reduce_range)
        same = np.concatenate([run(x).argmax(axis=1) == w for x, w in zip(batches, want)])
        lines.append(f"  top-1 agreement of {impl} with mgegraph float: {same.mean():.1%} "
                     f"of {same.size} images")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["1x224", "8x64"],
                        help="BATCHxSIZE of the 3-channel square input")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20, help="timed calls per process")
    parser.add_argument("--reduce-range", action="store_true",
                        help="both int8 rows on ONNX Runtime's reduce_range=True file")
    args = parser.parse_args(argv)
    middle = "reduce-range " if args.reduce_range else ""
    chosen = [f"resnet18-int8 {middle}{s}" for s in args.shapes]
    for workload in chosen:
        print("\n".join(report(shape_of(workload), reduce_range_of(workload))))
    fresh_process.WORKLOADS.update({w: IMPLS for w in chosen})
    results, skipped = {}, {}
    for _ in range(args.rounds):
        for workload in chosen:
            for t in args.threads:
                for impl in IMPLS:
                    got = fresh_process.child(impl, workload, t, args.runs)
                    if isinstance(got, str):
                        skipped[workload, impl, t] = got
                    else:
                        results.setdefault((workload, impl, t), []).append(got)
    print("\n".join(fresh_process.table(results, skipped, chosen, args.threads)))
    print("ratios of the medians: " + _int8_ratios(results, chosen, args.threads))
    return 0


def _int8_ratios(results, chosen, threads) -> str:
    parts = []
    for workload in chosen:
        for t in threads:
            med = {i: float(np.median(results[workload, i, t])) for i in IMPLS
                   if results.get((workload, i, t))}
            if len(med) == len(IMPLS):
                parts.append(f"{workload.split()[-1]} t{t}: mgegraph int8/float "
                             f"{med['mgegraph int8'] / med['mgegraph float']:.2f}, "
                             f"ORT int8/float "
                             f"{med['onnxruntime int8'] / med['onnxruntime float']:.2f}, "
                             f"int8 mgegraph/ORT "
                             f"{med['mgegraph int8'] / med['onnxruntime int8']:.2f}")
    return "; ".join(parts) or "none"


if __name__ == "__main__":
    sys.exit(main())
