# The fused elementwise evaluator: a whole expression of elementwise ops run block by block.
#
# Parameter layout (ints), written by mgegraph.ops.fused:
#   [n_in, n_out, ndim, shape[ndim], strides of each input [n_in * ndim] (elements, 0 where
#    broadcast), block, threads, n_regs, n_code, code[n_code * 5]]
# code: (opcode, dst, a, b, c) per step over registers; LOAD dst <- input a, CONST dst <-
# floats[a], STORE output a <- register b; float attributes (slopes, clip bounds) are floats[b]
# and floats[c]. bufs: the inputs, the outputs (contiguous, the shape), then the workspace:
# threads * n_regs * block elements of registers.
#
# Design (numexpr's): the output is walked in blocks small enough that every register stays in
# L1/L2, and each step of the program runs over a whole block, so the loops are long, simple
# and vectorised (float32 exp/tanh/sigmoid come from vecmath.pxd, not libm) while no
# intermediate ever goes to memory. A contiguous input is read in place: its register points
# into it. Blocks are shared among OpenMP threads, each with registers of its own.

from libc.math cimport (exp, log, logf, log1p, log1pf, sqrt, sqrtf, sin, sinf, cos, cosf, tanh,
                        erf, erff, fabs, floor, floorf, ceil, ceilf, pow as cpow, powf)
from libc.string cimport memcpy
from cython cimport floating
from cython.parallel cimport prange, threadid
cimport openmp

from .abi cimport Call, KERNEL_OK, KERNEL_UNSUPPORTED, kernel_address
from .expr_math cimport vexpf, vtanhf, vsigmoidf

cdef enum:
    MAX_REGS = 64
    MAX_INPUTS = 32
    MAX_DIMS_EXPR = 8

cdef enum Opcode:
    X_LOAD, X_CONST, X_STORE,
    X_NEG, X_ABS, X_EXP, X_LOG, X_LOG1P, X_SQRT, X_RSQRT, X_SQUARE, X_SIN, X_COS, X_TANH,
    X_SIGMOID, X_RELU, X_LEAKY_RELU, X_CLIP, X_FLOOR, X_CEIL, X_SIGN, X_RECIPROCAL, X_ERF,
    X_SILU, X_SOFTPLUS,
    X_ADD, X_SUB, X_MUL, X_DIV, X_POW, X_MAXIMUM, X_MINIMUM, X_RELU_BACKWARD

OPCODES = {"load": X_LOAD, "const": X_CONST, "store": X_STORE, "neg": X_NEG, "abs": X_ABS,
           "exp": X_EXP, "log": X_LOG, "log1p": X_LOG1P, "sqrt": X_SQRT, "rsqrt": X_RSQRT,
           "square": X_SQUARE, "sin": X_SIN, "cos": X_COS, "tanh": X_TANH,
           "sigmoid": X_SIGMOID, "relu": X_RELU, "leaky_relu": X_LEAKY_RELU, "clip": X_CLIP,
           "floor": X_FLOOR, "ceil": X_CEIL, "sign": X_SIGN, "reciprocal": X_RECIPROCAL,
           "erf": X_ERF, "silu": X_SILU, "softplus": X_SOFTPLUS, "add": X_ADD, "sub": X_SUB,
           "mul": X_MUL, "div": X_DIV, "pow": X_POW, "maximum": X_MAXIMUM,
           "minimum": X_MINIMUM, "relu_backward": X_RELU_BACKWARD}
LIMITS = {"registers": MAX_REGS, "inputs": MAX_INPUTS, "dims": MAX_DIMS_EXPR}


ctypedef struct Program:
    Py_ssize_t n_in, n_out, ndim, size, block, threads, n_regs, n_code
    const Py_ssize_t* shape
    const Py_ssize_t* strides
    const Py_ssize_t* code
    const double* floats
    bint contiguous[MAX_INPUTS]
    bint scalar[MAX_INPUTS]


# -- scalar forms: the same arithmetic as elementwise.pyx, so results agree ---------------------
cdef inline floating f_exp(floating x) noexcept nogil:
    if floating is float:
        return vexpf(x)
    return exp(x)

cdef inline floating f_tanh(floating x) noexcept nogil:
    if floating is float:
        return vtanhf(x)
    return tanh(x)

cdef inline floating f_sigmoid(floating x) noexcept nogil:
    if floating is float:
        return vsigmoidf(x)
    return 1.0 / (1.0 + exp(-x))

