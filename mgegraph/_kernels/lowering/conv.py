"""CPU lowerings of conv2d and its two backward ops: the shared Conv parameter block
(mgegraph/kernel_abi/conv.py) with which of the CPU kernels' paths a convolution takes, and its
workspace; and conv2d on prepacked weights, which only the CPU runs."""
from __future__ import annotations

import numpy as np

from ...backend import Launch
from ...kernel_abi import conv as abi
from ...kernel_abi.layout import pack
from ...kernel_abi.matmul import activation_code, check_blas_dims
from ...ops.conv import conv_geometry, weight_dims
from ...ops.matmul import rows_by_weight
from .. import blas_select, parallel
from .. import conv as K
from .built import check_built
from .threads import thread_choices, way_label

# a convolution below this many FLOPs runs on one thread (fork/join costs ~10 us)
PARALLEL_FLOPS = 4_000_000
PATHS = ("direct", "im2col", "shifted", "blocked", "gather", "batched",
         "winograd", "depthwise", "pointwise", "tiles")  # _conv_path's choices


def _shifted_pays(cg, ocg, col_bytes) -> bool:
    """Whether shifted GEMMs are expected to beat im2col: a rule fitted to measurements.

    Design: per tap, the shifted path reads and writes the (ocg, npix) result once more where
    im2col copies a (cg, npix) block, so it needs cg not far below ocg. Im2col's one GEMM streams
    its (cg * kh * kw, npix) matrix once per ocg rows: with few output channels, or a matrix
    larger than L2, that streaming is what it waits on. Measured on a 2-core Xeon (2 MiB L2 per
    core; OpenBLAS at 1 and 2 threads; 3x3 to 7x7 kernels, 1 to 128 channels, 4x4 to 64x64
    images), shifted was 1.2-2.8x faster where this holds (16 -> 16 at 32x32: x1.8, 64 -> 64 at
    32x32: x1.3); elsewhere it was up to 1.8x slower (3 -> 16, 16 -> 64) or within 10% either way
    (small images, 64 -> 64 at 16x16, 128 -> 128 at 8x8).
    """
    if ocg > 2 * cg or col_bytes < 256 * 1024:
        return False
    return ocg <= 32 or col_bytes >= 2 * 1024 * 1024


def _tiles_apply(op, dtype, kernel, stride, padding, dilation, out_cols=1) -> tuple:
    """The tiled paths that compute this op: float32 only, kernels of up to MAX_TAPS taps;
    backward data at stride 1 with a padding d (k - 1) - p that is not negative; the row tiles
    at stride 1, and conv2d's at stride 2 undilated; backward filter on the gather tiles, up to
    MAX_COLS output columns."""
    if dtype != "float32" or kernel[0] * kernel[1] > K.MAX_TAPS:
        return ()
    if op == "conv2d_backward_filter":
        return ("gather",) if out_cols <= K.MAX_COLS else ()
    if op == "conv2d_backward_data" and (stride != (1, 1) or any(
            p > d * (k - 1) for p, d, k in zip(padding, dilation, kernel))):
        return ()
    rows = stride == (1, 1) or (op == "conv2d" and stride == (2, 2) and dilation == (1, 1))
    return ("blocked", "gather") if rows else ("gather",)


