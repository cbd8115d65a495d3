/* The AVX2 int8 tile with the GEMV's 4-bit split, against qg_tile_avx2, in one process:
 * the experiment behind qgemm.h's "Not taken either" note, kept so it can be rerun on another
 * CPU (a quiet one, or one whose vpmaddubsw runs on more pipes than vpmaddwd).
 *
 *     gcc -O3 -Imgegraph/_kernels benchmarks/int8_nibble_tile.c -o /tmp/nibble && /tmp/nibble 25
 *
 * Two ways, both in inline assembly (GCC 12 spills the C version's 8 int16 sums), 4 rows x 8
 * columns of a tile a block, as qg_tile_avx2:
 *   x-nibbles: packed B split per call into its low and high nibble planes (timed with the
 *     tiles), vpmaddubsw(plane, A's int8 broadcast), 8 k groups summed in int16 (a pair is at
 *     most 2 x 15 x 128 = 3840), then vpmaddwd by 1 and by 16 into int32;
 *   w-nibbles: A split once (w + 128 = 16 h + l, nibble planes, as a new packed form would be),
 *     B read as int8 (x' ^ 0x80), vpmaddubsw(nibble broadcast, B); the sums need
 *     + 128 rowsum(w) - 128 colsum(x') + 16384 K, K in whole groups of 4 (checked here).
 * Each row: per GEMM shape the vpmaddwd tile's median ms and the two ways' time ratios over it
 * (interleaved A, B, C, A, B, C ...), and how many sums differ from qg_tile_avx2's (must be 0). */
#include "qgemm.h"

#include <stdio.h>
#include <time.h>

#define STEPS 8 /* k groups summed in int16 */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* packed B's low and high nibble planes, in B's layout */
__attribute__((target("avx2"))) static void split_b(const uint8_t* b, ptrdiff_t bytes,
                                                     uint8_t* lo, uint8_t* hi) {
    __m256i m = _mm256_set1_epi8(15);
    for (ptrdiff_t i = 0; i < bytes; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i*)(b + i));
        _mm256_storeu_si256((__m256i*)(lo + i), _mm256_and_si256(v, m));
        _mm256_storeu_si256((__m256i*)(hi + i), _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
    }
}

/* asm k loop: `groups` (<= 8) k groups of 4 rows x 8 columns; raw[0..3] lo int16 sums, raw[4..7] hi */
#define XROW(off, lo, hi) \
    "vpbroadcastd " off ", %%ymm10\n\t" \
    "vpmaddubsw %%ymm10, %%ymm8, %%ymm11\n\t" \
    "vpaddw %%ymm11, %%ymm" #lo ", %%ymm" #lo "\n\t" \
    "vpmaddubsw %%ymm10, %%ymm9, %%ymm12\n\t" \
    "vpaddw %%ymm12, %%ymm" #hi ", %%ymm" #hi "\n\t"
