"""deep-mlp-remat and a ResNet-style convnet-train (shared/BENCHMARKS.md): peak activation memory
and step time without rematerialisation, with remat="sqrt" and with remat="auto", beside
PyTorch eager and torch.utils.checkpoint.checkpoint_sequential(8) when torch is installed, and
then with a byte budget of what checkpoint_sequential holds ("budget=torch ckpt": the same
memory, so the extra step times compare like for like).

Run with ``python -m pytest benchmarks/test_remat.py --benchmark-only -q``. mgegraph's figure is
the plan's arena (every temporary: activations, gradients, workspaces); PyTorch's is the bytes
autograd holds for the backward when it starts (unique storages saved by its graph, the
parameters and the input batch left out), which has no gradients in it. Every remat plan is
checked first: its first loss equals the plain plan's, bitwise.
"""
from __future__ import annotations

import functools

import models
import pytest
from workloads import SEED, _batch, _torch

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim

MODES = {"plain": None, "sqrt": "sqrt", "auto": "auto"}
DEEP = {"depth": 64, "width": 512, "batch": 512}
RESNET = {"blocks": 16, "channels": 16, "batch": 8, "size": 32}
FIGURES: dict[str, dict] = {}    # workload -> {implementation: (bytes, median seconds)}


# -- the models --------------------------------------------------------------------------------
class Block(nn.Module):
    """A ResNet basic block at constant width: conv-bn-relu-conv-bn plus the input, relu."""

    def __init__(self, c):
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU(), nn.Conv2d(c, c, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(c))

    def forward(self, x):
        return F.relu(x + self.body(x))


def resnet_stack(blocks, c):
    return nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                         *[Block(c) for _ in range(blocks)], nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(c, 10))


def torch_resnet_stack(torch, blocks, c):
    t = torch.nn

    class TBlock(t.Module):
        def __init__(self):
            super().__init__()
            self.body = t.Sequential(t.Conv2d(c, c, 3, padding=1, bias=False), t.BatchNorm2d(c),
                                     t.ReLU(), t.Conv2d(c, c, 3, padding=1, bias=False),
                                     t.BatchNorm2d(c))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    return t.Sequential(t.Conv2d(3, c, 3, padding=1, bias=False), t.BatchNorm2d(c), t.ReLU(),
                        *[TBlock() for _ in range(blocks)], t.AdaptiveAvgPool2d(1), t.Flatten(),
                        t.Linear(c, 10))


def torch_deep_mlp(torch, depth, width):
    t = torch.nn
    layers = []
    for _ in range(depth):
        layers += [t.Linear(width, width), t.ReLU()]
    return t.Sequential(*layers, t.Linear(width, 10))


# -- mgegraph ----------------------------------------------------------------------------------
def mgegraph_steps(make, shape, modes) -> dict:
    """{mode: (step callable, arena bytes)}, the remat plans checked against the plain one."""
    x, y = _batch(shape)
    steps, first = {}, {}
    for name, remat in modes.items():
        nn.init.manual_seed(SEED)
        model = make()
        opt = optim.SGD(model.parameters(), lr=0.01)
        step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x, y),
                                     remat=remat)
        mg.planner.verify(step.plan)
        first[name] = step(x, y)
        steps[name] = (lambda s=step: s(x, y), step.plan.arena_bytes, step.plan)
    for name in modes:
        assert first[name] == first["plain"], f"remat={name} changed the loss"
    return steps


# -- PyTorch -----------------------------------------------------------------------------------
def held_bytes(torch, tmodel, x, checkpointed: bool) -> int:
    """Bytes of the distinct storages autograd holds for the backward when it starts, the
    parameters and the input batch left out. The checkpointed forward is the reentrant
    variant here, whose segment inputs pass through the hooks (the non-reentrant one keeps them
    out of sight); the input requires grad, as the reentrant variant needs."""
    from torch.utils.checkpoint import checkpoint_sequential

    inp = torch.from_numpy(x).requires_grad_(checkpointed)
    skip = {p.untyped_storage().data_ptr() for p in tmodel.parameters()}
    skip.add(inp.untyped_storage().data_ptr())
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = checkpoint_sequential(tmodel, 8, inp, use_reentrant=True) if checkpointed \
            else tmodel(inp)
    del out
    return sum(seen.values())


