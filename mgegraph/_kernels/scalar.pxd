# The scalar functions every CPU elementwise op is made of: the helpers (m_*) that the
# expressions of mgegraph/ops/elementwise_table.py call, and the vectorisable math behind them.
# Their bodies are C, in scalar.h, one source for the Python package's kernels and the C runtime
# (mgegraph/deploy), so both give the same bits; here each m_* is the fused-type name the Cython
# kernels call, picking scalar.h's function of the element type (inlined away).
#
# The table's expressions become one inline function per op (ew_ops.pxd, generated at build
# time), which the unfused kernels, the fused evaluator and the GEMM/conv epilogues all call, so
# every path computes an op with the same instructions and gives bitwise the same results.
# Special values follow NumPy: see the NOTE in elementwise_table.py; the design of the math is in
# scalar.h.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t
from cython cimport floating

from .dtypes cimport ew_int_t, ew_num_t


cdef extern from "scalar.h" nogil:
    # the vectorisable math behind m_exp, m_expm1, m_log, m_log1p, m_tanh and m_erf
    float vexpf(float x)
    float vlogf(float x)
    float vlog1pf(float x)
    float vexpm1f(float x)
    float vtanhf(float x)
    float verff(float x)
    double vexp(double x)
    double vlog(double x)
    double vlog1p(double x)
    double vexpm1(double x)
    double vtanh(double x)
    # casts of floats to integers: NumPy's results on x86 (INT_MIN out of range)
    int32_t float_to_i32(double x)
    int64_t float_to_i64(double x)

    # the helpers, one function per element type
    float m_exp_f32(float x)
    double m_exp_f64(double x)
    float m_expm1_f32(float x)
    double m_expm1_f64(double x)
    float m_log_f32(float x)
    double m_log_f64(double x)
    float m_log1p_f32(float x)
    double m_log1p_f64(double x)
    float m_tanh_f32(float x)
    double m_tanh_f64(double x)
    float m_erf_f32(float x)
    double m_erf_f64(double x)
    float m_sqrt_f32(float x)
    double m_sqrt_f64(double x)
    float m_sin_f32(float x)
    double m_sin_f64(double x)
    float m_cos_f32(float x)
    double m_cos_f64(double x)
    float m_floor_f32(float x)
    double m_floor_f64(double x)
    float m_ceil_f32(float x)
    double m_ceil_f64(double x)
    float m_tan_f32(float x)
    double m_tan_f64(double x)
    float m_asin_f32(float x)
    double m_asin_f64(double x)
    float m_acos_f32(float x)
    double m_acos_f64(double x)
    float m_atan_f32(float x)
    double m_atan_f64(double x)
    float m_sinh_f32(float x)
    double m_sinh_f64(double x)
    float m_cosh_f32(float x)
    double m_cosh_f64(double x)
    float m_asinh_f32(float x)
    double m_asinh_f64(double x)
    float m_acosh_f32(float x)
    double m_acosh_f64(double x)
    float m_atanh_f32(float x)
    double m_atanh_f64(double x)
    float m_round_f32(float x)
    double m_round_f64(double x)
    float m_rint_f32(float x)
    double m_rint_f64(double x)
    float m_atan2_f32(float y, float x)
    double m_atan2_f64(double y, double x)
    float m_mod_f32(float x, float y)
    double m_mod_f64(double x, double y)
    float m_floor_div_f32(float x, float y)
    double m_floor_div_f64(double x, double y)
    float m_relu_f32(float x)
    float m_abs_f32(float x)
    float m_sign_f32(float x)
    float m_max_f32(float x, float y)
    float m_min_f32(float x, float y)
    float m_pow_f32(float x, float y)
    float m_clamp_f32(float x, float lo, float hi)
    float m_select_f32(bint c, float a, float b)
    double m_relu_f64(double x)
    double m_abs_f64(double x)
    double m_sign_f64(double x)
    double m_max_f64(double x, double y)
    double m_min_f64(double x, double y)
    double m_pow_f64(double x, double y)
    double m_clamp_f64(double x, double lo, double hi)
    double m_select_f64(bint c, double a, double b)
    int32_t m_relu_i32(int32_t x)
    int32_t m_abs_i32(int32_t x)
    int32_t m_sign_i32(int32_t x)
    int32_t m_max_i32(int32_t x, int32_t y)
    int32_t m_min_i32(int32_t x, int32_t y)
    int32_t m_pow_i32(int32_t x, int32_t y)
    int32_t m_clamp_i32(int32_t x, int32_t lo, int32_t hi)
    int32_t m_select_i32(bint c, int32_t a, int32_t b)
    int64_t m_relu_i64(int64_t x)
    int64_t m_abs_i64(int64_t x)
    int64_t m_sign_i64(int64_t x)
    int64_t m_max_i64(int64_t x, int64_t y)
    int64_t m_min_i64(int64_t x, int64_t y)
    int64_t m_pow_i64(int64_t x, int64_t y)
    int64_t m_clamp_i64(int64_t x, int64_t lo, int64_t hi)
    int64_t m_select_i64(bint c, int64_t a, int64_t b)
    uint8_t m_relu_u8(uint8_t x)
    uint8_t m_abs_u8(uint8_t x)
    uint8_t m_sign_u8(uint8_t x)
    uint8_t m_max_u8(uint8_t x, uint8_t y)
    uint8_t m_min_u8(uint8_t x, uint8_t y)
    uint8_t m_pow_u8(uint8_t x, uint8_t y)
    uint8_t m_clamp_u8(uint8_t x, uint8_t lo, uint8_t hi)
    uint8_t m_select_u8(bint c, uint8_t a, uint8_t b)
    int8_t m_relu_i8(int8_t x)
    int8_t m_abs_i8(int8_t x)
    int8_t m_sign_i8(int8_t x)
    int8_t m_max_i8(int8_t x, int8_t y)
    int8_t m_min_i8(int8_t x, int8_t y)
    int8_t m_pow_i8(int8_t x, int8_t y)
    int8_t m_clamp_i8(int8_t x, int8_t lo, int8_t hi)
    int8_t m_select_i8(bint c, int8_t a, int8_t b)
    int16_t m_relu_i16(int16_t x)
    int16_t m_abs_i16(int16_t x)
    int16_t m_sign_i16(int16_t x)
    int16_t m_max_i16(int16_t x, int16_t y)
    int16_t m_min_i16(int16_t x, int16_t y)
    int16_t m_pow_i16(int16_t x, int16_t y)
    int16_t m_clamp_i16(int16_t x, int16_t lo, int16_t hi)
    int16_t m_select_i16(bint c, int16_t a, int16_t b)
    int32_t m_add_int_i32(int32_t x, int32_t y)
    int32_t m_sub_int_i32(int32_t x, int32_t y)
    int32_t m_mul_int_i32(int32_t x, int32_t y)
    int32_t m_floor_div_int_i32(int32_t x, int32_t y)
    int32_t m_mod_int_i32(int32_t x, int32_t y)
    int32_t m_neg_int_i32(int32_t x)
    int64_t m_add_int_i64(int64_t x, int64_t y)
    int64_t m_sub_int_i64(int64_t x, int64_t y)
    int64_t m_mul_int_i64(int64_t x, int64_t y)
    int64_t m_floor_div_int_i64(int64_t x, int64_t y)
    int64_t m_mod_int_i64(int64_t x, int64_t y)
    int64_t m_neg_int_i64(int64_t x)
    uint8_t m_add_int_u8(uint8_t x, uint8_t y)
    uint8_t m_sub_int_u8(uint8_t x, uint8_t y)
    uint8_t m_mul_int_u8(uint8_t x, uint8_t y)
    uint8_t m_floor_div_int_u8(uint8_t x, uint8_t y)
    uint8_t m_mod_int_u8(uint8_t x, uint8_t y)
    uint8_t m_neg_int_u8(uint8_t x)
    int8_t m_add_int_i8(int8_t x, int8_t y)
    int8_t m_sub_int_i8(int8_t x, int8_t y)
    int8_t m_mul_int_i8(int8_t x, int8_t y)
    int8_t m_floor_div_int_i8(int8_t x, int8_t y)
    int8_t m_mod_int_i8(int8_t x, int8_t y)
    int8_t m_neg_int_i8(int8_t x)
    int16_t m_add_int_i16(int16_t x, int16_t y)
    int16_t m_sub_int_i16(int16_t x, int16_t y)
    int16_t m_mul_int_i16(int16_t x, int16_t y)
    int16_t m_floor_div_int_i16(int16_t x, int16_t y)
    int16_t m_mod_int_i16(int16_t x, int16_t y)
    int16_t m_neg_int_i16(int16_t x)


