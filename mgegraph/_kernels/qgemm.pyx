# The fast int8 convolution and linear layer on the CPU: the GEMM core of qgemm.h (AMX, VNNI,
# AVX2 or portable tiles, the requantisation fused at the tile's store), the patches of
# qconv.h, and the thread split. The integers are ops/quantized.py's (tests/quant_reference.py).
#
# Design: the weights are packed once (pack_weights: packed A, per-channel constants, into a
# byte buffer: a constant of the plan, or a NumPy array here) and the kernels pack only the
# activations, per image (or batch of small images side by side: qconv.h's
# qg_images_per_gemm) and group: B of the patches, column blocks split across threads, then
# the tiles of C split across threads (panel-major, so a thread's tiles share columns of B). A
# GEMM of few columns (a linear layer of up to 8 rows, a convolution of up to 8 output cells
# per GEMM: qgemm.h's qg_gemv_fits) runs as a GEMV instead on the AVX2 and portable variants,
# its threads splitting the output channels. Every output is computed
# whole by one thread: any thread count gives the same bits. Each instruction-set variant (and
# the GEMV and the tiles) gives the same integers; the process uses the widest
# this CPU runs, or the one MGEGRAPH_INT8_ISA names ("portable", "avx2", "avxvnni",
# "avx512vnni", "amx": the GEMMs on AMX tiles, the depthwise kernel on AVX-512), and
# set_int8_isa changes it (the tests run every variant this CPU has). The
# scratch of packed B is malloc'd per call: the lowering plans no workspace for it yet.

import os

import numpy as np

from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.stdlib cimport free, malloc

from .abi cimport Call, KERNEL_OK, KERNEL_OUT_OF_MEMORY, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

