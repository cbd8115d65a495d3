"""The main job: train an MLP and a small CNN on scikit-learn's digits, print test accuracy,
the compiled training step's graph size and its plan summary.

Run with ``python -m mgegraph.demo`` (``pip install -e ".[demo]"`` brings scikit-learn, whose
digits data set ships with the package, so nothing is downloaded).
"""
from __future__ import annotations

import sys
import time

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim

BATCH = 64


def load_digits_split(seed: int = 0):
    """The 1,797 8x8 digits scaled to [0, 1], split 80/20 with a seeded permutation."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit('the demo needs scikit-learn: pip install -e ".[demo]"') from None
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


def train(name, model, x_train, y_train, x_test, y_test, epochs, lr):
    start = time.perf_counter()
    opt = optim.Adam(model.parameters(), lr=lr)
    loader = mg.DataLoader((x_train, y_train), BATCH, shuffle=True, seed=0, drop_last=True)
    steps = epochs * len(loader)
    schedule = optim.CosineAnnealingLR(opt, T_max=steps)
    step = mg.compile_train_step(model, F.cross_entropy, opt,
                                 example_batch=(x_train[:BATCH], y_train[:BATCH]),
                                 metrics=("accuracy",))
    mg.fit(step, loader, epochs, scheduler=schedule)
    model.eval()
    predict = mg.compile_module(model, example_inputs=(x_test,))
    accuracy = float((predict(x_test).argmax(1) == y_test).mean())
    plan = step.plan
    print(f"{name}: test accuracy {accuracy:.4f} after {epochs} epochs "
          f"({time.perf_counter() - start:.1f} s); training step = one plan of "
          f"{len(plan.instructions)} instructions over {len(plan.slots)} slots")
    return accuracy, plan


def main():
    nn.init.manual_seed(0)
    x_train, y_train, x_test, y_test = load_digits_split()
    print(f"digits: {len(x_train)} train / {len(x_test)} test images, 10 classes")
    results = {
        "mlp": train("mlp", mlp(), x_train, y_train, x_test, y_test, epochs=30, lr=3e-3),
        "cnn": train("cnn", cnn(), x_train.reshape(-1, 1, 8, 8), y_train,
                     x_test.reshape(-1, 1, 8, 8), y_test, epochs=15, lr=3e-3),
    }
    print(f"\nthe cnn's training step, memory:\n{results['cnn'][1].memory_report(top=5)}")
    targets = {"mlp": 0.97, "cnn": 0.98}
    missed = [k for k, (acc, _) in results.items() if acc < targets[k]]
    if missed:
        sys.exit(f"below target accuracy: {missed}")


if __name__ == "__main__":
    main()
