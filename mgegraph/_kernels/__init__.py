"""Compiled CPU kernels. Each module exposes KERNELS: {name: C function address}."""
import os

# NOTE: idle OpenMP threads spin by default; between two fused kernels the BLAS threads then
# fight them for the cores and a step can run tens of times slower (seen on 2 cores). Passive
# waiting costs a few microseconds per parallel kernel. It must be set before libgomp loads;
# a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import conv, elementwise, fused, linalg, movement, nn, pool, reduce  # noqa: E402


def _widest_fused_build():
    """The fused kernel built for the widest vectors this CPU runs (the same results)."""
    import importlib
    for isa in ("avx512", "avx2"):
        if fused.cpu_has(isa):
            try:
                return importlib.import_module(f"{__name__}.fused_{isa}")
            except ImportError:  # not built on this platform
                continue
    return fused


fused = _widest_fused_build()  # noqa: F811
KERNEL_MODULES = (elementwise, reduce, nn, linalg, conv, pool, movement, fused)
