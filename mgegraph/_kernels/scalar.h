/* The scalar functions every CPU elementwise op is made of: the helpers (m_*) that the
 * expressions of mgegraph/ops/elementwise_table.py call, and the vectorisable math behind them.
 * One source for both executors: scalar.pxd binds these for the Python package's kernels (its
 * fused-type m_* pick the function of the element type), and the C runtime (mgegraph/deploy)
 * compiles this file into an export's fused loops, so both give the same bits.
 *
 * Each helper is defined per element type, named by suffix: _f32 float, _f64 double, _i32,
 * _i64, _u8 (and bool), _i8, _i16.
 *
 * Design: branch-free inline functions (selects instead of branches, no libm calls for exp, log,
 * log1p, tanh and float32 erf) so that GCC -O3 vectorises the loops that call them. exp builds
 * 2^n from exponent bits with integer ops; inputs are clamped against overflow; inf and NaN come
 * out as libm's. sqrt, floor and ceil are single instructions; sin, cos, pow, fmod and float64
 * erf stay libm calls. Literals are written (float)<double literal>: rounded to double, then to
 * float, as Cython's <float> casts compiled when these bodies were Cython.
 *
 * NOTE: division is IEEE's (x / 0 = inf, 0 / 0 = NaN); the integer helpers handle a zero
 * divisor themselves. Special values follow NumPy: see the NOTE in elementwise_table.py. */
#ifndef MG_SCALAR_H
#define MG_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* -- the vectorisable math behind m_exp, m_expm1, m_log, m_log1p, m_tanh and m_erf ---------- */
static inline float f32_from_bits(int32_t b) {
    float out;
    memcpy(&out, &b, 4);
    return out;
}

static inline int32_t f32_bits(float x) {
    int32_t out;
    memcpy(&out, &x, 4);
    return out;
}

static inline double f64_from_bits(int64_t b) {
    double out;
    memcpy(&out, &b, 8);
    return out;
}

static inline int64_t f64_bits(double x) {
    int64_t out;
    memcpy(&out, &x, 8);
    return out;
}

/* float32 */
static inline float vexpf(float x) {
    /* x = n ln2 + r, |r| <= ln2/2; 2^n applied as two halves so that results down to the
     * smallest denormal round once instead of flushing to zero */
    float c = x < (float)88.72283935546875 ? x : (float)88.72283935546875;
    c = c > (float)-104.0 ? c : (float)-104.0;
    float t = c * (float)1.44269504088896341 + (float)12582912.0; /* 1.5 * 2^23 rounds n */
    float n = t - (float)12582912.0;
    int32_t ni = f32_bits(t) - f32_bits((float)12582912.0);
    int32_t n1 = ni >> 1;
    float r = c - n * (float)0.693359375 + n * (float)2.12194440e-4;
    /* the polynomial by Estrin's scheme, not Horner's: the same accuracy (1 ulp) in 3 dependent
     * steps instead of 5; a loop of exp took 17.6 cycles per 8 elements against 20.4 */
    float r2 = r * r;
    float p = (((float)5.0000001201e-1 + (float)1.6666665459e-1 * r)
               + ((float)4.1665795894e-2 + (float)8.3334519073e-3 * r) * r2)
              + ((float)1.3981999507e-3 + (float)1.9875691500e-4 * r) * (r2 * r2);
    float y = (p * r2 + r + (float)1.0) * f32_from_bits((n1 + 127) << 23);
    y = y * f32_from_bits((ni - n1 + 127) << 23);
    /* x <= -104 needs no select of its own: c = -104 gives +0.0 (e^-104 is below half the
     * smallest denormal), as does x = -inf. One select gives inf above the range and NaN for
     * NaN (x + inf), where two took 3% longer */
    return x < (float)88.72283935546875 ? y : x + (float)INFINITY;
}

