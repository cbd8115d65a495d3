# Branch-free float32 exp, tanh and sigmoid that GCC auto-vectorises inside block loops.
#
# Design: libm's expf is a call per element, which stops vectorisation; these are the usual
# range reduction (x = n ln2 + r, |r| <= ln2 / 2) with a degree-6 polynomial for e^r and 2^n
# built from exponent bits, so each is straight-line arithmetic and selects. Relative error is
# within about 2 ulp down to e^-86 (below it, within 5e-38 absolute); inf, -inf and NaN come
# out as libm's do.

from libc.stdint cimport int32_t
from libc.string cimport memcpy


cdef inline float pow2i(float n) noexcept nogil:
    # 2**n for an integral n in [-126, 127], from its exponent bits
    cdef int32_t bits = (<int32_t>n + 127) << 23
    cdef float out
    memcpy(&out, &bits, 4)
    return out


cdef inline float vexpf(float x) noexcept nogil:
    # clamped so that 2**(n - 1) stays a normal float; below -86 the result is under 5e-38
    cdef float c = x if x < <float>88.72283935546875 else <float>88.72283935546875
    c = c if c > -<float>86.0 else -<float>86.0
    # n = round(c / ln 2): adding and removing 1.5 * 2**23 rounds to the nearest integer
    cdef float n = (c * <float>1.44269504088896341 + <float>12582912.0) - <float>12582912.0
    cdef float r = c - n * <float>0.693359375 + n * <float>2.12194440e-4
    cdef float p = <float>1.9875691500e-4
    p = p * r + <float>1.3981999507e-3
    p = p * r + <float>8.3334519073e-3
    p = p * r + <float>4.1665795894e-2
    p = p * r + <float>1.6666665459e-1
    p = p * r + <float>5.0000001201e-1
    cdef float y = ((p * r * r + r + <float>1.0) * pow2i(n - <float>1.0)) * <float>2.0
    y = y if x < <float>88.72283935546875 else <float>1e38 * <float>1e38  # inf past overflow
    y = y if x > -<float>103.97 else <float>0.0
    return y if x == x else x


cdef inline float vtanhf(float x) noexcept nogil:
    # small |x|: Cephes' odd polynomial; otherwise 1 - 2 / (e^{2|x|} + 1) with x's sign
    cdef float a = x if x > 0 else -x
    cdef float z = x * x
    cdef float small = ((((-<float>5.70498872745e-3 * z + <float>2.06390887954e-2) * z
                          - <float>5.37397155531e-2) * z + <float>1.33314422036e-1) * z
                        - <float>3.33332819422e-1) * z * x + x
    cdef float big = <float>1.0 - <float>2.0 / (vexpf(a + a) + <float>1.0)
    big = big if x > 0 else -big
    return small if a < <float>0.625 else big


cdef inline float vsigmoidf(float x) noexcept nogil:
    return <float>1.0 / (<float>1.0 + vexpf(-x))