__attribute__((target("avx2"))) static void xnib_block(const uint8_t* bl, const uint8_t* bh, const int8_t* a,
        ptrdiff_t lda, ptrdiff_t groups, __m256i* raw) {
    ptrdiff_t l3 = 3 * lda, off = bh - bl;
    __asm__ volatile(
        "vpxor %%xmm0, %%xmm0, %%xmm0\n\t" "vpxor %%xmm1, %%xmm1, %%xmm1\n\t"
        "vpxor %%xmm2, %%xmm2, %%xmm2\n\t" "vpxor %%xmm3, %%xmm3, %%xmm3\n\t"
        "vpxor %%xmm4, %%xmm4, %%xmm4\n\t" "vpxor %%xmm5, %%xmm5, %%xmm5\n\t"
        "vpxor %%xmm6, %%xmm6, %%xmm6\n\t" "vpxor %%xmm7, %%xmm7, %%xmm7\n\t"
        "1:\n\t"
        "vmovdqu (%[b]), %%ymm8\n\t"
        "vmovdqu (%[b],%[off]), %%ymm9\n\t"
        XROW("(%[a])", 0, 4) XROW("(%[a],%[lda])", 1, 5) XROW("(%[a],%[lda],2)", 2, 6) XROW("(%[a],%[l3])", 3, 7)
        "add $64, %[b]\n\t"
        "add $4, %[a]\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        "vmovdqu %%ymm0, (%[raw])\n\t" "vmovdqu %%ymm1, 32(%[raw])\n\t"
        "vmovdqu %%ymm2, 64(%[raw])\n\t" "vmovdqu %%ymm3, 96(%[raw])\n\t"
        "vmovdqu %%ymm4, 128(%[raw])\n\t" "vmovdqu %%ymm5, 160(%[raw])\n\t"
        "vmovdqu %%ymm6, 192(%[raw])\n\t" "vmovdqu %%ymm7, 224(%[raw])\n\t"
        : [b] "+r"(bl), [a] "+r"(a), [n] "+r"(groups)
        : [raw] "r"(raw), [lda] "r"(lda), [l3] "r"(l3), [off] "r"(off)
        : "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","cc","memory");
}
/* weight nibbles: al/ah planes (off apart), B flipped to s8 */
#define WROW(offl, offh, lo, hi) \
    "vpbroadcastd " offl ", %%ymm10\n\t" \
    "vpmaddubsw %%ymm8, %%ymm10, %%ymm11\n\t" \
    "vpaddw %%ymm11, %%ymm" #lo ", %%ymm" #lo "\n\t" \
    "vpbroadcastd " offh ", %%ymm12\n\t" \
    "vpmaddubsw %%ymm8, %%ymm12, %%ymm12\n\t" \
    "vpaddw %%ymm12, %%ymm" #hi ", %%ymm" #hi "\n\t"
__attribute__((target("avx2"))) static void wnib_block(const uint8_t* b, const uint8_t* al, ptrdiff_t off,
        ptrdiff_t lda, ptrdiff_t groups, __m256i* raw) {
    const uint8_t* a1 = al + lda; const uint8_t* a2 = al + 2 * lda; const uint8_t* a3 = al + 3 * lda;
    __m256i flip = _mm256_set1_epi8((char)0x80);
    __asm__ volatile(
        "vpxor %%xmm0, %%xmm0, %%xmm0\n\t" "vpxor %%xmm1, %%xmm1, %%xmm1\n\t"
        "vpxor %%xmm2, %%xmm2, %%xmm2\n\t" "vpxor %%xmm3, %%xmm3, %%xmm3\n\t"
        "vpxor %%xmm4, %%xmm4, %%xmm4\n\t" "vpxor %%xmm5, %%xmm5, %%xmm5\n\t"
        "vpxor %%xmm6, %%xmm6, %%xmm6\n\t" "vpxor %%xmm7, %%xmm7, %%xmm7\n\t"
        "vmovdqu %[flip], %%ymm13\n\t"
        "1:\n\t"
        "vpxor (%[b]), %%ymm13, %%ymm8\n\t"
        WROW("(%[a0])", "(%[a0],%[off])", 0, 4) WROW("(%[a1])", "(%[a1],%[off])", 1, 5)
        WROW("(%[a2])", "(%[a2],%[off])", 2, 6) WROW("(%[a3])", "(%[a3],%[off])", 3, 7)
        "add $64, %[b]\n\t"
        "add $4, %[a0]\n\t" "add $4, %[a1]\n\t" "add $4, %[a2]\n\t" "add $4, %[a3]\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        "vmovdqu %%ymm0, (%[raw])\n\t" "vmovdqu %%ymm1, 32(%[raw])\n\t"
        "vmovdqu %%ymm2, 64(%[raw])\n\t" "vmovdqu %%ymm3, 96(%[raw])\n\t"
        "vmovdqu %%ymm4, 128(%[raw])\n\t" "vmovdqu %%ymm5, 160(%[raw])\n\t"
        "vmovdqu %%ymm6, 192(%[raw])\n\t" "vmovdqu %%ymm7, 224(%[raw])\n\t"
        : [b] "+r"(b), [a0] "+r"(al), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [n] "+r"(groups)
        : [raw] "r"(raw), [off] "r"(off), [flip] "m"(flip)
        : "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","cc","memory");
}
__attribute__((target("avx2"))) static void tile_asm(int wsplit, const int8_t* a, const uint8_t* al, const uint8_t* ah, ptrdiff_t lda,
        const uint8_t* bl, const uint8_t* bh, ptrdiff_t block_stride, ptrdiff_t kg, int nv, int32_t* tile) {
    const __m256i ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi16(16);
    __m256i raw[8];
    for (int v = 0; v < nv; v++)
        for (int half = 0; half < 2; half++)
            for (int h = 0; h < QG_MR; h += 4) {
                __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
                for (ptrdiff_t g0 = 0; g0 < kg; g0 += STEPS) {
                    ptrdiff_t groups = kg - g0 < STEPS ? kg - g0 : STEPS;
                    ptrdiff_t bo = v * block_stride + half * 32 + g0 * 64;
                    if (wsplit) wnib_block(bl + bo, al + h * lda + g0 * 4, ah - al, lda, groups, raw);
                    else xnib_block(bl + bo, bh + bo, a + h * lda + g0 * 4, lda, groups, raw);
                    for (int r = 0; r < 4; r++)
                        acc[r] = _mm256_add_epi32(acc[r], _mm256_add_epi32(_mm256_madd_epi16(raw[r], ones), _mm256_madd_epi16(raw[4 + r], sixteen)));
                }
                int32_t* out = tile + h * QG_TILE_COLS + v * QG_NB + half * 8;
                for (int r = 0; r < 4; r++) _mm256_storeu_si256((__m256i*)(out + r * QG_TILE_COLS), acc[r]);
            }
}