def _tiled_path(paths, op, kernel, groups_dims, plane, stride=(1, 1)) -> str | None:
    """Which of the tiled ``paths`` is expected to beat the GEMM paths, if any: a rule fitted to
    measurements. ``plane`` is the output's (oh, ow).

    Design: measured on the shared 2-core AMD EPYC (Zen 4, AVX-512 tiles), 1 thread, CPU time
    of the calling thread (the machine was overloaded: wall times drifted 4x), medians of 9-21
    interleaved runs, as time over PyTorch 2.13 eager (oneDNN) on the same shape and pass
    (GEMM path / row tiles / gather tiles):
    - row tiles at stride 1 on planes of 16x16 or more, forward and backward data: convnet
      32->64 at 32x32 1.20 / 1.01 / 1.45, 64->128 at 16x16 1.18 / 1.13 / 1.52, ResNet 64->64 at
      56x56 1.30 / 1.01 / 1.48, 128->128 at 28x28 1.37 / 1.07 / 1.13; backward data alike
      (1.19 / 0.99, 1.23 / 1.11, 1.36 / 0.97). Below 16x16 with many channels the GEMM paths
      win (256 channels at 14x14: 1.17 / 1.27 / 1.74; 512 at 7x7: 0.94 / 1.47 / 2.08), as with
      3 input channels (0.91 / 0.93 / 1.53).
    - gather tiles where the GEMMs degenerate: a few input channels at stride 2 (ResNet stems,
      7x7/2 from 3 channels: 2.26 / - / 1.59 at 224, 1.58 / - / 1.38 at 64) and backward data
      on planes of 4 cells or fewer (512 channels at 2x2: 6.3 / 5.4 / 2.9). Elsewhere at stride
      2 the GEMM paths are as fast or faster (256 -> 512 to 7x7: 1.09 / - / 2.23). A forward
      pass on a tiny plane goes to the batched GEMM instead (_batched_pays).
    - backward filter: see _filter_tiles_pay.
    - grouped convolutions with fewer than 8 output channels per group (depthwise) were not
      measured and keep the GEMM paths: most of a tile's rows would be padding.
    - row tiles at stride 2 (conv2d; the input split into four phase planes, each summed at
      stride 1), measured alike, against the paths chosen before them (wall time, 1 / 2 threads,
      ms): the ResNet-224 stem 2.84 / 1.78 against gather tiles 3.37 / 2.64, ResNet-64's (batch
      8) 1.96-2.31 / 1.20 against 2.02-2.08 / 1.57; 64 -> 128 from 56x56 1.26 / 1.07 against
      im2col 1.47 / 1.16. To 14x14 and smaller the GEMM paths stay faster (128 -> 256: 1.55 /
      1.49 against 1.42 / 1.05; 256 -> 512 to 7x7: 3.1 against 1.5).
    """
    cg, ocg = groups_dims
    cells = plane[0] * plane[1]
    if op == "conv2d_backward_filter":
        return "gather" if _filter_tiles_pay(paths, ocg, cells) else None
    if kernel == (1, 1) or ocg < 8:
        return None
    if "blocked" in paths and cells >= 256 and (cg > 3 or stride == (2, 2)):
        return "blocked"
    stem = stride != (1, 1) and cg * kernel[0] * kernel[1] <= 256
    tiny = op == "conv2d_backward_data" and cells <= 4
    if "gather" in paths and (tiny or stem):
        return "gather"
    return None


# the output cells at least, and output channels a multiple of, for which backward filter runs
# on the gather tiles (_filter_tiles_pay)
FILTER_TILE_CELLS = 256
FILTER_TILE_CHANNELS = {"avx512": 64, "avx2": 16}  # the tile's output channels, by instruction set


def _filter_tiles_pay(paths, ocg, cells) -> bool:
    """Whether backward filter is expected to run faster on the gather tiles than as im2col
    GEMMs: a rule fitted to measurements (conv_blocked.pxi's filter_call).

    Design: with output channels in whole 64s, AVX-512's 64-channel x 7-pair tile sums a block
    of dW^T in registers over every output cell, reading x's windows in place, where MKL's
    GEMMs per image reach 77-95 GFLOP/s. Measured on the 2-core AMD EPYC (Zen 4), time per
    call against the im2col path, 1 / 2 threads (/work/scratch/bwf.py, medians of 3 alternating
    rounds): convnet 32 -> 64 at 32x32 (batch 32) 0.81 / 0.82, 64 -> 128 at 16x16 0.89 / 0.92;
    batch 8: 128 at 28x28 0.86 / 0.89, 3x3/2 64 -> 128 to 28x28 0.75 / 0.84. On smaller planes
    the GEMMs stay: 256 at 14x14 0.97 / 1.07, and, measured before the threads prepared the
    next image beside the tiles, 512 at 7x7 0.95 / 1.05, 256 -> 512 to 7x7 (batch 2) 1.10 /
    1.38 (64 at 56x56, batch 1: 0.82 / 0.92). The 48- and 32-channel tiles were slower than the
    GEMMs (1.05-1.31x on convnet's layers).

    On AVX2 (AMD Zen 3, OpenBLAS, the 16-channel x 6-pair tile; the same script) the same
    rule holds, 1 / 2 threads: convnet 32 -> 64 at 32x32 0.81 / 0.89, 64 -> 128 at 16x16
    0.87 / 0.87, its RGB layer 3 -> 32 0.72 / 0.73; batch 8: 128 at 28x28 0.83 / 0.84, 64 at
    56x56 0.72 / 0.71, 3x3/2 64 -> 128 to 28x28 0.76 / 0.76; but 256 at 14x14 0.99 / 1.10."""
    channels = FILTER_TILE_CHANNELS.get(_isa())
    return ("gather" in paths and channels is not None and ocg % channels == 0
            and cells >= FILTER_TILE_CELLS)


