# cython: cdivision=True
# The scalar functions every CPU elementwise op is made of: the helpers (m_*) that the
# expressions of mgegraph/ops/elementwise_table.py call, and the vectorisable math behind them.
#
# The table's expressions become one inline function per op (ew_ops.pxd, generated at build
# time), which the unfused kernels, the fused evaluator and the GEMM/conv epilogues all call, so
# every path computes an op with the same instructions and gives bitwise the same results.
# Special values follow NumPy: see the NOTE in elementwise_table.py.
#
# Design: branch-free inline functions (selects instead of branches, no libm calls for exp, log,
# log1p, tanh and float32 erf) so that GCC -O3 vectorises the loops that call them. exp builds
# 2^n from exponent bits with integer ops; inputs are clamped against overflow; inf and NaN come
# out as libm's. sqrt, floor and ceil are single instructions; sin, cos, pow, fmod and float64
# erf stay libm calls.
#
# NOTE: cdivision is on even in debug builds: IEEE division (x / 0 = inf, 0 / 0 = NaN) is part
# of these functions; Cython's checked division would raise in nogil code and return garbage.
# The integer helpers handle a zero divisor themselves.

from libc.math cimport (INFINITY, NAN, erf, fabs, fabsf, sqrt, sqrtf, sin, sinf, cos, cosf,
                        floor, floorf, ceil, ceilf, fmod, fmodf, copysign, copysignf,
                        pow as cpow, powf)
from libc.math cimport (tan, tanf, asin, asinf, acos, acosf, atan, atanf, atan2, atan2f, sinh,
                        sinhf, cosh, coshf, asinh, asinhf, acosh, acoshf, atanh, atanhf,
                        round as cround, roundf, rint, rintf)
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t,
                          INT32_MIN, INT64_MIN)
from libc.string cimport memcpy
from cython cimport floating

from .dtypes cimport ew_int_t, ew_num_t


# -- the vectorisable math behind m_exp, m_expm1, m_log, m_log1p, m_tanh and m_erf ---------------
cdef inline float f32_from_bits(int32_t b) noexcept nogil:
    cdef float out
    memcpy(&out, &b, 4)
    return out

cdef inline int32_t f32_bits(float x) noexcept nogil:
    cdef int32_t out
    memcpy(&out, &x, 4)
    return out

cdef inline double f64_from_bits(int64_t b) noexcept nogil:
    cdef double out
    memcpy(&out, &b, 8)
    return out

cdef inline int64_t f64_bits(double x) noexcept nogil:
    cdef int64_t out
    memcpy(&out, &x, 8)
    return out


cdef inline float pow2i(float n) noexcept nogil:
    # 2**n for an integral n in [-126, 127], from its exponent bits
    return f32_from_bits((<int32_t>n + 127) << 23)


# float32
cdef inline float vexpf(float x) noexcept nogil:
    # x = n ln2 + r, |r| <= ln2/2; 2^n applied as two halves so that results down to the
    # smallest denormal round once instead of flushing to zero
    cdef float c = x if x < <float>88.72283935546875 else <float>88.72283935546875
    c = c if c > <float>-104.0 else <float>-104.0
    cdef float t = c * <float>1.44269504088896341 + <float>12582912.0  # 1.5 * 2^23 rounds n
    cdef float n = t - <float>12582912.0
    cdef int32_t ni = f32_bits(t) - f32_bits(<float>12582912.0)
    cdef int32_t n1 = ni >> 1
    cdef float r = c - n * <float>0.693359375 + n * <float>2.12194440e-4
    # the polynomial by Estrin's scheme, not Horner's: the same accuracy (1 ulp) in 3 dependent
    # steps instead of 5; a loop of exp took 17.6 cycles per 8 elements against 20.4 (see vtanhf)
    cdef float r2 = r * r
    cdef float p = ((<float>5.0000001201e-1 + <float>1.6666665459e-1 * r)
                    + (<float>4.1665795894e-2 + <float>8.3334519073e-3 * r) * r2) \
        + (<float>1.3981999507e-3 + <float>1.9875691500e-4 * r) * (r2 * r2)
    cdef float y = (p * r2 + r + <float>1.0) * f32_from_bits((n1 + 127) << 23)
    y = y * f32_from_bits((ni - n1 + 127) << 23)
    # x <= -104 needs no select of its own: c = -104 gives +0.0 (e^-104 is below half the
    # smallest denormal), as does x = -inf. One select gives inf above the range and NaN for
    # NaN (x + inf), where two took 3% longer
    return y if x < <float>88.72283935546875 else x + <float>INFINITY


