# Elementwise kernels: unary, binary with broadcasting, comparisons, where, cast.
#
# Parameter layout (ints), written by mgegraph.ops.elementwise.layout_params:
#   [opcode, ndim, shape[ndim], strides of input 0 [ndim], strides of input 1 [ndim], ...]
# Strides are in elements and 0 on broadcast dimensions, so broadcast inputs are never
# materialised. The output is contiguous with the given shape.

from libc.math cimport (exp, expf, log, logf, log1p, log1pf, sqrt, sqrtf, sin, sinf, cos, cosf,
                        tanh, tanhf, erf, erff, fabs, fabsf, pow as cpow, powf, floor, floorf,
                        fmod, fmodf, isnan)
from libc.stdint cimport int32_t, int64_t, uint8_t
from cython cimport floating

from .dtypes cimport any_t, int_t, num_t
from .abi cimport Call, KERNEL_OK, KERNEL_BAD_VALUE, KERNEL_UNSUPPORTED, kernel_fn, kernel_address
from .nditer cimport Odometer, odometer_init, odometer_next, count_rows

# a second fused type over every dtype, so cast can vary source and destination independently
ctypedef fused dst_t:
    float
    double
    int32_t
    int64_t
    uint8_t

cdef enum UnaryOp:
    U_COPY, U_NEG, U_ABS, U_EXP, U_LOG, U_LOG1P, U_SQRT, U_RSQRT, U_SQUARE, U_SIN, U_COS,
    U_TANH, U_SIGMOID, U_RELU, U_LEAKY_RELU, U_GELU, U_GELU_TANH, U_SILU, U_SOFTPLUS, U_CLIP,
    U_FLOOR, U_CEIL, U_SIGN, U_RECIPROCAL, U_ERF

cdef enum BinaryOp:
    B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAXIMUM, B_MINIMUM, B_FLOOR_DIV, B_MOD, B_RELU_GRAD

cdef enum CompareOp:
    C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE

UNARY_OPS = {"copy": U_COPY, "neg": U_NEG, "abs": U_ABS, "exp": U_EXP, "log": U_LOG,
             "log1p": U_LOG1P, "sqrt": U_SQRT, "rsqrt": U_RSQRT, "square": U_SQUARE, "sin": U_SIN,
             "cos": U_COS, "tanh": U_TANH, "sigmoid": U_SIGMOID, "relu": U_RELU,
             "leaky_relu": U_LEAKY_RELU, "gelu": U_GELU, "gelu_tanh": U_GELU_TANH, "silu": U_SILU,
             "softplus": U_SOFTPLUS, "clip": U_CLIP, "floor": U_FLOOR, "ceil": U_CEIL,
             "sign": U_SIGN, "reciprocal": U_RECIPROCAL, "erf": U_ERF}
BINARY_OPS = {"add": B_ADD, "sub": B_SUB, "mul": B_MUL, "div": B_DIV, "pow": B_POW,
              "maximum": B_MAXIMUM, "minimum": B_MINIMUM, "floor_div": B_FLOOR_DIV, "mod": B_MOD,
              "relu_backward": B_RELU_GRAD}
COMPARE_OPS = {"equal": C_EQ, "not_equal": C_NE, "less": C_LT, "less_equal": C_LE,
               "greater": C_GT, "greater_equal": C_GE}

cdef double SQRT_2_OVER_PI = 0.7978845608028654
cdef double INV_SQRT_2 = 0.7071067811865476


# -- scalar functions -------------------------------------------------------------------------
cdef inline floating f_exp(floating x) noexcept nogil:
    if floating is float:
        return expf(x)
    else:
        return exp(x)

cdef inline floating f_log(floating x) noexcept nogil:
    if floating is float:
        return logf(x)
    else:
        return log(x)

cdef inline floating f_sigmoid(floating x) noexcept nogil:
    cdef floating e
    if x >= 0:
        return 1 / (1 + f_exp(-x))
    e = f_exp(x)
    return e / (1 + e)