static int cmp(const void* x, const void* y) {
    double a = *(const double*)x, b = *(const double*)y;
    return a < b ? -1 : a > b;
}
static double median(double* v, int n) {
    qsort(v, n, sizeof(double), cmp);
    return v[n / 2];
}

typedef struct {
    ptrdiff_t m, k, n, kg, lda, bs, nb;
    int8_t* a;
    uint8_t *al, *ah, *b, *bl, *bh;
    int32_t *rowsum, *colsum;
} gemm;

static gemm make(ptrdiff_t m, ptrdiff_t k, ptrdiff_t n) {
    gemm g = {.m = m, .k = k, .n = n, .kg = qg_groups(k)};
    g.lda = qg_a_stride(g.kg), g.bs = qg_b_stride(g.kg), g.nb = qg_blocks(n, QG_NB);
    ptrdiff_t mp = qg_blocks(m, QG_AR) * QG_AR;
    g.a = calloc(mp * g.lda, 1), g.al = calloc(mp * g.lda, 1), g.ah = calloc(mp * g.lda, 1);
    g.b = calloc(g.nb * g.bs, 1), g.bl = calloc(g.nb * g.bs, 1), g.bh = calloc(g.nb * g.bs, 1);
    g.rowsum = calloc(mp, 4), g.colsum = calloc(g.nb * QG_NB, 4);
    srand(1);
    for (ptrdiff_t r = 0; r < m; r++)
        for (ptrdiff_t i = 0; i < k; i++) g.a[r * g.lda + i] = (int8_t)(rand() % 256 - 128);
    for (ptrdiff_t i = 0; i < mp * g.lda; i++) {
        uint8_t u = (uint8_t)g.a[i] ^ 0x80;
        g.al[i] = u & 15, g.ah[i] = u >> 4;
        g.rowsum[i / g.lda] += g.a[i];
    }
    for (ptrdiff_t bb = 0; bb < g.nb; bb++)
        for (ptrdiff_t q = 0; q < g.kg; q++)
            for (int c = 0; c < QG_NB; c++)
                for (int j = 0; j < 4; j++)
                    if (q * 4 + j < k && bb * QG_NB + c < n) {
                        uint8_t v = (uint8_t)(rand() % 256);
                        g.b[bb * g.bs + q * 64 + c * 4 + j] = v;
                        g.colsum[bb * QG_NB + c] += v;
                    }
    return g;
}

