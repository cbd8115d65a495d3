"""The C runtime's kernels: which of a plan's kernels it has, and the sources each needs.

A library kernel is a C file of ``csrc/kernels/`` defining ``mgr_<name>`` and its check
``mgr_<name>_check`` (``csrc/mgr_kernel.h``), with the headers it includes: its own, and those
of ``mgegraph/_kernels/`` it shares with the Python executor (one source, the same bits). A
fused elementwise instruction is generated instead (``fused_c.py``).
"""
from __future__ import annotations

from pathlib import Path

CSRC = Path(__file__).parent / "csrc"
SHARED = Path(__file__).parent.parent / "_kernels"  # headers the .pyx kernels include too
RUNTIME = ("mgr_runtime.h", "mgr_runtime.c", "mgr_threads.c", "mgr_kernel.h")
MODEL_RUN = "model_run.c"

# the package's gather tiles and what they include (the convolution runs them), and the GEMM's
# (csrc/kernels/gemm_c.h): the executor's GEMM tiles, the single row's loops, the threads rule
TILES = ("conv_tile.h", "cpu_isa.h", "activation.h")
GEMM_TILES = ("gemm_tile.h", "cpu_isa.h", "activation.h", "gemv_row.h", "grain.h")
# the convolution's drivers of those tiles, direct and Winograd (conv2d_f32.c includes them),
# and what they include of _kernels': the tiles, the gather tiles' driver (the executor's
# packed path), Winograd's driver and transforms, the data gradient's layout; the transposed
# convolution (conv2d_data_f32.c) adds the GEMM's tiles and col2im
CONV_TILES = ("conv_gather_c.h", "conv_wino_c.h")
CONV_HEADERS = (*TILES, "conv_gather.h", "wino_conv.h", "wino_tile.h", "conv_data.h")
# the int8 GEMM's headers: the patches and depthwise kernel, the GEMM's tiles, their AMX form
INT8_GEMM = ("qconv.h", "qgemm.h", "qgemm_amx.h")
# the poolings' passes (pool.pyx's: pool.h, pool_int.h for the integers) and the threads rule
POOLING = ("pool.h", "grain.h")
# the plan's kernel suffixes of the blob's dtypes
DTYPE_SUFFIXES = ("f32", "f64", "i32", "i64", "u8", "i8", "i16", "bool")
# kernel name -> (its C file, the headers it includes: csrc/kernels' own, then _kernels')
LIBRARY = {
    "matmul_f32": ("matmul_f32.c", ("gemm_c.h",), GEMM_TILES),
    "linear_f32": ("linear_f32.c", ("gemm_c.h",), GEMM_TILES),
    # the same on weights the exporter packed into panels (export.py's gemm_panels)
    "matmul_packed_f32": ("matmul_f32.c", ("gemm_c.h",), GEMM_TILES),
    "linear_packed_f32": ("linear_f32.c", ("gemm_c.h",), GEMM_TILES),
    "softmax_f32": ("softmax_f32.c", (), ("softmax.h",)),
    "group_norm_f32": ("group_norm_f32.c", (), ("group_norm.h", "activation.h", "cpu_isa.h",
                                               "grain.h")),
    "conv2d_f32": ("conv2d_f32.c", CONV_TILES, CONV_HEADERS),
    # conv2d_f32's Winograd on filters transformed and packed at export (conv_prepack.py), and
    # on U unpacked (blobs from before the packing)
    "conv2d_winograd_packed_f32": ("conv2d_f32.c", CONV_TILES, CONV_HEADERS),
    "conv2d_winograd_f32": ("conv2d_f32.c", CONV_TILES, CONV_HEADERS),
    "conv2d_backward_data_f32": ("conv2d_data_f32.c", CONV_TILES, tuple(dict.fromkeys((
        *CONV_HEADERS, "gemm_tile.h", "grain.h", "conv_col2im.h", "conv_data_gemm.h")))),
    "pool2d_f32": ("pool2d_f32.c", ("pool_c.h",), POOLING),
    # the package's reductions (reduce.h) and the threads rule (grain.h)
    "reduce_f32": ("reduce_f32.c", (), ("reduce.h", "grain.h")),
    # the gradients (and select, their adjoint) and the integers apart: a plan's library holds
    # the whole files it calls, and an inference plan calls the forward float pooling alone
    **{name: ("pool2d_backward_f32.c", ("pool_c.h",), POOLING) for name in (
        "max_pool2d_backward_f32", "avg_pool2d_backward_f32", "max_pool2d_select_f32")},
    "pool2d_i8": ("pool2d_i8.c", ("pool_c.h",), (*POOLING, "pool_int.h")),
    "pool2d_u8": ("pool2d_i8.c", ("pool_c.h",), (*POOLING, "pool_int.h")),
    **{name: ("quantize.c", (), ()) for name in (
        "quantize_f32", "quantize_f64", "dequantize_i8", "dequantize_u8", "dequantize_i32",
        "fake_quant_f32", "fake_quant_f64")},
    "quantized_add_i8": ("qadd_i8.c", (), ()),
    "quantized_add_u8": ("qadd_i8.c", (), ()),
    **{f"{name}_{dt}": ("qconv_i8.c", (), INT8_GEMM) for dt in ("i8", "u8") for name in (
        "quantized_conv2d", "quantized_conv2d_packed", "quantized_pack_weight")},
    # the int8 transposed convolution and batched matmul, on the same GEMM (qconv_i8.c)
    **{f"{name}_{dt}": ("qconv_i8.c", (), INT8_GEMM) for dt in ("i8", "u8") for name in (
        "quantized_conv_transpose2d", "quantized_batch_matmul",
        "quantized_deconv2d_packed", "quantized_pack_deconv_weight")},
    # the copies of every dtype (movement.c: one loop per element size), scatter_add's floats
    **{f"{name}_{dt}": ("movement.c", (), ()) for dt in DTYPE_SUFFIXES
       for name in ("strided", "concat", "pad", "slice_backward", "gather")},
    "scatter_add_f32": ("movement.c", (), ()),
    "scatter_add_f64": ("movement.c", (), ()),
    # sort, topk and the scans on sorting.h, the rows and lines sorting.pyx runs
    **{f"{name}_{dt}": ("sorting.c", (), ("sorting.h", "scalar.h"))
       for dt in ("f32", "f64", "i32", "i64")
       for name in ("sort", "topk", "cumsum", "cumprod", "cumprod_backward")},
}