cdef inline num_t unary_scalar(int op, num_t x, double a, double b) noexcept nogil:
    # Ops valid for every numeric dtype first; float-only ops below are unreachable for ints
    # because the op registry lists float dtypes only for them.
    if op == U_COPY:
        return x
    if op == U_NEG:
        return -x
    if op == U_ABS:
        return -x if x < 0 else x
    if op == U_SQUARE:
        return x * x
    if op == U_RELU:
        return x if x > 0 else 0
    if op == U_CLIP:
        if x < a:
            return <num_t>a
        if x > b:
            return <num_t>b
        return x
    if op == U_SIGN:
        return (x > 0) - (x < 0)
    if num_t is int32_t or num_t is int64_t:
        return x
    else:
        if op == U_EXP:
            return f_exp(x)
        if op == U_LOG:
            return f_log(x)
        if op == U_SIGMOID:
            return f_sigmoid(x)
        if op == U_TANH:
            return tanhf(x) if num_t is float else tanh(x)
        if op == U_LEAKY_RELU:
            return x if x > 0 else <num_t>(x * a)
        if op == U_SQRT:
            return sqrtf(x) if num_t is float else sqrt(x)
        if op == U_RSQRT:
            return 1 / (sqrtf(x) if num_t is float else sqrt(x))
        if op == U_RECIPROCAL:
            return 1 / x
        if op == U_LOG1P:
            return log1pf(x) if num_t is float else log1p(x)
        if op == U_SIN:
            return sinf(x) if num_t is float else sin(x)
        if op == U_COS:
            return cosf(x) if num_t is float else cos(x)
        if op == U_GELU:
            return <num_t>(0.5 * x * (1 + (erff(x * <float>INV_SQRT_2) if num_t is float
                                               else erf(x * INV_SQRT_2))))
        if op == U_GELU_TANH:
            return <num_t>(0.5 * x * (1 + (tanhf if num_t is float else tanh)(
                <num_t>SQRT_2_OVER_PI * (x + <num_t>0.044715 * x * x * x))))
        if op == U_SILU:
            return x * f_sigmoid(x)
        if op == U_SOFTPLUS:
            # max(x, 0) + log1p(exp(-|x|)) never overflows
            return (x if x > 0 else 0) + (log1pf if num_t is float else log1p)(
                f_exp(-x if x > 0 else x))
        if op == U_ERF:
            return erff(x) if num_t is float else erf(x)
        if op == U_FLOOR:
            return floorf(x) if num_t is float else floor(x)
        if op == U_CEIL:
            return -(floorf(-x) if num_t is float else floor(-x))
        return x


cdef inline int_t int_pow(int_t base, int_t e) noexcept nogil:
    cdef int_t result = 1
    while e > 0:
        if e & 1:
            result *= base
        base *= base
        e >>= 1
    return result


cdef inline num_t binary_scalar(int op, num_t x, num_t y) noexcept nogil:
    cdef num_t r
    if op == B_ADD:
        return x + y
    if op == B_SUB:
        return x - y
    if op == B_MUL:
        return x * y
    if op == B_RELU_GRAD:  # x is relu's output, y the gradient of that output
        return y if x > 0 else 0
    if op == B_MAXIMUM:
        if num_t is float or num_t is double:
            if isnan(x) or isnan(y):
                return x + y  # NaN propagates, as np.maximum
        return x if x >= y else y
    if op == B_MINIMUM:
        if num_t is float or num_t is double:
            if isnan(x) or isnan(y):
                return x + y
        return x if x <= y else y
    if num_t is float:
        if op == B_DIV:
            return x / y
        if op == B_POW:
            return powf(x, y)
        if op == B_FLOOR_DIV:
            return floorf(x / y)
        if op == B_MOD:
            r = fmodf(x, y)
            return r + y if r != 0 and ((r < 0) != (y < 0)) else r
    elif num_t is double:
        if op == B_DIV:
            return x / y
        if op == B_POW:
            return cpow(x, y)
        if op == B_FLOOR_DIV:
            return floor(x / y)
        if op == B_MOD:
            r = fmod(x, y)
            return r + y if r != 0 and ((r < 0) != (y < 0)) else r
    else:
        if op == B_POW:
            return int_pow(x, y)
        if y == 0:
            return 0  # NumPy also returns 0 for integer division by zero (with a warning)
        if op == B_FLOOR_DIV:
            r = x // y
            return r - 1 if (x % y != 0) and ((x < 0) != (y < 0)) else r
        if op == B_MOD:
            r = x % y
            return r + y if r != 0 and ((r < 0) != (y < 0)) else r
    return 0


