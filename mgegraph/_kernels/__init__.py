"""Compiled CPU kernels. Each module exposes KERNELS: {name: C function address}."""
from . import elementwise

KERNEL_MODULES = (elementwise,)