def torch_steps(torch, tmodel, shape) -> dict:
    """{"torch eager" | "torch checkpoint_sequential(8)": (step callable, bytes held)}; the
    timed checkpointed step is the non-reentrant variant PyTorch recommends."""
    from torch.utils.checkpoint import checkpoint_sequential

    x, y = _batch(shape)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.SGD(tmodel.parameters(), lr=0.01)

    def step(checkpointed):
        opt.zero_grad()
        out = checkpoint_sequential(tmodel, 8, tx, use_reentrant=False) if checkpointed \
            else tmodel(tx)
        torch.nn.functional.cross_entropy(out, ty).backward()
        opt.step()

    return {"torch eager": (lambda: step(False), held_bytes(torch, tmodel, x, False)),
            "torch checkpoint_sequential(8)": (lambda: step(True),
                                               held_bytes(torch, tmodel, x, True))}


# -- the workloads -----------------------------------------------------------------------------
@functools.cache
def workload(name) -> dict:
    """{implementation: (step callable, peak activation bytes)} of one workload."""
    torch = _torch()
    if name == "deep-mlp-remat":
        d = DEEP
        shape = (d["batch"], d["width"])
        make = functools.partial(models.deep_mlp, d["depth"], d["width"], d["width"], 10)
        make_torch = functools.partial(torch_deep_mlp, torch, d["depth"], d["width"])
    else:
        r = RESNET
        shape = (r["batch"], 3, r["size"], r["size"])
        make = functools.partial(resnet_stack, r["blocks"], r["channels"])
        make_torch = functools.partial(torch_resnet_stack, torch, r["blocks"], r["channels"])
    impls, modes = {}, dict(MODES)
    if torch is not None:
        torch.manual_seed(SEED)
        impls.update(torch_steps(torch, make_torch(), shape))
        # the least recomputation whose whole arena (gradients included) fits in the bytes
        # checkpoint_sequential(8) holds for its backward (gradients left out)
        modes[AT_TORCH] = impls["torch checkpoint_sequential(8)"][1]
    impls.update(mgegraph_steps(make, shape, modes))
    return impls


AT_TORCH = "budget=torch ckpt"
IMPLS = [f"mgegraph {m}" for m in (*MODES, AT_TORCH)] + ["torch eager",
                                                         "torch checkpoint_sequential(8)"]
GROUPS = {"deep-mlp-remat": "deep-mlp-remat (64 x 512, batch 512)",
          "convnet-train": "convnet-train, ResNet-style (16 blocks x 16 ch, 8x3x32x32)"}
CASES = {"deep-mlp-remat": "64 x 512, batch 512",  # the table's case of each workload
         "convnet-train": "ResNet-style, 16 blocks x 16 ch, 8x3x32x32"}
HELD = "bytes autograd holds for the backward (saved tensors; no gradients)"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.workload(n)) for n in GROUPS])
@pytest.mark.parametrize("impl", IMPLS)
def test_remat(benchmark, tag, name, impl):
    tag(CASES[name], impl)
    impls = {(k if k.startswith("torch") else f"mgegraph {k}"): v
             for k, v in workload(name).items()}
    if impl not in impls:
        pytest.skip(f"{impl}: torch is not installed")
    fn, nbytes = impls[impl][:2]
    benchmark.group = GROUPS[name]
    # mgegraph's figure is its whole arena (gradients and workspaces included)
    benchmark.extra_info.update({"arena_bytes": nbytes} if impl.startswith("mgegraph")
                                else {"peak_bytes": nbytes, "peak_kind": HELD})
    benchmark.pedantic(fn, rounds=5, warmup_rounds=1)
    FIGURES.setdefault(name, {})[impl] = (nbytes, benchmark.stats.stats.median)
    plain = workload(name)["plain"][1]
    if impl in ("mgegraph sqrt", "mgegraph auto"):
        assert nbytes * 5 <= plain, f"{impl}: arena {nbytes} B is not 5x below {plain} B"


def terminal_summary() -> list[str]:
    """Peak activation memory and step time per workload, each as ratios to its baseline."""
    lines = []
    for name, rows in FIGURES.items():
        lines.append(f"{GROUPS[name]}:")
        for impl, (nbytes, median) in rows.items():
            base = rows.get("torch eager" if impl.startswith("torch") else "mgegraph plain")
            ratio = f"peak {base[0] / nbytes:5.2f}x smaller, step x{median / base[1]:5.3f}" \
                if base else ""
            lines.append(f"  {impl:32s} peak {nbytes / 2**20:8.2f} MiB  step {median * 1e3:9.2f} "
                         f"ms  {ratio}")
        plan = workload(name)["auto"][2]
        lines.append("  remat='auto' report:")
        lines += ["    " + line for line in plan.remat_report().splitlines()[:4]]
    return lines
