"""The measured choice of a kernel's way (MegEngine's fast-run): ``compile(tune=...)``.

A backend may run a node several ways (a convolution's direct, im2col, Winograd or tiled paths,
on one thread or several; a GEMM on its own tiles or the BLAS): its ``OpImpl.candidates`` lists
them, its rules (``OpImpl.lower``) pick one by fits to measurements made on other machines. With
``tune="measure"`` each instruction of such a node is timed every way on its own shapes (the
backend's ``measurer``) and takes the fastest; the choice is stored per machine, op, types,
attributes and build of the kernels, in ``$XDG_CACHE_HOME/mgegraph/kernel_choices.json``
(``MGEGRAPH_TUNE_CACHE`` names another file), as the BLAS calibration is. The modes:

- None (the default): a choice stored for this machine where there is one, else the rules;
  nothing is measured.
- "rules": the rules alone, whatever is stored.
- "measure": time every way now (a few calls each within a budget) and store the choices.
- "cached": the stored choices; what is missing is measured and stored.
- "deterministic": nothing measured or stored; every instruction that has a way on the
  package's own kernels (sums in an order fixed by the plan, no BLAS: the backend's
  ``deterministic``) takes it, the rules' where theirs is one; the prepack pass keeps its
  rules. Such a plan gives the same bits on any thread count, and its C export
  (``mg.deploy.export_c``) computes what it computes, bit for bit (``plan.kernels_report()``
  says "rules" beside an instruction left on the BLAS, where no other way exists).

Every way computes the same values within float32 (or float64) rounding of the sums: the
tests hold every way of a convolution or GEMM to a float64 reference at the same tolerance as
the rules' way (tests/ops/test_kernel_ways.py). The package's own tile kernels give the same
bits on any thread count; the ways through the BLAS (im2col, Winograd, the GEMMs) cut their
calls by the threads, so their last bits may differ between thread counts.

Design: the store is one small JSON object (an entry per distinct instruction and prepack
question: ResNet-18 at one shape has about 30), read once per compile and written whole under a
temporary name, so two processes tuning at once lose at most one's entries, never the file. A
stored way that the backend no longer offers (a path renamed) is ignored and the rules decide.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from pathlib import Path

from .backend import Launch
from .disk_cache import cache_root
from .ir.graph import Graph
from .ops.conv import weight_dims
from .plan import Choice

MODES = (None, "rules", "measure", "cached", "deterministic")
# seconds the measurer may spend on one instruction beyond one call of each way
BUDGET = 0.02
_lock = threading.Lock()  # one writer of the store per process


def check_mode(tune) -> None:
    """A ValueError naming the modes when ``tune`` is not one."""
    if tune not in MODES:
        raise ValueError(f"compile(tune={tune!r}): tune is one of None (stored choices, else "
                         "the rules), 'rules', 'measure', 'cached' or 'deterministic'")


def store_path() -> Path:
    """The file of the stored choices: ``$MGEGRAPH_TUNE_CACHE``, else ``kernel_choices.json`` in
    the user's cache folder of mgegraph."""
    given = os.environ.get("MGEGRAPH_TUNE_CACHE")
    return Path(given) if given else cache_root() / "kernel_choices.json"


def read_store(path: Path | None = None) -> dict[str, dict]:
    """The stored choices by key; an unreadable or malformed file, or a malformed entry, is
    none (it is measured again)."""
    try:
        data = json.loads((path or store_path()).read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: a hostile nesting
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and _well_formed(v)}


def _well_formed(entry: dict) -> bool:
    runner_up = entry.get("runner_up_seconds")
    return (type(entry.get("path")) is str and _duration(entry.get("seconds"))
            and (entry.get("runner_up") is None or type(entry["runner_up"]) is str)
            and (runner_up is None or _duration(runner_up)))


def _duration(value) -> bool:
    """A time a measurement can give: a finite positive number (not a bool)."""
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def _write_store(entries: dict[str, dict], path: Path | None = None) -> None:
    path = path or store_path()
    with _lock:
        data = read_store(path) | entries
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, path)  # a concurrent reader sees the old file or the new one
        except OSError:
            pass  # a read-only home: measured again next time, nothing else changes


