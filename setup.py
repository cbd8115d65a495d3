"""Builds the Cython kernels of mgegraph/_kernels with optimisation on.

Set MGEGRAPH_DEBUG_KERNELS=1 at build time to compile with bounds checks and -O0 -g, and
MGEGRAPH_BUILD_ONLY=name,name to rebuild only those kernel modules while developing them.
"""
import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("MGEGRAPH_DEBUG_KERNELS") == "1"
COMPILE_ARGS = ["-O0", "-g"] if DEBUG else ["-O3", "-fno-math-errno", "-fno-trapping-math",
                                           "-finline-limit=5000"]

ONLY = set(filter(None, os.environ.get("MGEGRAPH_BUILD_ONLY", "").split(",")))

extensions = [
    Extension(f"mgegraph._kernels.{path.stem}", [str(path)], extra_compile_args=COMPILE_ARGS)
    for path in sorted(Path("mgegraph/_kernels").glob("*.pyx"))
    if not ONLY or path.stem in ONLY
]

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
