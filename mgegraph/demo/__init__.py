"""The main job: train an MLP and a small CNN on scikit-learn's digits, print test accuracy,
the compiled training step's graph size and its memory report, and save the CNN's predictor
as a model file that ``mgegraph run``, ``report``, ``viz`` and ``profile`` take. The
predictor names its batch (``input0: float32[batch, 1, 8, 8]``), so the file takes one image
as well as the 360 of the test set.

Run with ``mgegraph demo`` (or ``python -m mgegraph.demo``, the same command: this package's
``__main__`` hands it to the command line, which imports this module, never the reverse);
``pip install -e ".[demo]"`` brings scikit-learn, whose digits data set ships with the package,
so nothing is downloaded.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim

BATCH = 64
DEFAULT_OUTPUT = "digits_cnn.mgm"
# the accuracy each model reaches with its default epochs on the whole training set
TARGETS = {"mlp": 0.97, "cnn": 0.98}
DEFAULT_EPOCHS = {"mlp": 30, "cnn": 15}


def load_digits_split(seed: int = 0):
    """The 1,797 8x8 digits scaled to [0, 1], split 80/20 with a seeded permutation.

    >>> x_train, y_train, x_test, y_test = load_digits_split()   # (1437, 64) ... (360,)
    """
    try:
        from sklearn.datasets import load_digits  # lazy: optional dependency (scikit-learn)
    except ImportError:
        raise ImportError('the demo needs scikit-learn: pip install -e ".[demo]"') from None
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 4 * 4, 10))


def train(name, model, data, epochs, lr, log):
    """Train ``model`` on ``data`` (x_train, y_train, x_test, y_test) for ``epochs``, printing
    one line; returns (test accuracy, the training step's plan, the evaluation predictor, of
    any batch size). ``log`` gets the per-batch progress line (``mg.fit``'s)."""
    x_train, y_train, x_test, y_test = data
    start = time.perf_counter()
    opt = optim.Adam(model.parameters(), lr=lr)
    loader = mg.DataLoader((x_train, y_train), BATCH, shuffle=True, seed=0, drop_last=True)
    schedule = optim.CosineAnnealingLR(opt, T_max=epochs * len(loader))
    step = mg.compile_train_step(model, F.cross_entropy, opt,
                                 example_batch=(x_train[:BATCH], y_train[:BATCH]),
                                 metrics=("accuracy",))
    mg.fit(step, loader, epochs, log=log, scheduler=schedule)
    model.eval()
    predict = mg.compile_module(model, example_inputs=(x_test,),
                                dynamic={"input0": {0: "batch"}})
    accuracy = float((predict(x_test).argmax(1) == y_test).mean())
    plan = step.plan
    print(f"{name}: test accuracy {accuracy:.4f} after {epochs} epochs "
          f"({time.perf_counter() - start:.1f} s); training step = one plan of "
          f"{len(plan.instructions)} instructions over {len(plan.slots)} slots")
    return accuracy, plan, predict


def run_demo(epochs: int | None = None, train_size: int | None = None,
             output: str | None = DEFAULT_OUTPUT, progress: bool = False) -> dict[str, float]:
    """Train both models (``epochs`` each, default 30 for the MLP and 15 for the CNN, on the
    first ``train_size`` training images, default all), print the CNN training step's memory
    report, save the CNN's predictor to ``output`` (``None``: not saved) and return each
    model's test accuracy. ``progress`` shows a per-batch line on stderr.

    >>> run_demo(epochs=1, train_size=256, output="cnn.mgm")   # {'mlp': 0.8..., 'cnn': ...}
    """
    if train_size is not None and train_size < BATCH:
        raise ValueError(f"--train-size {train_size}: the demo trains on batches of {BATCH}, "
                         f"so it needs at least {BATCH} images")
    nn.init.manual_seed(0)
    x_train, y_train, x_test, y_test = load_digits_split()
    x_train, y_train = x_train[:train_size], y_train[:train_size]
    print(f"digits: {len(x_train)} train / {len(x_test)} test images, 10 classes")
    log = sys.stderr if progress else open(os.devnull, "w")  # noqa: SIM115 (closed below)
    try:
        mlp_acc, _, _ = train("mlp", mlp(), (x_train, y_train, x_test, y_test),
                              epochs or DEFAULT_EPOCHS["mlp"], 3e-3, log)
        images = (x_train.reshape(-1, 1, 8, 8), y_train, x_test.reshape(-1, 1, 8, 8), y_test)
        cnn_acc, plan, predict = train("cnn", cnn(), images, epochs or DEFAULT_EPOCHS["cnn"],
                                       3e-3, log)
    finally:
        if log is not sys.stderr:
            log.close()
    print(f"\nthe cnn's training step, memory:\n{plan.memory_report(top=5)}")
    if output is not None:
        mg.save(predict, output)
        print(f"\nsaved the cnn's predictor to {output} ({signature(predict.plan)}); try "
              f"`mgegraph report {output}` and `mgegraph profile {output}`")
    return {"mlp": mlp_acc, "cnn": cnn_acc}


def signature(plan) -> str:
    """``input0: float32[batch, 1, 8, 8] -> output0: float32[batch, 10]`` of a SymbolicPlan."""
    def text(name, t):
        return f"{name}: {t.dtype}[{', '.join(map(str, t.shape))}]"
    ins = ", ".join(text(name, t) for name, t in plan.input_types.items())
    outs = ", ".join(text(f"output{i}", t) for i, t in enumerate(plan.output_types))
    return f"{ins} -> {outs}"