def _batched_pays(batch, plane, kdim) -> bool:
    """Whether one GEMM over the whole batch's im2col beats a GEMM per image: a rule fitted to
    measurements, as _tiled_path's (batch 8, time over PyTorch eager; im2col per image / batched
    / gather tiles): 512 channels at 2x2 4.49 / 0.94 / 2.89, from stride 2 4.62 / 0.93 / 2.65;
    256 at 4x4 1.65 / 1.55 / 2.41, from stride 2 1.76 / 1.50 / 2.26; but 128 at 8x8
    1.24 / 1.38 / 1.58 and from stride 2 1.49 / 1.57 / 1.41. With the batched path's im2col
    read through a table (conv_gemm.pxi), kdim (input channels x taps) down to 128 pays too
    (AMD EPYC, 1 thread, CPU time of the call, MKL, per image / batched): the 1x1 stride-2
    256 -> 512 to 2x2 699 / 115 us, 128 -> 128 3x3 at 4x4 (batch 2) 151 / 133 us; at 8x8 it
    does not (16 -> 16 3x3: 52 / 70 us, 64 -> 64: 1.88 / 2.39 ms), except from deeper sums:
    the 3x3 stride-2 convolutions to 8x8 (64 -> 128, batch 8: 1.30 / 1.11 ms; 32 -> 64, batch
    32: 1.94 / 1.62 ms), whose per-image im2col copies cell by cell anyway. The workspace grows
    with the batch: kdim x batch x cells."""
    cells = plane[0] * plane[1]
    return batch > 1 and (cells <= 16 and kdim >= 128 or cells <= 64 and kdim >= 288)


def _winograd_pays(cg, ocg, plane, batch) -> bool:
    """Whether Winograd's F(2x2, 3x3) is expected to beat the other paths (float32, 3x3, stride
    1, no dilation or groups: _winograd_applies checks): a rule fitted to measurements.

    Design: measured on the AMD EPYC (Zen 4), 1 thread, CPU time of the call, MKL, 3x3 with
    padding 1 and relu, as Winograd's time over the path chosen without it (and Winograd's over
    PyTorch 2.13 eager, oneDNN): ResNet-224 64 -> 64 at 56x56 0.75 (0.84), 128 at 28x28 0.64
    (0.75), 256 at 14x14 0.81 (0.88); ResNet-64 (batch 8) 64 at 16x16 0.78 (0.93), 128 at 8x8
    0.63 (0.90), 256 at 4x4 0.78 (1.21); convnet-train (batch 32) 32 -> 64 at 32x32 0.88
    (0.85), 64 -> 128 at 16x16 0.69 (0.79). It loses with 512 channels (7x7 1.40, 2x2 3.29:
    transforming 512 x 512 filters on every call writes 16 MiB, and few tiles make thin GEMMs).
    Fewer than 32 input channels were not measured and keep the other paths. Backward data
    (the convolution of dy: its "input" channels are the forward's outputs; the caller swaps
    them) measured alike: convnet's 0.95 and 0.80, ResNet-64's 0.78 and 0.61, ResNet-224's
    0.78 and 0.68 of the blocked or im2col path.
    """
    return 32 <= cg <= 256 and ocg <= 256


def _winograd_applies(op, dtype, kernel, stride, padding, dilation, groups) -> bool:
    """Whether the Winograd path computes this op: float32 3x3 at stride 1, undilated, without
    groups; conv2d, or conv2d_backward_data (the convolution of dy padded by 2 - p, which must
    not be negative)."""
    if op not in ("conv2d", "conv2d_backward_data") or dtype != "float32" or groups != 1:
        return False
    if op == "conv2d_backward_data" and max(padding) > 2:
        return False
    return kernel == (3, 3) and stride == (1, 1) and dilation == (1, 1)


def _depthwise_applies(op, groups_dims) -> bool:
    """Whether the depthwise path computes this op: conv2d with one input and one output
    channel per group (conv_depthwise.pxi), which it takes wherever the tiles do not (they
    need 8 output channels per group). A rule fitted to measurements: on the shared 2-core
    Intel Xeon (AVX-512; the machine overloaded, load 9, so indicative), 1 thread, medians of 7
    interleaved rounds of 20 runs, im2col against depthwise: MobileNet-v2's 3x3 over 192
    channels, batch 1, at 56x56 stride 1 4.30 / 3.60 ms, 56x56 stride 2 6.82 / 2.86 ms, 28x28
    stride 1 1.09 / 0.82 ms (another run 0.60 / 0.78); 32 channels at 32x32, batch 8, 1.91 /
    1.41 ms. At 2 threads the load made the two indistinguishable (within 5%), except stride
    2 (4.51 / 1.92 ms)."""
    return op == "conv2d" and groups_dims == (1, 1)


