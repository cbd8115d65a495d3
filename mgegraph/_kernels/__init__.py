"""Compiled CPU kernels. Each module exposes KERNELS: {name: C function address}."""
from . import conv, elementwise, expr, fused, linalg, movement, nn, reduce

KERNEL_MODULES = (elementwise, reduce, nn, linalg, conv, movement, expr, fused)