cdef inline float vlogf(float x) noexcept nogil:
    # x = 2^e m with m in [sqrt(1/2), sqrt(2)); denormals are scaled by 2^23 first
    cdef bint tiny = x < <float>1.17549435e-38
    cdef float xs = x * <float>8388608.0 if tiny else x
    cdef int32_t bits = f32_bits(xs)
    cdef float e = <float>(((bits >> 23) & 0xff) - 126) - (<float>23.0 if tiny else <float>0.0)
    cdef float m = f32_from_bits((bits & ~<int32_t>0x7f800000) | 0x3f000000)  # [0.5, 1)
    cdef bint low = m < <float>0.707106781186547524
    e = e - <float>1.0 if low else e
    m = (m + m - <float>1.0) if low else (m - <float>1.0)
    cdef float z = m * m
    cdef float y = <float>7.0376836292e-2
    y = y * m - <float>1.1514610310e-1
    y = y * m + <float>1.1676998740e-1
    y = y * m - <float>1.2420140846e-1
    y = y * m + <float>1.4249322787e-1
    y = y * m - <float>1.6668057665e-1
    y = y * m + <float>2.0000714765e-1
    y = y * m - <float>2.4999993993e-1
    y = y * m + <float>3.3333331174e-1
    y = y * m * z - e * <float>2.12194440e-4 - <float>0.5 * z
    y = m + y + e * <float>0.693359375
    y = y if x != <float>INFINITY else x
    y = y if x != 0 else -<float>INFINITY
    y = y if x >= 0 else <float>NAN
    return y if x == x else x


cdef inline float vlog1pf(float x) noexcept nogil:
    # Kahan's log(u) * x / (u - 1) with u = 1 + x: the factor undoes the rounding of u
    cdef float u = x + <float>1.0
    cdef float y = vlogf(u) * (x / (u - <float>1.0))
    y = y if u != <float>1.0 else x
    return y if u != <float>INFINITY else u


cdef inline float vexpm1f(float x) noexcept nogil:
    # Kahan's (u - 1) * x / log(u) with u = e^x: the factor undoes the rounding of u, so e^x - 1
    # keeps its relative precision near 0 (elu, selu and celu just below 0)
    cdef float u = vexpf(x)
    cdef float y = (u - <float>1.0) * (x / vlogf(u))
    y = y if u != <float>1.0 else x
    y = y if u - <float>1.0 != <float>-1.0 else u - <float>1.0
    return y if u != <float>INFINITY else u


cdef inline float vtanhf(float x) noexcept nogil:
    # Design: the odd rational minimax approximation Eigen and XLA use, x P(x^2) / Q(x^2) on
    # [-7.9053, 7.9053], +-1 beyond (where tanh rounds to it): one division and no exp, about
    # twice as fast as 1 - 2 / (e^{2|x|} + 1) in a block loop. P and Q by Estrin's scheme
    # (pairs, then powers of z^2) in 4 dependent steps where Horner's took 6, and the ends by a
    # select, not a clamp: within 5.6 ulp over every float32 (Horner's: 6.2), and a loop of
    # tanh took 11.7 cycles per 8 elements against 16.1 (AMD Zen 3, AVX2, GCC 12; 64K elements
    # in L2). Beyond the range z overflows or P is inf - inf: the select drops those.
    cdef float a = fabsf(x)
    cdef float z = x * x
    cdef float z2 = z * z
    cdef float p = ((<float>4.89352455891786e-03 + <float>6.37261928875436e-04 * z)
                    + (<float>1.48572235717979e-05 + <float>5.12229709037114e-08 * z) * z2) \
        + ((-<float>8.60467152213735e-11 + <float>2.00018790482477e-13 * z)
           - <float>2.76076847742355e-16 * z2) * (z2 * z2)
    cdef float q = (<float>4.89352518554385e-03 + <float>2.26843463243900e-03 * z) \
        + (<float>1.18534705686654e-04 + <float>1.19825839466702e-06 * z) * z2
    cdef float y = p * x / q
    y = y if a < <float>7.90531110763549805 else copysignf(<float>1.0, x)
    # tiny |x|: tanh(x) rounds to x (and keeps -0.0); NaN fails the test too and comes back as
    # itself. Selects, no branch (an `or` here becomes a branch that stops the loop vectorising)
    return y if a > <float>0.0004 else x