# -- the helpers the table's expressions call (elementwise_table.HELPERS), by element type -----
cdef inline floating m_exp(floating x) noexcept nogil:
    return m_exp_f32(x) if floating is float else m_exp_f64(x)

cdef inline floating m_expm1(floating x) noexcept nogil:
    return m_expm1_f32(x) if floating is float else m_expm1_f64(x)

cdef inline floating m_log(floating x) noexcept nogil:
    return m_log_f32(x) if floating is float else m_log_f64(x)

cdef inline floating m_log1p(floating x) noexcept nogil:
    return m_log1p_f32(x) if floating is float else m_log1p_f64(x)

cdef inline floating m_tanh(floating x) noexcept nogil:
    return m_tanh_f32(x) if floating is float else m_tanh_f64(x)

cdef inline floating m_erf(floating x) noexcept nogil:
    return m_erf_f32(x) if floating is float else m_erf_f64(x)

cdef inline floating m_sqrt(floating x) noexcept nogil:
    return m_sqrt_f32(x) if floating is float else m_sqrt_f64(x)

cdef inline floating m_sin(floating x) noexcept nogil:
    return m_sin_f32(x) if floating is float else m_sin_f64(x)

cdef inline floating m_cos(floating x) noexcept nogil:
    return m_cos_f32(x) if floating is float else m_cos_f64(x)

