"""MegEngine's MNIST tutorial loop, written as a MegEngine user would, on the 8x8 digits.

``GradManager`` records the forward, ``gm.backward(loss)`` fills ``param.grad``,
``opt.step().clear_grad()`` updates, and ``@trace(symbolic=True)`` turns the whole step
(forward, backward, update) into one compiled plan after its first call. Porting a MegEngine
script is mostly the ``import`` lines: ``import mgegraph as mge`` instead of ``megengine``.

Run with ``python examples/megengine_style.py [--epochs N]``. The digits come with
scikit-learn (``pip install scikit-learn``); without it a seeded synthetic data set of the same
shapes is used instead, and a note says so.
"""
import argparse
import time

import numpy as np

import mgegraph as mge
import mgegraph.functional as F
import mgegraph.module as M
import mgegraph.optimizer as optim
from mgegraph.autodiff import GradManager
from mgegraph.jit import trace

BATCH = 64
N_TRAIN, N_TEST, N_PIXELS, N_CLASSES = 1437, 360, 64, 10


def load_data():
    """(x_train, y_train, x_test, y_test): digits if scikit-learn is installed, else synthetic."""
    try:
        import sklearn  # noqa: F401  (load_digits_split needs it)
    except ImportError:
        print("note: scikit-learn is not installed; using a seeded synthetic data set of the "
              "digits' shapes (pip install scikit-learn for the real digits)")
        return synthetic_digits()
    from mgegraph.demo import load_digits_split

    return load_digits_split()


def synthetic_digits(seed: int = 0):
    """Ten noisy prototypes in [0, 1]^64, one per class: learnable, like the digits."""
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(0, 1, (N_CLASSES, N_PIXELS))

    def draw(n):
        y = rng.integers(0, N_CLASSES, n)
        x = np.clip(prototypes[y] + rng.normal(0, 0.35, (n, N_PIXELS)), 0, 1)
        return x.astype(np.float32), y.astype(np.int32)

    return (*draw(N_TRAIN), *draw(N_TEST))


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(1, 16, 3, padding=1)
        self.pool = M.MaxPool2d(2)
        self.fc1 = M.Linear(16 * 4 * 4, 64)
        self.fc2 = M.Linear(64, N_CLASSES)

    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))
        x = F.relu(self.fc1(F.flatten(x, 1)))
        return self.fc2(x)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args(argv)

    M.init.manual_seed(0)
    x_train, y_train, x_test, y_test = load_data()
    x_train, x_test = x_train.reshape(-1, 1, 8, 8), x_test.reshape(-1, 1, 8, 8)
    print(f"data: {len(x_train)} train / {len(x_test)} test images of 1x8x8, {N_CLASSES} classes")

    model = Net()
    gm = GradManager().attach(model.parameters())
    opt = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    @trace(symbolic=True)
    def train_step(data, label):
        with gm:
            logits = model(data)
            loss = F.nn.cross_entropy(logits, label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    @trace(symbolic=True)
    def predict(data):
        return F.argmax(model(data), axis=1)

    loader = mge.DataLoader((x_train, y_train), BATCH, shuffle=True, seed=0, drop_last=True)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        losses = [float(train_step(mge.tensor(data), mge.tensor(label)))
                  for data, label in loader]
        print(f"epoch {epoch}: mean loss {np.mean(losses):.4f} (first batch {losses[0]:.4f}, "
              f"last batch {losses[-1]:.4f})")

    model.eval()
    predicted = predict(mge.tensor(x_test)).numpy()
    accuracy = float((predicted == y_test).mean())
    print(f"test accuracy {accuracy:.4f} after {args.epochs} epochs "
          f"({time.perf_counter() - start:.1f} s); the training step runs as one plan of "
          f"{len(train_step.plan.instructions)} instructions")
    return accuracy


if __name__ == "__main__":
    main()