cdef inline float verff(float x) noexcept nogil:
    # |x| < 1: Taylor series in x^2 (truncation 1e-9); else Abramowitz-Stegun 7.1.26
    # (1.5e-7 absolute), which near 0 would keep no relative accuracy
    cdef float a = x if x > 0 else -x
    cdef float z = x * x
    cdef float s = <float>1.4807192815879218e-08
    s = s * z - <float>1.6365844691234924e-07
    s = s * z + <float>1.6462114365889246e-06
    s = s * z - <float>1.492565035840625e-05
    s = s * z + <float>0.00012055332981789664
    s = s * z - <float>0.0008548327023450852
    s = s * z + <float>0.005223977625442188
    s = s * z - <float>0.026866170645131252
    s = s * z + <float>0.11283791670955126
    s = s * z - <float>0.37612638903183754
    s = (s * z + <float>1.1283791670955126) * x
    cdef float t = <float>1.0 / (<float>1.0 + <float>0.3275911 * a)
    cdef float q = t * (<float>0.254829592 + t * (-<float>0.284496736 + t * (
        <float>1.421413741 + t * (-<float>1.453152027 + t * <float>1.061405429))))
    cdef float big = <float>1.0 - q * vexpf(-z)
    big = big if x > 0 else -big
    return s if a < <float>1.0 else big


# float64
cdef inline double vexp(double x) noexcept nogil:
    # Cephes exp: e^r = 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)), 2^n as two halves (see vexpf)
    cdef double c = x if x < 709.782712893384 else 709.782712893384
    c = c if c > -745.2 else -745.2
    cdef double t = c * 1.4426950408889634074 + 6755399441055744.0  # 1.5 * 2^52 rounds n
    cdef double n = t - 6755399441055744.0
    cdef int64_t ni = f64_bits(t) - f64_bits(6755399441055744.0)
    cdef int64_t n1 = ni >> 1
    cdef double r = c - n * 6.93145751953125e-1 - n * 1.42860682030941723212e-6
    cdef double rr = r * r
    cdef double px = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr
                          + 9.99999999999999999910e-1)
    cdef double qx = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
                      + 2.27265548208155028766e-1) * rr + 2.00000000000000000009e0
    cdef double y = (1.0 + 2.0 * (px / (qx - px))) * f64_from_bits((n1 + 1023) << 52)
    y = y * f64_from_bits((ni - n1 + 1023) << 52)
    y = y if x < 709.782712893384 else INFINITY
    y = y if x > -745.2 else 0.0
    return y if x == x else x


cdef inline double vlog(double x) noexcept nogil:
    # fdlibm's reduction: x = 2^e (1 + f), log(1 + f) = f - s (f - R(s^2)), s = f / (2 + f),
    # R the atanh series 2 z / 3 + 2 z^2 / 5 + ... (|s| < 0.172, 11 terms reach 1e-18)
    cdef bint tiny = x < 2.2250738585072014e-308
    cdef double xs = x * 18014398509481984.0 if tiny else x  # 2^54
    cdef int64_t bits = f64_bits(xs)
    # the exponent field as a double through its bits: int64 -> double does not vectorise
    cdef double e = f64_from_bits(((bits >> 52) & 0x7ff) | <int64_t>0x4330000000000000LL) - (
        4503599627370496.0 + 1022.0 + (54.0 if tiny else 0.0))
    cdef double m = f64_from_bits((bits & ~<int64_t>0x7ff0000000000000LL)
                                 | <int64_t>0x3fe0000000000000LL)
    cdef bint low = m < 0.70710678118654752440
    e = e - 1.0 if low else e
    cdef double f = (m + m - 1.0) if low else (m - 1.0)
    cdef double s = f / (2.0 + f)
    cdef double z = s * s
    cdef double rz = 2.0 / 23
    rz = rz * z + 2.0 / 21
    rz = rz * z + 2.0 / 19
    rz = rz * z + 2.0 / 17
    rz = rz * z + 2.0 / 15
    rz = rz * z + 2.0 / 13
    rz = rz * z + 2.0 / 11
    rz = rz * z + 2.0 / 9
    rz = rz * z + 2.0 / 7
    rz = rz * z + 2.0 / 5
    rz = (rz * z + 2.0 / 3) * z
    cdef double y = e * 6.93147180369123816490e-01 + (
        f - (s * (f - rz) - e * 1.90821492927058770002e-10))
    y = y if x != INFINITY else x
    y = y if x != 0 else -INFINITY
    y = y if x >= 0 else NAN
    return y if x == x else x