cdef inline floating m_floor(floating x) noexcept nogil:
    return m_floor_f32(x) if floating is float else m_floor_f64(x)

cdef inline floating m_ceil(floating x) noexcept nogil:
    return m_ceil_f32(x) if floating is float else m_ceil_f64(x)

cdef inline floating m_tan(floating x) noexcept nogil:
    return m_tan_f32(x) if floating is float else m_tan_f64(x)

cdef inline floating m_asin(floating x) noexcept nogil:
    return m_asin_f32(x) if floating is float else m_asin_f64(x)

cdef inline floating m_acos(floating x) noexcept nogil:
    return m_acos_f32(x) if floating is float else m_acos_f64(x)

cdef inline floating m_atan(floating x) noexcept nogil:
    return m_atan_f32(x) if floating is float else m_atan_f64(x)

cdef inline floating m_sinh(floating x) noexcept nogil:
    return m_sinh_f32(x) if floating is float else m_sinh_f64(x)

cdef inline floating m_cosh(floating x) noexcept nogil:
    return m_cosh_f32(x) if floating is float else m_cosh_f64(x)

cdef inline floating m_asinh(floating x) noexcept nogil:
    return m_asinh_f32(x) if floating is float else m_asinh_f64(x)

cdef inline floating m_acosh(floating x) noexcept nogil:
    return m_acosh_f32(x) if floating is float else m_acosh_f64(x)

cdef inline floating m_atanh(floating x) noexcept nogil:
    return m_atanh_f32(x) if floating is float else m_atanh_f64(x)

cdef inline floating m_round(floating x) noexcept nogil:
    return m_round_f32(x) if floating is float else m_round_f64(x)

cdef inline floating m_rint(floating x) noexcept nogil:
    return m_rint_f32(x) if floating is float else m_rint_f64(x)

cdef inline floating m_atan2(floating y, floating x) noexcept nogil:
    return m_atan2_f32(y, x) if floating is float else m_atan2_f64(y, x)

