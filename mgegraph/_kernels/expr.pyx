# The fused elementwise evaluator, built for any x86-64 (SSE2) or other CPU; expr_avx2 is the
# same source built with AVX2 and FMA. See expr_body.pxi.
include "expr_body.pxi"