static inline float vlogf(float x) {
    /* x = 2^e m with m in [sqrt(1/2), sqrt(2)); denormals are scaled by 2^23 first */
    int tiny = x < (float)1.17549435e-38;
    float xs = tiny ? x * (float)8388608.0 : x;
    int32_t bits = f32_bits(xs);
    float e = (float)(((bits >> 23) & 0xff) - 126) - (tiny ? (float)23.0 : (float)0.0);
    float m = f32_from_bits((bits & ~(int32_t)0x7f800000) | 0x3f000000); /* [0.5, 1) */
    int low = m < (float)0.707106781186547524;
    e = low ? e - (float)1.0 : e;
    m = low ? (m + m - (float)1.0) : (m - (float)1.0);
    float z = m * m;
    float y = (float)7.0376836292e-2;
    y = y * m - (float)1.1514610310e-1;
    y = y * m + (float)1.1676998740e-1;
    y = y * m - (float)1.2420140846e-1;
    y = y * m + (float)1.4249322787e-1;
    y = y * m - (float)1.6668057665e-1;
    y = y * m + (float)2.0000714765e-1;
    y = y * m - (float)2.4999993993e-1;
    y = y * m + (float)3.3333331174e-1;
    y = y * m * z - e * (float)2.12194440e-4 - (float)0.5 * z;
    y = m + y + e * (float)0.693359375;
    y = x != (float)INFINITY ? y : x;
    y = x != 0 ? y : -(float)INFINITY;
    y = x >= 0 ? y : (float)NAN;
    return x == x ? y : x;
}

static inline float vlog1pf(float x) {
    /* Kahan's log(u) * x / (u - 1) with u = 1 + x: the factor undoes the rounding of u */
    float u = x + (float)1.0;
    float y = vlogf(u) * (x / (u - (float)1.0));
    y = u != (float)1.0 ? y : x;
    return u != (float)INFINITY ? y : u;
}

static inline float vexpm1f(float x) {
    /* Kahan's (u - 1) * x / log(u) with u = e^x: the factor undoes the rounding of u, so e^x - 1
     * keeps its relative precision near 0 (elu, selu and celu just below 0) */
    float u = vexpf(x);
    float y = (u - (float)1.0) * (x / vlogf(u));
    y = u != (float)1.0 ? y : x;
    y = u - (float)1.0 != (float)-1.0 ? y : u - (float)1.0;
    return u != (float)INFINITY ? y : u;
}

static inline float vtanhf(float x) {
    /* Design: the odd rational minimax approximation Eigen and XLA use, x P(x^2) / Q(x^2) on
     * [-7.9053, 7.9053], +-1 beyond (where tanh rounds to it): one division and no exp, about
     * twice as fast as 1 - 2 / (e^{2|x|} + 1) in a block loop. P and Q by Estrin's scheme
     * (pairs, then powers of z^2) in 4 dependent steps where Horner's took 6, and the ends by a
     * select, not a clamp: within 5.6 ulp over every float32 (Horner's: 6.2), and a loop of
     * tanh took 11.7 cycles per 8 elements against 16.1 (AMD Zen 3, AVX2, GCC 12; 64K elements
     * in L2). Beyond the range z overflows or P is inf - inf: the select drops those. */
    float a = fabsf(x);
    float z = x * x;
    float z2 = z * z;
    float p = (((float)4.89352455891786e-03 + (float)6.37261928875436e-04 * z)
               + ((float)1.48572235717979e-05 + (float)5.12229709037114e-08 * z) * z2)
              + ((-(float)8.60467152213735e-11 + (float)2.00018790482477e-13 * z)
                 - (float)2.76076847742355e-16 * z2) * (z2 * z2);
    float q = ((float)4.89352518554385e-03 + (float)2.26843463243900e-03 * z)
              + ((float)1.18534705686654e-04 + (float)1.19825839466702e-06 * z) * z2;
    float y = p * x / q;
    y = a < (float)7.90531110763549805 ? y : copysignf((float)1.0, x);
    /* tiny |x|: tanh(x) rounds to x (and keeps -0.0); NaN fails the test too and comes back as
     * itself. Selects, no branch (an `||` here becomes a branch that stops the loop
     * vectorising) */
    return a > (float)0.0004 ? y : x;
}

