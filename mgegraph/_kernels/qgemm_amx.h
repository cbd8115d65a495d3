/* The int8 GEMM's AMX tiles (included by qgemm.h, which runs the GEMM over them): one block of
 * C (32 rows x 32 columns, int32) = A (int8 rows, qgemm.h's packed A) x B (uint8, qgemm.h's
 * packed B), raw sums; the epilogue is qgemm.h's, as for every variant.
 *
 * Design: TDPBSUD multiplies a tile of signed bytes (16 rows of 64 k: 16 rows of packed A) by a
 * tile of unsigned bytes in 4-byte k groups (16 groups of 16 columns x 4 k: 1 KiB of a packed B
 * column block), the same operands and signs as vpdpbusd's, so the same packing, constants and
 * epilogue serve both and the sums are the same integers. A block holds four accumulators
 * (tmm0-3: rows 0-15 / 16-31 by columns 0-15 / 16-31); per 64 k it loads two A tiles (tmm4-5)
 * and two B tiles (tmm6-7) for four TDPBSUD of 16 x 16 x 64 multiply-adds. A block at the
 * edge with 16 rows or columns or fewer skips the tiles past them (packed A's rows are padded to
 * 16 and B's columns to 16 with zeros, so a tile never reads past the packing).
 *
 * Linux grants a process the tile state only when asked (arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA)); qg_amx_ready asks once and says whether the tiles may be used (it is
 * refused on old kernels and in some VMs: the VNNI variant runs then). The tile configuration
 * is per thread: every thread loads it (qg_amx_begin) before its tiles and releases it
 * (qg_amx_end) after. Only x86-64 GCC or Clang on Linux build the tiles; elsewhere
 * qg_amx_ready is 0 and the rest are never called.
 */
#ifndef MG_QGEMM_AMX_H
#define MG_QGEMM_AMX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QG_AMX_BLOCK 32 /* rows and columns of C per block */

#if QG_X86 && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

#define QG_ARCH_REQ_XCOMP_PERM 0x1023
#define QG_XFEATURE_XTILEDATA 18

/* the 64-byte operand of ldtilecfg: palette 1, then per tile its bytes per row and rows */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} qg_amx_config;

/* 1 when this CPU has AMX-INT8 and the kernel lets this process use the tiles (asked once; a
 * race only repeats the same idempotent request) */
static inline int qg_amx_ready(void) {
    static int state = -1;
    if (state < 0) {
        __builtin_cpu_init();
        state = __builtin_cpu_supports("amx-int8") && __builtin_cpu_supports("amx-tile")
                && syscall(SYS_arch_prctl, QG_ARCH_REQ_XCOMP_PERM, QG_XFEATURE_XTILEDATA) == 0;
    }
    return state;
}

__attribute__((target("amx-tile,amx-int8"))) static void qg_amx_begin(void) {
    qg_amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    /* GCC 12 does not see ldtilecfg read the struct and drops the stores above without this */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) static void qg_amx_end(void) { _tile_release(); }

/* c[0:32][0:32] (int32, rows 32 apart) = A rows [0, 16 or 32) (a, lda bytes apart) x B columns
 * [0, 16 or 32) (b: packed column blocks block_stride apart), over ksteps of 64 k; the rows
 * and columns a block skips are left as they were in c */
__attribute__((target("amx-tile,amx-int8"))) static void qg_amx_block(
    const int8_t* a, ptrdiff_t lda, int two_rows, const uint8_t* b, ptrdiff_t block_stride,
    int two_cols, ptrdiff_t ksteps, int32_t* c) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (ptrdiff_t s = 0; s < ksteps; s++) {
        _tile_loadd(4, a + s * 64, lda);
        _tile_loadd(6, b + s * 1024, 64);
        _tile_dpbsud(0, 4, 6);
        if (two_cols) {
            _tile_loadd(7, b + block_stride + s * 1024, 64);
            _tile_dpbsud(1, 4, 7);
        }
        if (two_rows) {
            _tile_loadd(5, a + 16 * lda + s * 64, lda);
            _tile_dpbsud(2, 5, 6);
            if (two_cols) _tile_dpbsud(3, 5, 7);
        }
    }
    _tile_stored(0, c, QG_AMX_BLOCK * 4);
    if (two_cols) _tile_stored(1, c + 16, QG_AMX_BLOCK * 4);
    if (two_rows) _tile_stored(2, c + 16 * QG_AMX_BLOCK, QG_AMX_BLOCK * 4);
    if (two_rows && two_cols) _tile_stored(3, c + 16 * QG_AMX_BLOCK + 16, QG_AMX_BLOCK * 4);
}

/* iterations x 4 register-only TDPBSUD (16 x 16 x 64 multiply-adds each) on this thread
 * (benchmarks/int8_kernels.py times it for the machine's peak); -1 without the tiles */
__attribute__((target("amx-tile,amx-int8"))) static int qg_amx_loop_tiles(long long iterations) {
    uint8_t ones[1024]; /* operands of ones: no zero the hardware could skip */
    memset(ones, 1, sizeof ones);
    qg_amx_begin();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (long long i = 0; i < iterations; i++) {
        _tile_dpbsud(0, 4, 6);
        _tile_dpbsud(1, 4, 7);
        _tile_dpbsud(2, 5, 6);
        _tile_dpbsud(3, 5, 7);
    }
    qg_amx_end();
    return 0;
}

static int qg_amx_loop(long long iterations) {
    return qg_amx_ready() ? qg_amx_loop_tiles(iterations) : -1;
}
#else
static inline int qg_amx_ready(void) { return 0; }
static inline void qg_amx_begin(void) {}
static inline void qg_amx_end(void) {}
static inline void qg_amx_block(const int8_t* a, ptrdiff_t lda, int two_rows, const uint8_t* b,
                                ptrdiff_t block_stride, int two_cols, ptrdiff_t ksteps,
                                int32_t* c) {
    (void)a, (void)lda, (void)two_rows, (void)b, (void)block_stride, (void)two_cols;
    (void)ksteps, (void)c;
}
static int qg_amx_loop(long long iterations) {
    (void)iterations;
    return -1;
}
#endif

#endif