def entry_key(machine: str, node, kernel_name: str) -> str:
    """What a choice holds for: the machine (the measurer's words), the kernel, the op's
    attributes and the types of the node's inputs and outputs."""
    text = json.dumps([machine, kernel_name, node.op.name, repr(node.attrs),
                       [str(v.type) for v in node.inputs], [str(v.type) for v in node.outputs]])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# scratch bytes a way may ask for beyond the rules' way's, whatever the node's size
WORKSPACE_SLACK = 16 << 20


def workspace_limit(node, rules: Launch) -> int:
    """The most workspace bytes a candidate way may take: twice the rules' way's or the node's
    inputs' and outputs', or WORKSPACE_SLACK more. A way past it is not tried: the plan's arena
    would grow by it (a batched im2col of 256 images at 56x56 asks for 1.8 GB), and the
    measurement would allocate it."""
    values = sum(v.type.size * v.dtype.itemsize for v in (*node.inputs, *node.outputs))
    return max(2 * rules.workspace, 2 * values, rules.workspace + WORKSPACE_SLACK)


def by_rules(node, impl) -> tuple[Launch, Choice | None]:
    """The launch the backend's rules give ``node`` and the choice it records (none for a
    kernel of one way)."""
    launch = impl.lower(node)
    return launch, (Choice(launch.path) if launch.path else None)


class Tuner:
    """The choices of one compile: ``choose(node, impl, kernel)`` for each instruction whose
    kernel has several ways, ``packing()`` for the prepack pass, then ``save()`` stores what
    was measured."""

    def __init__(self, backend, mode):
        check_mode(mode)
        self.mode = mode
        self.backend = backend
        self.measurer = backend.measurer
        self.measured: dict[str, dict] = {}
        self._stored: dict[str, dict] | None = None  # read at the first instruction that asks

    def _known(self, key: str) -> dict | None:
        """The entry measured in this compile, else (unless measuring anew) the stored one."""
        if key in self.measured:
            return self.measured[key]
        if self.mode == "measure":
            return None
        if self._stored is None:
            self._stored = read_store()
        return self._stored.get(key)

    def choose(self, node, impl, kernel, timed=False) -> tuple[Launch, Choice | None]:
        """The launch the node runs with and the choice it records; ``timed``: measured even
        where it has one way (the prepack question compares it with another node's)."""
        ruled = by_rules(node, impl)
        if self.mode == "deterministic":
            return deterministic_way(node, impl, ruled, self.backend.deterministic)
        if impl.candidates is None or self.measurer is None or self.mode == "rules":
            return ruled
        key = entry_key(self.measurer.machine(), node, kernel.name)
        entry = self._known(key)
        if entry is None and self.mode is None:
            return ruled
        rules = ruled[0]
        limit = workspace_limit(node, rules)
        ways = {c.path: c for c in impl.candidates(node) if c.workspace <= limit}
        ways.setdefault(rules.path, rules)
        if len(ways) == 1 and not timed:
            return ruled
        if entry is not None and entry["path"] in ways:
            how = "measured" if self.measured.get(key) is entry else "cached"
            return ways[entry["path"]], _choice(entry, how)
        if self.mode is None:  # a stored way the backend no longer has
            return ruled
        launches = tuple(ways.values())
        times = self.measurer.time(kernel, node, launches, BUDGET)
        entry = self._fastest(key, {launch.path: t for t, launch in zip(times, launches)})
        if entry is None:  # every way refused: the rules' launch fails the run as it would have
            return ruled
        return ways[entry["path"]], _choice(entry, "measured")

    def _fastest(self, key: str, times: dict[str, float | None]) -> dict | None:
        """The entry of the fastest way of ``times`` (seconds by way; None: refused), with the
        runner-up; kept as measured under ``key``."""
        ranked = sorted((t, way) for way, t in times.items() if t is not None)
        if not ranked:
            return None
        entry = {"path": ranked[0][1], "seconds": ranked[0][0],
                 "runner_up": ranked[1][1] if len(ranked) > 1 else None,
                 "runner_up_seconds": ranked[1][0] if len(ranked) > 1 else None}
        self.measured[key] = entry
        return entry

    def packing(self):
        """The prepack pass's question (the backend's ``prepack(conv2d node)``: the block of
        output channels to pack its weights in, or None), answered by measuring where tuning:
        the node's fastest way unpacked against conv2d on weights packed in each block the
        backend's packed kernel takes, threads included. Linear layers and matmuls keep the
        rules' answer."""
        backend, block_of = self.backend, self.backend.prepack
        if (block_of is None or self.measurer is None or backend.packed_blocks is None
                or self.mode in ("rules", "deterministic")):
            return block_of

        def measured_block(node):
            rule = block_of(node)
            blocks = backend.packed_blocks(node) if node.op.name == "conv2d" else ()
            if not blocks:
                return rule
            key = entry_key(self.measurer.machine(), node, "prepack")
            entry = self._known(key)
            if entry is None and self.mode is not None:
                entry = self._race_packing(node, blocks, key)
            ways = {"unpacked": None} | {f"packed {block}": block for block in blocks}
            # nothing measured, or a stored way the backend no longer takes: the rules'
            return ways[entry["path"]] if entry is not None and entry["path"] in ways else rule
        return measured_block

    def _race_packing(self, node, blocks, key) -> dict | None:
        """Time the node unpacked (its fastest way) and on weights packed in each of
        ``blocks`` (the packed kernel's fastest way)."""
        backend, dtype = self.backend, node.inputs[0].dtype
        nodes = {"unpacked": node} | {f"packed {block}": packed_node(node, block)
                                      for block in blocks}
        times = {}
        for way, made in nodes.items():
            _, choice = self.choose(made, backend.impl(made.op.name),
                                    backend.kernel(made.op.name, dtype), timed=True)
            times[way] = None if choice is None else choice.seconds
        return self._fastest(key, times)

    def save(self) -> None:
        """Store the choices measured (nothing when none was)."""
        if self.measured:
            _write_store(self.measured)


