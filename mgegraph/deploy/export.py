"""``export_c``: a plan as C sources a plain ``cc`` builds (docs/c_runtime.md).

The plan is translated as data: each slot becomes a tensor record (temporaries and workspaces
at their arena offsets, params and consts copied into the weights, a view at its root's bytes),
each instruction a call of a kernel the C runtime has, with the parameter block the Python
lowering packed. What the C runtime lacks refuses the export by name before anything is written.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..ir.dims import bindings_text
from ..plan import Plan, Role
from ..symbolic_plan import SymbolicPlan
from . import conv_prepack, fused_c, kernels
from .blob import (
    DTYPES,
    KIND_ARENA,
    KIND_INPUT,
    KIND_OUTPUT,
    KIND_WEIGHT,
    MAX_NDIM,
    Blob,
    Call,
    Tensor,
    encode,
)
from .errors import ExportError

FIELDS_PACKED = conv_prepack.FIELDS.index("packed")

BLOB_NAME = "model.mgr"
# -ffp-contract=off: the fused loops round each step as the fused kernels do (build_flags.py).
# -fno-trapping-math, as the package's kernels are built: selects of float compares (relu, the
# clamps of exp) if-converted, so the generated loops vectorise; no value changes by it.
# MGR_FLAGS, not CFLAGS: a `make CFLAGS=...` on the command line replaces CFLAGS whole
MAKEFILE = """\
# Build the exported model's runtime: `make` (or `make CC=aarch64-linux-gnu-gcc` for 64-bit ARM,
# its NEON tiles; CFLAGS="-O2 -march=armv8.2-a+dotprod" adds the int8 GEMM's sdot tiles).
CC ?= cc
CFLAGS ?= -O3
MGR_FLAGS = -std=gnu11 -ffp-contract=off -fno-math-errno -fno-trapping-math -pthread \\
    -I. -Ikernels
SOURCES = mgr_runtime.c mgr_threads.c model_kernels.c {kernels}
OBJECTS = $(SOURCES:.c=.o)

model_run: model_run.o libmgr_model.a
\t$(CC) $(CFLAGS) $(MGR_FLAGS) $(LDFLAGS) -o $@ model_run.o libmgr_model.a -lm

libmgr_model.a: $(OBJECTS)
\t$(AR) rcs $@ $(OBJECTS)

%.o: %.c mgr_runtime.h mgr_kernel.h
\t$(CC) $(CFLAGS) $(MGR_FLAGS) -c -o $@ $<