cdef inline bint compare_scalar(int op, any_t x, any_t y) noexcept nogil:
    if op == C_EQ:
        return x == y
    if op == C_NE:
        return x != y
    if op == C_LT:
        return x < y
    if op == C_LE:
        return x <= y
    if op == C_GT:
        return x > y
    return x >= y


# -- loops --------------------------------------------------------------------------------------
cdef inline bint fast_unary_row(int op, const num_t* x, num_t* y, Py_ssize_t n) noexcept nogil:
    # The cheap ops get loops of their own on contiguous rows. In the generic loop the compiler
    # neither vectorises them nor turns a select into a blend, so relu ran at 5 ns per element
    # (a mispredicted branch on half of random data) instead of 0.1.
    cdef Py_ssize_t i
    cdef num_t v
    if op == U_COPY:
        for i in range(n):
            y[i] = x[i]
    elif op == U_NEG:
        for i in range(n):
            y[i] = -x[i]
    elif op == U_SQUARE:
        for i in range(n):
            y[i] = x[i] * x[i]
    elif op == U_RELU:
        for i in range(n):
            v = x[i]
            y[i] = v if v > 0 else 0
    elif op == U_ABS:
        for i in range(n):
            v = x[i]
            y[i] = -v if v < 0 else v
    else:
        return False
    return True


# Design: the *_rows functions are inlined once per opcode with the opcode as a literal, so the
# compiler folds the opcode tests out of the inner loop and can vectorise it; a run-time opcode
# in the loop costs several nanoseconds per element.
cdef inline void unary_rows(int op, const num_t* x, num_t* y, const Call* c) noexcept nogil:
    cdef int ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t s = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef double a = c.floats[0], b = c.floats[1]
    cdef Odometer o
    cdef const num_t* px
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 1)
    for r in range(rows):
        px = x + o.offset[0]
        if s == 1 and fast_unary_row(op, px, y, inner):
            pass
        elif s == 1:
            for i in range(inner):
                y[i] = unary_scalar(op, px[i], a, b)
        else:
            for i in range(inner):
                y[i] = unary_scalar(op, px[i * s], a, b)
        y += inner
        odometer_next(&o)


cdef inline int unary_impl(const num_t* x, num_t* y, const Call* c) noexcept nogil:
    cdef int op = <int>c.ints[0]
    if op == U_COPY:
        unary_rows(U_COPY, x, y, c)
    elif op == U_NEG:
        unary_rows(U_NEG, x, y, c)
    elif op == U_ABS:
        unary_rows(U_ABS, x, y, c)
    elif op == U_EXP:
        unary_rows(U_EXP, x, y, c)
    elif op == U_LOG:
        unary_rows(U_LOG, x, y, c)
    elif op == U_LOG1P:
        unary_rows(U_LOG1P, x, y, c)
    elif op == U_SQRT:
        unary_rows(U_SQRT, x, y, c)
    elif op == U_RSQRT:
        unary_rows(U_RSQRT, x, y, c)
    elif op == U_SQUARE:
        unary_rows(U_SQUARE, x, y, c)
    elif op == U_SIN:
        unary_rows(U_SIN, x, y, c)
    elif op == U_COS:
        unary_rows(U_COS, x, y, c)
    elif op == U_TANH:
        unary_rows(U_TANH, x, y, c)
    elif op == U_SIGMOID:
        unary_rows(U_SIGMOID, x, y, c)
    elif op == U_RELU:
        unary_rows(U_RELU, x, y, c)
    elif op == U_LEAKY_RELU:
        unary_rows(U_LEAKY_RELU, x, y, c)
    elif op == U_GELU:
        unary_rows(U_GELU, x, y, c)
    elif op == U_GELU_TANH:
        unary_rows(U_GELU_TANH, x, y, c)
    elif op == U_SILU:
        unary_rows(U_SILU, x, y, c)
    elif op == U_SOFTPLUS:
        unary_rows(U_SOFTPLUS, x, y, c)
    elif op == U_CLIP:
        unary_rows(U_CLIP, x, y, c)
    elif op == U_FLOOR:
        unary_rows(U_FLOOR, x, y, c)
    elif op == U_CEIL:
        unary_rows(U_CEIL, x, y, c)
    elif op == U_SIGN:
        unary_rows(U_SIGN, x, y, c)
    elif op == U_RECIPROCAL:
        unary_rows(U_RECIPROCAL, x, y, c)
    elif op == U_ERF:
        unary_rows(U_ERF, x, y, c)
    else:
        return KERNEL_UNSUPPORTED
    return KERNEL_OK