cdef extern from "qconv.h":
    int QG_MR, QG_NB, QG_ISAS, QG_PORTABLE, QG_GEMV_MAX, QG_ZERO_POINTS, QG_PAIRS_FIT
    int qg_pairs_fit(const int8_t* a, Py_ssize_t lda, Py_ssize_t rows) noexcept nogil
    int32_t qg_weights_flags(const int8_t* a, Py_ssize_t groups, Py_ssize_t m, Py_ssize_t kg,
                             const int32_t* zw) noexcept nogil
    const char* qg_isa_names[]
    int qg_isa_ok(int isa) noexcept nogil
    int qg_widest() noexcept nogil
    Py_ssize_t qg_groups(Py_ssize_t k) noexcept nogil
    Py_ssize_t qg_blocks(Py_ssize_t n, Py_ssize_t per) noexcept nogil
    Py_ssize_t qg_a_bytes(Py_ssize_t m, Py_ssize_t kg) noexcept nogil
    Py_ssize_t qg_b_stride(Py_ssize_t kg) noexcept nogil
    ctypedef void (*qg_tile_fn)(const int8_t*, const uint8_t*, Py_ssize_t, Py_ssize_t, int,
                                int32_t*) noexcept nogil
    ctypedef struct qg_epilogue:
        const int32_t* row_const
        const int32_t* zw
        const int32_t* colsum
        const float* mult
        int32_t zy, lo, hi
        int kind
        void* out
        Py_ssize_t sm, sn, cells, si
    ctypedef void (*qg_gemv_fn)(const int8_t*, Py_ssize_t, const uint8_t*, int, int,
                                int32_t*) noexcept nogil
    ctypedef struct qg_variant:
        int isa
        qg_tile_fn tile
        qg_gemv_fn gemv
    int qg_gemv_fits(const qg_variant* var, Py_ssize_t n) noexcept nogil
    Py_ssize_t qg_gemv_column_bytes(Py_ssize_t kg) noexcept nogil
    void qg_gemv_prepare(const uint8_t* x, Py_ssize_t k, Py_ssize_t ldx, Py_ssize_t n,
                         uint8_t flip, uint8_t* dst, int32_t* colsum) noexcept nogil
    void qg_gemv_from_packed(const uint8_t* b, Py_ssize_t kg, Py_ssize_t n,
                             uint8_t* dst) noexcept nogil
    Py_ssize_t qg_gemv_blocks(Py_ssize_t m) noexcept nogil
    ctypedef struct qg_operands:
        const int8_t* a
        const uint8_t* b
        Py_ssize_t m, n, kg
        int pairs_fit
    qg_variant qg_variant_of(int isa) noexcept nogil
    void qg_pack_a(const uint8_t* w, int w_unsigned, Py_ssize_t m, Py_ssize_t k, Py_ssize_t ldw,
                   const int32_t* zw, int32_t zx, const int32_t* bias, int8_t* dst,
                   int32_t* row_const) noexcept nogil
    Py_ssize_t qg_images_per_gemm(Py_ssize_t cells, Py_ssize_t images) noexcept nogil
    Py_ssize_t qg_pack_b_scratch(const qg_conv* g, Py_ssize_t n0, Py_ssize_t n1) noexcept nogil
    void qg_pack_b_conv(const uint8_t* x, Py_ssize_t image_bytes, const qg_conv* g,
                        Py_ssize_t n0, Py_ssize_t n1, uint8_t pad, uint8_t flip,
                        uint8_t* scratch, uint8_t* dst) noexcept nogil
    void qg_pack_b_columns(const uint8_t* x, Py_ssize_t k, Py_ssize_t ldx, Py_ssize_t n0,
                           Py_ssize_t n1, uint8_t flip, uint8_t* dst) noexcept nogil
    void qg_column_sums(const uint8_t* b, Py_ssize_t kg, Py_ssize_t n0, Py_ssize_t n1,
                        int32_t* colsum) noexcept nogil
    Py_ssize_t qg_units(const qg_variant* var, const qg_operands* op) noexcept nogil
    void qg_gemm_units(const qg_variant* var, const qg_operands* op, const qg_epilogue* e,
                       Py_ssize_t lo, Py_ssize_t hi) noexcept nogil
    void qg_gemv_units(const qg_variant* var, const qg_operands* op, const uint8_t* x,
                       const qg_epilogue* e, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil
    ctypedef void (*qg_depthwise_fn)(const uint8_t*, int, int32_t, const uint8_t*, int, int32_t,
                                 const qg_conv*, short*, int32_t*) noexcept nogil
    qg_depthwise_fn qg_depthwise_of(int isa) noexcept nogil
    Py_ssize_t qg_depthwise_scratch(const qg_conv* g) noexcept nogil
    void qg_store_plane(const qg_variant* var, const int32_t* acc, Py_ssize_t m,
                        Py_ssize_t cells, const qg_epilogue* e) noexcept nogil
    void qg_transpose_weight(const uint8_t* w, const int32_t* zw, Py_ssize_t c_in,
                             Py_ssize_t opg, Py_ssize_t taps, Py_ssize_t groups, uint8_t* wt,
                             int32_t* zrows) noexcept nogil
    void qg_col2im_plane(const int32_t* cols, const qg_conv* g, int32_t* acc) noexcept nogil
    int qg_vnni_loop(long long iterations) noexcept nogil
    int qg_amx_loop(long long iterations) noexcept nogil

ISAS = tuple(qg_isa_names[i].decode() for i in range(QG_ISAS))
cdef int _isa = qg_widest()


def available_isas() -> tuple:
    """The variants this CPU runs, narrowest first.

    >>> available_isas()[0]
    'portable'
    """
    return tuple(name for i, name in enumerate(ISAS) if qg_isa_ok(i))


def int8_isa() -> str:
    """The variant the int8 kernels use now."""
    return ISAS[_isa]


def set_int8_isa(name=None) -> str:
    """Makes the int8 kernels use variant ``name`` (None: the widest this CPU runs); returns the
    one used before. Every variant gives the same integers: this is for tests and benchmarks."""
    global _isa
    before = ISAS[_isa]
    if name is None:
        _isa = qg_widest()
        return before
    if name not in ISAS:
        raise ValueError(f"MGEGRAPH_INT8_ISA: unknown int8 variant {name!r}; one of {ISAS}")
    if not qg_isa_ok(ISAS.index(name)):
        raise ValueError(f"this CPU does not run the {name} int8 variant; it runs "
                         f"{available_isas()}")
    _isa = ISAS.index(name)
    return before


def gemv_columns(name) -> int:
    """The most columns (a linear layer's rows) that variant ``name`` runs as a GEMV; 0 where
    it runs every GEMM on its tiles (qg_gemv_fits)."""
    if name not in ISAS:
        raise ValueError(f"unknown int8 variant {name!r}; one of {ISAS}")
    cdef qg_variant var = qg_variant_of(ISAS.index(name))
    return QG_GEMV_MAX if qg_gemv_fits(&var, 1) else 0


if os.environ.get("MGEGRAPH_INT8_ISA"):
    set_int8_isa(os.environ["MGEGRAPH_INT8_ISA"])


# ---- packed weights --------------------------------------------------------------------------

cdef Py_ssize_t packed_size(Py_ssize_t oc, Py_ssize_t k, Py_ssize_t groups) noexcept nogil:
    # bytes of packed weights: each group's A, then per channel the constants and the shifted
    # weight zero points (int32), then the flags (int32, qgemm.h's QG_ZERO_POINTS and
    # QG_PAIRS_FIT)
    return groups * qg_a_bytes(oc // groups, qg_groups(k)) + (2 * oc + 1) * 4


cdef void pack_weights(char* packed, const uint8_t* w, int w_unsigned, Py_ssize_t oc,
                       Py_ssize_t k, Py_ssize_t groups, const int32_t* zw, int32_t zx_shifted,
                       const int32_t* bias) noexcept nogil:
    # w (oc, k) row-major, groups of oc / groups rows; zw the stored zero points per channel
    cdef QWeights pw
    cdef Py_ssize_t gi, o
    weights_view(&pw, packed, oc, k, groups, NULL)
    pw.zw = pw.row_const + oc  # the view reads the flags, not written yet
    for o in range(oc):
        pw.zw[o] = zw[o] - 128 if w_unsigned else zw[o]
    for gi in range(groups):
        qg_pack_a(w + gi * pw.m * k, w_unsigned, pw.m, k, k, pw.zw + gi * pw.m,
                  zx_shifted, NULL if bias == NULL else bias + gi * pw.m,
                  pw.a + gi * pw.group_bytes, pw.row_const + gi * pw.m)
    pw.zw[oc] = qg_weights_flags(pw.a, groups, pw.m, pw.kg, pw.zw)


cdef void weights_view(QWeights* pw, const char* packed, Py_ssize_t oc, Py_ssize_t k,
                       Py_ssize_t groups, const float* mult) noexcept nogil:
    # the packed weights pack_weights wrote at `packed`, with the multipliers `mult`
    pw.groups, pw.m, pw.k, pw.kg, pw.mult = groups, oc // groups, k, qg_groups(k), mult
    pw.group_bytes = qg_a_bytes(pw.m, pw.kg)
    pw.a = <int8_t*>packed
    pw.row_const = <int32_t*>(packed + groups * pw.group_bytes)
    pw.zw = pw.row_const + oc
    pw.pairs_fit = (pw.zw[oc] & QG_PAIRS_FIT) != 0
    if not (pw.zw[oc] & QG_ZERO_POINTS):
        pw.zw = NULL


# ---- the quantized_pack_weight kernel (ops/quantized_pack.py, kernel_abi/quantized_pack.py) ----

ctypedef struct QPack:
    Py_ssize_t out_channels, k, groups, x_zero_shifted, has_bias, threads

cdef QPack _qp
QPACK_FIELDS = fields_of(_qp, sizeof(QPack))


cdef inline int pack_call(const Call* c, int w_unsigned) noexcept nogil:
    cdef const QPack* s = <const QPack*>c.ints
    cdef int32_t* zw = <int32_t*>malloc(max(s.out_channels, 1) * sizeof(int32_t))
    cdef Py_ssize_t o
    if zw == NULL:
        return KERNEL_OUT_OF_MEMORY
    for o in range(s.out_channels):
        zw[o] = <int32_t>c.floats[o]
    pack_weights(c.bufs[2 if s.has_bias else 1], <const uint8_t*>c.bufs[0], w_unsigned,
                 s.out_channels, s.k, s.groups, zw, <int32_t>s.x_zero_shifted,
                 <const int32_t*>c.bufs[1] if s.has_bias else NULL)
    free(zw)
    return KERNEL_OK


cdef int quantized_pack_weight_i8(const Call* c) noexcept nogil:
    return pack_call(c, 0)
cdef int quantized_pack_weight_u8(const Call* c) noexcept nogil:
    return pack_call(c, 1)


# quantized_pack_transposed_weight (kernel quantized_pack_deconv_weight, a name that fits the C
# runtime's 31 bytes): a transposed convolution's weight (c_in, out_per_group, taps)
# as its GEMM rows (qg_transpose_weight), packed without a bias; floats each output channel's
# weight zero point

ctypedef struct QPackT:
    Py_ssize_t c_in, out_per_group, taps, groups, x_zero_shifted, threads

cdef QPackT _qpt
QPACKT_FIELDS = fields_of(_qpt, sizeof(QPackT))


cdef inline int pack_transposed_call(const Call* c, int w_unsigned) noexcept nogil:
    cdef const QPackT* s = <const QPackT*>c.ints
    cdef Py_ssize_t oc = s.groups * s.out_per_group, rows = oc * s.taps, o
    cdef int32_t* zw = <int32_t*>malloc(max(oc, 1) * sizeof(int32_t))
    cdef int32_t* zrows = <int32_t*>malloc(max(rows, 1) * sizeof(int32_t))
    cdef uint8_t* wt = <uint8_t*>malloc(max(rows * (s.c_in // s.groups), 1))
    cdef int status = KERNEL_OUT_OF_MEMORY
    if zw != NULL and zrows != NULL and wt != NULL:
        for o in range(oc):
            zw[o] = <int32_t>c.floats[o]
        qg_transpose_weight(<const uint8_t*>c.bufs[0], zw, s.c_in, s.out_per_group, s.taps,
                            s.groups, wt, zrows)
        pack_weights(c.bufs[1], wt, w_unsigned, rows, s.c_in // s.groups, s.groups, zrows,
                     <int32_t>s.x_zero_shifted, NULL)
        status = KERNEL_OK
    free(zw)
    free(zrows)
    free(wt)
    return status


cdef int quantized_pack_deconv_weight_i8(const Call* c) noexcept nogil:
    return pack_transposed_call(c, 0)
cdef int quantized_pack_deconv_weight_u8(const Call* c) noexcept nogil:
    return pack_transposed_call(c, 1)


KERNELS = {
    "quantized_pack_weight_i8": kernel_address(quantized_pack_weight_i8),
    "quantized_pack_weight_u8": kernel_address(quantized_pack_weight_u8),
    "quantized_pack_deconv_weight_i8": kernel_address(quantized_pack_deconv_weight_i8),
    "quantized_pack_deconv_weight_u8": kernel_address(quantized_pack_deconv_weight_u8),
}


# ---- one GEMM: pack B over column blocks, then the tiles, each split across threads ---------

ctypedef struct PackB:
    const uint8_t* x
    const qg_conv* g      # NULL: a linear layer's rows (x (n, k), ldx apart)
    Py_ssize_t n, k, ldx, kg
    Py_ssize_t image_bytes  # a convolution's: between the images of its columns
    uint8_t pad, flip
    uint8_t* b
    int32_t* colsum       # NULL: not needed
    int failed

ctypedef struct Tiles:
    qg_variant var
    qg_operands op
    qg_epilogue e


cdef int _pack_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    # column blocks [lo, hi)
    cdef PackB* s = <PackB*>ctx
    cdef Py_ssize_t n0 = lo * QG_NB, n1 = min(hi * QG_NB, s.n)
    cdef uint8_t* scratch = NULL
    if s.g == NULL:
        qg_pack_b_columns(s.x, s.k, s.ldx, n0, n1, s.flip, s.b)
    else:
        scratch = <uint8_t*>malloc(qg_pack_b_scratch(s.g, n0, n1))
        if scratch == NULL:
            return KERNEL_OUT_OF_MEMORY
        qg_pack_b_conv(s.x, s.image_bytes, s.g, n0, n1, s.pad, s.flip, scratch, s.b)
        free(scratch)
    if s.colsum != NULL:
        qg_column_sums(s.b, s.kg, n0, n1, s.colsum)
    return KERNEL_OK


cdef int _tiles_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef Tiles* s = <Tiles*>ctx
    qg_gemm_units(&s.var, &s.op, &s.e, lo, hi)
    return KERNEL_OK


ctypedef struct Gemv:
    Tiles tiles
    const uint8_t* x      # the columns qg_gemv_prepare or qg_gemv_from_packed made


cdef int _gemv_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef Gemv* s = <Gemv*>ctx
    if s.tiles.var.gemv == NULL:  # forced on a variant without one: the portable GEMV
        s.tiles.var.gemv = qg_variant_of(QG_PORTABLE).gemv
    qg_gemv_units(&s.tiles.var, &s.tiles.op, s.x, &s.tiles.e, lo, hi)
    return KERNEL_OK


# how a GEMM runs: by the rule (qg_gemv_fits), or forced (tests and benchmarks)
cdef enum:
    WAY_RULE = 0
    WAY_TILES = 1
    WAY_GEMV = 2
_WAYS = ("rule", "tiles", "gemv")


cdef inline bint _gemv_way(const qg_variant* var, Py_ssize_t n, int way) noexcept nogil:
    return n > 0 and (way == WAY_GEMV or (way == WAY_RULE and qg_gemv_fits(var, n)))


cdef int _gemm(PackB* pack, Tiles* tiles, Py_ssize_t threads) noexcept nogil:
    # packs B as `pack` says, then runs every tile of `tiles`
    cdef int status = parallel_for(threads, qg_blocks(pack.n, QG_NB), _pack_part, pack)
    if status != KERNEL_OK:
        return status
    return parallel_for(threads, qg_units(&tiles.var, &tiles.op), _tiles_part, tiles)


cdef int _buffers(PackB* pack, int need_colsum) noexcept nogil:
    pack.b = <uint8_t*>malloc(max(qg_blocks(pack.n, QG_NB) * qg_b_stride(pack.kg), 1))
    pack.colsum = <int32_t*>malloc(max(pack.n, 1) * sizeof(int32_t)) if need_colsum else NULL
    return KERNEL_OK if pack.b != NULL and (pack.colsum != NULL or not need_colsum) \
        else KERNEL_OUT_OF_MEMORY


cdef void _epilogue(qg_epilogue* e, const QWeights* pw, const QOutput* out, int32_t* colsum,
                    Py_ssize_t sm, Py_ssize_t sn) noexcept nogil:
    e.row_const, e.zw, e.colsum, e.mult = pw.row_const, pw.zw, colsum, pw.mult
    e.zy, e.lo, e.hi, e.kind, e.out, e.sm, e.sn = out.zy, out.lo, out.hi, out.kind, out.y, sm, sn
    e.cells, e.si = 0, 0


cdef Py_ssize_t _item(int kind) noexcept nogil:
    return 4 if kind == QG_OUT_INT32 else 1


cdef int _conv_gemv(PackB* pack, Gemv* gemv, Py_ssize_t threads) noexcept nogil:
    # one GEMM of few columns: its patches packed (one column block) and prepared on this
    # thread, then row blocks of the weights split across `threads`
    cdef int status = _pack_part(pack, 0, 0, 1)
    if status != KERNEL_OK:
        return status
    qg_gemv_from_packed(pack.b, pack.kg, pack.n, <uint8_t*>gemv.x)
    return parallel_for(threads, qg_gemv_blocks(gemv.tiles.op.m), _gemv_part, gemv)


cdef Py_ssize_t _images_per_gemm(Py_ssize_t cells, Py_ssize_t images, int way) noexcept nogil:
    # a forced GEMV packs one column block: one image a GEMM there
    return 1 if way == WAY_GEMV else qg_images_per_gemm(cells, images)


cdef int _conv_images(const QWeights* pw, const uint8_t* x, int x_signed, int32_t zx,
                      Py_ssize_t lo, Py_ssize_t hi, const qg_conv* g, const QOutput* out,
                      Py_ssize_t threads, int way) noexcept nogil:
    # images [lo, hi): per batch of images (qg_images_per_gemm, their cells side by side) and
    # group one GEMM (or GEMV: _gemv_way), each split across `threads`
    cdef PackB pack
    cdef Tiles tiles
    cdef Gemv gemv
    cdef Py_ssize_t cells = g.oh * g.ow, i, gi, batch
    cdef Py_ssize_t per = _images_per_gemm(cells, hi - lo, way)
    cdef int status = KERNEL_OK
    cdef char* y = <char*>out.y
    pack.g, pack.n, pack.k, pack.kg = g, per * cells, pw.k, pw.kg
    pack.image_bytes = pw.groups * g.c * g.h * g.w
    pack.pad, pack.flip = <uint8_t>zx, 0x80 if x_signed else 0
    tiles.var = qg_variant_of(_isa)
    gemv.x = NULL
    if _gemv_way(&tiles.var, cells, way):  # the smallest batch's columns
        gemv.x = <uint8_t*>malloc(per * cells * qg_gemv_column_bytes(pw.kg))
    if _buffers(&pack, pw.zw != NULL) != KERNEL_OK or (
            _gemv_way(&tiles.var, cells, way) and gemv.x == NULL):
        free(pack.b)
        free(pack.colsum)
        free(<void*>gemv.x)
        return KERNEL_OUT_OF_MEMORY
    tiles.op.b, tiles.op.m, tiles.op.kg = pack.b, pw.m, pw.kg
    tiles.op.pairs_fit = pw.pairs_fit
    i = lo
    while i < hi and status == KERNEL_OK:
        batch = min(per, hi - i)
        pack.n = tiles.op.n = batch * cells
        for gi in range(pw.groups):
            pack.x = x + (i * pw.groups + gi) * g.c * g.h * g.w
            tiles.op.a = pw.a + gi * pw.group_bytes
            _epilogue(&tiles.e, pw, out, pack.colsum, cells, 1)
            tiles.e.cells, tiles.e.si = cells, pw.groups * pw.m * cells
            tiles.e.row_const += gi * pw.m
            if tiles.e.zw != NULL:
                tiles.e.zw += gi * pw.m
            if tiles.e.mult != NULL:
                tiles.e.mult += gi * pw.m
            tiles.e.out = y + (i * pw.groups + gi) * pw.m * cells * _item(out.kind)
            if gemv.x != NULL and _gemv_way(&tiles.var, pack.n, way):
                gemv.tiles = tiles
                status = _conv_gemv(&pack, &gemv, threads)
            else:
                status = _gemm(&pack, &tiles, threads)
            if status != KERNEL_OK:
                break
        i += batch
    free(pack.b)
    free(pack.colsum)
    free(<void*>gemv.x)
    return status


ctypedef struct Images:
    const QWeights* pw
    const uint8_t* x
    int x_signed
    int32_t zx
    const qg_conv* g
    const QOutput* out
    int way


cdef int _images_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef Images* s = <Images*>ctx
    return _conv_images(s.pw, s.x, s.x_signed, s.zx, lo, hi, s.g, s.out, 1, s.way)


cdef int conv_run(const QWeights* pw, const uint8_t* x, int x_signed, int32_t zx,
                  Py_ssize_t images, const qg_conv* g, const QOutput* out,
                  Py_ssize_t threads) noexcept nogil:
    return _conv_run(pw, x, x_signed, zx, images, g, out, threads, WAY_RULE)


cdef int _conv_run(const QWeights* pw, const uint8_t* x, int x_signed, int32_t zx,
                   Py_ssize_t images, const qg_conv* g, const QOutput* out,
                   Py_ssize_t threads, int way) noexcept nogil:
    # x (images, groups * g.c, g.h, g.w), y (images, groups * pw.m, g.oh, g.ow).
    # Design: a batch the threads divide evenly runs whole images per thread, one fork and join
    # for the layer; otherwise each image's GEMMs are split, two joins per image and group. A
    # batch of 8 small images (ResNet-18 at 8x3x64x64: 16 x 16 cells at layer 1) made 320
    # joins per forward the other way, and each costs most on a loaded machine. Small images
    # that one GEMM takes side by side (qg_images_per_gemm) run as that GEMM, its tiles split.
    cdef Images s
    if (threads > 1 and images >= threads and images % threads == 0
            and _images_per_gemm(g.oh * g.ow, images, way) == 1):
        s.pw, s.x, s.x_signed, s.zx, s.g, s.out, s.way = pw, x, x_signed, zx, g, out, way
        return parallel_for(threads, images, _images_part, &s)
    return _conv_images(pw, x, x_signed, zx, 0, images, g, out, threads, way)


cdef int _linear_gemv(const QWeights* pw, const uint8_t* x, int x_signed, Py_ssize_t rows,
                      const QOutput* out, Py_ssize_t threads) noexcept nogil:
    # a few rows of x (qg_gemv_fits): prepared once, then row blocks of W split across threads
    cdef Gemv s
    cdef uint8_t* prepared = <uint8_t*>malloc(rows * qg_gemv_column_bytes(pw.kg))
    cdef int32_t* colsum = <int32_t*>malloc(rows * sizeof(int32_t))
    cdef int status = KERNEL_OUT_OF_MEMORY
    if prepared != NULL and colsum != NULL:
        qg_gemv_prepare(x, pw.k, pw.k, rows, 0x80 if x_signed else 0, prepared,
                        colsum if pw.zw != NULL else NULL)
        s.x, s.tiles.var = prepared, qg_variant_of(_isa)
        s.tiles.op.a, s.tiles.op.b, s.tiles.op.m, s.tiles.op.n = pw.a, NULL, pw.m, rows
        s.tiles.op.kg, s.tiles.op.pairs_fit = pw.kg, pw.pairs_fit
        _epilogue(&s.tiles.e, pw, out, colsum, 1, pw.m)
        status = parallel_for(threads, qg_gemv_blocks(pw.m), _gemv_part, &s)
    free(prepared)
    free(colsum)
    return status


cdef int linear_run(const QWeights* pw, const uint8_t* x, int x_signed, Py_ssize_t rows,
                    const QOutput* out, Py_ssize_t threads) noexcept nogil:
    # x (rows, k), y (rows, m): a few rows as a GEMV, more on the tiles (qg_gemv_fits)
    return _linear_run(pw, x, x_signed, rows, out, threads, WAY_RULE)


cdef int _linear_run(const QWeights* pw, const uint8_t* x, int x_signed, Py_ssize_t rows,
                     const QOutput* out, Py_ssize_t threads, int way) noexcept nogil:
    cdef qg_variant var = qg_variant_of(_isa)
    if _gemv_way(&var, rows, way):
        return _linear_gemv(pw, x, x_signed, rows, out, threads)
    return _linear_tiles(pw, x, x_signed, rows, out, threads)


cdef int _linear_tiles(const QWeights* pw, const uint8_t* x, int x_signed, Py_ssize_t rows,
                       const QOutput* out, Py_ssize_t threads) noexcept nogil:
    # C = W x^T on the tiles, stored transposed
    cdef PackB pack
    cdef Tiles tiles
    cdef int status
    tiles.var = qg_variant_of(_isa)
    pack.x, pack.g, pack.n, pack.k, pack.ldx, pack.kg = x, NULL, rows, pw.k, pw.k, pw.kg
    pack.flip = 0x80 if x_signed else 0
    if _buffers(&pack, pw.zw != NULL) != KERNEL_OK:
        free(pack.b)
        return KERNEL_OUT_OF_MEMORY
    tiles.op.a, tiles.op.b, tiles.op.m, tiles.op.n, tiles.op.kg = pw.a, pack.b, pw.m, rows, pw.kg
    tiles.op.pairs_fit = pw.pairs_fit
    _epilogue(&tiles.e, pw, out, pack.colsum, 1, pw.m)
    status = _gemm(&pack, &tiles, threads)
    free(pack.b)
    free(pack.colsum)
    return status


# ---- depthwise: one (image, channel) plane a unit -------------------------------------------

ctypedef struct Depthwise:
    const uint8_t* x
    const uint8_t* w
    int x_signed, w_unsigned
    int32_t zx
    const int32_t* zw
    Py_ssize_t channels
    const qg_conv* g
    qg_variant var
    qg_epilogue e


cdef int _depthwise_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef Depthwise* s = <Depthwise*>ctx
    cdef const qg_conv* g = s.g
    cdef Py_ssize_t u, ch, cells = g.oh * g.ow
    cdef short* padded = <short*>malloc(max(qg_depthwise_scratch(g), 1) * 2)
    cdef int32_t* acc = <int32_t*>malloc(max(cells, 1) * sizeof(int32_t))
    cdef qg_depthwise_fn plane = qg_depthwise_of(s.var.isa)
    cdef qg_epilogue e = s.e
    if padded == NULL or acc == NULL:
        free(padded)
        free(acc)
        return KERNEL_OUT_OF_MEMORY
    for u in range(lo, hi):
        ch = u % s.channels
        plane(s.x + u * g.h * g.w, s.x_signed, s.zx, s.w + ch * g.kh * g.kw, s.w_unsigned,
              s.zw[ch], g, padded, acc)
        # the epilogue's row is the channel; its output is this image's planes
        e.out = <char*>s.e.out + (u - ch) * cells * _item(e.kind)
        qg_store_plane(&s.var, acc, ch, cells, &e)
    free(padded)
    free(acc)
    return KERNEL_OK


cdef int depthwise_run(const uint8_t* x, int x_signed, int32_t zx, const uint8_t* w,
                       int w_unsigned, const int32_t* zw, const int32_t* bias,
                       const float* mult, Py_ssize_t images, const qg_conv* g,
                       const QOutput* out, Py_ssize_t threads) noexcept nogil:
    # groups == channels == out channels: w (channels, 1, kh, kw); bias NULL or per channel
    cdef Depthwise s
    cdef Py_ssize_t ch
    cdef int32_t* consts = <int32_t*>malloc(max(g.c, 1) * sizeof(int32_t))
    cdef int status
    if consts == NULL:
        return KERNEL_OUT_OF_MEMORY
    for ch in range(g.c):
        consts[ch] = 0 if bias == NULL else bias[ch]
    s.x, s.w, s.x_signed, s.w_unsigned, s.zx, s.zw, s.channels, s.g = (
        x, w, x_signed, w_unsigned, zx, zw, g.c, g)
    s.var = qg_variant_of(_isa)
    s.e.row_const, s.e.zw, s.e.colsum, s.e.mult = consts, NULL, NULL, mult
    s.e.zy, s.e.lo, s.e.hi, s.e.kind, s.e.out = out.zy, out.lo, out.hi, out.kind, out.y
    s.e.sm, s.e.sn, s.e.cells, s.e.si = g.oh * g.ow, 1, 0, 0
    status = parallel_for(threads, images * g.c, _depthwise_part, &s)
    free(consts)
    return status


# ---- the transposed convolution: W^T x on the GEMM per image, then col2im per output channel --

ctypedef struct Col2im:
    const int32_t* cols   # per group, rows (o, i, j) of input planes: channel ch's at ch * taps
    const qg_conv* g
    Py_ssize_t taps
    qg_variant var
    qg_epilogue e


cdef int _col2im_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    # output channels [lo, hi) of one image: summed from their taps' planes, then stored
    cdef Col2im* s = <Col2im*>ctx
    cdef const qg_conv* g = s.g
    cdef Py_ssize_t ch, cells = g.oh * g.ow
    cdef int32_t* acc = <int32_t*>malloc(max(cells, 1) * sizeof(int32_t))
    if acc == NULL:
        return KERNEL_OUT_OF_MEMORY
    for ch in range(lo, hi):
        qg_col2im_plane(s.cols + ch * s.taps * g.h * g.w, g, acc)
        qg_store_plane(&s.var, acc, ch, cells, &s.e)
    free(acc)
    return KERNEL_OK


cdef int conv_transpose_run(const uint8_t* x, int x_signed, int32_t zx, const uint8_t* w,
                            int w_unsigned, const int32_t* zw, const int32_t* bias,
                            const float* mult, Py_ssize_t images, Py_ssize_t groups,
                            Py_ssize_t opg, const qg_conv* g, const QOutput* out,
                            Py_ssize_t threads) noexcept nogil:
    # x (images, groups * g.c, g.h, g.w), w (groups * g.c, opg, g.kh, g.kw), zw and bias per
    # output channel, y (images, groups * opg, g.oh, g.ow); the weight transposed and packed
    # now, then conv_transpose_packed_run
    cdef Py_ssize_t taps = g.kh * g.kw, rows = groups * opg * taps
    cdef uint8_t* wt = <uint8_t*>malloc(max(rows * g.c, 1))
    cdef int32_t* zrows = <int32_t*>malloc(max(rows, 1) * sizeof(int32_t))
    cdef char* packed = <char*>malloc(packed_size(rows, g.c, groups))
    cdef int status = KERNEL_OUT_OF_MEMORY
    cdef QWeights pw
    if wt != NULL and zrows != NULL and packed != NULL:
        qg_transpose_weight(w, zw, groups * g.c, opg, taps, groups, wt, zrows)
        pack_weights(packed, wt, w_unsigned, rows, g.c, groups, zrows,
                     zx + 128 if x_signed else zx, NULL)
        weights_view(&pw, packed, rows, g.c, groups, NULL)
        status = conv_transpose_packed_run(&pw, x, x_signed, zx, bias, mult, images,
                                           groups * opg, g, out, threads)
    free(wt)
    free(zrows)
    free(packed)
    return status


cdef int conv_transpose_packed_run(const QWeights* pw, const uint8_t* x, int x_signed,
                                   int32_t zx, const int32_t* bias, const float* mult,
                                   Py_ssize_t images, Py_ssize_t oc, const qg_conv* g,
                                   const QOutput* out, Py_ssize_t threads) noexcept nogil:
    # pw: the transposed weight's rows (output channel, tap) of g.c values per group (oc
    # output channels in pw.groups), packed without a bias (qg_transpose_weight, pack_weights);
    # per image their GEMM by x's channel rows into int32 planes, then col2im per output channel
    cdef Py_ssize_t taps = g.kh * g.kw, rows = oc * taps
    cdef Py_ssize_t plane = g.h * g.w, i, o
    cdef int32_t* consts = <int32_t*>malloc(max(oc, 1) * sizeof(int32_t))
    cdef int32_t* cols = <int32_t*>malloc(max(rows * plane, 1) * sizeof(int32_t))
    cdef int status = KERNEL_OUT_OF_MEMORY
    cdef qg_conv unit  # the GEMM's: x's channel rows read in place
    cdef QOutput planes
    cdef Col2im s
    if consts != NULL and cols != NULL:
        unit.c, unit.h, unit.w, unit.oh, unit.ow = g.c, g.h, g.w, g.h, g.w
        unit.kh = unit.kw = unit.sh = unit.sw = unit.dh = unit.dw = 1
        unit.ph = unit.pw = 0
        planes.y, planes.kind, planes.zy, planes.lo, planes.hi = cols, QG_OUT_INT32, 0, 0, 0
        for o in range(oc):
            consts[o] = 0 if bias == NULL else bias[o]
        s.cols, s.g, s.taps, s.var = cols, g, taps, qg_variant_of(_isa)
        s.e.row_const, s.e.zw, s.e.colsum, s.e.mult = consts, NULL, NULL, mult
        s.e.zy, s.e.lo, s.e.hi, s.e.kind = out.zy, out.lo, out.hi, out.kind
        s.e.sm, s.e.sn, s.e.cells, s.e.si = g.oh * g.ow, 1, 0, 0
        status = KERNEL_OK
        for i in range(images):
            status = conv_run(pw, x + i * pw.groups * g.c * plane, x_signed, zx, 1, &unit,
                              &planes, threads)
            if status != KERNEL_OK:
                break
            s.e.out = <char*>out.y + i * oc * g.oh * g.ow * _item(out.kind)
            status = parallel_for(threads, oc, _col2im_part, &s)
            if status != KERNEL_OK:
                break
    free(consts)
    free(cols)
    return status


# ---- array entry points: the same kernels on NumPy arrays (tests, benchmarks) ----------------

_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}
_KINDS = {"int32": QG_OUT_INT32, "int8": QG_OUT_INT8, "uint8": QG_OUT_UINT8}


cdef QOutput _output(y, str out_dtype, int zy, bint relu):
    cdef QOutput out
    cdef char[::1] view = y.reshape(-1).view(np.int8)
    out.y, out.kind, out.zy = &view[0], _KINDS[out_dtype], zy
    out.lo, out.hi = _RANGES.get(out_dtype, (0, 0))
    if relu:
        out.lo = max(out.lo, zy)
    return out


def _per_channel(values, count, dtype):
    values = np.ascontiguousarray(values, dtype)
    return np.ascontiguousarray(np.broadcast_to(values, (count,)) if values.size == 1
                                else values)


def _bytes(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8).reshape(-1)


def packed_weights(w, zw, bias, Py_ssize_t groups=1, bint x_signed=False, int zx=0):
    """w (O, ...) int8/uint8 with zero points zw (one or per channel) and bias int32 (O,) or
    None packed for an input of zero point zx: the bytes conv2d and linear read."""
    cdef Py_ssize_t oc = w.shape[0]
    cdef int w_unsigned = w.dtype == np.uint8, zxs = zx + 128 if x_signed else zx
    cdef const uint8_t[::1] wb = _bytes(w)
    cdef const int32_t[::1] zws = _per_channel(zw, oc, np.int32)
    cdef const int32_t[::1] bs = None if bias is None else _per_channel(bias, oc, np.int32)
    cdef Py_ssize_t k = wb.shape[0] // oc
    packed = np.empty(packed_size(oc, k, groups), np.uint8)
    cdef unsigned char[::1] out = packed
    with nogil:
        pack_weights(<char*>&out[0], &wb[0], w_unsigned, oc, k, groups, &zws[0], zxs,
                     NULL if bs is None else &bs[0])
    return packed


def packed_pairs_fit(packed) -> bool:
    """Whether packed weights (packed_weights) carry the proof that vpmaddubsw is exact on them
    (qgemm.h's qg_pairs_fit, from their bytes): the AVX2 variant then runs its vpmaddubsw tile.
    The flags are the buffer's last int32."""
    return bool(int(np.asarray(packed).view(np.uint8)[-4:].view(np.int32)[0]) & QG_PAIRS_FIT)


def without_pairs_fit(packed):
    """A copy of packed weights without the proof, so the AVX2 variant runs its widening tile on
    the same weights (tests and benchmarks compare the two)."""
    out = np.array(packed, np.uint8, copy=True)
    flags = out[-4:].view(np.int32)
    flags[0] &= ~QG_PAIRS_FIT
    return out


cdef QWeights _view(packed, Py_ssize_t oc, Py_ssize_t k, Py_ssize_t groups,
                    const float[::1] mults) except *:
    cdef QWeights pw
    cdef const unsigned char[::1] bytes_ = packed
    weights_view(&pw, <const char*>&bytes_[0], oc, k, groups, &mults[0])
    return pw


def _checked(packed, w, zw, bias, Py_ssize_t groups, bint x_signed, int zx, str op):
    # the packed weights given, if their size fits w, or w packed now
    cdef Py_ssize_t oc = w.shape[0], k = w.size // max(oc, 1)
    if packed is None:
        return packed_weights(w, zw, bias, groups, x_signed, zx)
    if len(packed) != packed_size(oc, k, groups):
        raise ValueError(f"{op}: packed weights of {len(packed)} bytes for a weight "
                         f"{tuple(w.shape)}; packed_weights gives {packed_size(oc, k, groups)}")
    return packed


def _way(str way, str op) -> int:
    if way not in _WAYS:
        raise ValueError(f"{op}: unknown way {way!r}; one of {_WAYS}")
    return _WAYS.index(way)


def conv2d(x, int zx, w, zw, bias, mult, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
           Py_ssize_t groups=1, str out_dtype="int8", int zy=0, bint relu=False,
           Py_ssize_t threads=1, str way="rule", packed=None):
    """The int8 convolution of stored integers: x (N, C, H, W) int8/uint8 with zero point zx,
    w (O, C/groups, kh, kw) int8/uint8 with zero points zw (one or per channel), bias int32 (O,)
    or None, mult the float32 multipliers (one or per channel; unused for int32), as
    ops/quantized.py defines. ``way`` and ``packed`` as linear's (a GEMV of at most QG_GEMV_MAX
    cells; packed_weights(w, zw, bias, groups, x is int8, zx), unused by a depthwise one)."""
    cdef qg_conv g
    cdef QWeights pw
    cdef QOutput out
    cdef int status, x_signed = x.dtype == np.int8, w_unsigned = w.dtype == np.uint8
    cdef Py_ssize_t n, c, oc
    n, c, g.h, g.w = x.shape
    oc, g.c, g.kh, g.kw = w.shape
    (g.sh, g.sw), (g.ph, g.pw), (g.dh, g.dw) = stride, padding, dilation
    g.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) // g.sh + 1
    g.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) // g.sw + 1
    cdef int choice = _way(way, "quantized_conv2d")
    if choice == WAY_GEMV and g.oh * g.ow > gemv_columns("portable"):
        raise ValueError(f"quantized_conv2d: a GEMV takes at most {gemv_columns('portable')} "
                         f"output cells; this convolution has {g.oh * g.ow}")
    y = np.empty((n, oc, g.oh, g.ow), out_dtype)
    out = _output(y, out_dtype, zy, relu)
    cdef const uint8_t[::1] xb = _bytes(x), wb = _bytes(w)
    cdef const int32_t[::1] zws = _per_channel(zw, oc, np.int32)
    cdef const float[::1] mults = _per_channel(1.0 if mult is None else mult, oc, np.float32)
    cdef const int32_t[::1] bs = None if bias is None else _per_channel(bias, oc, np.int32)
    if groups == c == oc and g.c == 1:
        g.c = c
        with nogil:
            status = depthwise_run(&xb[0], x_signed, zx, &wb[0], w_unsigned, &zws[0],
                                   NULL if bs is None else &bs[0], &mults[0], n, &g, &out,
                                   threads)
    else:
        packed = _checked(packed, w, zw, bias, groups, x_signed, zx, "quantized_conv2d")
        pw = _view(packed, oc, g.c * g.kh * g.kw, groups, mults)
        with nogil:
            status = _conv_run(&pw, &xb[0], x_signed, zx, n, &g, &out, threads, choice)
    if status != KERNEL_OK:
        raise MemoryError(f"quantized_conv2d: the int8 kernel failed (status {status})")
    return y


def linear(x, int zx, w, zw, bias, mult, str out_dtype="int8", int zy=0, bint relu=False,
           Py_ssize_t threads=1, str way="rule", packed=None):
    """The int8 linear layer of stored integers: x (..., in), w (out, in); as conv2d. ``way``
    "tiles" or "gemv" overrides the rule (qg_gemv_fits) for tests and benchmarks: every way
    gives the same integers; "gemv" on a variant without one runs the portable GEMV.
    ``packed``: packed_weights(w, zw, bias, 1, x is int8, zx), so a benchmark times the run
    alone."""
    cdef QWeights pw
    cdef QOutput out
    cdef int status, x_signed = x.dtype == np.int8
    cdef Py_ssize_t oc = w.shape[0], k = w.shape[1], rows = x.size // k
    y = np.empty(tuple(x.shape)[:len(x.shape) - 1] + (oc,), out_dtype)
    out = _output(y, out_dtype, zy, relu)
    cdef const uint8_t[::1] xb = _bytes(x)
    cdef const float[::1] mults = _per_channel(1.0 if mult is None else mult, oc, np.float32)
    packed = _checked(packed, w, zw, bias, 1, x_signed, zx, "quantized_linear")
    pw = _view(packed, oc, k, 1, mults)
    cdef int choice = _way(way, "quantized_linear")
    with nogil:
        status = _linear_run(&pw, &xb[0], x_signed, rows, &out, threads, choice)
    if status != KERNEL_OK:
        raise MemoryError(f"quantized_linear: the int8 kernel failed (status {status})")
    return y


def vnni_peak_loop(long long iterations) -> int:
    """Runs iterations x 16 register-only vpdpbusd (64 int8 multiply-adds each) on one thread
    (benchmarks/int8_kernels.py times it); -1 without AVX-512 VNNI."""
    cdef int r
    with nogil:
        r = qg_vnni_loop(iterations)
    return r


def amx_peak_loop(long long iterations) -> int:
    """Runs iterations x 4 register-only TDPBSUD (16 x 16 x 64 int8 multiply-adds each) on one
    thread (benchmarks/int8_kernels.py times it); -1 where the tiles cannot be used."""
    cdef int r
    with nogil:
        r = qg_amx_loop(iterations)
    return r
