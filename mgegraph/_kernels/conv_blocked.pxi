# The tiled float32 paths of conv.pyx: register-blocked tiles (conv_tile.h) over a zero-padded
# copy of each image. "blocked" (row tiles, stride 1): conv2d and conv2d_backward_data;
# "gather" (gather tiles, any stride): conv2d, conv2d_backward_data at stride 1 and
# conv2d_backward_filter.
#
# Design: as in shifted_group, the padded plane (hp, wp) read from flat offset q + i dh wp + j dw
# gives output cell q of tap (i, j), where q runs over rows of wp cells (the last wp - ow of each
# row wrapped round the edge and are dropped when the result is copied out). Instead of one GEMM
# per tap that writes the whole result back each time, a row tile sums every (channel, tap) in
# registers: the input is read once per tile, the result written once. A gather tile holds
# output channels in its vectors instead and reads each cell's input where it is (any stride,
# no wrapped cells), writing (cell, channel) rows that are transposed into place.
# conv2d_backward_data at stride 1 is the same computation: dx is the convolution of dy, padded
# by d (k - 1) - p, with the weights transposed (in <-> out channels) and flipped; so one driver
# serves both, over a Blocked geometry made by blocked_forward or blocked_backward.
# conv2d_backward_filter (filter_call) runs the gather tiles with the roles swapped.
# Threads: images go to threads when the batch has at least as many (each thread has its own
# padded input and result in the workspace); otherwise each image's tiles are split among the
# threads (backward filter always splits its tiles). Workspace: the packed weights, then per
# slot (one per thread when threads take whole images, blocked_slots, else one) the padded input
# (with CONV_COLS_MAX cells of slack for the last row tile's overrun) and the result.

from cython.parallel cimport parallel, prange, threadid

from .tiles cimport (cpu_isa_ok, conv_tile_fn, conv_gather_fn, conv_tile,
                     conv_packed_tile, conv_out_fn, CONV_PACK, CONV_COLS_MAX,
                     CONV_CPACK, CONV_PIX_MAX, CONV_PACKED_MAX, conv_tile_of,
                     conv_packed_tiles, conv_out_of, packed_tile)

# The threads a call runs on: the plan's (s.threads, the lowering's), capped by the one thread
# policy's maximum now (parallel.pyx: OpenMP's, 1 in a forked child, whose copy of GCC's pool
# would hang)
from .parallel cimport cut, max_threads as policy_threads


cdef inline int run_threads(const Conv* s) noexcept nogil:
    return <int>min(s.threads, policy_threads())


BLOCKED_ISAS = {"base": 0, "avx2": 1, "avx512": 2}
cdef enum:
    BLOCKED_MAX_TAPS = 64    # the tap tables of Blocked; larger kernels take another path
    BLOCKED_MAX_COLS = 1024  # so do backward filter's column offsets (one per output column)
    OUT_CHANNELS = 8    # the gather path's results are transposed out by blocks of channels,
                        # a block per thread at a time
MAX_TAPS, MAX_COLS = BLOCKED_MAX_TAPS, BLOCKED_MAX_COLS


def blocked_isas():
    """The instruction sets (BLOCKED_ISAS keys) this CPU runs the tiles with, widest last.

    >>> blocked_isas()[0]
    'base'
    """
    return tuple(k for k, v in sorted(BLOCKED_ISAS.items(), key=lambda kv: kv[1])
                 if cpu_isa_ok(v))


def packed_channels(isa):
    """The output channels of the gather tiles conv2d_packed runs on ``isa`` (a BLOCKED_ISAS
    key), widest first: the blocks its weights may be packed in.

    >>> packed_channels("avx512")
    (64, 48, 32)
    """
    cdef conv_packed_tile tiles[CONV_PACKED_MAX]
    cdef int i, n = conv_packed_tiles(BLOCKED_ISAS[isa], tiles)
    return tuple(tiles[i].ch for i in range(n))