static inline float verff(float x) {
    /* |x| < 1: Taylor series in x^2 (truncation 1e-9); else Abramowitz-Stegun 7.1.26
     * (1.5e-7 absolute), which near 0 would keep no relative accuracy */
    float a = x > 0 ? x : -x;
    float z = x * x;
    float s = (float)1.4807192815879218e-08;
    s = s * z - (float)1.6365844691234924e-07;
    s = s * z + (float)1.6462114365889246e-06;
    s = s * z - (float)1.492565035840625e-05;
    s = s * z + (float)0.00012055332981789664;
    s = s * z - (float)0.0008548327023450852;
    s = s * z + (float)0.005223977625442188;
    s = s * z - (float)0.026866170645131252;
    s = s * z + (float)0.11283791670955126;
    s = s * z - (float)0.37612638903183754;
    s = (s * z + (float)1.1283791670955126) * x;
    float t = (float)1.0 / ((float)1.0 + (float)0.3275911 * a);
    float q = t * ((float)0.254829592 + t * (-(float)0.284496736 + t * (
        (float)1.421413741 + t * (-(float)1.453152027 + t * (float)1.061405429))));
    float big = (float)1.0 - q * vexpf(-z);
    big = x > 0 ? big : -big;
    return a < (float)1.0 ? s : big;
}

/* float64 */
static inline double vexp(double x) {
    /* Cephes exp: e^r = 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)), 2^n as two halves (see vexpf) */
    double c = x < 709.782712893384 ? x : 709.782712893384;
    c = c > -745.2 ? c : -745.2;
    double t = c * 1.4426950408889634074 + 6755399441055744.0; /* 1.5 * 2^52 rounds n */
    double n = t - 6755399441055744.0;
    int64_t ni = f64_bits(t) - f64_bits(6755399441055744.0);
    int64_t n1 = ni >> 1;
    double r = c - n * 6.93145751953125e-1 - n * 1.42860682030941723212e-6;
    double rr = r * r;
    double px = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr
                     + 9.99999999999999999910e-1);
    double qx = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
                 + 2.27265548208155028766e-1) * rr + 2.00000000000000000009e0;
    double y = (1.0 + 2.0 * (px / (qx - px))) * f64_from_bits((n1 + 1023) << 52);
    y = y * f64_from_bits((ni - n1 + 1023) << 52);
    y = x < 709.782712893384 ? y : INFINITY;
    y = x > -745.2 ? y : 0.0;
    return x == x ? y : x;
}

static inline double vlog(double x) {
    /* fdlibm's reduction: x = 2^e (1 + f), log(1 + f) = f - s (f - R(s^2)), s = f / (2 + f),
     * R the atanh series 2 z / 3 + 2 z^2 / 5 + ... (|s| < 0.172, 11 terms reach 1e-18) */
    int tiny = x < 2.2250738585072014e-308;
    double xs = tiny ? x * 18014398509481984.0 : x; /* 2^54 */
    int64_t bits = f64_bits(xs);
    /* the exponent field as a double through its bits: int64 -> double does not vectorise */
    double e = f64_from_bits(((bits >> 52) & 0x7ff) | (int64_t)0x4330000000000000LL) - (
        4503599627370496.0 + 1022.0 + (tiny ? 54.0 : 0.0));
    double m = f64_from_bits((bits & ~(int64_t)0x7ff0000000000000LL)
                             | (int64_t)0x3fe0000000000000LL);
    int low = m < 0.70710678118654752440;
    e = low ? e - 1.0 : e;
    double f = low ? (m + m - 1.0) : (m - 1.0);
    double s = f / (2.0 + f);
    double z = s * s;
    double rz = 2.0 / 23;
    rz = rz * z + 2.0 / 21;
    rz = rz * z + 2.0 / 19;
    rz = rz * z + 2.0 / 17;
    rz = rz * z + 2.0 / 15;
    rz = rz * z + 2.0 / 13;
    rz = rz * z + 2.0 / 11;
    rz = rz * z + 2.0 / 9;
    rz = rz * z + 2.0 / 7;
    rz = rz * z + 2.0 / 5;
    rz = (rz * z + 2.0 / 3) * z;
    double y = e * 6.93147180369123816490e-01 + (
        f - (s * (f - rz) - e * 1.90821492927058770002e-10));
    y = x != INFINITY ? y : x;
    y = x != 0 ? y : -INFINITY;
    y = x >= 0 ? y : NAN;
    return x == x ? y : x;
}