cdef inline floating m_mod(floating x, floating y) noexcept nogil:
    return m_mod_f32(x, y) if floating is float else m_mod_f64(x, y)

cdef inline floating m_floor_div(floating x, floating y) noexcept nogil:
    return m_floor_div_f32(x, y) if floating is float else m_floor_div_f64(x, y)

cdef inline ew_num_t m_relu(ew_num_t x) noexcept nogil:
    if ew_num_t is float:
        return m_relu_f32(x)
    elif ew_num_t is double:
        return m_relu_f64(x)
    elif ew_num_t is int32_t:
        return m_relu_i32(x)
    elif ew_num_t is int64_t:
        return m_relu_i64(x)
    elif ew_num_t is uint8_t:
        return m_relu_u8(x)
    elif ew_num_t is int8_t:
        return m_relu_i8(x)
    else:
        return m_relu_i16(x)

cdef inline ew_num_t m_abs(ew_num_t x) noexcept nogil:
    if ew_num_t is float:
        return m_abs_f32(x)
    elif ew_num_t is double:
        return m_abs_f64(x)
    elif ew_num_t is int32_t:
        return m_abs_i32(x)
    elif ew_num_t is int64_t:
        return m_abs_i64(x)
    elif ew_num_t is uint8_t:
        return m_abs_u8(x)
    elif ew_num_t is int8_t:
        return m_abs_i8(x)
    else:
        return m_abs_i16(x)

cdef inline ew_num_t m_sign(ew_num_t x) noexcept nogil:
    if ew_num_t is float:
        return m_sign_f32(x)
    elif ew_num_t is double:
        return m_sign_f64(x)
    elif ew_num_t is int32_t:
        return m_sign_i32(x)
    elif ew_num_t is int64_t:
        return m_sign_i64(x)
    elif ew_num_t is uint8_t:
        return m_sign_u8(x)
    elif ew_num_t is int8_t:
        return m_sign_i8(x)
    else:
        return m_sign_i16(x)

cdef inline ew_num_t m_max(ew_num_t x, ew_num_t y) noexcept nogil:
    if ew_num_t is float:
        return m_max_f32(x, y)
    elif ew_num_t is double:
        return m_max_f64(x, y)
    elif ew_num_t is int32_t:
        return m_max_i32(x, y)
    elif ew_num_t is int64_t:
        return m_max_i64(x, y)
    elif ew_num_t is uint8_t:
        return m_max_u8(x, y)
    elif ew_num_t is int8_t:
        return m_max_i8(x, y)
    else:
        return m_max_i16(x, y)

cdef inline ew_num_t m_min(ew_num_t x, ew_num_t y) noexcept nogil:
    if ew_num_t is float:
        return m_min_f32(x, y)
    elif ew_num_t is double:
        return m_min_f64(x, y)
    elif ew_num_t is int32_t:
        return m_min_i32(x, y)
    elif ew_num_t is int64_t:
        return m_min_i64(x, y)
    elif ew_num_t is uint8_t:
        return m_min_u8(x, y)
    elif ew_num_t is int8_t:
        return m_min_i8(x, y)
    else:
        return m_min_i16(x, y)

cdef inline ew_num_t m_pow(ew_num_t x, ew_num_t y) noexcept nogil:
    if ew_num_t is float:
        return m_pow_f32(x, y)
    elif ew_num_t is double:
        return m_pow_f64(x, y)
    elif ew_num_t is int32_t:
        return m_pow_i32(x, y)
    elif ew_num_t is int64_t:
        return m_pow_i64(x, y)
    elif ew_num_t is uint8_t:
        return m_pow_u8(x, y)
    elif ew_num_t is int8_t:
        return m_pow_i8(x, y)
    else:
        return m_pow_i16(x, y)

