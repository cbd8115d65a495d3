# quantized_add's vectorised rows (included by quantized.pyx): a and b of one dtype, both read
# contiguously along the row, the output's dtype either.
#
# Design: the same integers as add_rows, bit for bit, from a loop the compiler vectorises (GCC 12
# -O3: 64-byte vectors under AVX-512BW, 32-byte under AVX2): the two products are float32
# products and their sum a float32 sum, never contracted into a fused multiply-add (the block
# is compiled with fp-contract off: objdump of the AVX-512 and AVX2 clones shows no vfmadd),
# rintf rounds half to even, and the clamp to [low - zy, high - zy] is done on the rounded float
# before the zero point is added, which is the reference's clamp of rint + zy (both exact: the
# bounds are small integers) and keeps the float to int conversion in range. Each ISA gets its
# own clone (target attributes), picked once by the CPU's features.
from libc.stdint cimport int8_t, uint8_t

cdef extern from *:
    """
    #include <math.h>
    #include <stdint.h>
    #pragma GCC push_options
    #pragma GCC optimize("fp-contract=off")
    #define MG_QADD_ROW(NAME, TIN, TOUT, ATTR)                                                  \\
        ATTR static void NAME(const TIN* a, const TIN* b, TOUT* out, Py_ssize_t n, int za,      \\
                              int zb, float ma, float mb, float low, float high, int zy) {      \\
            for (Py_ssize_t i = 0; i < n; ++i) {                                                \\
                const float fa = (float)(a[i] - za) * ma;                                       \\
                const float fb = (float)(b[i] - zb) * mb;                                       \\
                float r = rintf(fa + fb);                                                       \\
                r = r < low ? low : (r > high ? high : r);                                      \\
                out[i] = (TOUT)((int)r + zy);                                                   \\
            }                                                                                   \\
        }
    #if defined(__GNUC__) && defined(__x86_64__)
    #define MG_QADD_ISAS(NAME, TIN, TOUT)                                                       \\
        MG_QADD_ROW(NAME##_avx512, TIN, TOUT,                                                   \\
                    __attribute__((target("avx512f,avx512bw,avx512vl"))))                      \\
        MG_QADD_ROW(NAME##_avx2, TIN, TOUT, __attribute__((target("avx2"))))                  \\
        MG_QADD_ROW(NAME##_base, TIN, TOUT, )
    static int mg_qadd_isa(void) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) return 2;
        return __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    #define MG_QADD_PICK(NAME, ...)                                                             \\
        (mg_qadd_level == 2 ? NAME##_avx512(__VA_ARGS__)                                        \\
         : mg_qadd_level == 1 ? NAME##_avx2(__VA_ARGS__) : NAME##_base(__VA_ARGS__))
    #else
    #define MG_QADD_ISAS(NAME, TIN, TOUT) MG_QADD_ROW(NAME##_base, TIN, TOUT, )
    static int mg_qadd_isa(void) { return 0; }
    #define MG_QADD_PICK(NAME, ...) NAME##_base(__VA_ARGS__)
    #endif
    MG_QADD_ISAS(mg_qadd_i8_i8, int8_t, int8_t)
    MG_QADD_ISAS(mg_qadd_i8_u8, int8_t, uint8_t)
    MG_QADD_ISAS(mg_qadd_u8_i8, uint8_t, int8_t)
    MG_QADD_ISAS(mg_qadd_u8_u8, uint8_t, uint8_t)
    #pragma GCC pop_options
    static int mg_qadd_level = 0;  /* set once when the module loads */
    static void mg_qadd_init(void) { mg_qadd_level = mg_qadd_isa(); }
    /* one row: out (int8 when out_int8, else uint8) = the requantised a + b */
    static void mg_qadd_row(const void* a, const void* b, void* out, int in_int8, int out_int8,
                            Py_ssize_t n, int za, int zb, float ma, float mb, float low,
                            float high, int zy) {
        if (in_int8 && out_int8)
            MG_QADD_PICK(mg_qadd_i8_i8, a, b, out, n, za, zb, ma, mb, low, high, zy);
        else if (in_int8)
            MG_QADD_PICK(mg_qadd_i8_u8, a, b, out, n, za, zb, ma, mb, low, high, zy);
        else if (out_int8)
            MG_QADD_PICK(mg_qadd_u8_i8, a, b, out, n, za, zb, ma, mb, low, high, zy);
        else
            MG_QADD_PICK(mg_qadd_u8_u8, a, b, out, n, za, zb, ma, mb, low, high, zy);
    }
    """
    void mg_qadd_init()
    void mg_qadd_row(const void* a, const void* b, void* out, int in_int8, int out_int8,
                     Py_ssize_t n, int za, int zb, float ma, float mb, float low, float high,
                     int zy) nogil

mg_qadd_init()