# The width of the panels the exporter packs a GEMM's constant op(B) into: the columns of the
# exporting CPU's widest GEMM tile (gemm_tile.h's mg_gemm_panel), by conv_tile.h's instruction
# sets. A runtime on another CPU reads them with its widest tile whose width divides this one.
GEMM_PANELS = {"avx512": 64, "avx2": 16, "base": 8}


def gemm_panel() -> int:
    """The panel width of this CPU's widest GEMM tile (the exports' packed weights)."""
    from .._kernels import conv  # lazy: compiled kernels, loaded only when a GEMM is packed
    return GEMM_PANELS[conv.blocked_isas()[-1]]


# the sources built with FP contraction (the Makefile's -ffp-contract=off elsewhere): those on
# the GEMM and convolution tiles, whose sums are FMAs as the package's build contracts them
CONTRACTED = ("kernels/matmul_f32.c", "kernels/linear_f32.c", "kernels/conv2d_f32.c",
              "kernels/conv2d_data_f32.c")

# (a group loading quantized integers is named by its first input's dtype: fused_u8, fused_i8)
FUSED_KERNELS = ("fused_f32", "fused_f64", "fused_u8", "fused_i8")
# the unfused table ops', comparisons' and casts' kernels, named by their input's dtype: each
# instruction generated as a one-step loop (fused_c.program)
ELEMENTWISE_KERNELS = tuple(f"{family}_{dtype}" for family in ("unary", "binary", "compare", "cast")
                            for dtype in DTYPE_SUFFIXES)
GENERATED = FUSED_KERNELS + ELEMENTWISE_KERNELS


def has(kernel: str) -> bool:
    """Whether the C runtime runs the plan kernel ``kernel`` (a generated one still has its
    steps checked by ``fused_c``)."""
    return kernel in LIBRARY or kernel in GENERATED


def refuses(ins) -> str | None:
    """Why the C kernel of instruction ``ins`` cannot run its parameter block (None: it can):
    what its loader check (``mgr_<kernel>_check``) would refuse, said at export."""
    if ins.kernel == "reduce_f32":  # its op code first: kernel_abi/reduce.py's CODES
        return None if ins.ints[0] < 6 else "reduce_f32 argmax and argmin (an index output)"
    if ins.kernel != "conv2d_f32":
        return None
    from ..kernel_abi.conv import FIELDS  # lazy: startup cost (only conv plans read it)
    f = dict(zip(FIELDS, ins.ints))
    if f["groups"] != 1 and f["packed"]:
        return "conv2d_f32 of several groups on packed weights"
    return None


def sources(kernels) -> dict[str, Path]:
    """{file name in the export: source path} of the library kernels named."""
    files: dict[str, Path] = {}
    for name in sorted(set(kernels) & LIBRARY.keys()):
        source, own, shared = LIBRARY[name]
        files[f"kernels/{source}"] = CSRC / "kernels" / source
        files.update({f"kernels/{h}": CSRC / "kernels" / h for h in own})
        files.update({f"kernels/{h}": SHARED / h for h in shared})
    return files