cdef inline floating f_log(floating x) noexcept nogil:
    if floating is float:
        return logf(x)
    return log(x)


cdef inline floating unary(int op, floating x, floating p, floating q) noexcept nogil:
    if op == X_NEG:
        return -x
    if op == X_ABS:
        return x if x >= 0 else -x
    if op == X_LOG:
        return f_log(x)
    if op == X_LOG1P:
        return log1pf(x) if floating is float else log1p(x)
    if op == X_SQRT:
        return sqrtf(x) if floating is float else sqrt(x)
    if op == X_RSQRT:
        return 1 / (sqrtf(x) if floating is float else sqrt(x))
    if op == X_SIN:
        return sinf(x) if floating is float else sin(x)
    if op == X_COS:
        return cosf(x) if floating is float else cos(x)
    if op == X_LEAKY_RELU:
        return x if x > 0 else x * p
    if op == X_CLIP:
        return p if x < p else (q if x > q else x)
    if op == X_FLOOR:
        return floorf(x) if floating is float else floor(x)
    if op == X_CEIL:
        return ceilf(x) if floating is float else ceil(x)
    if op == X_SIGN:
        return (x > 0) - (x < 0)
    if op == X_ERF:
        return erff(x) if floating is float else erf(x)
    if op == X_SILU:
        return x * f_sigmoid(x)
    if op == X_SOFTPLUS:
        return (x if x > 0 else 0) + (log1pf(f_exp(-fabs(x))) if floating is float
                                      else log1p(exp(-fabs(x))))
    return x


cdef inline floating binary(int op, floating a, floating b) noexcept nogil:
    if op == X_DIV:
        return a / b
    if op == X_POW:
        return powf(a, b) if floating is float else cpow(a, b)
    return a


# -- one block -------------------------------------------------------------------------------
cdef inline void load(const Program* p, const floating* src, Py_ssize_t i, Py_ssize_t start,
                      Py_ssize_t n, floating* dst) noexcept nogil:
    # a broadcast input: each element's offset from its index in the output
    cdef Py_ssize_t e, flat, off, d
    cdef const Py_ssize_t* st = p.strides + i * p.ndim
    for e in range(n):
        flat, off = start + e, 0
        for d in range(p.ndim - 1, -1, -1):
            off += (flat % p.shape[d]) * st[d]
            flat = flat // p.shape[d]
        dst[e] = src[off]


cdef inline void run_step(int op, floating* d, const floating* a, const floating* b,
                          floating p, floating q, Py_ssize_t n) noexcept nogil:
    # the common ops get loops of their own so that each vectorises
    cdef Py_ssize_t e
    cdef floating v
    if op == X_ADD:
        for e in range(n):
            d[e] = a[e] + b[e]
    elif op == X_SUB:
        for e in range(n):
            d[e] = a[e] - b[e]
    elif op == X_MUL:
        for e in range(n):
            d[e] = a[e] * b[e]
    elif op == X_MAXIMUM:
        for e in range(n):
            v = b[e]
            d[e] = a[e] if a[e] >= v or a[e] != a[e] else v
    elif op == X_MINIMUM:
        for e in range(n):
            v = b[e]
            d[e] = a[e] if a[e] <= v or a[e] != a[e] else v
    elif op == X_RELU_BACKWARD:
        for e in range(n):
            v = b[e]
            d[e] = v if a[e] > 0 else 0
    elif op == X_RELU:
        for e in range(n):
            v = a[e]
            d[e] = v if v > 0 else 0
    elif op == X_SQUARE:
        for e in range(n):
            d[e] = a[e] * a[e]
    elif op == X_RECIPROCAL:
        for e in range(n):
            d[e] = 1 / a[e]
    elif op == X_EXP:
        for e in range(n):
            d[e] = f_exp(a[e])
    elif op == X_TANH:
        for e in range(n):
            d[e] = f_tanh(a[e])
    elif op == X_SIGMOID:
        for e in range(n):
            d[e] = f_sigmoid(a[e])
    elif op >= X_ADD:
        for e in range(n):
            d[e] = binary(op, a[e], b[e])
    else:
        for e in range(n):
            d[e] = unary(op, a[e], p, q)


