"""A fused elementwise instruction as a C function of its own: its program as one loop nest over
the output's shape, each input read at its broadcast strides, every value in a C variable.

Each step is the scalar function the Python kernels inline (``_kernels/scalar.pxd`` and the
rendered ``ew_ops.pxd``), written in C, and the export builds with ``-ffp-contract=off`` as the
fused kernels are built (``_kernels/build_flags.py``), so each number comes out bitwise as the
Python executor gives it. A step outside ``STEPS`` refuses the export (``unsupported``).
"""
from __future__ import annotations

import numpy as np

from ..ops.fused_program import steps

# op -> C expression over the operands x, y (the program's dtype T), as scalar.pxd defines them
STEPS = {
    "copy": "{x}",
    "neg": "(-{x})",
    "abs": "FABS({x})",
    "square": "({x} * {x})",
    "relu": "({x} <= 0 ? (T)0 : {x})",  # NaN stays, -0 becomes +0 (m_relu)
    "add": "({x} + {y})",
    "sub": "({x} - {y})",
    "mul": "({x} * {y})",
    "div": "({x} / {y})",
    # a NaN of either operand is kept (m_max, m_min)
    "maximum": "({x} > {y} ? {x} : ({y} >= {x} ? {y} : {x} + {y}))",
    "minimum": "({x} < {y} ? {x} : ({y} <= {x} ? {y} : {x} + {y}))",
}
C_TYPES = {np.dtype(np.float32): ("float", "fabsf"), np.dtype(np.float64): ("double", "fabs")}


def unsupported(attrs: dict, dtype) -> list[str]:
    """The steps of a fused program the C runtime lacks (empty when it runs them all)."""
    missing = [] if np.dtype(dtype) in C_TYPES else [f"dtype {np.dtype(dtype)}"]
    for op, _, _, b, _ in steps(attrs["code"]):
        if op in ("load", "store") and b:
            missing.append(f"{op} of stored integers")
        elif op not in ("load", "store", "const") and op not in STEPS:
            missing.append(op)
    return sorted(set(missing))


def _strides(shape, out_shape) -> list[int]:
    """An input's element strides over the output's dims (0 where it broadcasts)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = 0 if shape[d] == 1 and out_shape[d] != 1 else step
        step *= shape[d]
    return strides


def _literal(value, ctype: str) -> str:
    rounded = np.float32(value) if ctype == "float" else np.float64(value)
    if np.isnan(rounded):
        return f"(({ctype})NAN)"
    if np.isinf(rounded):
        return f"(({ctype})({'-' if rounded < 0 else ''}INFINITY))"
    return f"(({ctype}){float(rounded).hex()})"


def _body(code, constants, ctype) -> list[str]:
    lines = []
    for op, dst, a, b, _ in steps(code):
        if op == "load":
            lines.append(f"T v{dst} = in{a}[o{a}];")
        elif op == "const":
            lines.append(f"T v{dst} = {_literal(constants[a], ctype)};")
        elif op == "store":
            lines.append(f"out{dst}[e] = v{a};")
        else:
            lines.append(f"T v{dst} = {STEPS[op].format(x=f'v{a}', y=f'v{b}')};")
    return lines


def render(name: str, attrs: dict, input_shapes, dtype) -> tuple[str, list[int]]:
    """The C source of kernel ``name`` (``mgr_<name>`` and its check) for the fused program of
    ``attrs`` over inputs of ``input_shapes``, and the bytes of each buffer it reads and writes
    (inputs, then outputs), which its check requires."""
    dtype = np.dtype(dtype)
    ctype, fabs = C_TYPES[dtype]
    out_shape = tuple(attrs["shape"]) or (1,)
    n_in, n_out = len(input_shapes), attrs.get("n_outputs", 1)
    strides = [_strides(s, out_shape) for s in input_shapes]
    ndim = len(out_shape)
    lines = [f"static int mgr_{name}(const mgr_call* call) {{",
             f"    typedef {ctype} T;", "#define FABS " + fabs]
    lines += [f"    const T* in{i} = (const T*)call->bufs[{i}];" for i in range(n_in)]
    lines += [f"    T* out{k} = (T*)call->bufs[{n_in + k}];" for k in range(n_out)]
    lines.append("    int64_t e = 0;")
    indent = "    "
    for d in range(ndim):  # each input's offset at this level of the nest: p<input>_<level>
        lines.append(f"{indent}for (int64_t i{d} = 0; i{d} < {out_shape[d]}; i{d}++) {{")
        indent += "    "
        for i in range(n_in):
            base = f"p{i}_{d - 1} + " if d else ""
            lines.append(f"{indent}int64_t p{i}_{d} = {base}i{d} * {strides[i][d]};")
    lines += [f"{indent}int64_t o{i} = p{i}_{ndim - 1};" for i in range(n_in)]
    lines += [indent + line for line in _body(attrs["code"], attrs.get("constants", ()), ctype)]
    lines.append(f"{indent}e++;")
    for _ in range(ndim):
        indent = indent[:-4]
        lines.append(f"{indent}}}")
    lines += ["    (void)e;", "#undef FABS", "    return MGR_KERNEL_OK;", "}", ""]
    in_bytes = [int(np.prod(s, dtype=np.int64)) * dtype.itemsize for s in input_shapes]
    out_bytes = [int(np.prod(out_shape, dtype=np.int64)) * dtype.itemsize] * n_out
    return "\n".join(lines) + _check(name, in_bytes + out_bytes, dtype), in_bytes + out_bytes


def _check(name: str, nbytes: list[int], dtype) -> str:
    """The C check of a generated kernel: exactly the buffers it was generated for."""
    sizes = ", ".join(map(str, nbytes))
    code = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}[dtype]
    return "\n".join([
        f"static const char* mgr_{name}_check(const mgr_check_args* x) {{",
        f"    static const int64_t bytes[] = {{{sizes}}};",
        f"    if (x->n_bufs != {len(nbytes)} || x->n_ints != 0 || x->n_floats != 0)",
        f'        return "wants {len(nbytes)} buffers and no parameters";',
        f"    for (size_t b = 0; b < {len(nbytes)}; b++)",
        f"        if (x->buf_bytes[b] != bytes[b] || x->buf_dtypes[b] != {code})",
        '            return "a buffer is not of the size and dtype the loop was generated for";',
        "    return NULL;",
        "}",
        ""])
