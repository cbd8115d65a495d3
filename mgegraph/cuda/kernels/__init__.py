"""The CUDA kernel families: each module has ``implement(table)`` (the ops it runs, their kernel
family, dtypes and lowering, mostly the shared one of mgegraph/kernel_abi/<family>.py) and
``KERNELS`` (kernel name, e.g. "unary_f32", -> mgegraph.cuda.kernel.CudaKernel, or a
RenderedKernel for the families whose source is rendered per instruction: elementwise, fused).

The backend (mgegraph/cuda/backend.py) imports every module listed in FAMILIES, in order; a
kernel name defined twice or an op implemented twice is an ImportError there.
"""
FAMILIES = [
    "elementwise",   # unary, binary, compare, where, cast, assign, copy: rendered from the table
    "fused",         # fused_elementwise: each group's program rendered to one kernel
    "reduce",        # csrc_cuda/reduce.cu: sum, prod, mean, var, max, min, argmax, argmin
    "softmax",       # csrc_cuda/softmax.cu: softmax, log_softmax, cross entropy (+ backward)
    "gemm",          # csrc_cuda/gemm.cu: matmul, linear (bias and relu epilogue)
    "norm",          # csrc_cuda/norm.cu: layer_norm, batch_norm (+ backward)
    "pool",          # csrc_cuda/pool.cu: max/avg/adaptive pooling, their gradients, select
    "conv",          # csrc_cuda/conv.cu: conv2d and its two gradients (implicit GEMMs)
    "movement",      # csrc_cuda/movement.cu: strided copies, concat/split, pad, indexing, fills
    "dropout",       # csrc_cuda/dropout.cu: the CPU's counter-based mask
    "vision",        # csrc_cuda/vision.cu: grid_sample, remap, roi_align/pooling (+ backward), nms
]
# normalisation families (ops/norm.py)
FAMILIES += [
    "group_norm",    # csrc_cuda/group_norm.cu: group_norm (+ backward)
]
FAMILIES += [
    "resize",        # csrc_cuda/resize.cu: resize (nearest, linear, cubic) and its gradient
]
FAMILIES += [
    "deform",        # csrc_cuda/deform.cu: deform_im2col, correlation (+ backward)
]
FAMILIES += [
    "sorting",       # csrc_cuda/sorting.cu: sort, topk, cumsum, cumprod (+ cumprod's gradient)
    "rms_norm",      # csrc_cuda/rms_norm.cu: rms_norm (its gradient is made of other ops)
]
# scaled dot-product attention (ops/attention.py)
FAMILIES += [
    "attention",     # csrc_cuda/attention.cu: attention (+ backward), a thread per row
]
# the counter-based random draws (ops/random.py)
FAMILIES += [
    "random",        # csrc_cuda/rng.cu: rng_uniform, rng_gamma, rng_poisson (rng_sample.h)
]
# MegEngine's matinv (ops/linalg_inv.py) and sliding windows (ops/sliding_window.py)
FAMILIES += [
    "matinv",          # csrc_cuda/matinv.cu: matinv, a thread per matrix
    "sliding_window",  # csrc_cuda/sliding_window.cu: sliding_window and its transpose
]
# convolutions with unshared weights or region-restricted taps (ops/local_conv.py)
FAMILIES += [
    "local_conv",    # csrc_cuda/local_conv.cu: local_conv2d, region_restricted_conv (+ backward)
]
# quantize and dequantize (ops/quantize.py)
FAMILIES += [
    "quantize",      # csrc_cuda/quantize.cu: quantize, dequantize (per-channel: 4 channels)
]
# quantization-aware training's fake_quant (ops/fake_quant.py)
FAMILIES += [
    "fake_quant",    # csrc_cuda/fake_quant.cu: fake_quant, scales and zero points as buffers
]
# the int8 compute ops (ops/quantized.py)
FAMILIES += [
    "quantized",     # csrc_cuda/quantized.cu(h): quantized conv2d and linear (dp4a), add
]
# the collectives of data-parallel training (ops/collective.py): NCCL calls (cuda/collective.py)
FAMILIES += [
    "collective",    # csrc_cuda/collective.cu: the scale and the rank-order sum around NCCL
]
