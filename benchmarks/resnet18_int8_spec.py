"""ResNet-18's QDQ int8 file (benchmarks/resnet18_int8.py: ONNX Runtime's ``quantize_static``)
against the meaning ONNX gives it: does mgegraph's int8 plan follow the spec, and why does its
top-1 class agree less often with the float plan than ONNX Runtime's int8 does?

    python benchmarks/resnet18_int8_spec.py                   # 8x3x64x64, 16 batches for top-1
    python benchmarks/resnet18_int8_spec.py --batches 4       # the calibration batches only

1. Per op: every QuantizeLinear output of the file is made a graph output, so mgegraph's plan
   (fold_qdq makes its int8 ops) and ONNX's reference evaluator (``onnx.reference``: the QDQ
   float path in NumPy float32) give every quantized tensor. For each one after a Conv, Add,
   Gemm, MaxPool or GlobalAveragePool, the spec's value is computed in float64 from the
   implementation's own integer inputs (so an earlier difference does not count again):
   clamp(rint(real / sy) + zy), real the float op on the dequantized inputs, exact at this size.
   Printed: per op type, the outputs where mgegraph, and where the reference evaluator, differ
   from it; then, per tensor, how far mgegraph's and the evaluator's chains drift apart.
2. Top-1: on ``--batches`` seeded batches (the first four are the calibration batches), how
   often each int8 implementation (mgegraph, ONNX Runtime, the reference evaluator) picks
   mgegraph float's class, and how many images have a float top-1 margin below one step of the
   quantized output (where one step of rounding anywhere may flip the class).
"""
from __future__ import annotations

import argparse

import numpy as np
import resnet18_int8  # benchmarks/ is the script's folder, first on the path

CHECKED_OPS = ("Conv", "Add", "Gemm", "MaxPool", "GlobalAveragePool")


def with_quantized_outputs(model):
    """A copy of ``model`` whose every QuantizeLinear output is also a graph output."""
    import onnx  # lazy: optional dependency (onnx)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear":
            model.graph.output.append(onnx.helper.make_tensor_value_info(
                node.output[0], onnx.TensorProto.INT8, None))
    return model


def reference_run(model, feeds) -> dict:
    """The reference evaluator's outputs by name. onnx 1.23's evaluator implements
    DequantizeLinear from opset 19 on; QDQ of int8 with float32 scales means the same from 13,
    so the file's opset is raised for it."""
    import onnx  # lazy: optional dependency (onnx)
    from onnx.reference import ReferenceEvaluator  # lazy: loads the evaluator's op set
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = max(opset.version, 21)
    model.ir_version = max(model.ir_version, 10)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))


def mgegraph_run(model, feeds) -> dict:
    import mgegraph as mg
    plan = mg.onnx.import_model(model.SerializeToString(), freeze=True)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, (np.asarray(v) for v in plan.run(feeds))))


class Spec:
    """The float64 meaning of each checked QuantizeLinear's output, from given integer inputs."""

    def __init__(self, model):
        from onnx import numpy_helper  # lazy: optional dependency (onnx)
        self.init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.producer = {o: n for n in model.graph.node for o in n.output}
        self.quantizes = [n for n in model.graph.node if n.op_type == "QuantizeLinear"
                          and getattr(self.producer.get(n.input[0]), "op_type", "") in
                          CHECKED_OPS]

    def _dequantized(self, name, values):
        """the float64 value of a DequantizeLinear's output, its scale broadcast per channel"""
        dq = self.producer[name]
        q = self.init.get(dq.input[0], values.get(dq.input[0]))
        scale = self.init[dq.input[1]].astype(np.float64)
        zero = self.init[dq.input[2]].astype(np.float64) if len(dq.input) > 2 else 0.0
        shape = (-1,) + (1,) * (q.ndim - 1) if np.ndim(scale) else ()
        return (q.astype(np.float64) - np.reshape(zero, shape)) * np.reshape(scale, shape)

    def real(self, op, values):
        import torch  # lazy: optional dependency (torch), float64 convolutions and pools
        inputs = [self._dequantized(name, values) for name in op.input[:2]
                  if name in self.producer]
        attrs = {a.name: (list(a.ints) if a.ints else a.i) for a in op.attribute}
        t = [torch.from_numpy(v) for v in inputs]
        if op.op_type == "Conv":
            bias = torch.from_numpy(self._dequantized(op.input[2], values))
            pads = attrs.get("pads", [0, 0, 0, 0])
            return torch.nn.functional.conv2d(t[0], t[1], bias, attrs.get("strides", [1, 1]),
                                              pads[:2], attrs.get("dilations", [1, 1]),
                                              attrs.get("group", 1) or 1).numpy()
        if op.op_type == "Add":
            return inputs[0] + inputs[1]
        if op.op_type == "Gemm":
            w = inputs[1].T if attrs.get("transB", 0) else inputs[1]
            return inputs[0] @ w + self._dequantized(op.input[2], values)
        if op.op_type == "MaxPool":
            return torch.nn.functional.max_pool2d(t[0], attrs["kernel_shape"], attrs["strides"],
                                                  attrs.get("pads", [0, 0])[:2]).numpy()
        return inputs[0].mean(axis=(2, 3), keepdims=True)

    def expected(self, quantize, values) -> np.ndarray:
        real = self.real(self.producer[quantize.input[0]], values)
        scale = np.float64(self.init[quantize.input[1]])
        zero = int(self.init[quantize.input[2]])
        return np.clip(np.rint(real / scale) + zero, -128, 127)