/* way 0: qg_tile_avx2; 1: x-nibbles (B split included); 2: w-nibbles. Every tile into t. */
static void run(const gemm* g, int way, int32_t* t, long long* bad) {
    int32_t ref[QG_MR * QG_TILE_COLS] __attribute__((aligned(64)));
    if (way == 1) split_b(g->b, g->nb * g->bs, g->bl, g->bh);
    for (ptrdiff_t m0 = 0; m0 < g->m; m0 += QG_MR)
        for (ptrdiff_t n0 = 0; n0 < g->n; n0 += QG_TILE_COLS) {
            ptrdiff_t cols = g->n - n0 < QG_TILE_COLS ? g->n - n0 : QG_TILE_COLS;
            int nv = (int)qg_blocks(cols, QG_NB);
            ptrdiff_t bo = n0 / QG_NB * g->bs, ao = m0 * g->lda;
            if (way == 0)
                qg_tile_avx2(g->a + ao, g->lda, g->b + bo, g->bs, g->kg, nv, t);
            else if (way == 1)
                tile_asm(0, g->a + ao, 0, 0, g->lda, g->bl + bo, g->bh + bo, g->bs, g->kg, nv, t);
            else
                tile_asm(1, 0, g->al + ao, g->ah + ao, g->lda, g->b + bo, 0, g->bs, g->kg, nv, t);
            if (!bad) continue;
            qg_tile_avx2(g->a + ao, g->lda, g->b + bo, g->bs, g->kg, nv, ref);
            ptrdiff_t kp = g->kg * 4; /* the k the tiles run: whole groups */
            for (int r = 0; r < QG_MR; r++)
                for (int c = 0; c < cols; c++) {
                    int32_t s = t[r * QG_TILE_COLS + c];
                    if (way == 2)
                        s += 128 * g->rowsum[m0 + r] - 128 * g->colsum[n0 + c] + 16384 * kp;
                    *bad += s != ref[r * QG_TILE_COLS + c];
                }
        }
}

static void shape(const char* name, ptrdiff_t m, ptrdiff_t k, ptrdiff_t n, int reps) {
    gemm g = make(m, k, n);
    int32_t t[QG_MR * QG_TILE_COLS] __attribute__((aligned(64)));
    long long bad = 0;
    run(&g, 1, t, &bad);
    run(&g, 2, t, &bad);
    double times[3][64];
    for (int rep = 0; rep < reps; rep++)
        for (int way = 0; way < 3; way++) {
            double t0 = now();
            run(&g, way, t, NULL);
            times[way][rep] = now() - t0;
        }
    double base = median(times[0], reps);
    printf("%-26s %5td %5td %5td  vpmaddwd %.3f ms  x-nibbles %.2fx  w-nibbles %.2fx  "
           "differ %lld\n", name, m, k, n, base * 1e3, median(times[1], reps) / base,
           median(times[2], reps) / base, bad);
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 25;
    if (reps < 1 || reps > 64 || !qg_isa_ok(QG_AVX2)) {
        fprintf(stderr, "usage: %s [calls, 1-64] (needs AVX2)\n", argv[0]);
        return 2;
    }
    printf("shape                          M     K     N\n");
    /* ResNet-18 at 64x64, one image's GEMM; the int8 MLP at batch 128 */
    shape("r18 conv1 7x7 s2 3->64", 64, 147, 1024, reps);
    shape("r18 layer1 3x3 64", 64, 576, 256, reps);
    shape("r18 layer2 3x3 s2 64->128", 128, 576, 64, reps);
    shape("r18 layer2 3x3 128", 128, 1152, 64, reps);
    shape("r18 layer3 3x3 256", 256, 2304, 16, reps);
    shape("mlp 784->1024 b128", 1024, 784, 128, reps);
    shape("mlp 1024->1024 b128", 1024, 1024, 128, reps);
    return 0;
}