ctypedef struct Blocked:
    Py_ssize_t nc, no, h, w, ph, pw    # channels per group in and out; the input plane; padding
    Py_ssize_t hp, wp, oh, ow, sh, sw  # the padded plane (a phase's at stride 2); output; stride
    Py_ssize_t kh, kw, dh, dw, taps
    Py_ssize_t pack, ldy               # packed weight block rows; the result's leading dimension
    Py_ssize_t ncols                   # rows path: result cells, rows of wp (gather: oh * ow)
    Py_ssize_t npacked, npadded, nres  # workspace areas, elements (npadded, nres per slot)
    bint flip, gather                  # flip: backward data's weights; gather: the gather tiles
    # Taps in the order the tiles sum them: offs[t] (from a cell to its input in the plane) and
    # order[t] (the weight's tap index), by phases: 1, or 4 for the rows path at stride 2, whose
    # padded plane is split by (row, column) parity into four planes of half the size, read at
    # stride 1 (a tap (i, j) reads phase (i % 2, j % 2) at (i // 2, j // 2)). Phase a's taps are
    # [pstart[a], pstart[a] + ptaps[a]); plane: the elements of one channel's (phase) plane.
    Py_ssize_t phases, plane
    Py_ssize_t pstart[4]
    Py_ssize_t ptaps[4]
    Py_ssize_t offs[BLOCKED_MAX_TAPS]
    Py_ssize_t order[BLOCKED_MAX_TAPS]


