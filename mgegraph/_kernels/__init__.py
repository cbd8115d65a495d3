"""Compiled CPU kernels. Each module exposes KERNELS: {name: C function address}."""
import os

# NOTE: idle OpenMP threads spin by default; between two fused kernels the BLAS threads then
# fight them for the cores and a step can run tens of times slower (seen on 2 cores). Passive
# waiting costs a few microseconds per parallel kernel. It must be set before libgomp loads;
# a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import conv, elementwise, fused, linalg, movement, nn, reduce  # noqa: E402

KERNEL_MODULES = (elementwise, reduce, nn, linalg, conv, movement, fused)
