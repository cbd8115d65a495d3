"""Generated CPU bodies for fused elementwise programs: the whole expression as one loop.

The fused kernel (fused_body.pxi) interprets a program block by block, one pass over the block
per step: every step loads and stores its operands from registers in L1/L2. For a large program
that traffic, not the arithmetic, is most of the time (fusion-chain, 4M float32: 10.6 ms
interpreted against 5.0 ms as one loop at 1 thread, benchmarks/test_fused_kernel.py). So a plan
gets, for each large fused instruction (``lowering.fused.wants_body``), a body generated for its
program: one loop over the elements that keeps every value in a machine register and
calls the same inline scalar functions (ew_ops.pxd) the interpreter calls. Built with the flags
of the fused build it runs beside (build_flags.py: no FP contraction), it gives every number
bit for bit as the interpreter does; the tests check that for every op of the table. (Only the
sign and payload of a NaN may differ: IEEE 754 leaves them open, NaN * NaN keeps either
operand's, and the compiler orders the operands of * and + differently in the two loops.)

How it runs: the generated module's ``kernel`` has the fused kernel's calling convention and
takes the same ints, so the executor calls it in the interpreter's place. It hands the call to
the fused module's driver (``DRIVERS``), which reads and checks the program as always, runs the
body only when the call's steps are the ones it was generated from (else it interprets them),
and does the rest as for the interpreter: the blocks, the threads, gathering strided inputs,
streaming stores.

Building: Cython turns the source into C and the system C compiler (``$CC``, else Python's) into
a shared library: some 3 s, once per program and machine, since builds are kept in the disk cache
(``$MGEGRAPH_JIT_CACHE``, else ``~/.cache/mgegraph/jit``) keyed by the source, the flags, the
scalar functions' sources, and the Cython and Python versions. Without Cython or a compiler, or
when a build fails, the plan interprets (``unavailable()`` says why); results are the same.

``MGEGRAPH_CPU_JIT``: ``auto`` (the default: programs of at least ``JIT_MIN_ELEMENTS`` output
elements), ``all`` (every fused program, as the tests use it) or ``off``.
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

from ..disk_cache import DiskCache, cache_dir, key
from ..ops import elementwise_table as TABLE
from . import build_flags, fused
from .lowering.fused import Encoded, decode, wants_body

CACHE_ENV = "MGEGRAPH_JIT_CACHE"
KERNELS_DIR = Path(__file__).parent
# what a body's source depends on beside its own text (the scalar functions it inlines)
HEADERS = ("abi.pxd", "dtypes.pxd", "ew_ops.pxd", "scalar.pxd")
BUILD_SECONDS = 300

_LOCK = threading.Lock()
_LOADED: dict[str, tuple[object, int]] = {}  # key -> (module, kernel address), kept alive
_FAILED: dict[str, str] = {}                  # key -> why it did not build
_unavailable: str | None = None


def unavailable() -> str | None:
    """Why the last body that was wanted could not be built (None: every one built)."""
    return _unavailable


def kernel_for(name: str, ints) -> int | None:
    """The address of a generated kernel for the fused instruction of kernel ``name`` and
    parameters ``ints``, built (or found in the cache) now; None when the policy wants none,
    the kernel is not a fused one, or no body could be built (the interpreter runs it)."""
    drive = fused.DRIVERS.get(name)
    if drive is None:
        return None
    encoded = decode(ints)
    if not wants_body(encoded.size):
        return None
    dtype = "float" if name.endswith("f32") else "double"
    source = render(encoded, dtype)
    return _load(source, drive)


# -- the source ---------------------------------------------------------------------------------
def render(encoded: Encoded, ctype: str) -> str:
    """The Cython source of a body for ``encoded``'s steps over ``ctype`` ("float", "double").

    >>> from mgegraph.ops.fused_program import Program
    >>> from mgegraph._kernels.lowering.fused import encode
    >>> p = Program([(8,)], (8,), "float32", [("load", 0, 0), ("neg", 1, 0), ("store", 0, 1)])
    >>> [line.strip() for line in render(decode(encode(p)[0]), "float").splitlines()[-10:-6]]
    ['for e in range(n):', 'r0 = in0[e]', 'r1 = ew_neg(r0)', 'out0[e] = r1']
    """
    code = encoded.code()
    functions = sorted({op for op, *_ in code if op in TABLE.BY_NAME})
    consts = sorted({a for op, _, a, _, _ in code if op == "const"}
                    | {x for op, _, _, b, c in code if op in TABLE.BY_NAME
                       for x in (b, c)[:len(TABLE.BY_NAME[op].params)]})
    regs = sorted({dst for op, dst, *_ in code if op != "store"})
    lines = [
        "# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True",
        "# cython: initializedcheck=False",
        "# Generated by mgegraph/_kernels/fused_jit.py: one fused program as one loop.",
        "from mgegraph._kernels.abi cimport Call",
    ]
    if functions:
        lines.append("from mgegraph._kernels.ew_ops cimport " + ", ".join(
            f"ew_{f}" for f in functions))
    lines += [
        "",
        "ctypedef int (*drive_fn)(const Call* c, void* body, const Py_ssize_t* steps,",
        "                         Py_ssize_t n_steps) noexcept nogil",
        "cdef drive_fn _drive = NULL",
        f"cdef Py_ssize_t STEPS[{len(encoded.steps)}]",
        f"STEPS[:] = [{', '.join(map(str, encoded.steps))}]",
        "",
        "",
        f"cdef void body(const {ctype}** ins, {ctype}** outs, const double* floats,",
        "               Py_ssize_t n) noexcept nogil:",
    ]
    lines += [f"    cdef const {ctype}* in{i} = ins[{i}]" for i in range(encoded.n_in)]
    lines += [f"    cdef {ctype}* out{i} = outs[{i}]" for i in range(encoded.n_out)]
    lines += [f"    cdef {ctype} k{i} = <{ctype}>floats[{i}]" for i in consts]
    if regs:
        lines.append(f"    cdef {ctype} " + ", ".join(f"r{r}" for r in regs))
    lines += ["    cdef Py_ssize_t e", "    for e in range(n):"]
    lines += [f"        {_statement(step)}" for step in code]
    lines += [
        "",
        "",
        "cdef int kernel(const Call* c) noexcept nogil:",
        f"    return _drive(c, <void*>body, STEPS, {len(encoded.steps)})",
        "",
        "",
        "def bind(Py_ssize_t drive):",
        "    global _drive",
        "    _drive = <drive_fn>drive",
        "    return <Py_ssize_t>kernel",
    ]
    return "\n".join(lines) + "\n"


def _statement(step) -> str:
    """One step inside the loop, as the interpreter computes it (fused_body.pxi's eval_block)."""
    op, dst, a, b, c = step
    if op == "load":
        return f"r{dst} = in{a}[e]"
    if op == "const":
        return f"r{dst} = k{a}"
    if op == "store":
        return f"out{dst}[e] = r{a}"
    if op == "where":
        return f"r{dst} = r{b} if r{a} != 0 else r{c}"
    spec = TABLE.BY_NAME[op]
    if spec.kind == "unary":
        args = [f"r{a}"] + [f"k{x}" for x in (b, c)[:len(spec.params)]]
    else:  # binary ops, and comparisons (1 or 0 as the register's type)
        args = [f"r{a}", f"r{b}"]
    return f"r{dst} = ew_{op}({', '.join(args)})"


# -- building and loading -----------------------------------------------------------------------
def _isa() -> str:
    return fused.__name__.rsplit(".", 1)[-1]  # fused, fused_avx2 or fused_avx512


def _flags() -> list[str]:
    return build_flags.OPTIMISE + build_flags.TARGET[_isa()] + ["-fPIC", "-shared"]


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def _cache() -> DiskCache:
    return DiskCache(cache_dir("jit", CACHE_ENV), suffix=".so.mg")


def _key(source: str) -> str:
    import Cython
    headers = {name: (KERNELS_DIR / name).read_text() for name in HEADERS}
    return key(source, headers, _isa(),
               (Cython.__version__, sys.version, sysconfig.get_config_var("EXT_SUFFIX")),
               _compiler() + _flags())


def _load(source: str, drive: int) -> int | None:
    global _unavailable
    with _LOCK:
        try:
            name = _key(source)
        except (ImportError, OSError) as error:  # no Cython, or the package lacks its .pxd
            _unavailable = f"cannot build fused bodies: {error}"
            return None
        if name in _LOADED:
            return _LOADED[name][1]
        if name in _FAILED:
            _unavailable = _FAILED[name]
            return None
        cache = _cache()
        with tempfile.TemporaryDirectory(prefix="mgegraph-jit-") as tmp:
            module_name = f"mgegraph_fused_{name[:20]}"
            library = Path(tmp) / (module_name + sysconfig.get_config_var("EXT_SUFFIX"))
            built = cache.get(name)
            if built is None:
                why = _build(source, module_name, Path(tmp), library)
                if why is not None:
                    _FAILED[name] = _unavailable = why
                    return None
                built = library.read_bytes()
                cache.put(name, built)
            else:
                library.write_bytes(built)
            try:
                spec = importlib.util.spec_from_file_location(module_name, library)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)  # the file may go: the library stays mapped
            except (ImportError, OSError) as error:  # built for another Python, say
                cache.path(name).unlink(missing_ok=True)
                _FAILED[name] = _unavailable = f"cannot load a fused body: {error}"
                return None
        address = module.bind(drive)
        _LOADED[name] = (module, address)
        return address


def _build(source: str, module_name: str, tmp: Path, library: Path) -> str | None:
    """Cython and the C compiler on ``source``; None when ``library`` was built, else why not."""
    pyx, c_file = tmp / f"{module_name}.pyx", tmp / f"{module_name}.c"
    pyx.write_text(source)
    steps = [
        [sys.executable, "-m", "cython", "-3", "-I", str(KERNELS_DIR.parent.parent), str(pyx),
         "-o", str(c_file)],
        _compiler() + _flags() + ["-I", sysconfig.get_paths()["include"], str(c_file), "-o",
                                  str(library)],
    ]
    for command in steps:
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=BUILD_SECONDS, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"cannot build fused bodies: {command[0]}: {error}"
        if done.returncode != 0:
            return (f"cannot build fused bodies: {' '.join(command[:3])} failed: "
                    f"{(done.stderr or done.stdout).strip()[-500:]}")
    return None


def loaded() -> int:
    """How many generated bodies this process has loaded."""
    return len(_LOADED)


__all__ = ["kernel_for", "loaded", "render", "unavailable"]