cdef inline Py_ssize_t round_up(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b * b


cdef inline Py_ssize_t gather_rows(Py_ssize_t no) noexcept nogil:
    # at least round_up(no, ch) for every gather tile's ch (8, 16, 32, 48): the workspace bound
    return round_up(no, 16) + 32


cdef inline void tap_tables(Blocked* b) noexcept nogil:
    # b.offs, b.order, b.pstart and b.ptaps (see Blocked)
    cdef Py_ssize_t a, i, j, t = 0
    for a in range(b.phases):
        b.pstart[a] = t
        for i in range(b.kh):
            for j in range(b.kw):
                if b.phases == 4 and (i % 2 != a // 2 or j % 2 != a % 2):
                    continue
                b.order[t] = i * b.kw + j
                b.offs[t] = (i // 2 * b.wp + j // 2 if b.phases == 4
                             else i * b.dh * b.wp + j * b.dw)
                t += 1
        b.ptaps[a] = t - b.pstart[a]


cdef inline Blocked blocked_of(Py_ssize_t nc, Py_ssize_t no, Py_ssize_t h, Py_ssize_t w,
                               Py_ssize_t ph, Py_ssize_t pw, const Conv* s) noexcept nogil:
    # the rows path at stride 1, or 2 undilated (result rows of wp cells, ldy of them with the
    # slack), or the gather path at any stride (a result row per output cell, ldy channels long)
    cdef Blocked b
    b.nc, b.no, b.h, b.w, b.ph, b.pw = nc, no, h, w, ph, pw
    b.kh, b.kw, b.dh, b.dw, b.taps = s.kh, s.kw, s.dh, s.dw, s.kh * s.kw
    b.hp, b.wp, b.sh, b.sw = h + 2 * ph, w + 2 * pw, s.sh, s.sw
    b.oh = (b.hp - s.dh * (s.kh - 1) - 1) // s.sh + 1
    b.ow = (b.wp - s.dw * (s.kw - 1) - 1) // s.sw + 1
    b.gather, b.flip = s.path == C_GATHER, False
    b.phases = 4 if not b.gather and s.sh == 2 and s.sw == 2 and s.dh == 1 and s.dw == 1 else 1
    if b.phases == 4:
        b.hp, b.wp = (b.hp + 1) // 2, (b.wp + 1) // 2
    b.plane = b.hp * b.wp
    if b.taps <= BLOCKED_MAX_TAPS:
        tap_tables(&b)
    # the gather tiles' packed blocks are tile.ch wide, known at run time (tile_for): size for
    # the widest rounding
    b.pack = b.ldy = gather_rows(no) if b.gather else CONV_PACK
    b.npacked = s.groups * round_up(no, b.pack) * nc * b.taps
    b.npadded = b.phases * nc * b.plane
    if b.gather:
        b.ncols = b.oh * b.ow
        b.nres = (b.ncols + CONV_PIX_MAX) * b.ldy  # a tile of any width may run past
    else:
        b.ncols = (b.oh - 1) * b.wp + b.ow
        b.ldy = round_up(b.ncols, CONV_COLS_MAX)
        b.npadded += CONV_COLS_MAX
        b.nres = no * b.ldy
    return b


cdef inline Blocked blocked_forward(const Conv* s) noexcept nogil:
    return blocked_of(s.cin // s.groups, s.cout // s.groups, s.h, s.w, s.ph, s.pw, s)


cdef inline conv_shape shape_of(const Conv* s) noexcept nogil:
    # the sizes conv_data.h and conv_gather.h read: the Conv struct's first fields
    cdef conv_shape t
    t.batch, t.cin, t.h, t.w, t.cout, t.oh, t.ow = s.batch, s.cin, s.h, s.w, s.cout, s.oh, s.ow
    t.kh, t.kw, t.sh, t.sw, t.ph, t.pw = s.kh, s.kw, s.sh, s.sw, s.ph, s.pw
    t.dh, t.dw, t.groups = s.dh, s.dw, s.groups
    return t


cdef inline Blocked blocked_backward(const Conv* s) noexcept nogil:
    # dx = dy padded by d (k - 1) - p, convolved (conv_data.h's conv_data_as_forward: the
    # lowering checks that it is one)
    cdef conv_shape shape = shape_of(s)
    cdef conv_shape t
    conv_data_as_forward(&shape, &t)
    cdef Blocked b = blocked_of(t.cin // t.groups, t.cout // t.groups, t.h, t.w, t.ph, t.pw, s)
    b.flip = True
    return b


cdef inline Py_ssize_t blocked_slots(const Conv* s) noexcept nogil:
    # a padded input and result per thread when threads take whole images, else one
    return s.threads if s.batch >= s.threads else 1


cdef inline Blocked blocked_filter(const Conv* s) noexcept nogil:
    # backward filter on the gather tiles, roles swapped: a tile's cells are (input channel,
    # tap) pairs, its sum runs over output cells, and its "weights" are dy transposed, packed per
    # image; the result (pairs, ldy) per group accumulates over the batch
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups
    cdef Blocked b = blocked_of(cg, ocg, s.h, s.w, s.ph, s.pw, s)
    b.npacked = b.ldy * s.oh * s.ow
    b.nres = s.groups * (cg * b.taps + CONV_PIX_MAX) * b.ldy
    return b


cdef inline Py_ssize_t filter_elems(const Blocked* b, const Conv* s) noexcept nogil:
    # backward filter: dy^T packed and the padded image, dW^T, then a second dy^T and image for
    # threads to prepare the next image in while the tiles run on this one (filter_call)
    return b.npacked + b.npadded + b.nres + ((b.npacked + b.npadded) if s.threads > 1 else 0)


cdef inline Py_ssize_t blocked_elems(const Conv* s, int op) noexcept nogil:
    cdef Blocked b
    if op == OP_FILTER:
        b = blocked_filter(s)
        return filter_elems(&b, s)
    b = blocked_forward(s) if op == OP_FORWARD else blocked_backward(s)
    return b.npacked + blocked_slots(s) * (b.npadded + b.nres)


cdef inline void pack_blocks(const float* w, float* packed, const Blocked* b,
                             const Conv* s) noexcept nogil:
    # packed[g, blk, phase, k, t, r] = the weight of output row blk * pack + r, input k, the
    # phase's tap t, 0 past the last row. Forward: w[g, row, k, tap]; backward data:
    # w[g, k, row, flipped tap] (conv_data.h).
    cdef Py_ssize_t g, o, k, a, t, tap, ng = s.cout // s.groups, cg = s.cin // s.groups
    cdef Py_ssize_t rows = round_up(b.no, b.pack)
    cdef float* blk
    for g in range(s.groups):
        for o in range(rows):
            blk = packed + (g * rows + o - o % b.pack) * b.nc * b.taps + o % b.pack
            for a in range(b.phases):
                for k in range(b.nc):
                    for t in range(b.pstart[a], b.pstart[a] + b.ptaps[a]):
                        tap = b.order[t]
                        if o >= b.no:
                            blk[0] = 0
                        elif b.flip:
                            blk[0] = w[conv_data_weight(g, o, k, tap, ng, cg, b.taps)]
                        else:
                            blk[0] = w[((g * ng + o) * cg + k) * b.taps + tap]
                        blk += b.pack


cdef inline void pad_channels(const float* x, float* padded, Py_ssize_t c0, Py_ssize_t c1,
                              const Blocked* b) noexcept nogil:
    # the interior of padded planes c0 .. c1 of nc (by phases: see Blocked); the borders and the
    # slack are zeroed once per call
    cdef Py_ssize_t c, r, i, pr
    cdef const float* src
    cdef float* even
    cdef float* odd
    if b.phases == 1:
        for c in range(c0, c1):
            for r in range(b.h):
                memcpy(padded + (c * b.hp + r + b.ph) * b.wp + b.pw, x + (c * b.h + r) * b.w,
                       <size_t>b.w * sizeof(float))
        return
    for c in range(c0, c1):
        for r in range(b.h):
            pr, src = r + b.ph, x + (c * b.h + r) * b.w
            # input column i is padded column i + pw: phase column (i + pw) % 2, at (i + pw) // 2
            even = padded + ((pr % 2 * 2 + b.pw % 2) * b.nc + c) * b.plane + pr // 2 * b.wp \
                + b.pw // 2
            odd = padded + ((pr % 2 * 2 + (b.pw + 1) % 2) * b.nc + c) * b.plane \
                + pr // 2 * b.wp + (b.pw + 1) // 2
            for i in range((b.w + 1) // 2):
                even[i] = src[2 * i]
            for i in range(b.w // 2):
                odd[i] = src[2 * i + 1]


cdef inline void pad_image(const float* x, float* padded, const Blocked* b) noexcept nogil:
    pad_channels(x, padded, 0, b.nc, b)


cdef inline void tiles(const float* padded, const float* packed, float* rows, Py_ssize_t q,
                       conv_tile tile, const Blocked* b) noexcept nogil:
    # the result cells [q, q + tile.cols) of every output channel, summed phase by phase
    cdef Py_ssize_t k, o, a, ldw = b.nc * b.taps * CONV_PACK
    for k in range((b.no + tile.rows - 1) // tile.rows):
        o = k * tile.rows
        for a in range(b.phases):
            tile.fn(padded + a * b.nc * b.plane + q, b.plane, b.offs + b.pstart[a], b.ptaps[a],
                    b.nc, packed + o // CONV_PACK * ldw + b.pstart[a] * b.nc * CONV_PACK
                    + o % CONV_PACK, rows + o * b.ldy + q, b.ldy, b.no - o, a > 0)


cdef inline void rows_out(const float* rows, float* y, const float* bias, Py_ssize_t act,
                          Py_ssize_t o, const Blocked* b) noexcept nogil:
    # output channel o's rows without their wrapped cells, with the epilogue
    cdef Py_ssize_t r, i
    cdef float v, add = bias[o] if bias != NULL else 0
    cdef const float* src
    cdef float* dst
    for r in range(b.oh):
        src, dst = rows + o * b.ldy + r * b.wp, y + (o * b.oh + r) * b.ow
        if act:
            for i in range(b.ow):
                dst[i] = activate(src[i] + add, act)
        elif bias != NULL:
            for i in range(b.ow):
                dst[i] = src[i] + add
        else:
            memcpy(dst, src, <size_t>b.ow * sizeof(float))


cdef inline conv_tile tile_for(int isa, Blocked* b) noexcept nogil:
    # the gather tile that computes the fewest padding channels for b.no output channels; b's
    # packed blocks and result rows take its width
    cdef conv_tile t = conv_tile_of(isa)
    if round_up(b.no, t.narrow_ch) < round_up(b.no, t.ch):
        t.gather, t.pix, t.ch = t.narrow, t.narrow_pix, t.narrow_ch
    if b.gather:
        b.pack, b.ldy = t.ch, round_up(b.no, t.ch)
    return t


cdef inline void gather_tiles(const float* padded, const float* packed, float* cells,
                              Py_ssize_t first, Py_ssize_t last, conv_tile tile,
                              const Blocked* b) noexcept nogil:
    # result rows of the cells in tiles [first, last): every output channel of tile.pix cells
    # (a tile past the last cell repeats it; its rows are scratch). NOTE: splitting the sum into
    # chunks of input channels whose packed weights stay in L2 across cell tiles measured slower
    # on the EPYC (r64 l2 1.49x torch against 1.12x, 512-channel 7x7 1.86x against 1.44x).
    cdef const float* px[CONV_PIX_MAX]
    cdef Py_ssize_t i, p, cell, o, ldw = b.nc * b.taps * b.pack
    for i in range(first, last):
        for p in range(tile.pix):
            cell = min(i * tile.pix + p, b.ncols - 1)
            px[p] = padded + cell // b.ow * b.sh * b.wp + cell % b.ow * b.sw
        for o in range((b.no + tile.ch - 1) // tile.ch):
            tile.gather(px, b.plane, b.offs, b.taps, b.nc, packed + o * ldw, tile.ch,
                        cells + i * tile.pix * b.ldy + o * tile.ch, b.ldy, 0)


cdef inline void cells_out(const float* cells, float* y, const float* bias, Py_ssize_t act,
                           Py_ssize_t o0, Py_ssize_t o1, const Blocked* b, int isa) noexcept nogil:
    # y's channels [o0, o1) of (no, oh * ow) = the transposed result rows, with the epilogue
    # (conv_tile.h's conv_out: blocks of cells whose rows stay in L1, transposed in registers)
    conv_out_of(isa)(cells, b.ldy, y, b.ncols, b.ncols, o0, o1, bias, act)


cdef inline void results_out(const float* res, float* y, const float* bias, Py_ssize_t act,
                             Py_ssize_t k, const Blocked* b, int isa) noexcept nogil:
    # output channels [k * OUT_CHANNELS, (k + 1) * OUT_CHANNELS) of one image and group, from
    # either path's result layout
    cdef Py_ssize_t o, o0 = k * OUT_CHANNELS, o1 = min(b.no, (k + 1) * OUT_CHANNELS)
    if b.gather:
        cells_out(res, y, bias, act, o0, o1, b, isa)
    else:
        for o in range(o0, o1):
            rows_out(res, y, bias, act, o, b)


cdef inline void image_tiles(const float* padded, const float* packed, float* res,
                             conv_tile tile, const Blocked* b, int nt) noexcept nogil:
    # every tile of one image and group; nt > 1 threads share them
    cdef Py_ssize_t q, ntiles
    if b.gather:
        ntiles = (b.ncols + tile.pix - 1) // tile.pix
        if nt > 1:
            for q in prange(ntiles, num_threads=nt, schedule="static"):
                gather_tiles(padded, packed, res, q, q + 1, tile, b)
        else:
            gather_tiles(padded, packed, res, 0, ntiles, tile, b)
        return
    ntiles = (b.ncols + tile.cols - 1) // tile.cols
    if nt > 1:
        for q in prange(ntiles, num_threads=nt, schedule="static"):
            tiles(padded, packed, res, q * tile.cols, tile, b)
    else:
        for q in range(ntiles):
            tiles(padded, packed, res, q * tile.cols, tile, b)


cdef inline void blocked_image(const float* x, const float* packed, float* y, const float* bias,
                               Py_ssize_t act, float* padded, float* res, conv_tile tile,
                               const Blocked* b, const Conv* s, int nt) noexcept nogil:
    # one image, every group; nt > 1 threads share its tiles
    cdef Py_ssize_t g, o
    cdef const float* bg
    for g in range(s.groups):
        pad_image(x + g * b.nc * b.h * b.w, padded, b)
        image_tiles(padded, packed, res, tile, b, nt)
        bg = bias + g * b.no if bias != NULL else NULL
        if nt > 1:  # the threads that shared the tiles share the copy out, by channels
            for o in prange(ceil_div(b.no, OUT_CHANNELS), num_threads=nt, schedule="static"):
                results_out(res, y + g * b.no * b.oh * b.ow, bg, act, o, b, <int>s.isa)
        else:
            for o in range(ceil_div(b.no, OUT_CHANNELS)):
                results_out(res, y + g * b.no * b.oh * b.ow, bg, act, o, b, <int>s.isa)
        packed += round_up(b.no, b.pack) * b.nc * b.taps


cdef inline int blocked_call(const float* x, const float* w, const float* bias, Py_ssize_t act,
                             float* y, float* ws, Blocked* b, const Conv* s) noexcept nogil:
    # x: (batch, nc * groups, h, w) -> y: (batch, no * groups, oh, ow), by the path's layout
    # (b: the geometry, whose gather packing the tile fixes)
    cdef Py_ssize_t n, slot = b.npadded + b.nres
    cdef Py_ssize_t xs = b.nc * s.groups * b.h * b.w, ys = b.no * s.groups * b.oh * b.ow
    cdef float* area = ws + b.npacked
    cdef int k, nt = run_threads(s)
    if not cpu_isa_ok(<int>s.isa) or b.taps > BLOCKED_MAX_TAPS:
        return KERNEL_UNSUPPORTED
    if not b.gather and (b.sh != 1 or b.sw != 1) and (b.phases != 4 or b.flip):
        return KERNEL_UNSUPPORTED  # the rows path runs stride 1, and stride 2 forward
    cdef conv_tile tile = tile_for(<int>s.isa, b)
    pack_blocks(w, ws, b, s)
    for k in range(blocked_slots(s)):
        memset(area + k * slot, 0, <size_t>b.npadded * sizeof(float))
    if nt > 1 and blocked_slots(s) > 1:  # a slot per thread of the plan's (nt at most)
        for n in prange(s.batch, num_threads=nt, schedule="static"):
            k = threadid()
            blocked_image(x + n * xs, ws, y + n * ys, bias, act, area + k * slot,
                          area + k * slot + b.npadded, tile, b, s, 1)
    else:
        for n in range(s.batch):
            blocked_image(x + n * xs, ws, y + n * ys, bias, act, area, area + b.npadded,
                          tile, b, s, nt)
    return KERNEL_OK


# -- backward filter on the gather tiles ----------------------------------------------------------
# Design: dW^T (pairs, channels) = sum over images and output cells of x's window (per (input
# channel, tap) pair) times dy^T, on the gather tiles: a tile's cells are pairs, its vectors
# output channels (dy transposed into blocks of the tile's width, per image), its sum runs over
# the output cells where the x windows are read in place from the padded image. Where the
# output channels come in whole 64s (AVX-512), the 64-channel x 7-pair tile, which the lowering
# picks where it measured faster than the im2col GEMMs (lowering/conv.py, _filter_tiles_pay).
# Threads share each image's tiles and prepare the next image beside them (filter_call); every
# pair's sum runs over the images in order, so the bits do not depend on the threads.
cdef enum:
    PACK_CELLS = 64  # output cells per part of dy's transpose that a thread takes

cdef inline void pack_dy(const float* dy, float* packed, Py_ssize_t i0, Py_ssize_t i1,
                         const Blocked* b, Py_ssize_t ncells, int isa) noexcept nogil:
    # packed[blk, cell, r] = dy[blk * pack + r, cell] for cells [i0, i1); the channels past no
    # stay zero. conv_out transposes 8 channels at a time (8 x 8 blocks in registers with AVX2;
    # the scalar loop took 15% of the call) and adds 0, which turns a -0 into +0: no product's
    # sign of zero shows in a sum that starts from +0
    cdef Py_ssize_t r
    for r in range(0, b.no, 8):
        conv_out_of(isa)(dy + r * ncells, ncells, packed + (r - r % b.pack) * ncells + r % b.pack,
                         b.pack, min(8, b.no - r), i0, i1, NULL, 0)


cdef inline conv_tile filter_tile(int isa, Blocked* b) noexcept nogil:
    # tile_for's tile, or the 64-channel one where the output channels come in whole 64s
    cdef conv_tile t = tile_for(isa, b)
    cdef conv_tile wide
    if isa == 2 and b.no % 64 == 0 and packed_tile(2, 64, &wide):
        t.gather, t.pix, t.ch = wide.gather, wide.pix, wide.ch
        b.pack, b.ldy = wide.ch, b.no
    return t


cdef inline void filter_tiles(const float* padded, const float* packed, float* dwt,
                              Py_ssize_t tile_index, const Py_ssize_t* cols, conv_tile tile,
                              const Blocked* b, const Conv* s) noexcept nogil:
    # dwt[pair, o] += sum over output cells of x(pair's window at the cell) dy[o, cell], for
    # tile.pix (input channel, tap) pairs; a tile past the last pair repeats it (scratch rows)
    cdef const float* px[CONV_PIX_MAX]
    cdef Py_ssize_t p, pair, t, o, ncells = s.oh * s.ow, last = b.nc * b.taps - 1
    for p in range(tile.pix):
        pair = min(tile_index * tile.pix + p, last)
        t = pair % b.taps
        px[p] = (padded + pair // b.taps * b.plane + t // b.kw * b.dh * b.wp
                 + t % b.kw * b.dw)
    for o in range((b.no + tile.ch - 1) // tile.ch):
        tile.gather(px, s.sh * b.wp, cols, s.ow, s.oh,
                    packed + o * b.pack * ncells, tile.ch,
                    dwt + tile_index * tile.pix * b.ldy + o * tile.ch, b.ldy, 1)


cdef inline void filter_out(const float* dwt, float* dw, const Blocked* b) noexcept nogil:
    # dw (no, nc * taps) of one group = the transposed accumulators
    cdef Py_ssize_t o, k, npairs = b.nc * b.taps
    for o in range(b.no):
        for k in range(npairs):
            dw[o * npairs + k] = dwt[k * b.ldy + o]


cdef inline void filter_prepare(const float* x, const float* dy, float* packed, float* padded,
                                Py_ssize_t u, Py_ssize_t item, const Blocked* b,
                                const Conv* s) noexcept nogil:
    # part `item` of preparing unit u (image u // groups, group u % groups): its input channel
    # `item` padded, then its dy^T by PACK_CELLS cells
    cdef Py_ssize_t ncells = s.oh * s.ow, q = item - b.nc
    if item < b.nc:
        pad_channels(x + u * b.nc * s.h * s.w, padded, item, item + 1, b)
    else:
        pack_dy(dy + u * b.no * ncells, packed, q * PACK_CELLS,
                min(ncells, (q + 1) * PACK_CELLS), b, ncells, <int>s.isa)


cdef inline int filter_call(const float* x,   # IN  (batch, cin, h, w)
                            const float* dy,  # IN  (batch, cout, oh, ow)
                            float* dw,        # OUT (cout, cin / groups, kh, kw)
                            float* ws, const Conv* s) noexcept nogil:
    # Threads: one parallel region; step k runs unit k's tiles and prepares unit k + 1 in the
    # other buffer (dynamic parts: the tiles are compute, the preparing memory), one barrier
    # between steps
    cdef Blocked b = blocked_filter(s)
    cdef Py_ssize_t cols[BLOCKED_MAX_COLS]
    cdef Py_ssize_t k, i, ncells = s.oh * s.ow, npairs = b.nc * b.taps, units = s.batch * s.groups
    cdef Py_ssize_t ntiles, gres = (npairs + CONV_PIX_MAX) * b.ldy, nparts
    cdef Py_ssize_t nprep = b.nc + ceil_div(ncells, PACK_CELLS)
    cdef float* packed[2]
    cdef float* padded[2]
    cdef float* dwt = ws + b.npacked + b.npadded
    cdef int nt = run_threads(s)
    if not cpu_isa_ok(<int>s.isa) or s.ow > BLOCKED_MAX_COLS:
        return KERNEL_UNSUPPORTED
    cdef conv_tile tile = filter_tile(<int>s.isa, &b)
    ntiles = (npairs + tile.pix - 1) // tile.pix
    for i in range(s.ow):
        cols[i] = i * s.sw
    packed[0], padded[0] = ws, ws + b.npacked
    packed[1] = dwt + b.nres if s.threads > 1 else ws
    padded[1] = packed[1] + b.npacked if s.threads > 1 else padded[0]
    memset(ws, 0, <size_t>filter_elems(&b, s) * sizeof(float))
    if nt == 1:
        for k in range(units):
            for i in range(nprep):
                filter_prepare(x, dy, packed[0], padded[0], k, i, &b, s)
            for i in range(ntiles):
                filter_tiles(padded[0], packed[0], dwt + k % s.groups * gres, i, cols, tile, &b,
                             s)
    elif units > 0:
        with parallel(num_threads=nt):
            for i in prange(nprep, schedule="static"):
                filter_prepare(x, dy, packed[0], padded[0], 0, i, &b, s)
            for k in range(units):
                nparts = ntiles + (nprep if k + 1 < units else 0)
                for i in prange(nparts, schedule="dynamic"):
                    if i < ntiles:
                        filter_tiles(padded[k % 2], packed[k % 2], dwt + k % s.groups * gres, i,
                                     cols, tile, &b, s)
                    else:
                        filter_prepare(x, dy, packed[(k + 1) % 2], padded[(k + 1) % 2], k + 1,
                                       i - ntiles, &b, s)
    for k in range(s.groups):
        filter_out(dwt + k * gres, dw + k * b.no * npairs, &b)
    return KERNEL_OK


# -- conv2d on prepacked weights (conv2d_packed) ---------------------------------------------------
# The weights come packed by conv2d_pack_weight (pack_weight), once per weight change instead of
# once per call (blocked_call's pack_blocks writes 9 MiB for a 512 x 512 3x3 convolution on every
# call, more than the convolution's own time), in blocks of s.packed output channels: the width
# of one of the isa's conv2d_packed tiles (conv_packed_tiles). The driver is conv_gather.h's,
# the C runtime's too (one source: the work items, the padding, the packing, the 1x1 GEMM of
# rows); here its items run in one OpenMP region, each thread's slot in the workspace: the
# padded batch (when padded), then a slot per thread.
cdef extern from "conv_gather.h":
    ctypedef struct conv_gather:
        Py_ssize_t no, plane
        const float* planes
        const float* weights
        const float* bias
        float* y
        int act
    enum:
        CONV_CHUNK_TILES
    int conv_gather_tile_for(int isa, Py_ssize_t pack, Py_ssize_t no,
                             conv_packed_tile* out) noexcept nogil
    int conv_gather_geometry(conv_gather* c, const conv_shape* s) noexcept nogil
    void conv_gather_walk(conv_gather* c, conv_packed_tile t, Py_ssize_t pack,
                          Py_ssize_t min_items, int isa) noexcept nogil
    Py_ssize_t conv_gather_items(const conv_gather* c) noexcept nogil
    void conv_gather_pad(const conv_gather* c, const float* x, float* padded, Py_ssize_t n0,
                         Py_ssize_t n1) noexcept nogil
    void conv_gather_pack(const float* w, float* packed, Py_ssize_t nc, Py_ssize_t no,
                          Py_ssize_t taps, Py_ssize_t pack, int flip, Py_ssize_t b0,
                          Py_ssize_t b1) noexcept nogil
    void conv_gather_item(const conv_gather* c, Py_ssize_t item, float* res) noexcept nogil
    void conv_gather_rows_item(const float* x, const float* packed, const float* bias, int act,
                               float* y, Py_ssize_t item, Py_ssize_t rgroups, conv_packed_tile t,
                               Py_ssize_t m, Py_ssize_t n, Py_ssize_t k) noexcept nogil


cdef inline void pack_weight(const float* w, float* packed, const Conv* s) noexcept nogil:
    # packed[g, blk, k, r] = w[g * ocg + blk * packed + r, k] (k: input channel x tap), 0 past
    # the group's last output channel
    cdef Py_ssize_t ocg = s.cout // s.groups
    conv_gather_pack(w, packed, s.cin // s.groups, ocg, s.kh * s.kw, s.packed, 0, 0,
                     s.groups * ceil_div(ocg, s.packed))


cdef inline Py_ssize_t packed_slot(const Conv* s) noexcept nogil:
    # one work item's results: a chunk of cells by the padded channels (at least
    # conv_gather_slot's, whichever tile runs)
    return CONV_CHUNK_TILES * CONV_PIX_MAX * round_up(s.cout, s.packed)


cdef inline bint rows_case(const Conv* s) noexcept nogil:
    # a 1x1 convolution of unpadded 1x1 planes: rows_call, which needs no workspace
    return s.h == 1 and s.w == 1 and s.kh == 1 and s.kw == 1 and s.ph == 0 and s.pw == 0


cdef inline Py_ssize_t packed_elems(const Conv* s) noexcept nogil:
    if rows_case(s):
        return 0
    cdef Py_ssize_t padded = 0
    if s.ph != 0 or s.pw != 0:
        padded = s.batch * s.cin * (s.h + 2 * s.ph) * (s.w + 2 * s.pw)
    return padded + max(s.threads, 1) * packed_slot(s)


cdef inline int rows_call(const float* x, const float* packed, const float* bias, Py_ssize_t act,
                          float* y, conv_packed_tile tile, const Conv* s) noexcept nogil:
    cdef Py_ssize_t item, nblocks = ceil_div(s.cout, tile.ch), rgroups = 1
    cdef Py_ssize_t ntiles = ceil_div(s.batch, tile.pix)
    cdef int nt = run_threads(s)
    if nt > 1 and nblocks < 2 * nt:  # too few blocks for the threads: split the rows too
        rgroups = min(ntiles, ceil_div(2 * nt, nblocks))
    if nt > 1:
        for item in prange(nblocks * rgroups, schedule="static", num_threads=nt):
            conv_gather_rows_item(x, packed, bias, <int>act, y, item, rgroups, tile, s.batch,
                                  s.cout, s.cin)
    else:
        for item in range(nblocks * rgroups):
            conv_gather_rows_item(x, packed, bias, <int>act, y, item, rgroups, tile, s.batch,
                                  s.cout, s.cin)
    return KERNEL_OK


cdef inline int packed_call(const float* x, const float* packed, const float* bias, Py_ssize_t act,
                            float* y, float* ws, const Conv* s) noexcept nogil:
    # x: (batch, nc, h, w) -> y: (batch, no, oh, ow); no groups. Threads: a few items each
    # (4 per thread); the bits do not depend on them (conv_gather.h)
    cdef conv_shape shape = shape_of(s)
    cdef conv_gather c
    cdef conv_packed_tile tile
    cdef Py_ssize_t n, item, nitems
    cdef bint padded = s.ph != 0 or s.pw != 0
    cdef float* slots = ws
    cdef int nt = run_threads(s)
    if (s.groups != 1 or not cpu_isa_ok(<int>s.isa) or not conv_gather_geometry(&c, &shape)
            or not conv_gather_tile_for(<int>s.isa, s.packed, c.no, &tile)):
        return KERNEL_UNSUPPORTED
    if rows_case(s):
        return rows_call(x, packed, bias, act, y, tile, s)
    conv_gather_walk(&c, tile, s.packed, 4 * nt if nt > 1 else 1, <int>s.isa)
    c.planes, c.weights, c.bias, c.y, c.act = x, packed, bias, y, <int>act
    if padded:
        c.planes, slots = ws, ws + s.batch * s.cin * c.plane
    nitems = conv_gather_items(&c)
    if nt > 1:  # one parallel region: waking sleeping threads costs 60-90 us a region
        with parallel(num_threads=nt):
            if padded:
                for n in prange(s.batch, schedule="static"):
                    conv_gather_pad(&c, x, ws, n, n + 1)
            for item in prange(nitems, schedule="static"):
                conv_gather_item(&c, item, slots + threadid() * packed_slot(s))
        return KERNEL_OK
    if padded:
        conv_gather_pad(&c, x, ws, 0, s.batch)
    for item in range(nitems):
        conv_gather_item(&c, item, slots)
    return KERNEL_OK