def _pointwise_applies(op, dtype) -> bool:
    """Whether the pointwise path computes this 1x1, stride-1, unpadded convolution: conv2d in
    float32 (conv_pointwise.pxi)."""
    return op == "conv2d" and dtype == "float32"


# the fewest output cells, and the most input channels per group, of the pointwise path's rule
POINTWISE_MIN_CELLS, POINTWISE_MAX_CHANNELS = 16, 512
# on AVX2, for one image: planes of fewer cells than this (8 vectors) take the direct GEMM when
# the weights (input x output channels per group) are more than POINTWISE_AVX2_MAX_WEIGHTS
POINTWISE_AVX2_MIN_CELLS, POINTWISE_AVX2_MAX_WEIGHTS = 64, 32 * 1024


def _pointwise_pays(cg, cells, ocg, batch) -> bool:
    """Whether the pointwise tiles are expected to beat the direct GEMM: a rule fitted to
    measurements.

    Design: the direct GEMM packs x's panels and passes over y again for the bias and
    activation; the tiles read x in place and store y once, but compute a plane narrower than
    a vector cell by cell, and re-read a column strip (input channels x 48 cells) per block of
    8 output channels, from L1 only while the strip fits. Measured on the shared 2-core Intel
    Xeon (Sapphire Rapids, AVX-512; OpenBLAS), 1 thread, bias and relu6, a frozen plan, median
    over 5 alternating rounds of medians (or bests) of 20-300 calls, direct / pointwise, us:
    MobileNet-v2's block, 32 -> 192 at 56x56 712 / 398, 192 -> 32 683 / 349, at 28x28 181 / 93
    and 221 / 125; 16 -> 96 at 112x112 1596 / 753, 64 -> 384 at 14x14 121 / 78, 160 -> 960 at
    7x7 182 / 160, batch 8: 256 at 4x4 234 / 200, 64 at 8x8 47 / 37. The GEMM wins with many
    input channels on small planes (960 -> 160 at 7x7 163 / 168, 1024 -> 1024 1058 / 1174) and
    on planes narrower than a vector (512 at 2x2: 92 / 776).

    On AVX2 (AMD Zen 3, OpenBLAS; 8-cell vectors, tiles of 4 channels x 2 or 3 vectors; the
    two plans in one process, interleaved, 1 thread, bias and relu6, medians of 5 rounds of
    medians of 5-200 calls, the machine loaded, load 4-5), pointwise over direct: the block's
    layers 0.64-0.71 (32 -> 192 and 192 -> 32 at 56x56 and 28x28), 16 -> 96 at 112x112 0.61,
    at 14x14 64 -> 384 0.92, 576 -> 96 0.78, 96 -> 576 0.88, 256 -> 256 0.93, 512 -> 512
    1.07; batch 8, 256 at 4x4 0.88, 64 at 8x8 0.74; at 8x8 128 -> 128 0.83, 256 -> 256 0.88.
    But one image's 7x7 plane (6 vectors and an overlapping one) loses with many weights:
    96 -> 576 1.12, 160 -> 960 1.00-1.10, 320 -> 1280 1.12, 512 -> 512 1.21 (960 -> 160,
    beyond the strip's channels anyway, 1.20-1.27), where 64 -> 384 is even (0.99), 160 -> 160
    1.02 and 32 -> 32 0.85 (batch 2 and 4, 160 -> 960: 1.03). So on AVX2 one image under 64
    cells keeps the GEMM beyond 32K weights. The base build (4-cell vectors) was not
    measured and keeps AVX-512's rule.
    """
    if cells < POINTWISE_MIN_CELLS or cg > POINTWISE_MAX_CHANNELS:
        return False
    small_plane = batch == 1 and cells < POINTWISE_AVX2_MIN_CELLS
    return not (_isa() == "avx2" and small_plane and cg * ocg > POINTWISE_AVX2_MAX_WEIGHTS)


