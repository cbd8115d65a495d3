# The register-blocked float32 tiles of conv_tile.h and the CPU feature test they are picked
# by (cpu_isa.h), declared once for the modules that run them: conv.pyx's tiled convolution
# paths (conv_blocked.pxi, conv_winograd.pxi) and linalg.pyx's GEMMs on the gather tiles, with
# packed_tile, the lookup of a tile by its width. Each module compiles the header's static
# functions into itself.

cdef extern from "cpu_isa.h":
    int cpu_isa_ok(int isa) noexcept nogil

cdef extern from "conv_tile.h":
    ctypedef void (*conv_tile_fn)(const float* x, Py_ssize_t cstride, const Py_ssize_t* offs,
                                  Py_ssize_t ntaps, Py_ssize_t nc, const float* w, float* y,
                                  Py_ssize_t ldy, Py_ssize_t nrows, int accumulate) noexcept nogil
    ctypedef void (*conv_gather_fn)(const float* const* px, Py_ssize_t cstride,
                                    const Py_ssize_t* offs, Py_ssize_t ntaps, Py_ssize_t nc,
                                    const float* w, Py_ssize_t ldw, float* y, Py_ssize_t ldy,
                                    int accumulate) noexcept nogil
    ctypedef struct conv_tile:
        conv_tile_fn fn
        Py_ssize_t rows, cols
        conv_gather_fn gather
        Py_ssize_t pix, ch
        conv_gather_fn narrow
        Py_ssize_t narrow_pix, narrow_ch
    ctypedef struct conv_packed_tile:
        conv_gather_fn fn
        Py_ssize_t pix, ch
    ctypedef void (*conv_out_fn)(const float* cells, Py_ssize_t ldc, float* y, Py_ssize_t ldy,
                                 Py_ssize_t ncells, Py_ssize_t o0, Py_ssize_t o1,
                                 const float* bias, int act) noexcept nogil
    enum:
        CONV_PACK
        CONV_COLS_MAX
        CONV_CPACK
        CONV_PIX_MAX
        CONV_PACKED_MAX
    conv_tile conv_tile_of(int isa) noexcept nogil
    int conv_packed_tiles(int isa, conv_packed_tile* out) noexcept nogil
    conv_out_fn conv_out_of(int isa) noexcept nogil
    float conv_out_one(float v, float add, int act) noexcept nogil


cdef inline bint packed_tile(int isa, Py_ssize_t block, conv_tile* t) noexcept nogil:
    # t.gather, t.pix, t.ch: the isa's conv2d_packed tile whose channels are block wide; False
    # when it has none
    cdef conv_packed_tile tiles[CONV_PACKED_MAX]
    cdef int i, n = conv_packed_tiles(isa, tiles)
    for i in range(n):
        if tiles[i].ch == block:
            t.gather, t.pix, t.ch = tiles[i].fn, tiles[i].pix, tiles[i].ch
            return True
    return False