cdef inline ew_num_t m_clamp(ew_num_t x, ew_num_t lo, ew_num_t hi) noexcept nogil:
    if ew_num_t is float:
        return m_clamp_f32(x, lo, hi)
    elif ew_num_t is double:
        return m_clamp_f64(x, lo, hi)
    elif ew_num_t is int32_t:
        return m_clamp_i32(x, lo, hi)
    elif ew_num_t is int64_t:
        return m_clamp_i64(x, lo, hi)
    elif ew_num_t is uint8_t:
        return m_clamp_u8(x, lo, hi)
    elif ew_num_t is int8_t:
        return m_clamp_i8(x, lo, hi)
    else:
        return m_clamp_i16(x, lo, hi)

cdef inline ew_num_t m_select(bint c, ew_num_t a, ew_num_t b) noexcept nogil:
    if ew_num_t is float:
        return m_select_f32(c, a, b)
    elif ew_num_t is double:
        return m_select_f64(c, a, b)
    elif ew_num_t is int32_t:
        return m_select_i32(c, a, b)
    elif ew_num_t is int64_t:
        return m_select_i64(c, a, b)
    elif ew_num_t is uint8_t:
        return m_select_u8(c, a, b)
    elif ew_num_t is int8_t:
        return m_select_i8(c, a, b)
    else:
        return m_select_i16(c, a, b)

cdef inline ew_int_t m_neg_int(ew_int_t x) noexcept nogil:
    if ew_int_t is int32_t:
        return m_neg_int_i32(x)
    elif ew_int_t is int64_t:
        return m_neg_int_i64(x)
    elif ew_int_t is uint8_t:
        return m_neg_int_u8(x)
    elif ew_int_t is int8_t:
        return m_neg_int_i8(x)
    else:
        return m_neg_int_i16(x)

cdef inline ew_int_t m_add_int(ew_int_t x, ew_int_t y) noexcept nogil:
    if ew_int_t is int32_t:
        return m_add_int_i32(x, y)
    elif ew_int_t is int64_t:
        return m_add_int_i64(x, y)
    elif ew_int_t is uint8_t:
        return m_add_int_u8(x, y)
    elif ew_int_t is int8_t:
        return m_add_int_i8(x, y)
    else:
        return m_add_int_i16(x, y)

cdef inline ew_int_t m_sub_int(ew_int_t x, ew_int_t y) noexcept nogil:
    if ew_int_t is int32_t:
        return m_sub_int_i32(x, y)
    elif ew_int_t is int64_t:
        return m_sub_int_i64(x, y)
    elif ew_int_t is uint8_t:
        return m_sub_int_u8(x, y)
    elif ew_int_t is int8_t:
        return m_sub_int_i8(x, y)
    else:
        return m_sub_int_i16(x, y)

cdef inline ew_int_t m_mul_int(ew_int_t x, ew_int_t y) noexcept nogil:
    if ew_int_t is int32_t:
        return m_mul_int_i32(x, y)
    elif ew_int_t is int64_t:
        return m_mul_int_i64(x, y)
    elif ew_int_t is uint8_t:
        return m_mul_int_u8(x, y)
    elif ew_int_t is int8_t:
        return m_mul_int_i8(x, y)
    else:
        return m_mul_int_i16(x, y)

cdef inline ew_int_t m_floor_div_int(ew_int_t x, ew_int_t y) noexcept nogil:
    if ew_int_t is int32_t:
        return m_floor_div_int_i32(x, y)
    elif ew_int_t is int64_t:
        return m_floor_div_int_i64(x, y)
    elif ew_int_t is uint8_t:
        return m_floor_div_int_u8(x, y)
    elif ew_int_t is int8_t:
        return m_floor_div_int_i8(x, y)
    else:
        return m_floor_div_int_i16(x, y)

cdef inline ew_int_t m_mod_int(ew_int_t x, ew_int_t y) noexcept nogil:
    if ew_int_t is int32_t:
        return m_mod_int_i32(x, y)
    elif ew_int_t is int64_t:
        return m_mod_int_i64(x, y)
    elif ew_int_t is uint8_t:
        return m_mod_int_u8(x, y)
    elif ew_int_t is int8_t:
        return m_mod_int_i8(x, y)
    else:
        return m_mod_int_i16(x, y)