static inline double vlog1p(double x) {
    double u = x + 1.0;
    double y = vlog(u) * (x / (u - 1.0));
    y = u != 1.0 ? y : x;
    return u != INFINITY ? y : u;
}

static inline double vexpm1(double x) {
    double u = vexp(x);
    double y = (u - 1.0) * (x / vlog(u));
    y = u != 1.0 ? y : x;
    y = u - 1.0 != -1.0 ? y : u - 1.0;
    return u != INFINITY ? y : u;
}

static inline double vtanh(double x) {
    /* |x| < 0.3: Taylor series to x^23 (truncation 2e-17); else 1 - 2 / (e^{2|x|} + 1) */
    double a = x > 0 ? x : -x;
    double z = x * x;
    double s = -3.927832388331683e-05;
    s = s * z + 9.691537956929451e-05;
    s = s * z - 0.00023912911424355248;
    s = s * z + 0.000590027440945586;
    s = s * z - 0.0014558343870513183;
    s = s * z + 0.003592128036572481;
    s = s * z - 0.008863235529902197;
    s = s * z + 0.021869488536155203;
    s = s * z - 0.05396825396825397;
    s = s * z + 0.13333333333333333;
    s = s * z - 0.3333333333333333;
    s = s * z * x + x;
    double big = 1.0 - 2.0 / (vexp(a + a) + 1.0);
    big = x > 0 ? big : -big;
    return a < 0.3 ? s : big;
}

/* -- the float helpers the table's expressions call (elementwise_table.HELPERS) -------------- */
/* F(name, float body, double body): m_<name>_f32 and m_<name>_f64 of one argument x */
#define MG_FLOAT_HELPER(NAME, F32, F64)                                                        \
    static inline float m_##NAME##_f32(float x) { return F32; }                                \
    static inline double m_##NAME##_f64(double x) { return F64; }

MG_FLOAT_HELPER(exp, vexpf(x), vexp(x))
MG_FLOAT_HELPER(expm1, vexpm1f(x), vexpm1(x))
MG_FLOAT_HELPER(log, vlogf(x), vlog(x))
MG_FLOAT_HELPER(log1p, vlog1pf(x), vlog1p(x))
MG_FLOAT_HELPER(tanh, vtanhf(x), vtanh(x))
MG_FLOAT_HELPER(erf, verff(x), erf(x))
MG_FLOAT_HELPER(sqrt, sqrtf(x), sqrt(x))
MG_FLOAT_HELPER(sin, sinf(x), sin(x))
MG_FLOAT_HELPER(cos, cosf(x), cos(x))
MG_FLOAT_HELPER(floor, floorf(x), floor(x))
MG_FLOAT_HELPER(ceil, ceilf(x), ceil(x))
/* trigonometric and hyperbolic functions and the two roundings: libm's (NaN outside a domain,
 * +-inf at atanh's ends, as NumPy). rint rounds halves to even in the default rounding mode,
 * which the kernels never change */
MG_FLOAT_HELPER(tan, tanf(x), tan(x))
MG_FLOAT_HELPER(asin, asinf(x), asin(x))
MG_FLOAT_HELPER(acos, acosf(x), acos(x))
MG_FLOAT_HELPER(atan, atanf(x), atan(x))
MG_FLOAT_HELPER(sinh, sinhf(x), sinh(x))
MG_FLOAT_HELPER(cosh, coshf(x), cosh(x))
MG_FLOAT_HELPER(asinh, asinhf(x), asinh(x))
MG_FLOAT_HELPER(acosh, acoshf(x), acosh(x))
MG_FLOAT_HELPER(atanh, atanhf(x), atanh(x))
MG_FLOAT_HELPER(round, roundf(x), round(x))
MG_FLOAT_HELPER(rint, rintf(x), rint(x))
#undef MG_FLOAT_HELPER