cdef inline bint fast_binary_row(int op, const num_t* x, Py_ssize_t sx, const num_t* z,
                                 Py_ssize_t sz, num_t* y, Py_ssize_t n) noexcept nogil:
    # Contiguous (or scalar-broadcast) add/sub/mul/div in loops the compiler vectorises.
    cdef Py_ssize_t i
    cdef num_t c
    if sx == 1 and sz == 1:
        if op == B_ADD:
            for i in range(n):
                y[i] = x[i] + z[i]
        elif op == B_SUB:
            for i in range(n):
                y[i] = x[i] - z[i]
        elif op == B_MUL:
            for i in range(n):
                y[i] = x[i] * z[i]
        elif op == B_DIV and (num_t is float or num_t is double):
            for i in range(n):
                y[i] = x[i] / z[i]
        elif op == B_RELU_GRAD:
            for i in range(n):
                c = z[i]  # loaded unconditionally, so the select needs no branch
                y[i] = c if x[i] > 0 else 0
        else:
            return False
        return True
    if sx == 1 and sz == 0:
        c = z[0]
        if op == B_ADD:
            for i in range(n):
                y[i] = x[i] + c
        elif op == B_SUB:
            for i in range(n):
                y[i] = x[i] - c
        elif op == B_MUL:
            for i in range(n):
                y[i] = x[i] * c
        else:
            return False
        return True
    return False


cdef inline void binary_rows(int op, const num_t* x, const num_t* z, num_t* y,
                             const Call* c) noexcept nogil:
    cdef int ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t sx = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t sz = c.ints[2 + 3 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef Odometer o
    cdef const num_t* px
    cdef const num_t* pz
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 2)
    for r in range(rows):
        px = x + o.offset[0]
        pz = z + o.offset[1]
        if fast_binary_row(op, px, sx, pz, sz, y, inner):
            pass
        elif sx == 1 and sz == 1:
            for i in range(inner):
                y[i] = binary_scalar(op, px[i], pz[i])
        elif sx == 1 and sz == 0:
            for i in range(inner):
                y[i] = binary_scalar(op, px[i], pz[0])
        elif sx == 0 and sz == 1:
            for i in range(inner):
                y[i] = binary_scalar(op, px[0], pz[i])
        else:
            for i in range(inner):
                y[i] = binary_scalar(op, px[i * sx], pz[i * sz])
        y += inner
        odometer_next(&o)


cdef inline int binary_impl(const num_t* x, const num_t* z, num_t* y, const Call* c) noexcept nogil:
    cdef int op = <int>c.ints[0]
    if op == B_ADD:
        binary_rows(B_ADD, x, z, y, c)
    elif op == B_SUB:
        binary_rows(B_SUB, x, z, y, c)
    elif op == B_MUL:
        binary_rows(B_MUL, x, z, y, c)
    elif op == B_DIV:
        binary_rows(B_DIV, x, z, y, c)
    elif op == B_POW:
        binary_rows(B_POW, x, z, y, c)
    elif op == B_MAXIMUM:
        binary_rows(B_MAXIMUM, x, z, y, c)
    elif op == B_MINIMUM:
        binary_rows(B_MINIMUM, x, z, y, c)
    elif op == B_FLOOR_DIV:
        binary_rows(B_FLOOR_DIV, x, z, y, c)
    elif op == B_MOD:
        binary_rows(B_MOD, x, z, y, c)
    elif op == B_RELU_GRAD:
        binary_rows(B_RELU_GRAD, x, z, y, c)
    else:
        return KERNEL_UNSUPPORTED
    return KERNEL_OK