def deterministic_way(node, impl, ruled, deterministic) -> tuple[Launch, Choice | None]:
    """The rules' way where it is deterministic (``deterministic(op, launch)``), else the first
    candidate that is, on the rules' threads where one is; the rules' way where none is (the
    report says "rules" there, "deterministic" where the way was changed)."""
    launch = ruled[0]
    if impl.candidates is None or deterministic is None or deterministic(node.op.name, launch):
        return ruled
    ways = [c for c in impl.candidates(node) if deterministic(node.op.name, c)]
    if not ways:
        return ruled
    threads = launch.path.partition(", ")[2]
    way = next((c for c in ways if c.path.partition(", ")[2] == threads), ways[0])
    return way, Choice(way.path, "deterministic")


def _choice(entry: dict, how: str) -> Choice:
    return Choice(entry["path"], how, entry["seconds"], entry.get("runner_up"),
                  entry.get("runner_up_seconds"))


def packed_node(node, block: int):
    """``conv2d_packed(x, conv2d_pack_weight(w))`` of conv2d ``node`` with weights packed in
    blocks of ``block`` output channels, in a graph of its own (what the prepack pass would
    make of it), to be timed."""
    g = Graph()
    x, w, *bias = (g.input(f"in{i}", v.shape, v.dtype) for i, v in enumerate(node.inputs))
    groups = node.attr["groups"]
    (packed,) = g.add_node("conv2d_pack_weight", [w], {"groups": groups, "block": block},
                           location=node.location).outputs
    oc, _, kh, kw = weight_dims(node.inputs[1].type, groups)
    attrs = {**node.attr, "out_channels": oc, "kernel_size": (kh, kw)}
    return g.add_node("conv2d_packed", [x, packed, *bias], attrs, location=node.location)
