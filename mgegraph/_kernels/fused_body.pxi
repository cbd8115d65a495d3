# cython: cdivision=True
# The fused elementwise kernel: a whole expression of elementwise ops evaluated block by block.
#
# Kernels fused_f32 and fused_f64; inputs, registers and outputs all have the kernel's dtype.
# bufs: n_in inputs, n_out outputs (contiguous, the output shape), then one workspace holding
#   threads * n_regs * block elements of registers.
# ints, written by mgegraph.ops.fused_program.encode:
#   [n_in, n_out, ndim, out_shape[ndim], input strides[n_in * ndim] (elements, 0 on broadcast
#    dims), block, threads, n_regs, n_code, code[n_code * 5]]
# code: one (opcode, dst, a, b, c) per step, over registers:
#   LOAD dst <- input a          CONST dst <- floats[a]          STORE output dst <- register a
#   unary dst <- op(a); leaky_relu's slope is floats[b], clip's bounds floats[b] and floats[c]
#   binary and comparisons dst <- op(a, b) (comparisons give 1.0 or 0.0; relu_backward(y, g) is
#   g where y > 0, the registry's operand order); WHERE dst <- a != 0 ? b : c
# floats: the constants the code refers to by index.
#
# Design (numexpr's): the flattened output is walked in blocks small enough that every register
# stays in L1/L2, and each step runs over a whole block, so every loop is long, simple and
# vectorised (exp/log/tanh/sigmoid/erf come from vecmath.pxd, not libm) while no intermediate
# goes to memory. An input laid out like the output is read in place (its register points into
# it); others are gathered by strides. Blocks are shared among OpenMP threads, each with its own
# registers. Steps run in code order, so an output may share an input's buffer only when no step
# after the output's STORE reads that input.
#
# This source is built three times (setup.py): fused.pyx for any CPU, fused_avx2.pyx and
# fused_avx512.pyx for wider vectors, all without FP contraction, so they agree bitwise;
# _kernels/__init__.py imports the widest one the CPU runs (cpu_has).

from libc.math cimport (sqrt, sqrtf, sin, sinf, cos, cosf, erf, fabs, fabsf, floor, floorf, ceil,
                        ceilf, pow as cpow, powf)
from libc.string cimport memcpy
from libc.stdlib cimport malloc, free
from cython cimport floating
from cython.parallel cimport prange, threadid

from .abi cimport Call, KERNEL_OK, KERNEL_BAD_VALUE, KERNEL_UNSUPPORTED, kernel_fn, kernel_address
from .vecmath cimport (vexpf, vexp, vlogf, vlog, vlog1pf, vlog1p, vtanhf, vtanh, vsigmoidf,
                       vsigmoid, verff)

cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    static int mg_fused_max_threads(void) { return omp_get_max_threads(); }
    #else
    static int mg_fused_max_threads(void) { return 1; }
    #endif
    """
    int mg_fused_max_threads() nogil

cdef extern from *:
    """
    static int mg_fused_cpu_has(int level) {
    #if defined(__GNUC__) && defined(__x86_64__)
        __builtin_cpu_init();
        if (level == 1) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        if (level == 2) return __builtin_cpu_supports("avx512f") &&
                               __builtin_cpu_supports("avx512dq") &&
                               __builtin_cpu_supports("avx512vl") &&
                               __builtin_cpu_supports("avx512bw");
    #endif
        return level == 0;
    }
    """
    int mg_fused_cpu_has(int level) nogil

cdef enum:
    MAX_REGS = 64
    MAX_INPUTS = 32
    MAX_DIMS = 8

cdef enum Opcode:
    F_LOAD, F_CONST, F_STORE,
    F_NEG, F_ABS, F_EXP, F_LOG, F_LOG1P, F_SQRT, F_RSQRT, F_SQUARE, F_SIN, F_COS, F_TANH,
    F_SIGMOID, F_RELU, F_LEAKY_RELU, F_GELU, F_GELU_TANH, F_SILU, F_SOFTPLUS, F_CLIP, F_FLOOR,
    F_CEIL, F_SIGN, F_RECIPROCAL, F_ERF,
    F_ADD, F_SUB, F_MUL, F_DIV, F_POW, F_MAXIMUM, F_MINIMUM, F_RELU_BACKWARD,
    F_LESS, F_LESS_EQUAL, F_GREATER, F_GREATER_EQUAL, F_EQUAL, F_NOT_EQUAL,
    F_WHERE

UNARY = ("neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "square", "sin", "cos", "tanh",
         "sigmoid", "relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "softplus", "clip", "floor",
         "ceil", "sign", "reciprocal", "erf")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "relu_backward", "less",
          "less_equal", "greater", "greater_equal", "equal", "not_equal")
OPCODES = {"load": F_LOAD, "const": F_CONST, "store": F_STORE, "where": F_WHERE,
           **{name: F_NEG + i for i, name in enumerate(UNARY)},
           **{name: F_ADD + i for i, name in enumerate(BINARY)}}
LIMITS = {"registers": MAX_REGS, "inputs": MAX_INPUTS, "dims": MAX_DIMS}

cdef double SQRT_2_OVER_PI = 0.7978845608028654
cdef double INV_SQRT_2 = 0.7071067811865476


ctypedef struct Program:
    Py_ssize_t n_in, n_out, ndim, size, block, threads, n_regs, n_code
    const Py_ssize_t* shape
    const Py_ssize_t* strides
    const Py_ssize_t* code
    const double* floats
    bint contiguous[MAX_INPUTS]
    bint scalar[MAX_INPUTS]


# -- scalar forms, written as selects so that each block loop vectorises -----------------------
cdef inline floating v_exp(floating x) noexcept nogil:
    return vexpf(x) if floating is float else vexp(x)

cdef inline floating v_tanh(floating x) noexcept nogil:
    return vtanhf(x) if floating is float else vtanh(x)

cdef inline floating v_sigmoid(floating x) noexcept nogil:
    return vsigmoidf(x) if floating is float else vsigmoid(x)

cdef inline floating v_erf(floating x) noexcept nogil:
    return verff(x) if floating is float else erf(x)


cdef inline floating unary_scalar(int op, floating x, floating p, floating q) noexcept nogil:
    if op == F_NEG:
        return -x
    if op == F_ABS:
        return fabsf(x) if floating is float else fabs(x)
    if op == F_EXP:
        return v_exp(x)
    if op == F_LOG:
        return vlogf(x) if floating is float else vlog(x)
    if op == F_LOG1P:
        return vlog1pf(x) if floating is float else vlog1p(x)
    if op == F_SQRT:
        return sqrtf(x) if floating is float else sqrt(x)
    if op == F_RSQRT:
        return 1 / (sqrtf(x) if floating is float else sqrt(x))
    if op == F_SQUARE:
        return x * x
    if op == F_SIN:
        return sinf(x) if floating is float else sin(x)
    if op == F_COS:
        return cosf(x) if floating is float else cos(x)
    if op == F_TANH:
        return v_tanh(x)
    if op == F_SIGMOID:
        return v_sigmoid(x)
    if op == F_RELU:
        return 0 if x <= 0 else x  # NaN propagates, as np.maximum(x, 0)
    if op == F_LEAKY_RELU:
        return x if x > 0 else x * p
    if op == F_GELU:
        return <floating>0.5 * x * (1 + v_erf(x * <floating>INV_SQRT_2))
    if op == F_GELU_TANH:
        return <floating>0.5 * x * (1 + v_tanh(
            <floating>SQRT_2_OVER_PI * (x + <floating>0.044715 * x * x * x)))
    if op == F_SILU:
        return x * v_sigmoid(x)
    if op == F_SOFTPLUS:
        # max(x, 0) + log1p(exp(-|x|)) never overflows
        return (x if x > 0 else 0) + (vlog1pf(vexpf(-fabsf(x))) if floating is float
                                      else vlog1p(vexp(-fabs(x))))
    if op == F_CLIP:
        return p if x < p else (q if x > q else x)
    if op == F_FLOOR:
        return floorf(x) if floating is float else floor(x)
    if op == F_CEIL:
        return ceilf(x) if floating is float else ceil(x)
    if op == F_SIGN:
        return 1 if x > 0 else (-1 if x < 0 else x)  # keeps 0 and NaN, as np.sign
    if op == F_RECIPROCAL:
        return 1 / x
    if op == F_ERF:
        return v_erf(x)
    return x


cdef inline floating binary_scalar(int op, floating x, floating y) noexcept nogil:
    if op == F_ADD:
        return x + y
    if op == F_SUB:
        return x - y
    if op == F_MUL:
        return x * y
    if op == F_DIV:
        return x / y
    if op == F_POW:
        return powf(x, y) if floating is float else cpow(x, y)
    if op == F_MAXIMUM:  # NaN from either side propagates, as np.maximum
        return x if x >= y else (y if y > x else x + y)
    if op == F_MINIMUM:
        return x if x <= y else (y if y < x else x + y)
    if op == F_RELU_BACKWARD:
        return y if x > 0 else 0
    if op == F_LESS:
        return 1 if x < y else 0
    if op == F_LESS_EQUAL:
        return 1 if x <= y else 0
    if op == F_GREATER:
        return 1 if x > y else 0
    if op == F_GREATER_EQUAL:
        return 1 if x >= y else 0
    if op == F_EQUAL:
        return 1 if x == y else 0
    if op == F_NOT_EQUAL:
        return 1 if x != y else 0
    return x


# -- block loops: inlined once per opcode with the opcode a literal, so each one vectorises ---
cdef inline void unary_loop(int op, floating* d, const floating* a, floating p, floating q,
                            Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t e
    for e in range(n):
        d[e] = unary_scalar(op, a[e], p, q)


cdef inline void binary_loop(int op, floating* d, const floating* a, const floating* b,
                             Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t e
    for e in range(n):
        d[e] = binary_scalar(op, a[e], b[e])


cdef void run_unary(int op, floating* d, const floating* a, floating p, floating q,
                    Py_ssize_t n) noexcept nogil:
    if op == F_NEG: unary_loop(F_NEG, d, a, p, q, n)
    elif op == F_ABS: unary_loop(F_ABS, d, a, p, q, n)
    elif op == F_EXP: unary_loop(F_EXP, d, a, p, q, n)
    elif op == F_LOG: unary_loop(F_LOG, d, a, p, q, n)
    elif op == F_LOG1P: unary_loop(F_LOG1P, d, a, p, q, n)
    elif op == F_SQRT: unary_loop(F_SQRT, d, a, p, q, n)
    elif op == F_RSQRT: unary_loop(F_RSQRT, d, a, p, q, n)
    elif op == F_SQUARE: unary_loop(F_SQUARE, d, a, p, q, n)
    elif op == F_SIN: unary_loop(F_SIN, d, a, p, q, n)
    elif op == F_COS: unary_loop(F_COS, d, a, p, q, n)
    elif op == F_TANH: unary_loop(F_TANH, d, a, p, q, n)
    elif op == F_SIGMOID: unary_loop(F_SIGMOID, d, a, p, q, n)
    elif op == F_RELU: unary_loop(F_RELU, d, a, p, q, n)
    elif op == F_LEAKY_RELU: unary_loop(F_LEAKY_RELU, d, a, p, q, n)
    elif op == F_GELU: unary_loop(F_GELU, d, a, p, q, n)
    elif op == F_GELU_TANH: unary_loop(F_GELU_TANH, d, a, p, q, n)
    elif op == F_SILU: unary_loop(F_SILU, d, a, p, q, n)
    elif op == F_SOFTPLUS: unary_loop(F_SOFTPLUS, d, a, p, q, n)
    elif op == F_CLIP: unary_loop(F_CLIP, d, a, p, q, n)
    elif op == F_FLOOR: unary_loop(F_FLOOR, d, a, p, q, n)
    elif op == F_CEIL: unary_loop(F_CEIL, d, a, p, q, n)
    elif op == F_SIGN: unary_loop(F_SIGN, d, a, p, q, n)
    elif op == F_RECIPROCAL: unary_loop(F_RECIPROCAL, d, a, p, q, n)
    elif op == F_ERF: unary_loop(F_ERF, d, a, p, q, n)


cdef void run_binary(int op, floating* d, const floating* a, const floating* b,
                     Py_ssize_t n) noexcept nogil:
    if op == F_ADD: binary_loop(F_ADD, d, a, b, n)
    elif op == F_SUB: binary_loop(F_SUB, d, a, b, n)
    elif op == F_MUL: binary_loop(F_MUL, d, a, b, n)
    elif op == F_DIV: binary_loop(F_DIV, d, a, b, n)
    elif op == F_POW: binary_loop(F_POW, d, a, b, n)
    elif op == F_MAXIMUM: binary_loop(F_MAXIMUM, d, a, b, n)
    elif op == F_MINIMUM: binary_loop(F_MINIMUM, d, a, b, n)
    elif op == F_RELU_BACKWARD: binary_loop(F_RELU_BACKWARD, d, a, b, n)
    elif op == F_LESS: binary_loop(F_LESS, d, a, b, n)
    elif op == F_LESS_EQUAL: binary_loop(F_LESS_EQUAL, d, a, b, n)
    elif op == F_GREATER: binary_loop(F_GREATER, d, a, b, n)
    elif op == F_GREATER_EQUAL: binary_loop(F_GREATER_EQUAL, d, a, b, n)
    elif op == F_EQUAL: binary_loop(F_EQUAL, d, a, b, n)
    elif op == F_NOT_EQUAL: binary_loop(F_NOT_EQUAL, d, a, b, n)


cdef inline void run_where(floating* d, const floating* cond, const floating* a,
                           const floating* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t e
    cdef floating x, y
    for e in range(n):
        x, y = a[e], b[e]  # both loaded, so the select needs no branch
        d[e] = x if cond[e] != 0 else y


# -- loading a strided input -------------------------------------------------------------------
cdef void gather(const Program* p, const floating* src, Py_ssize_t i, Py_ssize_t start,
                 Py_ssize_t n, floating* dst) noexcept nogil:
    # runs along the innermost dimension, carried odometer-style into the outer ones
    cdef const Py_ssize_t* st = p.strides + i * p.ndim
    cdef Py_ssize_t idx[MAX_DIMS]
    cdef Py_ssize_t off = 0, flat = start, done = 0, run, e, d
    cdef Py_ssize_t last = p.ndim - 1, inner = p.shape[p.ndim - 1], s = st[p.ndim - 1]
    cdef const floating* q
    cdef floating v
    for d in range(last, -1, -1):
        idx[d] = flat % p.shape[d]
        flat = flat // p.shape[d]
        off += idx[d] * st[d]
    while done < n:
        run = min(inner - idx[last], n - done)
        q = src + off
        if s == 0:
            v = q[0]
            for e in range(run):
                dst[done + e] = v
        elif s == 1:
            memcpy(dst + done, q, <size_t>run * sizeof(floating))
        else:
            for e in range(run):
                dst[done + e] = q[e * s]
        done += run
        idx[last] += run
        off += run * s
        d = last
        while d > 0 and idx[d] == p.shape[d]:
            off -= idx[d] * st[d]
            idx[d] = 0
            d -= 1
            idx[d] += 1
            off += st[d]


# -- one block ---------------------------------------------------------------------------------
cdef void eval_block(const Program* p, const Call* c, Py_ssize_t start, Py_ssize_t n,
                     floating* home) noexcept nogil:
    cdef const floating* cur[MAX_REGS]
    cdef const Py_ssize_t* s
    cdef Py_ssize_t k, e, op
    cdef floating* d
    cdef const floating* src
    cdef floating v
    for k in range(p.n_code):
        s = p.code + 5 * k
        op = s[0]
        if op == F_STORE:
            memcpy((<floating*>c.bufs[p.n_in + s[1]]) + start, cur[s[2]],
                   <size_t>n * sizeof(floating))
            continue
        d = home + s[1] * p.block
        if op == F_LOAD:
            src = <const floating*>c.bufs[s[2]]
            if p.contiguous[s[2]]:
                cur[s[1]] = src + start
                continue
            if p.scalar[s[2]]:
                v = src[0]
                for e in range(n):
                    d[e] = v
            else:
                gather(p, src, s[2], start, n, d)
        elif op == F_CONST:
            v = <floating>p.floats[s[2]]
            for e in range(n):
                d[e] = v
        elif op == F_WHERE:
            run_where(d, cur[s[2]], cur[s[3]], cur[s[4]], n)
        elif op >= F_ADD:
            run_binary(<int>op, d, cur[s[2]], cur[s[3]], n)
        elif op == F_LEAKY_RELU:
            run_unary(<int>op, d, cur[s[2]], <floating>p.floats[s[3]], 0, n)
        elif op == F_CLIP:
            run_unary(<int>op, d, cur[s[2]], <floating>p.floats[s[3]],
                      <floating>p.floats[s[4]], n)
        else:
            run_unary(<int>op, d, cur[s[2]], 0, 0, n)
        cur[s[1]] = d


cdef int check_code(const Program* p) noexcept nogil:
    cdef Py_ssize_t k, op
    cdef const Py_ssize_t* s
    for k in range(p.n_code):
        s = p.code + 5 * k
        op = s[0]
        if op < F_LOAD or op > F_WHERE:
            return KERNEL_UNSUPPORTED
        if op == F_STORE:
            if s[1] < 0 or s[1] >= p.n_out or s[2] < 0 or s[2] >= p.n_regs:
                return KERNEL_BAD_VALUE
        elif s[1] < 0 or s[1] >= p.n_regs or (op == F_LOAD and (s[2] < 0 or s[2] >= p.n_in)):
            return KERNEL_BAD_VALUE
    return KERNEL_OK


cdef int read_program(Program* p, const Call* c) noexcept nogil:
    cdef const Py_ssize_t* ints = c.ints
    cdef Py_ssize_t i, d, want
    p.n_in, p.n_out, p.ndim = ints[0], ints[1], ints[2]
    if p.n_in > MAX_INPUTS or p.ndim > MAX_DIMS or p.ndim < 1:
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
    return check_code(p)


cdef inline int fused_impl(const Call* c, floating* tag) noexcept nogil:
    # tag (always NULL) only selects the specialisation
    cdef Program p
    cdef int status = read_program(&p, c)
    cdef Py_ssize_t b, nblocks
    cdef floating* ws
    if status != KERNEL_OK:
        return status
    ws = <floating*>c.bufs[p.n_in + p.n_out]
    nblocks = (p.size + p.block - 1) // p.block
    if p.threads == 1 or nblocks < 2:
        for b in range(nblocks):
            eval_block(&p, c, b * p.block, min(p.block, p.size - b * p.block), ws)
        return KERNEL_OK
    for b in prange(nblocks, nogil=True, num_threads=p.threads, schedule="static"):
        eval_block(&p, c, b * p.block, min(p.block, p.size - b * p.block),
                   ws + threadid() * p.n_regs * p.block)
    return KERNEL_OK


cdef int fused_f32(const Call* c) noexcept nogil:
    return fused_impl(c, <float*>NULL)
cdef int fused_f64(const Call* c) noexcept nogil:
    return fused_impl(c, <double*>NULL)


KERNELS = {"fused_f32": kernel_address(fused_f32), "fused_f64": kernel_address(fused_f64)}


def cpu_has(str isa) -> bool:
    """Whether this CPU runs the build of this kernel for ``isa`` ("baseline", "avx2",
    "avx512").

    >>> cpu_has("baseline")
    True
    """
    return bool(mg_fused_cpu_has(("baseline", "avx2", "avx512").index(isa)))


def max_threads() -> int:
    """The threads a fused kernel may use: OpenMP's maximum, 1 when built without OpenMP.

    >>> max_threads() >= 1
    True
    """
    return mg_fused_max_threads()


def call_kernel(str name, list arrays, ints, floats) -> int:
    """Call kernel ``name`` on NumPy arrays (inputs, outputs, workspace); returns its status.

    For tests and benchmarks only: the executor builds its Calls itself.

    >>> call_kernel("fused_f32", [x, out, ws], ints, floats)  # doctest: +SKIP
    0
    """
    cdef kernel_fn f = <kernel_fn><Py_ssize_t>KERNELS[name]
    cdef Py_ssize_t n_bufs = len(arrays), n_ints = len(ints), n_floats = len(floats), i
    cdef char** bufs = <char**>malloc(max(n_bufs, 1) * sizeof(char*))
    cdef Py_ssize_t* ip = <Py_ssize_t*>malloc(max(n_ints, 1) * sizeof(Py_ssize_t))
    cdef double* fp = <double*>malloc(max(n_floats, 1) * sizeof(double))
    cdef Call call
    cdef int status
    try:
        if bufs == NULL or ip == NULL or fp == NULL:
            raise MemoryError()
        for i in range(n_bufs):
            bufs[i] = <char*><Py_ssize_t>arrays[i].__array_interface__["data"][0]
        for i in range(n_ints):
            ip[i] = ints[i]
        for i in range(n_floats):
            fp[i] = floats[i]
        call.bufs, call.ints, call.floats = bufs, ip, fp
        with nogil:
            status = f(&call)
        return status
    finally:
        free(bufs)
        free(ip)
        free(fp)