def _conv_path(op, dtype, kernel, stride, padding, dilation, groups_dims, col_bytes,
               plane, batch=1, groups=1) -> str:
    """Which of the kernels' ways to compute a convolution (one of ``PATHS``).
    ``groups_dims`` is (input, output) channels per group; backward filter has only the GEMM
    paths, backward data no shifted one."""
    cg, ocg = groups_dims
    if cg == 0:
        return "direct"  # no input channels: the GEMM only zeroes y
    if kernel == (1, 1) and stride == (1, 1) and padding == (0, 0):
        pays = _pointwise_applies(op, dtype) and _pointwise_pays(cg, plane[0] * plane[1],
                                                                 ocg, batch)
        return "pointwise" if pays else "direct"
    if _winograd_applies(op, dtype, kernel, stride, padding, dilation, groups) and (
            _winograd_pays(ocg, cg, plane, batch) if op == "conv2d_backward_data"
            else _winograd_pays(cg, ocg, plane, batch)):
        return "winograd"
    tiled = _tiled_path(_tiles_apply(op, dtype, kernel, stride, padding, dilation, plane[1]),
                        op, kernel, groups_dims, plane, stride)
    if tiled is not None:
        return tiled
    if _depthwise_applies(op, groups_dims):
        return "depthwise"
    if op == "conv2d" and groups == 1 and _batched_pays(batch, plane, cg * kernel[0] * kernel[1]):
        return "batched"
    forward = op == "conv2d"
    if (forward and stride == (1, 1) and dilation == (1, 1) and kernel != (1, 1)
            and _shifted_pays(cg, ocg, col_bytes)):
        return "shifted"
    return "im2col"


# cells of output at most, and output channels (of a group) at least, for which MKL runs an
# im2col GEMM faster as y^T = col^T w^T (then a transpose): measured on the 2-core AMD EPYC, 1
# thread, CPU time, best of 20: ResNet's 512 -> 512 3x3 at 7x7 (512 x 49 x 4608) 3.53 -> 2.90 ms
# with the transpose (47 us), 512 x 49 x 2304 1.58 -> 1.32; at 196 cells 3-7% faster before a
# transpose of 50-225 us; batched 512 x 32 x 4608 3%. OpenBLAS was 4-10% slower that way.
TRANSPOSED_MAX_CELLS, TRANSPOSED_MIN_CHANNELS = 64, 256


def _transposed_pays(op, path, cells, ocg) -> bool:
    """Whether conv2d's im2col GEMM should give y^T (cells x channels), then transpose: a rule
    fitted to measurements, for the BLAS in use."""
    return (op == "conv2d" and path == "im2col" and cells <= TRANSPOSED_MAX_CELLS
            and ocg >= TRANSPOSED_MIN_CHANNELS and blas_select.choice().name == "mkl")


def _isa() -> str:
    """The tiles' instruction set: the widest this CPU runs."""
    return K.blocked_isas()[-1]


def _threads(batch, flops) -> int:
    """The threads a convolution may use (capped at run time by the thread policy's maximum,
    parallel.max_threads)."""
    return parallel.max_threads() if flops >= PARALLEL_FLOPS else 1


# bytes moved (input and output) per thread from which the depthwise path splits its planes
DEPTHWISE_GRAIN = 512 * 1024


def _depthwise_threads(x, y) -> int:
    """The threads of the depthwise path: by the bytes it moves, not its FLOPs, as a
    memory-bound kernel's (parallel.threads_for). Design: 9 multiply-adds per output cell put
    MobileNet-v2's layers under PARALLEL_FLOPS (192 channels to 28x28: 2.7 MFLOP) while one
    thread takes 75-180 us over them. Measured on the shared 2-core Intel Xeon (Sapphire
    Rapids, AVX-512; medians of 100 calls, 5 rounds, the rounds undisturbed by the load), 3x3
    with bias and relu6, 1 / 2 threads: 192 channels 56x56 stride 1 (4.8 MB) 330 / 172-215 us,
    stride 2 (3 MB) 183 / 89-114 us, 28x28 stride 1 (1.2 MB) 76 / 61-65 us."""
    moved = (x.size + y.size) * x.dtype.itemsize
    return parallel.threads_for(moved, DEPTHWISE_GRAIN)