static inline float m_atan2_f32(float y, float x) { return atan2f(y, x); }
static inline double m_atan2_f64(double y, double x) { return atan2(y, x); }

/* NumPy's modulo: fmod moved to the divisor's sign; a zero remainder takes the divisor's sign.
 * Floor division as NumPy's (npy_divmod): (x - fmod(x, y)) / y moved to the floor, then
 * rounded to the nearest integer, so 1 // 0.1 is 9 (the quotient 10.000000000000002 rounds
 * wrongly to 10) and inf // 1 is NaN; a zero divisor gives x / y. */
#define MG_FLOAT_DIVISION(S, T, FMOD, COPYSIGN, FLOOR)                                         \
    static inline T m_mod_##S(T x, T y) {                                                      \
        T r = FMOD(x, y);                                                                      \
        T z = COPYSIGN(0, y);                                                                  \
        if (r != 0) return (r < 0) != (y < 0) ? r + y : r;                                     \
        return z;                                                                              \
    }                                                                                          \
    static inline T m_floor_div_##S(T x, T y) {                                                \
        if (y == 0) return x / y;                                                              \
        T mod = FMOD(x, y);                                                                    \
        T div = (x - mod) / y;                                                                 \
        if (mod != 0 && (y < 0) != (mod < 0)) div = div - 1;                                   \
        if (div != 0) {                                                                        \
            T whole = FLOOR(div);                                                              \
            return div - whole > (T)0.5 ? whole + 1 : whole;                                   \
        }                                                                                      \
        return COPYSIGN(0, x / y);                                                             \
    }
MG_FLOAT_DIVISION(f32, float, fmodf, copysignf, floorf)
MG_FLOAT_DIVISION(f64, double, fmod, copysign, floor)
#undef MG_FLOAT_DIVISION

/* -- the helpers of every numeric type ------------------------------------------------------- */
/* NOTE: the small integers (uint8, int8, int16) compute in C's int, where their sums and
 * products cannot overflow, and the result is converted back keeping the low bits (GCC and
 * Clang define the conversion to a narrower signed type so): NumPy's wrapping. */
#define MG_NUM_HELPERS(S, T)                                                                   \
    static inline T m_relu_##S(T x) { return x <= 0 ? 0 : x; } /* NaN stays; -0 gives +0 */  \
    static inline T m_clamp_##S(T x, T lo, T hi) {                                             \
        /* np.clip's minimum(maximum(x, lo), hi): hi wherever lo > hi, as NumPy and ONNX */    \
        T t = x < lo ? lo : x;                                                                 \
        return t > hi ? hi : t;                                                                \
    }                                                                                          \
    /* both operands are evaluated by the caller: a blend, no branch */                        \
    static inline T m_select_##S(int c, T a, T b) { return c ? a : b; }
#define MG_FLOAT_NUM_HELPERS(S, T, FABS, POW)                                                  \
    MG_NUM_HELPERS(S, T)                                                                       \
    static inline T m_abs_##S(T x) { return FABS(x); }                                         \
    /* x - x: +0.0 for either zero, NaN for NaN */                                             \
    static inline T m_sign_##S(T x) { return x > 0 ? 1 : (x < 0 ? -1 : x - x); }              \
    /* neither larger: a NaN, which x + y keeps */                                             \
    static inline T m_max_##S(T x, T y) { return x > y ? x : (y >= x ? y : x + y); }          \
    static inline T m_min_##S(T x, T y) { return x < y ? x : (y <= x ? y : x + y); }          \
    static inline T m_pow_##S(T x, T y) { return POW(x, y); }
MG_FLOAT_NUM_HELPERS(f32, float, fabsf, powf)
MG_FLOAT_NUM_HELPERS(f64, double, fabs, pow)
#undef MG_FLOAT_NUM_HELPERS

/* The integers: W is the type the arithmetic runs in (unsigned for int32 and int64, where
 * signed overflow is undefined in C; int for the small ones), so results wrap as NumPy's. */