cdef inline double vlog1p(double x) noexcept nogil:
    cdef double u = x + 1.0
    cdef double y = vlog(u) * (x / (u - 1.0))
    y = y if u != 1.0 else x
    return y if u != INFINITY else u


cdef inline double vexpm1(double x) noexcept nogil:
    cdef double u = vexp(x)
    cdef double y = (u - 1.0) * (x / vlog(u))
    y = y if u != 1.0 else x
    y = y if u - 1.0 != -1.0 else u - 1.0
    return y if u != INFINITY else u


cdef inline double vtanh(double x) noexcept nogil:
    # |x| < 0.3: Taylor series to x^23 (truncation 2e-17); else 1 - 2 / (e^{2|x|} + 1)
    cdef double a = x if x > 0 else -x
    cdef double z = x * x
    cdef double s = -3.927832388331683e-05
    s = s * z + 9.691537956929451e-05
    s = s * z - 0.00023912911424355248
    s = s * z + 0.000590027440945586
    s = s * z - 0.0014558343870513183
    s = s * z + 0.003592128036572481
    s = s * z - 0.008863235529902197
    s = s * z + 0.021869488536155203
    s = s * z - 0.05396825396825397
    s = s * z + 0.13333333333333333
    s = s * z - 0.3333333333333333
    s = s * z * x + x
    cdef double big = 1.0 - 2.0 / (vexp(a + a) + 1.0)
    big = big if x > 0 else -big
    return s if a < 0.3 else big


# -- the helpers the table's expressions call (elementwise_table.HELPERS) -------------------------
cdef inline floating m_exp(floating x) noexcept nogil:
    return vexpf(x) if floating is float else vexp(x)

cdef inline floating m_expm1(floating x) noexcept nogil:
    return vexpm1f(x) if floating is float else vexpm1(x)

cdef inline floating m_log(floating x) noexcept nogil:
    return vlogf(x) if floating is float else vlog(x)

cdef inline floating m_log1p(floating x) noexcept nogil:
    return vlog1pf(x) if floating is float else vlog1p(x)

cdef inline floating m_tanh(floating x) noexcept nogil:
    return vtanhf(x) if floating is float else vtanh(x)

cdef inline floating m_erf(floating x) noexcept nogil:
    return verff(x) if floating is float else erf(x)

cdef inline floating m_sqrt(floating x) noexcept nogil:
    return sqrtf(x) if floating is float else sqrt(x)

cdef inline floating m_sin(floating x) noexcept nogil:
    return sinf(x) if floating is float else sin(x)

cdef inline floating m_cos(floating x) noexcept nogil:
    return cosf(x) if floating is float else cos(x)

cdef inline floating m_floor(floating x) noexcept nogil:
    return floorf(x) if floating is float else floor(x)

cdef inline floating m_ceil(floating x) noexcept nogil:
    return ceilf(x) if floating is float else ceil(x)

# trigonometric and hyperbolic functions and the two roundings: libm's (NaN outside a domain,
# +-inf at atanh's ends, as NumPy). rint rounds halves to even in the default rounding mode,
# which the kernels never change
cdef inline floating m_tan(floating x) noexcept nogil:
    return tanf(x) if floating is float else tan(x)

cdef inline floating m_asin(floating x) noexcept nogil:
    return asinf(x) if floating is float else asin(x)

cdef inline floating m_acos(floating x) noexcept nogil:
    return acosf(x) if floating is float else acos(x)

cdef inline floating m_atan(floating x) noexcept nogil:
    return atanf(x) if floating is float else atan(x)

cdef inline floating m_atan2(floating y, floating x) noexcept nogil:
    return atan2f(y, x) if floating is float else atan2(y, x)

cdef inline floating m_sinh(floating x) noexcept nogil:
    return sinhf(x) if floating is float else sinh(x)