def _conv_launch(op, x, w, y, attrs, has_bias=False, activation=0, way=None) -> Launch:
    """The Conv parameters of convolving x by w into y. The backward ops, which compute x or w
    instead, walk the same layouts, so they take the same parameters. ``way`` (path, threads,
    transposed) is a candidate of the measured choice; None: the rules choose."""
    oc, cg, (kh, kw), stride, padding, dilation = conv_geometry((x, w), attrs)
    groups, npix, kdim = attrs["groups"], y.shape[2] * y.shape[3], cg * kh * kw
    if way is None:
        path = _conv_path(op, x.dtype.name, (kh, kw), stride, padding, dilation,
                          (cg, oc // groups), kdim * npix * x.dtype.itemsize, y.shape[2:],
                          x.shape[0], groups)
        threads = _threads(x.shape[0], 2 * x.shape[0] * oc * npix * kdim)
        if path == "depthwise":
            threads = max(threads, _depthwise_threads(x, y))
        transposed = _transposed_pays(op, path, npix, oc // groups)
    else:
        path, threads, transposed = way
    ints = pack(abi.FIELDS, **abi.geometry(x, w, y, attrs), has_bias=has_bias,
                path=K.CONV_PATHS[path], activation=activation, isa=K.BLOCKED_ISAS[_isa()],
                threads=threads, transposed=transposed, packed=0)
    # the shifted path's leading dimension is one padded plane
    plane = (x.shape[2] + 2 * padding[0]) * (x.shape[3] + 2 * padding[1])
    # batched and winograd: GEMMs over every image's columns (or tiles, fewer than cells)
    columns = npix * (x.shape[0] if path in ("batched", "winograd") else 1)
    check_blas_dims(x.dtype, oc // groups, columns, kdim, plane if path == "shifted" else 0)
    # scratch for one (batch element, group), reused for all of them
    nelems = K.workspace_size(ints, op)
    return Launch(ints, workspace=nelems * x.dtype.itemsize,
                  path=way_label(path, threads, transposed))


def _gemm_tiles_apply(op, dtype) -> bool:
    """Whether backward data's GEMM runs on gemm_tile.h's panels ("tiles", the C runtime's
    GEMM and col2im, conv_data_gemm.h): float32 on a CPU with the FMA (its tiles)."""
    return op == "conv2d_backward_data" and dtype == "float32" and _isa() in ("avx2", "avx512")


def applicable_paths(op, dtype, kernel, stride, padding, dilation, groups, cg,
                     out_cols, ocg=0) -> tuple[str, ...]:
    """Every path of ``PATHS`` that computes this convolution (the measured choice's
    candidates): the direct GEMM alone where the input is its own im2col matrix, and for
    backward data that GEMM on the tiles. ``ocg``: output channels per group."""
    tiles = ("tiles",) if _gemm_tiles_apply(op, dtype) else ()
    if cg == 0:
        return ("direct",)
    if kernel == (1, 1) and stride == (1, 1) and padding == (0, 0):
        return ("direct", "pointwise") if _pointwise_applies(op, dtype) else ("direct", *tiles)
    paths = ["im2col"]
    if _depthwise_applies(op, (cg, ocg)):
        paths.append("depthwise")
    if op == "conv2d" and stride == (1, 1) and dilation == (1, 1):
        paths.append("shifted")
    if op == "conv2d" and groups == 1:
        paths.append("batched")
    if _winograd_applies(op, dtype, kernel, stride, padding, dilation, groups):
        paths.append("winograd")
    paths += _tiles_apply(op, dtype, kernel, stride, padding, dilation, out_cols)
    return (*paths, *tiles)


def _conv_candidates(op, x, w, y, attrs, has_bias=False, activation=0) -> tuple[Launch, ...]:
    """Every way the CPU computes this convolution: each applicable path (im2col's conv2d GEMM
    also transposed, with MKL: the other BLAS was slower so everywhere measured) on each of
    ``thread_choices``."""
    oc, cg, kernel, stride, padding, dilation = conv_geometry((x, w), attrs)
    paths = applicable_paths(op, x.dtype.name, kernel, stride, padding, dilation,
                             attrs["groups"], cg, y.shape[3], oc // attrs["groups"])
    if x.shape[0] == 1 and "batched" in paths:  # one image: the same GEMM as im2col's
        paths = tuple(p for p in paths if p != "batched")
    flops = 2 * y.size * cg * kernel[0] * kernel[1]
    launches = []
    for path in paths:
        for threads in thread_choices(flops):
            for transposed in (False, True) if op == "conv2d" and path == "im2col" \
                    and blas_select.choice().name == "mkl" else (False,):
                launches.append(_conv_launch(op, x, w, y, attrs, has_bias, activation,
                                             (path, threads, transposed)))
    return tuple(launches)


# -- conv2d on prepacked weights --------------------------------------------------------------
def prepack_block(node) -> int | None:
    """The output channels per block that the prepack pass packs a conv2d's weights in for
    the CPU (conv2d_packed on the gather tiles, the widest of this CPU), or None where the
    convolution keeps its path: a rule fitted to measurements.

    Design: with the weights packed once, the gather tiles run the convolutions whose planes
    are too small for the row tiles and Winograd near the FMA peak, where MKL's GEMMs stay
    below 75% on such thin shapes (49 to 196 cells; 1x1 at stride 2 on K = 64 to 256), and
    the repacking on every call that the unpacked gather path pays (9 MiB for 512 -> 512 3x3)
    is gone. Measured on the 2-core AMD EPYC (Zen 4, AVX-512: the 64-channel x 7-cell tile),
    1 thread, CPU time, best of 15, six rounds (/work/scratch/layer.py: one conv + relu, weights
    packed against the path chosen otherwise), us: ResNet-224 stem 2474-2577 against the row
    tiles' 2715-2776, 64 -> 128 3x3/2 1065 against 1257 (row tiles), batch 8: the stem 1544
    against 1927, 64 -> 128 3x3/2 712 against 929 (batched GEMM); the tiles alone, weights cold
    in DRAM, against the resnet-infer plan's instruction: 512 -> 512 3x3 at 7x7 2.23-2.31
    against 3.25 ms, 256 -> 512 3x3/2 1.09-1.12 against 1.75, 128 -> 256 3x3/2 1.07 against
    1.67, 1x1/2 skips 0.125 against 0.18. Winograd stays faster at stride 1 (256 at 14x14
    2048 against 1947, 128 at 28x28 2058 against 1605, 64 at 56x56 2112 against 1738; batch 8
    alike), and the row tiles at stride 1 were not measured against them. So: float32 without
    groups, at least 32 output channels (the narrowest tile's), except where Winograd, the
    direct 1x1 GEMM or the row tiles at stride 1 run; the block is the widest tile's of the
    fewest padding channels.

    On AVX2 (the 16-channel x 6-cell tile; AMD Zen 3, OpenBLAS, /work/scratch/layer.py: one
    conv + relu, medians of 3 alternating rounds, 1 / 2 threads, ms) the tiles win the same
    3x3 and 7x7 convolutions: the stem 2.76 / 1.42 against the row tiles' 3.35 / 1.76,
    64 -> 128 3x3/2 1.60 / 0.92 against 1.83 / 1.04, 512 -> 512 at 7x7 2.80 / 1.67 against
    im2col's 3.10 / 1.84; batch 8: the stem 1.86 / 0.92 against 2.81 / 1.17, 512 at 2x2
    1.93 / 0.96 against 2.18 / 1.18. But not the 1x1 stride-2 skips, whose im2col GEMM is a
    plain one: 64 -> 128 to 28x28 0.29 / 0.15 against 0.23 / 0.14, 256 -> 512 to 7x7
    0.32 / 0.17 against 0.20 / 0.11 (batch 8 to 2x2: 0.22 / 0.16 against 0.14 / 0.11). So off
    AVX-512, 1x1 convolutions keep the GEMM.
    """
    x, w = node.inputs[:2]
    if node.op.name in ("linear", "matmul"):
        return _linear_block(node)
    if node.op.name != "conv2d" or x.dtype.name != "float32" or node.attr["groups"] != 1:
        return None
    oc, cg, kernel, stride, padding, dilation = conv_geometry((x.type, w.type), node.attr)
    y = node.outputs[0]
    if oc < 32 or kernel[0] * kernel[1] > K.MAX_TAPS or kernel == (1, 1) and _isa() != "avx512":
        return None
    path = _conv_path("conv2d", "float32", kernel, stride, padding, dilation, (cg, oc),
                      cg * kernel[0] * kernel[1] * y.shape[2] * y.shape[3] * 4, y.shape[2:],
                      x.shape[0])
    if path in ("winograd", "direct", "pointwise") or path == "blocked" and stride == (1, 1):
        return None
    return _block_for(oc)


def packed_blocks(node) -> tuple[int, ...]:
    """The block a measured choice tries a conv2d's weights packed in (the widest of this CPU's
    packed tiles that pads the fewest channels), where the packed kernel computes it: float32
    without groups, at least 32 output channels, up to MAX_TAPS taps; none for the direct 1x1
    GEMM's case."""
    x, w = node.inputs[:2]
    if x.dtype.name != "float32" or node.attr["groups"] != 1:
        return ()
    oc, cg, kernel, stride, padding, dilation = conv_geometry((x.type, w.type), node.attr)
    direct = "direct" in applicable_paths("conv2d", "float32", kernel, stride, padding,
                                          dilation, 1, cg, node.outputs[0].shape[3])
    if oc < 32 or kernel[0] * kernel[1] > K.MAX_TAPS or direct:
        return ()
    return (_block_for(oc),)


def _block_for(oc) -> int:
    """The widest of this CPU's packed tiles that pads ``oc`` channels the least."""
    return min(K.packed_channels(_isa()), key=lambda ch: (-(-oc // ch) * ch, -ch))


# the fewest rows for which a linear layer runs on the packed tiles (a tile takes 7 on AVX-512)
LINEAR_MIN_ROWS = 4


def _linear_block(node) -> int | None:
    """A linear layer's block (conv2d_packed's rows_call, a GEMM of rows on the gather tiles),
    or None where it keeps the BLAS. Measured on the 2-core AMD EPYC (Zen 4, MKL the BLAS):
    mlp-infer batch 128 (784-1024-1024-10, benchmarks/fresh_process.py, 3 rounds) took 4.81 ms
    on 1 thread against its GEMMs' 5.73 through MKL and ONNX Runtime's 4.97 (3.01 against 3.44
    and 3.17 on 2); a 512 -> 1000 layer (ResNet's last), weights warm, took 0.086 ms against
    MKL's 0.107 at 4 rows, 0.099 against 0.187 at 8, 0.166 against 0.225 at 16, but 0.095
    against the gemv's 0.057 at 1 row (/work/scratch/ablin.py, medians of 8 alternating
    rounds). So: float32, AVX-512, at least 4 rows and 32 outputs. A matmul qualifies as
    ops.matmul.rows_by_weight says (a 2-D weight, its first operand not transposed)."""
    dims = rows_by_weight(node)
    if dims is None:
        return None
    rows, _, outputs = dims
    if node.inputs[0].dtype.name != "float32" or _isa() != "avx512" \
            or rows < LINEAR_MIN_ROWS or outputs < 32:
        return None
    return _block_for(outputs)


def _packed_lower(node, threads=None) -> Launch:
    x, wp = node.inputs[:2]
    y, attrs = node.outputs[0], node.attr
    (kh, kw), block, isa = attrs["kernel_size"], wp.shape[-1], _isa()
    if block not in K.packed_channels(isa) or attrs["groups"] != 1:
        raise ValueError(f"conv2d_packed: weights packed by blocks of {block} channels with "
                         f"groups={attrs['groups']}; this CPU's gather tiles ({isa}) take "
                         f"blocks of {' or '.join(map(str, K.packed_channels(isa)))} and no "
                         f"groups")
    (sh, sw), (ph, pw), (dh, dw) = attrs["stride"], attrs["padding"], attrs["dilation"]
    if threads is None:
        threads = _threads(x.shape[0], node.op.flops(node))
    ints = pack(abi.FIELDS, batch=x.shape[0], cin=x.shape[1], h=x.shape[2], w=x.shape[3],
                cout=y.shape[1], oh=y.shape[2], ow=y.shape[3], kh=kh, kw=kw, sh=sh, sw=sw,
                ph=ph, pw=pw, dh=dh, dw=dw, groups=1, has_bias=len(node.inputs) == 3,
                path=K.CONV_PATHS["gather"], activation=activation_code(attrs),
                isa=K.BLOCKED_ISAS[isa], threads=threads, transposed=0, packed=block)
    return Launch(ints, workspace=K.workspace_size(ints) * x.dtype.itemsize,
                  path=way_label("gather packed", threads))


def _packed_candidates(node) -> tuple[Launch, ...]:
    """conv2d on packed weights runs on the gather tiles: its ways are its thread counts."""
    return tuple(_packed_lower(node, threads)
                 for threads in thread_choices(node.op.flops(node)))


def _pack_lower(node) -> Launch:
    (w,), groups = node.inputs, node.attr["groups"]
    oc, cg, kh, kw = weight_dims(w.type, groups)
    fields = dict.fromkeys(abi.FIELDS, 0)
    fields.update(cout=oc, cin=cg * groups, kh=kh, kw=kw, groups=groups,
                  packed=node.attr["block"])
    return Launch(pack(abi.FIELDS, **fields))


def implement(table) -> None:
    check_built(K, CONV_FIELDS=abi.FIELDS)
    if set(PATHS) != set(K.CONV_PATHS):
        raise ImportError(f"conv.pyx's paths {sorted(K.CONV_PATHS)} differ from the lowering's "
                          f"{sorted(PATHS)}")
    abi.implement(table, launch=_conv_launch, candidates=_conv_candidates)
    f32 = (np.dtype(np.float32),)
    table.implement("conv2d_packed", kernel="conv2d", dtypes=f32, lower=_packed_lower,
                    candidates=_packed_candidates)
    table.implement("conv2d_pack_weight", kernel="conv2d_pack_weight", dtypes=f32,
                    lower=_pack_lower)
