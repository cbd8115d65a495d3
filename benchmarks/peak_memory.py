"""Peak memory of the first training steps (mlp-train, convnet-train), in a fresh process.

    python benchmarks/peak_memory.py {mgegraph|torch} {mlp-train|convnet-train}

prints one JSON object. The baseline is taken once the model, its weights and the batch exist
(for mgegraph also once the step is compiled: its arena and buffers are allocated at the first
run), so both sides count what the steps allocate: activations, gradients, optimiser state,
copies of the batch, and whatever the framework initialises lazily on its first step.

Design: the peak is the kernel's high-water mark of the resident set (VmHWM), reset just
before the steps by writing 5 to /proc/self/clear_refs, so that the import and compile peaks
do not count; where that is refused, ru_maxrss (the peak since the process began) stands in.
Resident pages also include code and data of shared libraries read for the first time
(``file_growth``): PyTorch's first backward pages in a good part of libtorch, which is not
memory the step allocated; ``anon_growth`` (at the end, not the peak) leaves those out.
glibc keeps freed memory for reuse, so both sides call malloc_trim before the baseline: what
compiling freed would otherwise hide what the first run allocates.

>>> python benchmarks/peak_memory.py torch mlp-train
{"impl": "torch", "workload": "mlp-train", "steps": 3, "threads": 2, "peak_growth": ...}
"""
from __future__ import annotations

import os

# Read when the thread pools load, before numpy and torch are imported.
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import ctypes  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

STEPS = 3
BATCH = {"mlp-train": (128, 784), "convnet-train": (32, 3, 32, 32)}


def status() -> dict[str, int]:
    """The Vm* and Rss* lines of /proc/self/status, in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.startswith(("Vm", "Rss")):
                out[key] = int(value.split()[0]) * 1024
    return out


def settle() -> None:
    """Collect garbage and hand glibc's free memory back, so that the baseline is what is used."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(run_steps) -> dict:
    """Resident-set figures of ``run_steps()`` relative to the moment before it."""
    settle()
    before = status()
    exact = reset_peak()
    run_steps()
    after = status()
    peak = after["VmHWM"] if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"rss_before": before["VmRSS"], "peak_growth": peak - before["VmRSS"],
            "file_growth": after["RssFile"] - before["RssFile"],
            "anon_growth": after["RssAnon"] - before["RssAnon"], "peak_exact": exact}


def _mgegraph_model(workload):
    from mgegraph import nn
    from workloads import SEED, _convnet, _mlp_module

    nn.init.manual_seed(SEED)
    return _mlp_module() if workload == "mlp-train" else _convnet()


def run_mgegraph(workload: str) -> dict:
    """The compiled step; ``planned_new`` leaves out the parameters, which the plan shares with
    the model instead of allocating them."""
    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph import optim
    from workloads import _batch

    model = _mgegraph_model(workload)
    x, y = _batch(BATCH[workload])
    settle()
    before_compile = status()["VmRSS"]
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.01),
                                 example_batch=(x, y))
    plan = step.plan
    result = measure(lambda: [step(x, y) for _ in range(STEPS)])
    shared = sum(plan.slots[s].nbytes for s in plan.shared)
    result.update(arena=plan.arena_bytes, persistent=plan.persistent_bytes,
                  planned=plan.arena_bytes + plan.persistent_bytes,
                  planned_new=plan.arena_bytes + plan.persistent_bytes - shared,
                  compile_growth=result["rss_before"] - before_compile)
    return result


def _torch_model(torch, workload):
    from workloads import _torch_convnet

    t = torch.nn
    if workload == "mlp-train":
        return t.Sequential(t.Linear(784, 1024), t.ReLU(), t.Linear(1024, 1024), t.ReLU(),
                            t.Linear(1024, 10))
    return _torch_convnet(torch)


def torch_allocated_peak(torch, body) -> int | None:
    """The most bytes PyTorch's CPU allocator held at once during ``body()``, counting only
    what ``body`` allocated, from the profiler's memory timeline (a private API: None when it
    is not there)."""
    try:
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler._memory_profiler import Action

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            body()
        timeline = prof._memory_profile().timeline
    except (ImportError, AttributeError, RuntimeError):
        return None
    live = peak = 0
    for _, action, _, size in sorted(timeline, key=lambda e: e[0]):
        if action in (Action.CREATE, Action.DESTROY):
            live += size if action == Action.CREATE else -size
            peak = max(peak, live)
    return peak


def run_torch(workload: str) -> dict:
    """The eager step, SGD lr 0.01 with cross-entropy. ``allocated_peak`` profiles one more step
    that starts, like the first, without gradients (zero_grad sets them to None)."""
    import torch

    from workloads import SEED, _batch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    torch.manual_seed(SEED)
    model = _torch_model(torch, workload)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = (torch.from_numpy(a) for a in _batch(BATCH[workload]))

    def body():
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    def step():
        opt.zero_grad()
        body()

    result = measure(lambda: [step() for _ in range(STEPS)])
    opt.zero_grad()
    result["allocated_peak"] = torch_allocated_peak(torch, body)
    return result


def main(argv) -> None:
    impl, workload = argv
    if impl not in ("mgegraph", "torch") or workload not in BATCH:
        sys.exit(f"usage: peak_memory.py {{mgegraph|torch}} {{{'|'.join(BATCH)}}}")
    result = (run_mgegraph if impl == "mgegraph" else run_torch)(workload)
    print(json.dumps({"impl": impl, "workload": workload, "steps": STEPS,
                      "threads": int(os.environ["OMP_NUM_THREADS"]), **result}))


if __name__ == "__main__":
    main(sys.argv[1:])