cdef void eval_block(const Program* p, const Call* c, Py_ssize_t start, Py_ssize_t n,
                     floating* home) noexcept nogil:
    cdef const floating* cur[MAX_REGS]
    cdef Py_ssize_t k, e
    cdef const Py_ssize_t* s
    cdef floating* d
    cdef const floating* src
    cdef floating value
    for k in range(p.n_code):
        s = p.code + 5 * k
        d = home + s[1] * p.block
        if s[0] == X_LOAD:
            src = <const floating*>c.bufs[s[2]]
            if p.contiguous[s[2]]:
                cur[s[1]] = src + start
                continue
            if p.scalar[s[2]]:
                for e in range(n):
                    d[e] = src[0]
            else:
                load(p, src, s[2], start, n, d)
        elif s[0] == X_CONST:
            value = <floating>p.floats[s[2]]
            for e in range(n):
                d[e] = value
        elif s[0] == X_STORE:
            memcpy((<floating*>c.bufs[p.n_in + s[1]]) + start, cur[s[2]],
                   <size_t>n * sizeof(floating))
            continue
        else:
            run_step(<int>s[0], d, cur[s[2]], cur[s[3]] if s[0] >= X_ADD else cur[s[2]],
                     <floating>p.floats[s[3]] if s[0] in (X_LEAKY_RELU, X_CLIP) else 0,
                     <floating>p.floats[s[4]] if s[0] == X_CLIP else 0, n)
        cur[s[1]] = d


cdef int read_program(Program* p, const Call* c) noexcept nogil:
    cdef const Py_ssize_t* ints = c.ints
    cdef Py_ssize_t i, d, want
    p.n_in, p.n_out, p.ndim = ints[0], ints[1], ints[2]
    if p.n_in > MAX_INPUTS or p.ndim > MAX_DIMS_EXPR:
        return KERNEL_UNSUPPORTED
    p.shape = ints + 3
    p.strides = p.shape + p.ndim
    p.size = 1
    for d in range(p.ndim):
        p.size *= p.shape[d]
    i = 3 + p.ndim + p.n_in * p.ndim
    p.block, p.threads, p.n_regs, p.n_code = ints[i], ints[i + 1], ints[i + 2], ints[i + 3]
    if p.n_regs > MAX_REGS or p.block < 1 or p.threads < 1:
        return KERNEL_UNSUPPORTED
    p.code = ints + i + 4
    p.floats = c.floats
    for i in range(p.n_in):
        p.contiguous[i], p.scalar[i], want = True, True, 1
        for d in range(p.ndim - 1, -1, -1):
            if p.shape[d] != 1 and p.strides[i * p.ndim + d] != want:
                p.contiguous[i] = False
            if p.shape[d] != 1 and p.strides[i * p.ndim + d] != 0:
                p.scalar[i] = False
            want *= p.shape[d]
    return KERNEL_OK


cdef inline int expr_impl(const Call* c, floating* tag) noexcept nogil:
    # tag (always NULL) only selects the fused specialisation
    cdef Program p
    cdef int status = read_program(&p, c)
    cdef Py_ssize_t b, start, nblocks
    cdef floating* ws
    if status != KERNEL_OK:
        return status
    ws = <floating*>c.bufs[p.n_in + p.n_out]
    nblocks = (p.size + p.block - 1) // p.block
    if p.threads == 1 or nblocks < 2:
        for b in range(nblocks):
            start = b * p.block
            eval_block(&p, c, start, min(p.block, p.size - start), ws)
        return KERNEL_OK
    for b in prange(nblocks, nogil=True, num_threads=p.threads, schedule="static"):
        eval_block(&p, c, b * p.block, min(p.block, p.size - b * p.block),
                   ws + threadid() * p.n_regs * p.block)
    return KERNEL_OK


cdef int expr_f32(const Call* c) noexcept nogil:
    return expr_impl(c, <float*>NULL)
cdef int expr_f64(const Call* c) noexcept nogil:
    return expr_impl(c, <double*>NULL)


cdef extern from *:
    """
    static int mgegraph_cpu_has_avx2_fma(void) {
    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    #else
        return 0;
    #endif
    }
    """
    int mgegraph_cpu_has_avx2_fma() nogil


def cpu_has_avx2_fma() -> bool:
    """Whether this CPU runs the AVX2 + FMA build of the evaluator."""
    return bool(mgegraph_cpu_has_avx2_fma())


def max_threads() -> int:
    """The OpenMP threads a fused kernel may use."""
    return openmp.omp_get_max_threads()


# both builds register the same names; _kernels/__init__.py imports the one this CPU runs
KERNELS = {"expr_f32": kernel_address(expr_f32), "expr_f64": kernel_address(expr_f64)}
