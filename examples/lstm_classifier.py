"""An LSTM sequence classifier: does a sequence of random digits hold the pair "4 2" side by
side? Embedding, LSTM (``--bidirectional`` for both directions), a linear head on the final
hidden state; trained with ``compile_train_step`` (forward, backward and Adam in one plan; the
LSTM's time loop unrolled in it), then deployed: saved as a model file, loaded and run, and
exported to ONNX and compared with ONNX Runtime.

Run with ``python examples/lstm_classifier.py [--steps N] [--bidirectional]``. The data are
synthetic (seeded, nothing downloaded); half the sequences hold the pair, so chance is 50%.
"""
import argparse
import tempfile
from pathlib import Path

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim

DIGITS, PATTERN = 10, (4, 2)


def make_data(n: int, seq: int, seed: int):
    """(digits (n, seq) int32, labels (n,) int32): label 1 where PATTERN occurs side by side."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, DIGITS, (n, seq))
    y = rng.integers(0, 2, n)
    for row, label in zip(x, y):
        while _holds(row):  # negatives first: no pair anywhere
            row[:] = rng.integers(0, DIGITS, seq)
        if label:
            at = rng.integers(0, seq - 1)
            row[at:at + 2] = PATTERN
    return x.astype(np.int32), y.astype(np.int32)


def _holds(row) -> bool:
    return bool(np.any((row[:-1] == PATTERN[0]) & (row[1:] == PATTERN[1])))


class Classifier(nn.Module):
    """Embedding -> LSTM -> Linear on the last layer's final hidden state(s)."""

    def __init__(self, embed: int, hidden: int, bidirectional: bool = False):
        super().__init__()
        self.embed = nn.Embedding(DIGITS, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), 2)

    def forward(self, digits):
        _, (h_n, _) = self.lstm(self.embed(digits))
        last = h_n[-1] if h_n.shape[0] == 1 else F.concat([h_n[-2], h_n[-1]], axis=-1)
        return self.head(last)


def train(model, steps: int, batch: int, seq: int, lr: float):
    """Adam steps over fresh synthetic batches; returns (first loss, last loss)."""
    opt = optim.Adam(model.parameters(), lr=lr)
    x, y = make_data(steps * batch, seq, seed=0)
    step = mg.compile_train_step(model, F.cross_entropy, opt,
                                 example_batch=(x[:batch], y[:batch]))
    losses = [float(step(x[i:i + batch], y[i:i + batch]))
              for i in range(0, steps * batch, batch)]
    return losses[0], float(np.mean(losses[-10:]))


def deploy(model, x, workdir: Path):
    """The model file and the ONNX export of the trained predictor, each checked against it."""
    predict = mg.compile_module(model.eval(), example_inputs=(x,))
    logits = predict(x)
    path = workdir / "lstm_classifier.mgm"
    mg.save(predict.plan, path)
    (loaded,) = mg.load(path).run([x])
    np.testing.assert_array_equal(loaded, logits)
    print(f"model file: {path.name}, {path.stat().st_size} bytes, loaded logits equal bitwise")
    try:
        import onnxruntime as ort  # lazy: optional dependency (onnxruntime)

        from mgegraph import onnx as mo  # lazy: optional dependency (onnx)
    except ImportError:
        print("onnx or onnxruntime not installed: ONNX export skipped")
        return logits
    proto = mo.export(predict.plan, workdir / "lstm_classifier.onnx")
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {proto.graph.input[0].name: x})
    error = float(np.abs(theirs - logits).max())
    print(f"ONNX: {len(proto.graph.node)} nodes; max |ONNX Runtime - mgegraph| = {error:.2e}")
    if error > 1e-4:
        raise SystemExit("ONNX Runtime's logits differ from mgegraph's")
    return logits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--embed", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--bidirectional", action="store_true")
    args = parser.parse_args(argv)

    nn.init.manual_seed(0)
    model = Classifier(args.embed, args.hidden, args.bidirectional)
    first, last = train(model, args.steps, args.batch, args.seq, args.lr)
    print(f"{args.steps} steps of batch {args.batch}: loss {first:.3f} -> {last:.3f} "
          "(mean of the last 10)")
    x_test, y_test = make_data(512, args.seq, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        logits = deploy(model, x_test, Path(tmp))
    accuracy = float(np.mean(logits.argmax(1) == y_test))
    print(f"test accuracy {accuracy:.3f} (chance 0.5)")
    if args.steps >= 300 and accuracy < 0.9:
        raise SystemExit(f"accuracy {accuracy:.3f} is not clearly above chance")


if __name__ == "__main__":
    main()