def check_ops(shape) -> list[str]:
    import onnx  # lazy: optional dependency (onnx)
    _, int8_path = resnet18_int8.files(shape)
    model = with_quantized_outputs(onnx.load(str(int8_path)))
    name = model.graph.input[0].name
    feeds = {name: resnet18_int8.calibration(shape)[0]}
    ours, ref = mgegraph_run(model, feeds), reference_run(model, feeds)
    spec = Spec(model)
    counts, drift = {}, []
    for q in spec.quantizes:
        op = spec.producer[q.input[0]].op_type
        c = counts.setdefault(op, [0, 0, 0])
        c[0] += ours[q.output[0]].size
        c[1] += int((ours[q.output[0]] != spec.expected(q, ours)).sum())
        c[2] += int((ref[q.output[0]] != spec.expected(q, ref)).sum())
        differ = np.mean(ours[q.output[0]] != ref[q.output[0]])
        drift.append(f"  {q.output[0][:44]:44} {differ:.5f}")
    lines = [f"{'x'.join(map(str, shape))}, batch 0: outputs differing from the spec's value "
             "computed in float64 from each one's own inputs"]
    lines += [f"  {op:18} {n:8d} outputs: mgegraph {a}, reference evaluator {b}"
              for op, (n, a, b) in counts.items()]
    lines.append("share of each checked tensor where mgegraph's chain and the evaluator's differ:")
    return lines + drift


def top1(shape, batches: int) -> list[str]:
    import onnx  # lazy: optional dependency (onnx)
    _, int8_path = resnet18_int8.files(shape)
    model = onnx.load(str(int8_path))
    name = model.graph.input[0].name
    step = _output_scale(model)
    runs = {impl: resnet18_int8.runner(impl, shape)
            for impl in ("mgegraph float", "mgegraph int8", "onnxruntime int8")}
    rng = np.random.default_rng(resnet18_int8.SEED)
    got = {impl: [] for impl in (*runs, "reference int8")}
    for _ in range(batches):  # the generator's first draws are the calibration batches
        x = rng.standard_normal(shape, dtype=np.float32)
        for impl, run in runs.items():
            got[impl].append(run(x))
        got["reference int8"].append(reference_run(model, {name: x})[model.graph.output[0].name])
    logits = {impl: np.concatenate(v) for impl, v in got.items()}
    want = logits["mgegraph float"].argmax(axis=1)
    top2 = np.sort(logits["mgegraph float"], axis=1)[:, -2:]
    close = int((top2[:, 1] - top2[:, 0] < step).sum())
    lines = [f"top-1 agreement with mgegraph float on {want.size} images ({close} with a float "
             f"margin below one output step, {step:.4g}):"]
    for impl in ("mgegraph int8", "onnxruntime int8", "reference int8"):
        same = logits[impl].argmax(axis=1) == want
        equal = np.mean(logits[impl] == logits["reference int8"])
        lines.append(f"  {impl:17} {int(same.sum()):4d} of {same.size}; logits equal to the "
                     f"reference evaluator's: {equal:.1%}")
    return lines


def _output_scale(model) -> float:
    from onnx import numpy_helper  # lazy: optional dependency (onnx)
    last = next(n for n in reversed(model.graph.node) if n.op_type == "DequantizeLinear")
    return float(next(numpy_helper.to_array(t) for t in model.graph.initializer
                      if t.name == last.input[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8x64", help="BATCHxSIZE of the 3-channel input")
    parser.add_argument("--batches", type=int, default=16)
    args = parser.parse_args(argv)
    shape = resnet18_int8.shape_of(args.shape)
    print("\n".join(check_ops(shape)))
    print("\n".join(top1(shape, args.batches)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
