"""Quick start: build a small graph, compile it, run it, print the graph, the plan and the result.

Run with ``python examples/quickstart.py``.
"""
import numpy as np

import mgegraph as mg
import mgegraph.functional as F


def main():
    rng = np.random.default_rng(0)
    g = mg.Graph()
    x = g.input("x", shape=(128, 784), dtype="float32")
    w = g.param("w", rng.standard_normal((784, 10), dtype=np.float32) * 0.05)
    b = g.param("b", np.zeros(10, np.float32))
    y = F.softmax(F.relu(x @ w + b), axis=-1)
    print("graph:")
    print(g)
    plan = mg.compile([y])
    print("\n" + str(plan))
    batch = rng.standard_normal((128, 784), dtype=np.float32)
    (out,) = plan.run({"x": batch})
    reference = np.maximum(batch @ g.values[w.id] + g.values[b.id], 0)
    reference = np.exp(reference - reference.max(-1, keepdims=True))
    reference /= reference.sum(-1, keepdims=True)
    error = float(np.abs(out - reference).max())
    print(f"\noutput {out.dtype}{list(out.shape)}; rows sum to 1: "
          f"{np.allclose(out.sum(-1), 1, atol=1e-5)}; max |mgegraph - numpy| = {error:.2e}")
    if error > 1e-5:
        raise SystemExit("the plan's result differs from NumPy's")


if __name__ == "__main__":
    main()