cdef inline floating m_cosh(floating x) noexcept nogil:
    return coshf(x) if floating is float else cosh(x)

cdef inline floating m_asinh(floating x) noexcept nogil:
    return asinhf(x) if floating is float else asinh(x)

cdef inline floating m_acosh(floating x) noexcept nogil:
    return acoshf(x) if floating is float else acosh(x)

cdef inline floating m_atanh(floating x) noexcept nogil:
    return atanhf(x) if floating is float else atanh(x)

cdef inline floating m_round(floating x) noexcept nogil:
    return roundf(x) if floating is float else cround(x)

cdef inline floating m_rint(floating x) noexcept nogil:
    return rintf(x) if floating is float else rint(x)

cdef inline ew_num_t m_pow(ew_num_t x, ew_num_t y) noexcept nogil:
    # integers: by squaring in unsigned arithmetic, so an overflow wraps as NumPy's does (signed
    # overflow is undefined in C); a negative exponent gives 0 here, and the binary kernel
    # refuses the call (KERNEL_BAD_VALUE) before it gets one, as NumPy raises
    cdef uint64_t result = 1, base
    if ew_num_t is float:
        return powf(x, y)
    elif ew_num_t is double:
        return cpow(x, y)
    else:
        if y < 0:
            return 0
        base = <uint64_t>x
        while y > 0:
            if y & 1:
                result = result * base
            base = base * base
            y >>= 1
        return <ew_num_t>result

# NOTE: the small integers (uint8, int8, int16) compute in C's int, where their sums and
# products cannot overflow, and the result is converted back keeping the low bits (GCC and
# Clang define the conversion to a narrower signed type so): NumPy's wrapping.
cdef inline ew_int_t m_neg_int(ew_int_t x) noexcept nogil:
    # -x wrapping as NumPy: -INT_MIN is INT_MIN (computed unsigned; signed overflow is UB)
    if ew_int_t is int32_t:
        return <int32_t>(<uint32_t>0 - <uint32_t>x)
    elif ew_int_t is int64_t:
        return <int64_t>(<uint64_t>0 - <uint64_t>x)
    else:
        return <ew_int_t>(-<int>x)

cdef inline ew_int_t m_add_int(ew_int_t x, ew_int_t y) noexcept nogil:
    if ew_int_t is int32_t:
        return <int32_t>(<uint32_t>x + <uint32_t>y)
    elif ew_int_t is int64_t:
        return <int64_t>(<uint64_t>x + <uint64_t>y)
    else:
        return <ew_int_t>(<int>x + <int>y)

cdef inline ew_int_t m_sub_int(ew_int_t x, ew_int_t y) noexcept nogil:
    if ew_int_t is int32_t:
        return <int32_t>(<uint32_t>x - <uint32_t>y)
    elif ew_int_t is int64_t:
        return <int64_t>(<uint64_t>x - <uint64_t>y)
    else:
        return <ew_int_t>(<int>x - <int>y)

cdef inline ew_int_t m_mul_int(ew_int_t x, ew_int_t y) noexcept nogil:
    if ew_int_t is int32_t:
        return <int32_t>(<uint32_t>x * <uint32_t>y)
    elif ew_int_t is int64_t:
        return <int64_t>(<uint64_t>x * <uint64_t>y)
    else:
        return <ew_int_t>(<int>x * <int>y)

cdef inline ew_num_t m_abs(ew_num_t x) noexcept nogil:
    if ew_num_t is float:
        return fabsf(x)
    elif ew_num_t is double:
        return fabs(x)
    elif ew_num_t is int32_t:
        return <int32_t>(<uint32_t>0 - <uint32_t>x) if x < 0 else x  # abs(INT_MIN) = INT_MIN
    elif ew_num_t is int64_t:
        return <int64_t>(<uint64_t>0 - <uint64_t>x) if x < 0 else x
    elif ew_num_t is uint8_t:
        return x
    else:
        return <ew_num_t>(-<int>x) if x < 0 else x  # abs(-128) = -128 in int8, as NumPy

cdef inline ew_num_t m_relu(ew_num_t x) noexcept nogil:
    return 0 if x <= 0 else x  # NaN <= 0 is false: NaN stays; -0.0 gives +0.0

