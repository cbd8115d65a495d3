# The fused elementwise evaluator built with -mavx2 -mfma (setup.py); imported only on CPUs
# that have both (expr.cpu_has_avx2_fma). See expr_body.pxi.
include "expr_body.pxi"