cdef inline int compare_impl(const any_t* x, const any_t* z, uint8_t* y, const Call* c) noexcept nogil:
    cdef int op = <int>c.ints[0], ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t sx = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t sz = c.ints[2 + 3 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef Odometer o
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 2)
    for r in range(rows):
        for i in range(inner):
            y[i] = compare_scalar(op, x[o.offset[0] + i * sx], z[o.offset[1] + i * sz])
        y += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline int where_impl(const uint8_t* cond, const any_t* x, const any_t* z, any_t* y,
                           const Call* c) noexcept nogil:
    # ints: [unused opcode, ndim, shape, strides cond, strides x, strides z]
    cdef int ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t sc = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t sx = c.ints[2 + 3 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t sz = c.ints[2 + 4 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef Odometer o
    cdef const uint8_t* pc
    cdef const any_t* px
    cdef const any_t* pz
    cdef any_t a, b
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 3)
    for r in range(rows):
        pc, px, pz = cond + o.offset[0], x + o.offset[1], z + o.offset[2]
        if sc == 1 and sx == 1 and sz == 1:
            # both branches loaded unconditionally: a select the compiler can vectorise
            for i in range(inner):
                a, b = px[i], pz[i]
                y[i] = a if pc[i] else b
            y += inner
            odometer_next(&o)
            continue
        if sc == 1 and sx == 1 and sz == 0:
            b = pz[0]
            for i in range(inner):
                a = px[i]
                y[i] = a if pc[i] else b
            y += inner
            odometer_next(&o)
            continue
        for i in range(inner):
            if cond[o.offset[0] + i * sc]:
                y[i] = x[o.offset[1] + i * sx]
            else:
                y[i] = z[o.offset[2] + i * sz]
        y += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline void cast_rows(const any_t* x, dst_t* y, const Call* c) noexcept nogil:
    cdef int ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t s = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef Odometer o
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 1)
    for r in range(rows):
        for i in range(inner):
            if dst_t is uint8_t:
                y[i] = x[o.offset[0] + i * s] != 0
            else:
                y[i] = <dst_t>x[o.offset[0] + i * s]
        y += inner
        odometer_next(&o)


cdef inline int cast_impl(const any_t* x, char* y, const Call* c) noexcept nogil:
    # ints[0] is the destination dtype code (mgegraph.ir.types.SUPPORTED)
    cdef int dst = <int>c.ints[0]
    if dst == 0:
        cast_rows(x, <float*>y, c)
    elif dst == 1:
        cast_rows(x, <double*>y, c)
    elif dst == 2:
        cast_rows(x, <int32_t*>y, c)
    elif dst == 3:
        cast_rows(x, <int64_t*>y, c)
    elif dst == 4:
        cast_rows(x, <uint8_t*>y, c)
    else:
        return KERNEL_UNSUPPORTED
    return KERNEL_OK


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef int unary_f32(const Call* c) noexcept nogil:
    return unary_impl(<const float*>c.bufs[0], <float*>c.bufs[1], c)
cdef int unary_f64(const Call* c) noexcept nogil:
    return unary_impl(<const double*>c.bufs[0], <double*>c.bufs[1], c)
cdef int unary_i32(const Call* c) noexcept nogil:
    return unary_impl(<const int32_t*>c.bufs[0], <int32_t*>c.bufs[1], c)
cdef int unary_i64(const Call* c) noexcept nogil:
    return unary_impl(<const int64_t*>c.bufs[0], <int64_t*>c.bufs[1], c)

cdef int binary_f32(const Call* c) noexcept nogil:
    return binary_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <float*>c.bufs[2], c)
