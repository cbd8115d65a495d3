# The fused elementwise kernel built for any CPU (x86-64: SSE2). fused_avx2 and fused_avx512
# are the same source built for wider vectors; _kernels/__init__.py imports the widest this CPU
# runs. See fused_body.pxi.
include "fused_body.pxi"