cdef inline ew_num_t m_sign(ew_num_t x) noexcept nogil:
    if ew_num_t is float or ew_num_t is double:
        # x - x: +0.0 for either zero, NaN for NaN
        return 1 if x > 0 else (-1 if x < 0 else x - x)
    else:
        return (x > 0) - (x < 0)

cdef inline ew_num_t m_max(ew_num_t x, ew_num_t y) noexcept nogil:
    if ew_num_t is float or ew_num_t is double:
        return x if x > y else (y if y >= x else x + y)  # neither: a NaN, which x + y keeps
    else:
        return x if x > y else y

cdef inline ew_num_t m_min(ew_num_t x, ew_num_t y) noexcept nogil:
    if ew_num_t is float or ew_num_t is double:
        return x if x < y else (y if y <= x else x + y)
    else:
        return x if x < y else y

cdef inline ew_num_t m_clamp(ew_num_t x, ew_num_t lo, ew_num_t hi) noexcept nogil:
    # np.clip's minimum(maximum(x, lo), hi): hi wherever lo > hi, as NumPy and ONNX's Clip
    cdef ew_num_t t = lo if x < lo else x
    return hi if t > hi else t

cdef inline ew_num_t m_select(bint c, ew_num_t a, ew_num_t b) noexcept nogil:
    return a if c else b  # both operands are evaluated by the caller: a blend, no branch

cdef inline floating m_mod(floating x, floating y) noexcept nogil:
    # NumPy's: fmod moved to the divisor's sign; a zero remainder takes the divisor's sign
    cdef floating r = fmodf(x, y) if floating is float else fmod(x, y)
    cdef floating z = copysignf(0, y) if floating is float else copysign(0, y)
    if r != 0:
        return r + y if (r < 0) != (y < 0) else r
    return z

cdef inline floating m_floor_div(floating x, floating y) noexcept nogil:
    # NumPy's (npy_divmod): (x - fmod(x, y)) / y moved to the floor, then rounded to the nearest
    # integer, so 1 // 0.1 is 9 (the quotient 10.000000000000002 rounds wrongly to 10) and
    # inf // 1 is NaN; a zero divisor gives x / y
    cdef floating mod, div, whole
    if y == 0:
        return x / y
    mod = fmodf(x, y) if floating is float else fmod(x, y)
    div = (x - mod) / y
    if mod != 0 and (y < 0) != (mod < 0):
        div = div - 1
    if div != 0:
        whole = floorf(div) if floating is float else floor(div)
        return whole + 1 if div - whole > <floating>0.5 else whole
    return copysignf(0, x / y) if floating is float else copysign(0, x / y)

cdef inline ew_int_t m_floor_div_int(ew_int_t x, ew_int_t y) noexcept nogil:
    # C division truncates (cdivision): step down when the signs differ and it was inexact.
    # A zero divisor gives 0 and INT_MIN // -1 gives INT_MIN (NumPy's results); in C both trap
    # (SIGFPE on x86), so neither reaches the division
    cdef ew_int_t r
    if y == 0:
        return 0
    if y == -1:
        return m_neg_int(x)
    r = x // y
    return r - 1 if (x % y != 0) and ((x < 0) != (y < 0)) else r

cdef inline ew_int_t m_mod_int(ew_int_t x, ew_int_t y) noexcept nogil:
    # 0 for a zero divisor and for -1 (INT_MIN % -1 traps in C)
    cdef ew_int_t r
    if y == 0 or y == -1:
        return 0
    r = x % y
    return r + y if r != 0 and ((r < 0) != (y < 0)) else r


# -- casts of floats to integers ------------------------------------------------------------------
# C leaves a float outside the integer's range (NaN, inf, too large) undefined; the result here is
# the one NumPy gives on x86 (the cvttsd2si "integer indefinite"): INT_MIN of the destination.
# A small integer (uint8, int8, int16) is NumPy's result too: the float truncated to int32 as
# below, then the low bits of that (so 300.7 -> uint8 44, NaN and inf -> 0, -1.5 -> uint8 255).
cdef inline int32_t float_to_i32(double x) noexcept nogil:
    if x >= -2147483648.0 and x < 2147483648.0:  # false for NaN
        return <int32_t>x
    return INT32_MIN

cdef inline int64_t float_to_i64(double x) noexcept nogil:
    if x >= -9223372036854775808.0 and x < 9223372036854775808.0:
        return <int64_t>x
    return INT64_MIN
