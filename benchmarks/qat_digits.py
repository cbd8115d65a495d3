"""The digits CNN in int8: post-training calibration alone, and quantization-aware training
from the float model, against the float model's test accuracy.

    python benchmarks/qat_digits.py                 # float 15 epochs, QAT 3 epochs
    python benchmarks/qat_digits.py --float-epochs 5 --qat-epochs 1
    python benchmarks/qat_digits.py --reduce-range  # 7-bit weights (qint7_narrow)

The CNN is the demo's (conv3x3 1->32, conv3x3 32->64, each with batch norm and ReLU, max
pooling, a linear layer) written with MegEngine's fused modules and stubs, so that
``quantize_qat`` and ``quantize`` convert it. Each int8 model is the whole network on int8
kernels (quantized convolutions, int8 max pooling, a quantized linear layer with int32 logits
dequantized at the end). Printed: each model's test accuracy, the int8 models' distance from
the float one in percentage points, how often the int8 model's class equals its QAT
(fake-quantized) forward's, and how far apart their logits are in output steps.
"""
from __future__ import annotations

import argparse
import copy
import os
import time

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.quantization as Q
from mgegraph import module as M
from mgegraph.demo import BATCH, load_digits_split


class DigitsCNN(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.block1 = M.ConvBnRelu2d(1, 32, 3, padding=1)
        self.block2 = M.ConvBnRelu2d(32, 64, 3, padding=1)
        self.fc = M.Linear(64 * 4 * 4, 10)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = F.max_pool2d(self.block2(self.block1(self.quant(x))), 2)
        return self.dequant(self.fc(F.flatten(x, 1)))


def _train(net, data, epochs: int, lr: float) -> None:
    x_train, y_train = data
    opt = mg.optim.Adam(net.parameters(), lr=lr)
    loader = mg.DataLoader((x_train, y_train), BATCH, shuffle=True, seed=0, drop_last=True)
    step = mg.compile_train_step(net, F.nn.cross_entropy, opt,
                                 example_batch=(x_train[:BATCH], y_train[:BATCH]))
    with open(os.devnull, "w") as quiet:  # mg.fit's per-batch progress line
        mg.fit(step, loader, epochs, log=quiet)


def _predict(net, x) -> np.ndarray:
    return net.eval()(mg.tensor(x)).numpy()


def run(float_epochs: int, qat_epochs: int, calibration_rows: int = 256,
        reduce_range: bool = False) -> dict:
    """``reduce_range``: 7-bit weights (quantization's ``*_reduce_range_qconfig``), which AVX2
    runs on its vpmaddubsw int8 tile."""
    calibration, fakequant = ((Q.calibration_reduce_range_qconfig,
                               Q.ema_fakequant_reduce_range_qconfig) if reduce_range
                              else (Q.calibration_qconfig, Q.ema_fakequant_qconfig))
    mg.nn.init.manual_seed(0)
    x_train, y_train, x_test, y_test = load_digits_split()
    x_train, x_test = x_train.reshape(-1, 1, 8, 8), x_test.reshape(-1, 1, 8, 8)
    accuracy = {}

    start = time.perf_counter()
    net = DigitsCNN()
    _train(net, (x_train, y_train), float_epochs, 3e-3)
    float_logits = _predict(net, x_test)
    accuracy["float32"] = float((float_logits.argmax(1) == y_test).mean())
    print(f"float32 trained {float_epochs} epochs in {time.perf_counter() - start:.1f} s")

    ptq = Q.quantize_qat(copy.deepcopy(net).eval(), qconfig=calibration)
    Q.enable_observer(ptq)  # eval mode: the batch norm's statistics stay; the observers observe
    ptq(mg.tensor(x_train[:calibration_rows]))
    Q.quantize(ptq)
    accuracy["int8, calibration only"] = float((_predict(ptq, x_test).argmax(1) == y_test).mean())

    start = time.perf_counter()
    qat = Q.quantize_qat(copy.deepcopy(net).train(), qconfig=fakequant)
    _train(qat, (x_train, y_train), qat_epochs, 3e-4)
    qat_logits = _predict(qat, x_test)
    accuracy["QAT fake-quant"] = float((qat_logits.argmax(1) == y_test).mean())
    print(f"QAT trained {qat_epochs} epochs in {time.perf_counter() - start:.1f} s")
    Q.quantize(qat)
    int8_logits = _predict(qat, x_test)
    accuracy["int8 after QAT"] = float((int8_logits.argmax(1) == y_test).mean())
    same_class = float((int8_logits.argmax(1) == qat_logits.argmax(1)).mean())
    # the logits in steps of the int8 model's output scale: how far training is from deployment
    steps = np.abs(np.rint((int8_logits - qat_logits) / mg.dtype.get_scale(qat.fc.output_dtype)))

    for name, value in accuracy.items():
        gap = (value - accuracy["float32"]) * 100
        print(f"{name:24} test accuracy {value:.4f}  ({gap:+.2f} points vs float32)")
    print(f"int8 after QAT makes its QAT forward's class decision on {same_class:.2%} of "
          f"{len(y_test)} test images")
    print(f"int8 logits against the QAT forward's: {steps.max():.0f} steps apart at most, "
          f"{(steps == 0).mean():.2%} of {steps.size} bitwise equal")
    return {**accuracy, "int8 = QAT class": same_class, "max steps": float(steps.max()),
            "bitwise equal": float((steps == 0).mean())}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--float-epochs", type=int, default=15)
    parser.add_argument("--qat-epochs", type=int, default=3)
    parser.add_argument("--reduce-range", action="store_true",
                        help="7-bit weights (qint7_narrow): AVX2's vpmaddubsw int8 tile")
    args = parser.parse_args()
    run(args.float_epochs, args.qat_epochs, reduce_range=args.reduce_range)