cdef int binary_f64(const Call* c) noexcept nogil:
    return binary_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <double*>c.bufs[2], c)
cdef int binary_i32(const Call* c) noexcept nogil:
    return binary_impl(<const int32_t*>c.bufs[0], <const int32_t*>c.bufs[1], <int32_t*>c.bufs[2], c)
cdef int binary_i64(const Call* c) noexcept nogil:
    return binary_impl(<const int64_t*>c.bufs[0], <const int64_t*>c.bufs[1], <int64_t*>c.bufs[2], c)

cdef int compare_f32(const Call* c) noexcept nogil:
    return compare_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <uint8_t*>c.bufs[2], c)
cdef int compare_f64(const Call* c) noexcept nogil:
    return compare_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <uint8_t*>c.bufs[2], c)
cdef int compare_i32(const Call* c) noexcept nogil:
    return compare_impl(<const int32_t*>c.bufs[0], <const int32_t*>c.bufs[1], <uint8_t*>c.bufs[2], c)
cdef int compare_i64(const Call* c) noexcept nogil:
    return compare_impl(<const int64_t*>c.bufs[0], <const int64_t*>c.bufs[1], <uint8_t*>c.bufs[2], c)
cdef int compare_bool(const Call* c) noexcept nogil:
    return compare_impl(<const uint8_t*>c.bufs[0], <const uint8_t*>c.bufs[1], <uint8_t*>c.bufs[2], c)

cdef int where_f32(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const float*>c.bufs[1], <const float*>c.bufs[2],
                      <float*>c.bufs[3], c)
cdef int where_f64(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const double*>c.bufs[1],
                      <const double*>c.bufs[2], <double*>c.bufs[3], c)
cdef int where_i32(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const int32_t*>c.bufs[1],
                      <const int32_t*>c.bufs[2], <int32_t*>c.bufs[3], c)
cdef int where_i64(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const int64_t*>c.bufs[1],
                      <const int64_t*>c.bufs[2], <int64_t*>c.bufs[3], c)
cdef int where_bool(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const uint8_t*>c.bufs[1],
                      <const uint8_t*>c.bufs[2], <uint8_t*>c.bufs[3], c)

cdef int cast_f32(const Call* c) noexcept nogil:
    return cast_impl(<const float*>c.bufs[0], c.bufs[1], c)
cdef int cast_f64(const Call* c) noexcept nogil:
    return cast_impl(<const double*>c.bufs[0], c.bufs[1], c)
cdef int cast_i32(const Call* c) noexcept nogil:
    return cast_impl(<const int32_t*>c.bufs[0], c.bufs[1], c)
cdef int cast_i64(const Call* c) noexcept nogil:
    return cast_impl(<const int64_t*>c.bufs[0], c.bufs[1], c)
cdef int cast_bool(const Call* c) noexcept nogil:
    return cast_impl(<const uint8_t*>c.bufs[0], c.bufs[1], c)

KERNELS = {
    "unary_f32": kernel_address(unary_f32), "unary_f64": kernel_address(unary_f64),
    "unary_i32": kernel_address(unary_i32), "unary_i64": kernel_address(unary_i64),
    "binary_f32": kernel_address(binary_f32), "binary_f64": kernel_address(binary_f64),
    "binary_i32": kernel_address(binary_i32), "binary_i64": kernel_address(binary_i64),
    "compare_f32": kernel_address(compare_f32), "compare_f64": kernel_address(compare_f64),
    "compare_i32": kernel_address(compare_i32), "compare_i64": kernel_address(compare_i64),
    "compare_bool": kernel_address(compare_bool),
    "where_f32": kernel_address(where_f32), "where_f64": kernel_address(where_f64), "where_i32": kernel_address(where_i32),
    "where_i64": kernel_address(where_i64), "where_bool": kernel_address(where_bool),
    "cast_f32": kernel_address(cast_f32), "cast_f64": kernel_address(cast_f64), "cast_i32": kernel_address(cast_i32),
    "cast_i64": kernel_address(cast_i64), "cast_bool": kernel_address(cast_bool),
}
