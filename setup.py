"""Builds the Cython kernels of mgegraph/_kernels with optimisation on.

First it renders the elementwise table (mgegraph/ops/elementwise_table.py) into
mgegraph/_kernels/ew_ops.pxd, the scalar functions and loops of every elementwise op that the
kernels cimport (see mgegraph/_kernels/ew_codegen.py).

Set MGEGRAPH_DEBUG_KERNELS=1 at build time to compile with bounds checks and -O0 -g, and
MGEGRAPH_BUILD_ONLY=name,name to rebuild only those kernel modules while developing them.
MGEGRAPH_ASAN=1 compiles and links them with AddressSanitizer (-fsanitize=address -O1 -g); the
result loads only with libasan preloaded: .ci/asan builds and tests such a build in a clone.
"""
import importlib.util
import os
import platform
import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("MGEGRAPH_DEBUG_KERNELS") == "1"
ASAN = os.environ.get("MGEGRAPH_ASAN") == "1"
ASAN_ARGS = ["-fsanitize=address", "-fno-omit-frame-pointer", "-O1", "-g"] if ASAN else []
# (the last -O wins, so ASan's -O1 after the -O3: fast enough, and exact line numbers)

ONLY = set(filter(None, os.environ.get("MGEGRAPH_BUILD_ONLY", "").split(",")))
KERNELS = Path("mgegraph/_kernels")


def _load(name: str, path: Path):
    """A module loaded from its file: the package cannot be imported before it is built."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _render_elementwise_ops() -> None:
    table = _load("_mgegraph_elementwise_table", Path("mgegraph/ops/elementwise_table.py"))
    codegen = _load("_mgegraph_ew_codegen", KERNELS / "ew_codegen.py")
    codegen.write(table, KERNELS)


_render_elementwise_ops()
FLAGS = _load("_mgegraph_build_flags", KERNELS / "build_flags.py")  # shared with fused_jit.py
COMPILE_ARGS = (FLAGS.DEBUG if DEBUG else FLAGS.OPTIMISE) + ASAN_ARGS

# The fused elementwise kernel is one source built three times (see build_flags.py).
X86 = platform.machine().lower() in ("x86_64", "amd64")
FUSED_BUILDS = ("fused", "fused_avx2", "fused_avx512") if X86 else ("fused",)
TARGET = FLAGS.TARGET
OPENMP = set()
# parallel.pyx holds the thread policy and the parallel loop of the other kernels (issue 19)
OPENMP_OPTIONAL = set(FUSED_BUILDS) | {"conv", "parallel"}  # one thread without OpenMP


def _have_openmp() -> bool:
    import tempfile

    from setuptools._distutils import ccompiler, sysconfig

    cc = ccompiler.new_compiler()
    sysconfig.customize_compiler(cc)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.c")
        src.write_text("#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n")
        try:
            objs = cc.compile([str(src)], output_dir=tmp, extra_postargs=["-fopenmp"])
            cc.link_executable(objs, str(Path(tmp, "probe")), extra_postargs=["-fopenmp"])
        except Exception:  # noqa: BLE001  any failure means no OpenMP; setuptools 80+ raises
            return False   # a CompileError that is no longer a CCompilerError
    return True


if (not ONLY or ONLY & OPENMP_OPTIONAL) and _have_openmp():
    OPENMP |= OPENMP_OPTIONAL

extensions = [
    Extension(f"mgegraph._kernels.{path.stem}", [str(path)],
              extra_compile_args=COMPILE_ARGS + (["-fopenmp"] if path.stem in OPENMP else [])
              + TARGET.get(path.stem, []),
              extra_link_args=(["-fopenmp"] if path.stem in OPENMP else []) + ASAN_ARGS[:1])
    for path in sorted(KERNELS.glob("*.pyx"))
    if (not ONLY or path.stem in ONLY) and (path.stem in FUSED_BUILDS
                                            or not path.stem.startswith("fused"))
]
# eager dispatch's C path: it calls the kernels through launch.pxd, allocates with NumPy's C API
if not ONLY or "fastpath" in ONLY:
    extensions.append(Extension("mgegraph.eager.fastpath", ["mgegraph/eager/fastpath.pyx"],
                                include_dirs=[numpy.get_include()],
                                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                                extra_compile_args=COMPILE_ARGS, extra_link_args=ASAN_ARGS[:1]))

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={
            "boundscheck": DEBUG, "wraparound": DEBUG, "initializedcheck": DEBUG,
            "cdivision": not DEBUG, "nonecheck": DEBUG,
        },
    ),
)
