"""The supported-ops table of ``docs/ops.md``, written from the registries themselves: each op's
category, whether it has a gradient rule, the dtypes the CPU and CUDA kernels take, its
model-file version and whether the ONNX exporter writes it; then every ONNX op the importer
converts. A test compares the file with ``render()``, so the page cannot fall behind the code.

    python -m mgegraph.tools.ops_table --write      # after adding an op
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..io.graph_json import OP_VERSIONS
from ..ops.registry import all_ops

PAGE = Path(__file__).resolve().parents[2] / "docs" / "ops.md"

HEADER = """# Supported ops

Written by `python -m mgegraph.tools.ops_table --write` from the op registry, the CPU and CUDA
kernel tables, the model file's op versions and the ONNX converters; `tests/tools` checks the
page against the code. An op is what a graph node is; the public functions (`mgegraph.functional`,
`functional.nn`, `functional.vision`, `nn` modules) build nodes of these ops, many of them
several (`F.group_norm` is reshapes, a mean, a variance and a fused elementwise body).

Columns: the op's category; `grad`: whether autodiff differentiates it; the element types of
its CPU and CUDA kernels (`-`: none: a planner-only op, or one the device lacks); the op's
version in the model file; `ONNX`: whether `mg.onnx.export` writes it. Every op with a f32
kernel also takes f16 and bf16 (half precision): where no kernel of its own is listed, a plan
and eager mode run it in float32 between casts (`planner/passes/half.py`).
"""

_SHORT = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "bool",
          "uint8": "u8", "int8": "i8", "int16": "i16", "float16": "f16", "bfloat16": "bf16"}


def _dtypes(backend, op: str) -> str:
    impl = backend.impls.get(op) if backend is not None else None
    if impl is None:
        return "-"
    return " ".join(_SHORT.get(np.dtype(d).name, np.dtype(d).name) for d in impl.dtypes)


def _backends():
    from .._kernels.cpu import backend as cpu_backend  # lazy: compiled kernels load here
    from ..cuda.backend import CudaBackend  # lazy: the CUDA table (no GPU needed to read it)

    return cpu_backend(), CudaBackend(None)


def _onnx_tables():
    try:
        from ..onnx.converters import CONVERTERS  # lazy: optional dependency (onnx)
        from ..onnx.exporter import WRITERS  # lazy: optional dependency (onnx)
    except ImportError:
        return None, None
    return WRITERS, sorted(CONVERTERS)


def render() -> str:
    """The whole page as markdown."""
    cpu, cuda = _backends()
    writers, imported = _onnx_tables()
    rows = ["| op | category | grad | CPU | CUDA | file | ONNX |", "|---|---|---|---|---|---|---|"]
    for name, opdef in sorted(all_ops().items()):
        onnx = "?" if writers is None else ("yes" if name in writers else "-")
        rows.append(f"| `{name}` | {opdef.category} | {'yes' if opdef.grad else '-'} | "
                    f"{_dtypes(cpu, name)} | {_dtypes(cuda, name)} | "
                    f"{OP_VERSIONS.get(name, '-')} | {onnx} |")
    lines = [HEADER, f"## Ops ({len(rows) - 2})", "", *rows, ""]
    if imported is not None:
        lines += [f"## ONNX ops the importer converts ({len(imported)})", "",
                  ", ".join(f"`{op}`" for op in imported), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--write" in argv:
        PAGE.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
