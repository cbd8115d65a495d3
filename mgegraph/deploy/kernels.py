"""The C runtime's kernels: which of a plan's kernels it has, and the sources each needs.

A library kernel is a C file of ``csrc/kernels/`` defining ``mgr_<name>`` and its check
``mgr_<name>_check`` (``csrc/mgr_kernel.h``), with the headers it includes: its own, and those
of ``mgegraph/_kernels/`` it shares with the Python executor (one source, the same bits). A
fused elementwise instruction is generated instead (``fused_c.py``).
"""
from __future__ import annotations

from pathlib import Path

CSRC = Path(__file__).parent / "csrc"
SHARED = Path(__file__).parent.parent / "_kernels"  # headers the .pyx kernels include too
RUNTIME = ("mgr_runtime.h", "mgr_runtime.c", "mgr_kernel.h")
MODEL_RUN = "model_run.c"

# kernel name -> (its C file, the headers it includes: csrc/kernels' own, then _kernels')
LIBRARY = {
    "matmul_f32": ("matmul_f32.c", ("gemm_fma.h",), ()),
    "linear_f32": ("linear_f32.c", ("gemm_fma.h",), ("activation.h",)),
    "softmax_f32": ("softmax_f32.c", (), ("softmax.h",)),
    "conv2d_f32": ("conv2d_f32.c", (), ("activation.h",)),
    "pool2d_f32": ("pool2d_f32.c", (), ()),
}

FUSED_KERNELS = ("fused_f32", "fused_f64")


def has(kernel: str) -> bool:
    """Whether the C runtime runs the plan kernel ``kernel`` (a fused one still has its steps
    checked by ``fused_c``)."""
    return kernel in LIBRARY or kernel in FUSED_KERNELS


def refuses(ins) -> str | None:
    """Why the C kernel of instruction ``ins`` cannot run its parameter block (None: it can):
    what its loader check (``mgr_<kernel>_check``) would refuse, said at export."""
    if ins.kernel == "pool2d_f32":
        return None if ins.ints[0] == 0 else "pool2d_f32 averaging (the C runtime has max)"
    if ins.kernel != "conv2d_f32":
        return None
    from ..kernel_abi.conv import FIELDS  # lazy: startup cost (only conv plans read it)
    f = dict(zip(FIELDS, ins.ints))
    if f["groups"] != 1 or f["transposed"]:
        return "conv2d_f32 of several groups (the C runtime has one group)"
    return None


def sources(kernels) -> dict[str, Path]:
    """{file name in the export: source path} of the library kernels named."""
    files: dict[str, Path] = {}
    for name in sorted(set(kernels) & LIBRARY.keys()):
        source, own, shared = LIBRARY[name]
        files[f"kernels/{source}"] = CSRC / "kernels" / source
        files.update({f"kernels/{h}": CSRC / "kernels" / h for h in own})
        files.update({f"kernels/{h}": SHARED / h for h in shared})
    return files
