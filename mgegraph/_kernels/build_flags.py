"""The C compiler flags of the kernels: setup.py loads this file by path at build time, and
fused_jit.py builds each generated fused body with the flags of the fused build it runs beside,
so that the two give bitwise the same results. Imports nothing.
"""
# every kernel module, unless built for debugging
OPTIMISE = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-finline-limit=5000"]
DEBUG = ["-O0", "-g"]

# Per module, beside OPTIMISE. The fused kernel is one source built three times, for any CPU and
# for AVX2 and AVX-512 (512-bit vectors: GCC otherwise keeps to 256); _kernels/__init__.py
# imports the widest build the CPU runs. No FP contraction anywhere here, so every build, the
# unfused loops of elementwise.pyx and every generated body agree bitwise.
#
# The fused builds also let GCC's inliner grow the module further than its defaults: the
# evaluator's loops (eval_block) are fast only with every op's loop (ew_unary_run and
# ew_binary_run) inlined into them, and with the default budgets the driver of generated bodies
# beside them made GCC stop short: fusion-chain's evaluator took 28-31 ms at 1 thread against
# 10.8 (GCC 12, AMD EPYC).
INLINE = ["--param=inline-unit-growth=400", "--param=large-function-growth=400"]
# norm: its float32 loops (group_norm.h) give one result from three instruction sets; reduce:
# var's squares (reduce.h) are not fused into its sums where the CPU has FMA (aarch64), as the C
# runtime's build does not fuse them.
TARGET = {"elementwise": ["-ffp-contract=off"], "norm": ["-ffp-contract=off"],
          "reduce": ["-ffp-contract=off"],
          "fused": ["-ffp-contract=off", *INLINE],
          "fused_avx2": ["-mavx2", "-mfma", "-ffp-contract=off", *INLINE],
          "fused_avx512": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma",
                           "-mprefer-vector-width=512", "-ffp-contract=off", *INLINE]}
