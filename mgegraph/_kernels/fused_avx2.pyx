# The fused elementwise kernel built with -mavx2 -mfma (setup.py). See fused_body.pxi.
include "fused_body.pxi"