#define MG_INT_HELPERS(S, T, W)                                                                \
    MG_NUM_HELPERS(S, T)                                                                       \
    static inline T m_neg_int_##S(T x) { return (T)((W)0 - (W)x); } /* -INT_MIN is INT_MIN */ \
    static inline T m_add_int_##S(T x, T y) { return (T)((W)x + (W)y); }                      \
    static inline T m_sub_int_##S(T x, T y) { return (T)((W)x - (W)y); }                      \
    static inline T m_mul_int_##S(T x, T y) { return (T)((W)x * (W)y); }                      \
    /* abs(INT_MIN) = INT_MIN, abs(-128) = -128 in int8, as NumPy; uint8 is its own */         \
    static inline T m_abs_##S(T x) { return x < 0 ? (T)((W)0 - (W)x) : x; }                  \
    static inline T m_sign_##S(T x) { return (T)((x > 0) - (x < 0)); }                         \
    static inline T m_max_##S(T x, T y) { return x > y ? x : y; }                              \
    static inline T m_min_##S(T x, T y) { return x < y ? x : y; }                              \
    static inline T m_pow_##S(T x, T y) {                                                      \
        /* by squaring in unsigned arithmetic, so an overflow wraps as NumPy's does; a negative \
         * exponent gives 0 here, and the binary kernel refuses the call before it gets one */  \
        uint64_t result = 1, base;                                                             \
        if (y < 0) return 0;                                                                   \
        base = (uint64_t)x;                                                                    \
        while (y > 0) {                                                                        \
            if (y & 1) result = result * base;                                                 \
            base = base * base;                                                                \
            y >>= 1;                                                                           \
        }                                                                                      \
        return (T)result;                                                                      \
    }                                                                                          \
    static inline T m_floor_div_int_##S(T x, T y) {                                            \
        /* C division truncates: step down when the signs differ and it was inexact. A zero    \
         * divisor gives 0 and INT_MIN // -1 gives INT_MIN (NumPy's results); in C both trap   \
         * (SIGFPE on x86), so neither reaches the division */                                 \
        T r;                                                                                   \
        if (y == 0) return 0;                                                                  \
        if (y == -1) return m_neg_int_##S(x);                                                  \
        r = (T)(x / y);                                                                        \
        return (x % y != 0) && ((x < 0) != (y < 0)) ? (T)(r - 1) : r;                          \
    }                                                                                          \
    static inline T m_mod_int_##S(T x, T y) {                                                  \
        /* 0 for a zero divisor and for -1 (INT_MIN % -1 traps in C) */                        \
        T r;                                                                                   \
        if (y == 0 || y == -1) return 0;                                                       \
        r = (T)(x % y);                                                                        \
        return r != 0 && ((r < 0) != (y < 0)) ? (T)(r + y) : r;                                \
    }
MG_INT_HELPERS(i32, int32_t, uint32_t)
MG_INT_HELPERS(i64, int64_t, uint64_t)
MG_INT_HELPERS(u8, uint8_t, int)
MG_INT_HELPERS(i8, int8_t, int)
MG_INT_HELPERS(i16, int16_t, int)
#undef MG_INT_HELPERS
#undef MG_NUM_HELPERS

/* -- casts of floats to integers --------------------------------------------------------------
 * C leaves a float outside the integer's range (NaN, inf, too large) undefined; the result here
 * is the one NumPy gives on x86 (the cvttsd2si "integer indefinite"): INT_MIN of the destination.
 * A small integer (uint8, int8, int16) is NumPy's result too: the float truncated to int32 as
 * below, then the low bits of that (so 300.7 -> uint8 44, NaN and inf -> 0, -1.5 -> uint8 255). */
static inline int32_t float_to_i32(double x) {
    if (x >= -2147483648.0 && x < 2147483648.0) return (int32_t)x; /* false for NaN */
    return INT32_MIN;
}

static inline int64_t float_to_i64(double x) {
    if (x >= -9223372036854775808.0 && x < 9223372036854775808.0) return (int64_t)x;
    return INT64_MIN;
}

#endif
