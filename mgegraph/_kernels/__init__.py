"""Compiled CPU kernels. Each module exposes KERNELS: {name: C function address}."""
from . import conv, elementwise, expr, fused, linalg, movement, nn, reduce

if expr.cpu_has_avx2_fma():
    from . import expr_avx2 as expr  # the same kernels, built for AVX2 + FMA

KERNEL_MODULES = (elementwise, reduce, nn, linalg, conv, movement, expr, fused)
