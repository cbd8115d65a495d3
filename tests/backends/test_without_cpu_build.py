"""The op layer, the IR, the planner and the compiler need no compiled module: with the CPU
kernels made unimportable, a whole training step is planned and run on the reference backend."""
import subprocess
import sys
from pathlib import Path

NO_CPU_BUILD = r"""
import sys

class NoCpuBuild:
    # refuses every module of mgegraph._kernels, as on a machine where the build never ran
    def find_spec(self, name, path=None, target=None):
        if name == "mgegraph._kernels" or name.startswith("mgegraph._kernels."):
            raise ImportError(f"{name} is blocked: no CPU build")
        return None

sys.meta_path.insert(0, NoCpuBuild())
"""

SCRIPT = NO_CPU_BUILD + r"""
import numpy as np
import mgegraph as mg
import mgegraph.functional as F
import mgegraph.ir, mgegraph.ops, mgegraph.planner, mgegraph.autodiff, mgegraph.nn, mgegraph.optim
from mgegraph import nn, optim
from backends.reference import ReferenceBackend

mg.register_backend("reference", ReferenceBackend)
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
y = np.array([0, 1, 2, 1], np.int64)
step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.1),
                             (x, y), device="reference", remat="sqrt")
losses = [float(step(x, y)) for _ in range(3)]
assert losses[-1] < losses[0], losses
loaded = sorted(m for m in sys.modules if m.startswith("mgegraph._kernels"))
assert not loaded, loaded
try:
    mg.compile([F.relu(mg.Graph().input("x", (2,)))])
except ImportError as exc:
    print("cpu refused:", exc)
print("ok", losses)
"""


def test_everything_above_the_kernels_runs_without_the_cpu_build():
    tests = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tests, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "cpu refused: mgegraph._kernels" in done.stdout and "ok" in done.stdout


CUDA_SCRIPT = NO_CPU_BUILD + r"""
import numpy as np
import mgegraph as mg
import mgegraph.functional as F
from mgegraph.cuda.backend import CudaBackend
from mgegraph.backend import get_backend
from mgegraph.cuda.launches import plan_calls, rendered_source

# a backend that plans and renders without a GPU (device=None)
mg.register_backend("cuda-plan", lambda: CudaBackend(None, name="cuda-plan"))
g = mg.Graph()
x, w = g.input("x", (2, 3, 8, 8)), g.param("w", np.ones((4, 3, 3, 3), np.float32))
h = F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)
fc = g.param("fc", np.ones((10, 64), np.float32))
logits = F.linear(F.reshape(h, (2, 64)), fc)
loss = F.cross_entropy(logits, g.input("y", (2,), "int64"))
plan = mg.compile([loss, *mg.grad(loss, [w, fc])], device="cuda-plan", optimize=0)
calls, texts = plan_calls(plan, get_backend("cuda-plan"))
assert calls and "__global__" in rendered_source(texts)
loaded = sorted(m for m in sys.modules if m.startswith("mgegraph._kernels"))
assert not loaded, loaded
print("ok", len(plan.instructions), len(calls))
"""


def test_the_cuda_backend_plans_without_the_cpu_build():
    # the parameter blocks CUDA shares with the CPU live below both (mgegraph/kernel_abi)
    tests = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", CUDA_SCRIPT], cwd=tests, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")