clean:
\trm -f model_run libmgr_model.a $(OBJECTS) model_run.o
"""
# the GEMM tiles' sources: their sums are FMAs, as the package's build contracts them
CONTRACTED_RULE = "\n{objects}: MGR_FLAGS += -ffp-contract=fast\n"


@dataclass(frozen=True)
class Exported:
    """What ``export_c`` wrote: the ``directory``, the ``plan`` exported (the specialisation,
    for a symbolic one), the input and output names in the C API's order, and the kernels
    the C table holds."""

    directory: Path
    plan: Plan
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    kernels: tuple[str, ...]


def export_c(obj, out_dir, *, bindings: dict | None = None,
             output_names=None) -> Exported:
    """Write ``obj`` (a Plan, a ``SymbolicPlan`` with ``bindings``, a loaded model's Predictor,
    a ``compile_module`` predictor, or a model file's path) to ``out_dir`` as C: the runtime, the
    kernels its plan calls, ``model_kernels.c``, the blob ``model.mgr``, ``model_run.c`` and a
    Makefile. An ``ExportError`` names what the C runtime lacks.

    The C runtime computes what the plan's deterministic ways compute, bit for bit; where a plan
    runs the BLAS (the default rules' GEMMs and im2col convolutions), C agrees within float32
    rounding. A plan compiled with ``tune="deterministic"`` runs no BLAS where it need not, and
    a model file's path is loaded so (``runtime.load(path, tune="deterministic")`` is then the
    Python twin of the export, bitwise).

    >>> mg.deploy.export_c(plan, "out")   # then: make -C out && out/model_run out/model.mgr x.npy
    """
    plan, input_names, names = _resolve(obj, bindings)
    output_names = tuple(output_names or names or
                         (f"output{k}" for k in range(len(plan.outputs))))
    if len(output_names) != len(plan.outputs):
        raise ExportError(f"export_c: {len(output_names)} output names for "
                          f"{len(plan.outputs)} outputs")
    _check_plan(plan)
    if plan.prologue is not None:
        # the CPU executable runs the prologue as it is made, writing what it computes from the
        # weights (packed, folded) into the plan's shared params: those are the values to ship
        plan.executable()
    blob, generated = _tables(plan, input_names, output_names)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_sources(out, blob.kernels, generated)
    (out / BLOB_NAME).write_bytes(encode(blob))
    return Exported(out, plan, tuple(input_names), output_names, tuple(blob.kernels))


# -- what is exported ------------------------------------------------------------------------
def _resolve(obj, bindings) -> tuple[Plan, tuple[str, ...], tuple[str, ...] | None]:
    """(the plan, its input names in order, the output names where the object has them)."""
    names = None
    if isinstance(obj, (str, os.PathLike)):
        from ..io.predictor import load_predictor  # lazy: startup cost (the model file's reader)
        obj = load_predictor(obj, tune="deterministic")
    if not isinstance(obj, (Plan, SymbolicPlan)) and hasattr(obj, "plan"):
        names = getattr(obj, "output_names", None)
        obj = obj.plan
    if isinstance(obj, SymbolicPlan):
        if not bindings:
            raise ExportError("export_c: the model names dimensions "
                              f"({', '.join(sorted(obj.names))}); pass bindings= (--dim NAME=N "
                              "on the command line): the C runtime runs one specialisation")
        obj = obj.specialize(dict(bindings))
    elif bindings:
        raise ExportError(f"export_c: bindings {bindings_text(bindings)} given for a plan "
                          "whose shapes are all numbers")
    if not isinstance(obj, Plan):
        raise ExportError(f"export_c: cannot export a {type(obj).__name__}; give a plan, a "
                          "loaded model or a model file")
    return obj, tuple(obj.feeds), (tuple(names) if names else None)


def _check_plan(plan: Plan) -> None:
    """An ExportError naming everything of ``plan`` the C runtime cannot run."""
    problems = []
    if plan.device != "cpu":
        problems.append(f"the plan is for device {plan.device!r}; export a CPU plan")
    lacking = {}
    for ins in plan.instructions:
        if not kernels.has(ins.kernel):
            lacking.setdefault(ins.kernel, set()).add(ins.op)
        elif kernels.refuses(ins):
            lacking.setdefault(kernels.refuses(ins), set()).add(ins.op)
        elif ins.kernel in kernels.GENERATED:
            attrs = fused_c.program(ins, _types(plan, ins))
            for step in fused_c.unsupported(attrs, attrs["dtype"]):
                lacking.setdefault(f"{ins.kernel} step {step}", set()).add(ins.op)
    if lacking:
        problems.append("the C runtime lacks " + "; ".join(
            f"{kernel} (op {', '.join(sorted(ops))})" for kernel, ops in sorted(lacking.items())))
    for slot in plan.slots:
        if slot.type.dtype not in DTYPES or len(slot.type.shape) > MAX_NDIM:
            problems.append(f"slot s{slot.index} is {slot.type}: the C runtime takes "
                            f"{', '.join(d.name for d in DTYPES)} up to {MAX_NDIM} dims")
    for k, s in enumerate(plan.outputs):
        if plan.slots[s].role != Role.OUTPUT or plan.outputs.index(s) != k:
            problems.append(f"output {k} is slot s{s} ({plan.slots[s].role}), not an output "
                            "of its own")
    if problems:
        raise ExportError("export_c: " + "; ".join(problems))


# -- the tables ------------------------------------------------------------------------------
def _root(plan: Plan, index: int) -> tuple[int, int]:
    """(root slot, byte offset into it) of slot ``index``, through views of views."""
    slot, offset = plan.slots[index], 0
    while slot.alias is not None:
        offset += slot.view_offset
        slot = plan.slots[slot.alias]
    return slot.index, offset


class _Tables:
    """The blob being built: a tensor record per slot used, weights added once per root."""

    def __init__(self, plan: Plan, input_names, output_names):
        self.plan, self.blob = plan, Blob(arena_bytes=plan.arena_bytes)
        self.records: dict[int, int] = {}
        self.weight_at: dict[int, int] = {}
        # a weight prepared at export (GEMM panels, Winograd's or packed conv filters), by what
        # it was made from and how -> its record: each made once however many calls read it
        self.prepared: dict[tuple, int] = {}
        self.io = {**{plan.feeds[n]: (KIND_INPUT, k, n) for k, n in enumerate(input_names)},
                   **{s: (KIND_OUTPUT, k, output_names[k]) for k, s in enumerate(plan.outputs)}}
        for slot in self.io:  # every input and output has its named root record
            self.tensor(slot)

    def prepared_weight(self, key: tuple, make) -> int:
        """The record of the weight ``make()`` returns, made and stored once per ``key``."""
        if key not in self.prepared:
            value = make()
            self.prepared[key] = len(self.blob.tensors)
            self.blob.tensors.append(Tensor(KIND_WEIGHT, 0, self.blob.add_weight(value),
                                            value.dtype, value.shape))
        return self.prepared[key]

    def tensor(self, index: int) -> int:
        if index not in self.records:
            self.records[index] = len(self.blob.tensors)
            self.blob.tensors.append(self._record(index))
        return self.records[index]

    def _record(self, index: int) -> Tensor:
        slot = self.plan.slots[index]
        root, offset = _root(self.plan, index)
        role = self.plan.slots[root].role
        shape, dtype = tuple(slot.type.shape), np.dtype(slot.type.dtype)
        if root in self.io:
            kind, position, name = self.io[root]
            return Tensor(kind, position, offset, dtype, shape, name if root == index else "")
        if role in (Role.TEMP, Role.WORKSPACE):
            return Tensor(KIND_ARENA, 0, self.plan.slots[root].offset + offset, dtype, shape)
        if role in (Role.PARAM, Role.CONST):
            if root not in self.weight_at:
                self.weight_at[root] = self.blob.add_weight(self.plan.values[root])
            return Tensor(KIND_WEIGHT, 0, self.weight_at[root] + offset, dtype, shape)
        raise ExportError(f"export_c: slot s{index} ({slot.role}, root s{root} {role}) is "
                          "neither an input, an output, a weight nor in the arena")


def _types(plan: Plan, ins) -> list:
    """The types of instruction ``ins``'s inputs, then its outputs."""
    return [plan.slots[s].type for s in (*ins.inputs, *ins.outputs)]


def _tables(plan: Plan, input_names, output_names) -> tuple[Blob, dict[str, str]]:
    """The blob's tables and the C source of each generated kernel, by name (``""``: the table
    ops the generated loops call, defined once before them)."""
    tables = _Tables(plan, input_names, output_names)
    blob, generated, index, ew_ops = tables.blob, {}, {}, {}
    written = {_root(plan, s)[0] for ins in plan.instructions for s in ins.outputs}
    for i, ins in enumerate(plan.instructions):
        refs, ints, floats, name = ins.buffers, ins.ints, ins.floats, ins.kernel
        if ins.kernel in kernels.GENERATED:  # a loop of its own, needing no parameters
            name, refs, ints, floats = f"fused_{i}", ins.inputs + ins.outputs, (), ()
            attrs = fused_c.program(ins, _types(plan, ins))
            shapes = [plan.slots[s].type.shape for s in ins.inputs]
            dtype = np.dtype(attrs["dtype"])
            generated[name] = fused_c.render(name, attrs, shapes, dtype)[0]
            # one set of functions per C type (bool's are uint8's)
            ew_ops.setdefault(fused_c.C_TYPES[dtype], (dtype, set()))[1].update(
                fused_c.table_ops(attrs["code"], dtype))
        packed = _packed_gemm(tables, ins, written) or _prepared_conv(tables, ins, written)
        if packed:  # its weight's record is the panels or prepared filters, not the weight
            name, ints, panels = packed
            records = (refs[0], panels, *refs[2:])
        else:
            records = refs
        if name not in index:
            index[name] = len(blob.kernels)
            blob.kernels.append(name)
        blob.calls.append(Call(index[name], tuple(
            r if packed and k == 1 else tables.tensor(r) for k, r in enumerate(records)),
            tuple(ints), tuple(floats)))
    if generated:
        generated[""] = "\n".join(
            [f'#include "{fused_c.SHARED_HEADER}"', "", fused_c.DRIVER]
            + [line for dtype, ops in ew_ops.values()
               for line in fused_c.ew_functions(ops, dtype)]
            + [""])
    return blob, generated


def _fixed_weight(plan: Plan, index: int, written) -> bool:
    """Slot ``index`` is a weight of its own root that no instruction writes (a state update's
    weight is never prepared at export: the prepared copy would go stale)."""
    slot = plan.slots[index]
    return slot.alias is None and slot.role in (Role.PARAM, Role.CONST) and index not in written


# -- GEMMs on weights packed at export --------------------------------------------------------
# A GEMM of many rows whose op(B) is a weight (linear's w, matmul's b the same for every batch)
# runs on op(B) in gemm_tile.h's panels, packed here once instead of on every call: the
# instruction becomes linear_packed_f32 or matmul_packed_f32, its b the panels' record (the
# weight itself is stored only if another instruction reads it), its block the plan's with the
# panel width appended (matmul's transpose_b 0: the panels are op(B)). A single row keeps the
# plan's kernel, whose GEMV reads the weight where it lies; a weight an instruction writes (a
# state update) is never packed, as the panels would go stale.
PACKED_GEMMS = {"linear_f32": "linear_packed_f32", "matmul_f32": "matmul_packed_f32"}


def gemm_panels(opb: np.ndarray, panel: int) -> np.ndarray:
    """op(B) (k, n) in panels of ``panel`` columns, zeros past n: (ceil(n / panel), k, panel),
    panel j's row p the columns j * panel ... of op(B)'s row p (gemm_tile.h's layout)."""
    k, n = opb.shape
    padded = np.zeros((k, -(-n // panel) * panel), np.float32)
    padded[:, :n] = opb
    return np.ascontiguousarray(padded.reshape(k, -1, panel).transpose(1, 0, 2))


def _constant_opb(plan: Plan, ins, written) -> np.ndarray | None:
    """op(B) (k, n) of a linear_f32 or matmul_f32 of at least 2 rows whose B is a float32 weight
    of its own root that no instruction writes, the same for every batch; else None."""
    if ins.kernel not in PACKED_GEMMS or ins.ints[0] < 2:
        return None
    m, n, k = ins.ints[:3]
    transpose_b, b = True, ins.inputs[1]
    if ins.kernel == "matmul_f32":
        ndim = ins.ints[8]
        transpose_b = bool(ins.ints[4])
        if any(ins.ints[9 + 2 * ndim:9 + 3 * ndim]):  # b's batch strides
            return None
    if not _fixed_weight(plan, b, written):
        return None
    value = np.asarray(plan.values[b])
    if value.dtype != np.float32 or value.size != n * k:
        return None
    return value.reshape(n, k).T if transpose_b else value.reshape(k, n)


def _packed_gemm(tables: _Tables, ins, written) -> tuple[str, tuple, int] | None:
    """(kernel, parameter block, the panels' tensor record) where ``ins`` runs on packed
    weights, else None; each weight packed once however many instructions read it."""
    opb = _constant_opb(tables.plan, ins, written)
    if opb is None:
        return None
    panel = kernels.gemm_panel()
    key = ("panels", ins.inputs[1], ins.kernel == "linear_f32" or bool(ins.ints[4]), panel)
    record = tables.prepared_weight(key, lambda: gemm_panels(opb, panel))
    ints = list(ins.ints)
    if ins.kernel == "matmul_f32":
        ints[4] = 0
    return PACKED_GEMMS[ins.kernel], (*ints, panel), record


# -- convolutions on filters prepared at export ----------------------------------------------
def _prepared_conv(tables: _Tables, ins, written) -> tuple[str, tuple, int] | None:
    """(kernel, parameter block, the prepared filters' tensor record) where the conv2d_f32
    ``ins`` runs on filters prepared here (conv_prepack.py: Winograd's transform, or packed
    blocks), else None. The filters must be a float32 weight of their own root that no
    instruction writes; each is prepared once however many instructions read it."""
    w = ins.inputs[1] if ins.kernel == "conv2d_f32" else None
    plan = tables.plan
    if w is None or not _fixed_weight(plan, w, written):
        return None
    done = conv_prepack.prepared(ins.kernel, ins.ints, np.asarray(plan.values[w]))
    if done is None:
        return None
    kernel, ints, value = done
    return kernel, ints, tables.prepared_weight((kernel, w, ints[FIELDS_PACKED]), lambda: value)


# -- the files -------------------------------------------------------------------------------
def _kernel_table(names, generated: dict[str, str]) -> str:
    lines = ["/* The kernels of this model's plan: generated by mgegraph.deploy.export_c. */",
             "#include <math.h>", "#include <stdint.h>", "", '#include "mgr_kernel.h"', ""]
    for name in names:
        if name not in generated:
            lines += [f"int mgr_{name}(const mgr_call* call);",
                      f"const char* mgr_{name}_check(const mgr_check_args* args);"]
    lines.append("")
    lines += [generated[name] for name in ("", *names) if name in generated]
    lines.append("const mgr_kernel mgr_kernels[] = {")
    lines += [f'    {{"{name}", mgr_{name}, mgr_{name}_check}},' for name in names]
    lines += ["};", f"const size_t mgr_n_kernels = {len(names)};", ""]
    return "\n".join(lines)


def _write_sources(out: Path, names, generated: dict[str, str]) -> None:
    files = {name: kernels.CSRC / name for name in (*kernels.RUNTIME, kernels.MODEL_RUN)}
    files.update(kernels.sources(names))
    if generated:
        files[f"kernels/{fused_c.SHARED_HEADER}"] = kernels.SHARED / fused_c.SHARED_HEADER
    (out / "kernels").mkdir(exist_ok=True)
    for name, source in files.items():
        shutil.copyfile(source, out / name)
    (out / "model_kernels.c").write_text(_kernel_table(names, generated))
    library = " ".join(n for n in sorted(files) if n.startswith("kernels/") and n.endswith(".c"))
    contracted = " ".join(n[:-2] + ".o" for n in kernels.CONTRACTED if n in files)
    (out / "Makefile").write_text(MAKEFILE.format(kernels=library) + (
        CONTRACTED_RULE.format(objects=contracted) if contracted else ""))
