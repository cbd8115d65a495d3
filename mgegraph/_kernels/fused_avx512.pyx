# The fused elementwise kernel built with AVX-512 and 512-bit vectors (setup.py). See
# fused_body.pxi.
include "fused_body.pxi"
