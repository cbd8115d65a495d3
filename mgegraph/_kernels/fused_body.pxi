# cython: cdivision=True
# The fused elementwise kernel: a whole expression of elementwise ops evaluated block by block.
#
# Kernels fused_f32 and fused_f64; inputs, registers and outputs all have the kernel's dtype.
# bufs: n_in inputs, n_out outputs (contiguous, the output shape), then one workspace holding
#   threads * n_regs * block elements of registers.
# ints, written by mgegraph._kernels.lowering.fused.encode, three structs (Head, Run, Step,
# whose field names this module exports) with arrays between them:
#   Head [n_in, n_out, ndim], out_shape[ndim], input strides[n_in * ndim] (elements, 0 on
#   broadcast dims), Run [block, threads, n_regs, n_code, n_floats], then n_code Steps
#   [op, dst, a, b, c]
# over registers:
#   LOAD dst <- input a          CONST dst <- floats[a]          STORE output dst <- register a
#   a unary op (its op code of ew_ops.pxd) dst <- op(a) with its parameters floats[b] and
#   floats[c] (leaky_relu's slope, clip's bounds); binary ops and comparisons dst <- op(a, b)
#   (comparisons give 1.0 or 0.0; relu_backward(y, g) is g where y > 0, the registry's operand
#   order); WHERE dst <- a != 0 ? b : c
#   quantized values (float32 programs; ops/fused_program.py): LOAD and STORE with b = 1 (int8)
#   or 2 (uint8) move integers, converted exactly to and from the registers' floats;
#   DEQUANTIZE dst <- (a - floats[c]) * floats[b]; QUANTIZE_I8 / _U8 dst <- saturated
#   rint(a / floats[b]) + floats[c], a NaN stopping the call with KERNEL_NOT_A_NUMBER.
# floats: the n_floats constants the code refers to by index.
#
# Design (numexpr's): the flattened output is walked in blocks small enough that every register
# stays in L1/L2, and each step runs over a whole block, so every loop is long, simple and
# vectorised while no intermediate goes to memory. Each op's loop is the one ew_ops.pxd
# (generated from the elementwise table) writes for it, calling the op's scalar function
# (exp/log/tanh/erf are the branch-free math of scalar.pxd, not libm); the unfused kernels run
# the same loops, so a fused program gives bitwise what its ops give one by one. An input laid
# out like the output is read in place (its register points into it); others are gathered by
# strides. Blocks are shared among OpenMP threads, each with its own registers. Steps run in
# code order, so an output may share an input's buffer only when no step after the output's
# STORE reads that input.
#
# This source is built three times (setup.py): fused.pyx for any CPU, fused_avx2.pyx and
# fused_avx512.pyx for wider vectors, all without FP contraction, so they agree bitwise;
# _kernels/__init__.py imports the widest one the CPU runs (cpu_has).
#
# Quantized steps compute as _kernels/quantize.pyx does, so a fused program gives its integers
# bitwise: dequantize is float32(q - zp) * float32(scale), one rounding; quantize divides in the
# registers' dtype, then rounds (rint, ties to even), adds the zero point and saturates in
# double. A quantized input is always laid out like the output (the fusion pass fuses a
# dequantize, whose input has its output's shape) or a scalar; a strided one is refused. Such
# programs run on the interpreter (no generated body) and store without streaming.
#
# Streaming (Run.stream; the lowering sets it when a call moves more bytes than the last-level
# cache holds): STORE writes with non-temporal stores, which skip the read for ownership of each
# output line and leave the cache to the inputs; it only moves bytes, the results are the same
# bitwise. (Software prefetch of the inputs a few blocks ahead, into L1 or L2, measured no
# better than the hardware's prefetchers on fusion-chain and was left out.)

from libc.string cimport memcmp, memcpy
from libc.stdlib cimport malloc, free
from cython cimport floating
from cython.parallel cimport parallel, prange, threadid

from libc.math cimport rint
from libc.stdint cimport int8_t, uint8_t

from .abi cimport (Call, KERNEL_OK, KERNEL_BAD_VALUE, KERNEL_NOT_A_NUMBER, KERNEL_UNSUPPORTED,
                   kernel_fn, kernel_address)
from .params cimport fields_of
from .ew_ops cimport (EW_FIRST_BINARY, EW_COUNT, ew_binary_run, ew_n_params, ew_opcodes,
                      ew_unary_run)

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

# 1 in a child made by fork(): GCC's OpenMP pool does not survive fork, and a child entering a
# parallel region the parent had started hangs, so a forked child runs each kernel on one thread.
cdef int _forked = 0


def _mark_forked():
    global _forked
    _forked = 1


import os as _os
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_mark_forked)

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

cdef extern from *:
    """
    #include <string.h>
    #if defined(__SSE2__)
    #include <immintrin.h>
    #endif
    /* dst[0:bytes] = src[0:bytes], the 64-byte lines of dst written with non-temporal stores */
    static void mg_stream_copy(char* dst, const char* src, size_t bytes) {
    #if defined(__SSE2__)
        size_t head = (64 - ((size_t)dst & 63)) & 63, k;
        if (head > bytes) head = bytes;
        memcpy(dst, src, head);
        dst += head; src += head; bytes -= head;
        for (k = 0; k + 64 <= bytes; k += 64) {
    #if defined(__AVX512F__)
            _mm512_stream_si512((__m512i*)(dst + k), _mm512_loadu_si512(src + k));
    #elif defined(__AVX__)
            _mm256_stream_si256((__m256i*)(dst + k), _mm256_loadu_si256((const __m256i*)(src + k)));
            _mm256_stream_si256((__m256i*)(dst + k + 32),
                                _mm256_loadu_si256((const __m256i*)(src + k + 32)));
    #else
            int j;
            for (j = 0; j < 64; j += 16)
                _mm_stream_si128((__m128i*)(dst + k + j), _mm_loadu_si128((const __m128i*)(src + k + j)));
    #endif
        }
        memcpy(dst + k, src + k, bytes - k);
    #else
        memcpy(dst, src, bytes);
    #endif
    }
    /* orders this thread's non-temporal stores before what follows (the end of the kernel) */
    static void mg_store_fence(void) {
    #if defined(__SSE2__)
        _mm_sfence();
    #endif
    }
    """
    void mg_stream_copy(char* dst, const char* src, size_t bytes) nogil
    void mg_store_fence() nogil

cdef enum:
    MAX_REGS = 64
    MAX_INPUTS = 32
    MAX_DIMS = 8

cdef enum Opcode:  # the steps that are not elementwise ops, after the table's op codes
    F_LOAD = EW_COUNT
    F_CONST
    F_STORE
    F_WHERE
    F_DEQUANTIZE
    F_QUANTIZE_I8
    F_QUANTIZE_U8

cdef enum Storage:  # a LOAD's or STORE's b: what its buffer holds
    S_FLOAT, S_INT8, S_UINT8

OPCODES = {**ew_opcodes(), "load": F_LOAD, "const": F_CONST, "store": F_STORE, "where": F_WHERE,
           "dequantize": F_DEQUANTIZE, "quantize_int8": F_QUANTIZE_I8,
           "quantize_uint8": F_QUANTIZE_U8}
LIMITS = {"registers": MAX_REGS, "inputs": MAX_INPUTS, "dims": MAX_DIMS}

# The ints are three structs with arrays between them (see the top of this file):
ctypedef struct Head:    # then out_shape[ndim], input strides[n_in * ndim]
    Py_ssize_t n_in, n_out, ndim

ctypedef struct Run:     # then n_code Steps
    Py_ssize_t block, threads, n_regs, n_code, n_floats  # n_floats: the length of Call.floats
    Py_ssize_t stream  # 1: STORE with non-temporal stores; 0: plain ones

ctypedef struct Step:
    Py_ssize_t op, dst, a, b, c

cdef Head _head
cdef Run _run
cdef Step _step
HEAD_FIELDS = fields_of(_head, sizeof(Head))
RUN_FIELDS = fields_of(_run, sizeof(Run))
STEP_FIELDS = fields_of(_step, sizeof(Step))


ctypedef struct Program:
    Py_ssize_t n_in, n_out, ndim, size, block, threads, n_regs, n_code, n_floats
    Py_ssize_t stream
    const Py_ssize_t* shape
    const Py_ssize_t* strides
    const Step* code
    const double* floats
    bint contiguous[MAX_INPUTS]
    bint scalar[MAX_INPUTS]
    bint quantized  # a step loads or stores integers, or quantizes


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


# -- quantized values ------------------------------------------------------------------------
cdef void load_integers(const char* src, Py_ssize_t storage, bint scalar, Py_ssize_t start,
                        Py_ssize_t n, floating* d) noexcept nogil:
    cdef Py_ssize_t e
    if scalar:
        for e in range(n):
            d[e] = (<const int8_t*>src)[0] if storage == S_INT8 else (<const uint8_t*>src)[0]
    elif storage == S_INT8:
        for e in range(n):
            d[e] = (<const int8_t*>src)[start + e]
    else:
        for e in range(n):
            d[e] = (<const uint8_t*>src)[start + e]


cdef void store_integers(char* dst, Py_ssize_t storage, const floating* v,
                         Py_ssize_t n) noexcept nogil:
    # v holds integers in the storage's range (a QUANTIZE step made them): exact conversions
    cdef Py_ssize_t e
    if storage == S_INT8:
        for e in range(n):
            (<int8_t*>dst)[e] = <int8_t>v[e]
    else:
        for e in range(n):
            (<uint8_t*>dst)[e] = <uint8_t>v[e]


cdef void run_dequantize(floating* d, const floating* q, floating scale, floating zp,
                         Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t e
    for e in range(n):
        d[e] = (q[e] - zp) * scale


cdef int run_quantize(floating* d, const floating* x, floating scale, double zp, double low,
                      double high, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t e
    cdef double v
    for e in range(n):
        v = <double>(x[e] / scale)
        if v != v:
            return KERNEL_NOT_A_NUMBER
        v = rint(v) + zp
        d[e] = <floating>(low if v < low else (high if v > high else v))
    return KERNEL_OK


# -- one block ---------------------------------------------------------------------------------
cdef int eval_block(const Program* p, const Call* c, Py_ssize_t start, Py_ssize_t n,
                    floating* home) noexcept nogil:
    cdef const floating* cur[MAX_REGS]
    cdef const Step* s
    cdef Py_ssize_t k, e
    cdef int op, params
    cdef floating* d
    cdef const floating* src
    cdef floating v
    for k in range(p.n_code):
        s = p.code + k
        op = <int>s.op
        if op == F_STORE:
            if s.b != S_FLOAT:
                store_integers(c.bufs[p.n_in + s.dst] + start, s.b, cur[s.a], n)
                continue
            d = (<floating*>c.bufs[p.n_in + s.dst]) + start
            if p.stream:
                mg_stream_copy(<char*>d, <const char*>cur[s.a], <size_t>n * sizeof(floating))
            else:
                memcpy(d, cur[s.a], <size_t>n * sizeof(floating))
            continue
        d = home + s.dst * p.block
        if op == F_LOAD and s.b != S_FLOAT:
            load_integers(c.bufs[s.a], s.b, p.scalar[s.a], start, n, d)
        elif op == F_LOAD:
            src = <const floating*>c.bufs[s.a]
            if p.contiguous[s.a]:
                cur[s.dst] = src + start
                continue
            if p.scalar[s.a]:
                v = src[0]
                for e in range(n):
                    d[e] = v
            else:
                gather(p, src, s.a, start, n, d)
        elif op == F_CONST:
            v = <floating>p.floats[s.a]
            for e in range(n):
                d[e] = v
        elif op == F_WHERE:
            run_where(d, cur[s.a], cur[s.b], cur[s.c], n)
        elif op == F_DEQUANTIZE:
            run_dequantize(d, cur[s.a], <floating>p.floats[s.b], <floating>p.floats[s.c], n)
        elif op == F_QUANTIZE_I8 or op == F_QUANTIZE_U8:
            if run_quantize(d, cur[s.a], <floating>p.floats[s.b], p.floats[s.c],
                            -128.0 if op == F_QUANTIZE_I8 else 0.0,
                            127.0 if op == F_QUANTIZE_I8 else 255.0, n) != KERNEL_OK:
                return KERNEL_NOT_A_NUMBER
        elif op >= EW_FIRST_BINARY:
            ew_binary_run(op, d, cur[s.a], 1, cur[s.b], 1, n)
        else:  # a unary op; b and c index its parameters
            params = ew_n_params(op)
            ew_unary_run(op, d, cur[s.a], 1, <floating>p.floats[s.b] if params > 0 else 0,
                         <floating>p.floats[s.c] if params > 1 else 0, n)
        cur[s.dst] = d
    return KERNEL_OK


cdef inline bint _bad_reg(Py_ssize_t r, const Program* p, unsigned long long defined) noexcept nogil:
    return r < 0 or r >= p.n_regs or not (defined >> r) & 1


cdef inline bint _bad_const(Py_ssize_t i, const Program* p) noexcept nogil:
    return i < 0 or i >= p.n_floats


cdef int check_code(const Program* p) noexcept nogil:
    # Once per call, before any element is touched: whatever the parameter block says, no step
    # reads or writes outside its buffers or reads a register no earlier step wrote, and every
    # constant index is below n_floats (the op's shape rule, fused_program.check_code, has
    # checked them against the constants too).
    cdef Py_ssize_t k
    cdef const Step* s
    cdef unsigned long long defined = 0, stored = 0  # bit r: register r written / output r stored
    cdef int params
    if p.n_code < 0 or p.n_out < 0 or p.n_out > 64 or p.n_in < 0 or p.n_regs < 1 or p.n_floats < 0:
        return KERNEL_BAD_VALUE
    for k in range(p.n_code):
        s = p.code + k
        if s.op < 0 or s.op > F_QUANTIZE_U8:
            return KERNEL_UNSUPPORTED
        if (s.op == F_LOAD or s.op == F_STORE) and (s.b < S_FLOAT or s.b > S_UINT8):
            return KERNEL_BAD_VALUE
        if s.op == F_STORE:
            if s.dst < 0 or s.dst >= p.n_out or (stored >> s.dst) & 1 or _bad_reg(s.a, p, defined):
                return KERNEL_BAD_VALUE
            stored |= 1ULL << s.dst
            continue
        if s.dst < 0 or s.dst >= p.n_regs:
            return KERNEL_BAD_VALUE
        if s.op == F_LOAD:
            if s.a < 0 or s.a >= p.n_in:
                return KERNEL_BAD_VALUE
        elif s.op == F_CONST:
            if _bad_const(s.a, p):
                return KERNEL_BAD_VALUE
        elif s.op == F_WHERE:
            if _bad_reg(s.a, p, defined) or _bad_reg(s.b, p, defined) or _bad_reg(s.c, p, defined):
                return KERNEL_BAD_VALUE
        elif s.op >= F_DEQUANTIZE:
            if _bad_reg(s.a, p, defined) or _bad_const(s.b, p) or _bad_const(s.c, p):
                return KERNEL_BAD_VALUE
        elif s.op >= EW_FIRST_BINARY:
            if _bad_reg(s.a, p, defined) or _bad_reg(s.b, p, defined):
                return KERNEL_BAD_VALUE
        else:
            params = ew_n_params(<int>s.op)
            if (_bad_reg(s.a, p, defined) or (params > 0 and _bad_const(s.b, p))
                    or (params > 1 and _bad_const(s.c, p))):
                return KERNEL_BAD_VALUE
        defined |= 1ULL << s.dst
    if p.n_out < 64 and stored != (1ULL << p.n_out) - 1 or p.n_out == 64 and stored != ~0ULL:
        return KERNEL_BAD_VALUE
    return KERNEL_OK


cdef int read_program(Program* p, const Call* c) noexcept nogil:
    cdef const Head* head = <const Head*>c.ints
    cdef const Run* run
    cdef Py_ssize_t i, d, want
    cdef int status
    p.n_in, p.n_out, p.ndim = head.n_in, head.n_out, head.ndim
    if p.n_in > MAX_INPUTS or p.ndim > MAX_DIMS or p.ndim < 1:
        return KERNEL_UNSUPPORTED
    p.shape = <const Py_ssize_t*>(head + 1)
    p.strides = p.shape + p.ndim
    p.size = 1
    for d in range(p.ndim):
        p.size *= p.shape[d]
    run = <const Run*>(p.strides + p.n_in * p.ndim)
    p.block, p.threads, p.n_regs, p.n_code = run.block, run.threads, run.n_regs, run.n_code
    p.n_floats, p.stream = run.n_floats, run.stream
    if p.n_regs > MAX_REGS or p.block < 1 or p.threads < 1:
        return KERNEL_UNSUPPORTED
    if p.stream < 0 or p.stream > 1:
        return KERNEL_BAD_VALUE
    p.code = <const Step*>(run + 1)
    p.floats = c.floats
    for i in range(p.n_in):
        p.contiguous[i], p.scalar[i], want = True, True, 1
        for d in range(p.ndim - 1, -1, -1):
            if p.shape[d] != 1 and p.strides[i * p.ndim + d] != want:
                p.contiguous[i] = False
            if p.shape[d] != 1 and p.strides[i * p.ndim + d] != 0:
                p.scalar[i] = False
            want *= p.shape[d]
    status = check_code(p)
    return status if status != KERNEL_OK else read_quantized(p)


cdef int read_quantized(Program* p) noexcept nogil:
    # whether the program holds quantized steps; integers are loaded in place or as a scalar
    cdef Py_ssize_t k
    cdef const Step* s
    p.quantized = False
    for k in range(p.n_code):
        s = p.code + k
        if s.op >= F_DEQUANTIZE or (s.op == F_LOAD or s.op == F_STORE) and s.b != S_FLOAT:
            p.quantized = True
        if (s.op == F_LOAD and s.b != S_FLOAT and not p.contiguous[s.a]
                and not p.scalar[s.a]):
            return KERNEL_UNSUPPORTED
    return KERNEL_OK


# -- one block through a generated body ---------------------------------------------------------
# fused_jit.py compiles one loop per program (the whole expression per element, in registers) and
# calls drive_f32 / drive_f64 with it; the inputs and outputs are resolved here, per block, as
# eval_block resolves them: an input laid out like the output is read in place, others are filled
# or gathered into their own register; each output is written into its own register (so it never
# aliases an input inside the loop, which then vectorises without checks) and copied out, with
# non-temporal stores when streaming.
ctypedef void (*body_f32)(const float** ins, float** outs, const double* floats,
                          Py_ssize_t n) noexcept nogil
ctypedef void (*body_f64)(const double** ins, double** outs, const double* floats,
                          Py_ssize_t n) noexcept nogil


cdef void eval_block_body(const Program* p, const Call* c, Py_ssize_t start, Py_ssize_t n,
                          floating* home, void* body) noexcept nogil:
    cdef const floating* ins[MAX_INPUTS]
    cdef floating* outs[64]
    cdef Py_ssize_t i, e
    cdef const floating* src
    cdef floating* d
    cdef floating v
    for i in range(p.n_in):
        src = <const floating*>c.bufs[i]
        if p.contiguous[i]:
            ins[i] = src + start
            continue
        d = home + i * p.block
        if p.scalar[i]:
            v = src[0]
            for e in range(n):
                d[e] = v
        else:
            gather(p, src, i, start, n, d)
        ins[i] = d
    for i in range(p.n_out):
        outs[i] = home + (p.n_in + i) * p.block
    if floating is float:
        (<body_f32>body)(ins, outs, p.floats, n)
    else:
        (<body_f64>body)(ins, outs, p.floats, n)
    for i in range(p.n_out):
        d = (<floating*>c.bufs[p.n_in + i]) + start
        if p.stream:
            mg_stream_copy(<char*>d, <const char*>outs[i], <size_t>n * sizeof(floating))
        else:
            memcpy(d, outs[i], <size_t>n * sizeof(floating))


cdef int eval_any(const Program* p, const Call* c, Py_ssize_t start, Py_ssize_t n,
                  floating* home, void* body) noexcept nogil:
    if body == NULL:
        return eval_block(p, c, start, n, home)
    eval_block_body(p, c, start, n, home, body)
    return KERNEL_OK


cdef inline bint body_fits(const Program* p, void* body, const Py_ssize_t* steps,
                           Py_ssize_t n_steps) noexcept nogil:
    # a generated body runs a call only when the call's steps are the ones it was generated
    # from (so a body never meets a program it does not compute) and the workspace holds a
    # register for every input and output
    return (body != NULL and not p.quantized and n_steps == p.n_code * 5
            and p.n_regs >= p.n_in + p.n_out
            and memcmp(<const void*>p.code, <const void*>steps,
                       <size_t>n_steps * sizeof(Py_ssize_t)) == 0)


cdef inline int fused_impl(const Call* c, floating* tag, void* body, const Py_ssize_t* steps,
                           Py_ssize_t n_steps) noexcept nogil:
    # tag (always NULL) only selects the specialisation; body: a generated body for the
    # program of ``steps`` (NULL: interpret the steps)
    cdef Program p
    cdef int status = read_program(&p, c)
    cdef int failed[1]  # a block's failure (a NaN met by a quantize step); any thread sets it
    cdef Py_ssize_t b, nblocks
    cdef floating* ws
    if status != KERNEL_OK:
        return status
    if not body_fits(&p, body, steps, n_steps):
        body = NULL
    if p.quantized:
        p.stream = 0  # integers are stored by their own loops
    ws = <floating*>c.bufs[p.n_in + p.n_out]
    nblocks = (p.size + p.block - 1) // p.block
    failed[0] = KERNEL_OK
    if p.threads == 1 or nblocks < 2 or _forked:
        for b in range(nblocks):
            status = eval_any(&p, c, b * p.block, min(p.block, p.size - b * p.block), ws, body)
            if status != KERNEL_OK:
                return status
        mg_store_fence()
        return KERNEL_OK
    with parallel(num_threads=p.threads):
        for b in prange(nblocks, schedule="static"):
            if eval_any(&p, c, b * p.block, min(p.block, p.size - b * p.block),
                        ws + threadid() * p.n_regs * p.block, body) != KERNEL_OK:
                failed[0] = KERNEL_NOT_A_NUMBER
        mg_store_fence()  # each thread's own non-temporal stores
    return failed[0]


cdef int fused_f32(const Call* c) noexcept nogil:
    return fused_impl(c, <float*>NULL, NULL, NULL, 0)
cdef int fused_f64(const Call* c) noexcept nogil:
    return fused_impl(c, <double*>NULL, NULL, NULL, 0)
cdef int drive_f32(const Call* c, void* body, const Py_ssize_t* steps,
                   Py_ssize_t n_steps) noexcept nogil:
    return fused_impl(c, <float*>NULL, body, steps, n_steps)
cdef int drive_f64(const Call* c, void* body, const Py_ssize_t* steps,
                   Py_ssize_t n_steps) noexcept nogil:
    return fused_impl(c, <double*>NULL, body, steps, n_steps)


# A program whose first output is quantized computes in float32 (the fused op's rule): the
# executor picks its kernel by that output's dtype
KERNELS = {"fused_f32": kernel_address(fused_f32), "fused_f64": kernel_address(fused_f64),
           "fused_i8": kernel_address(fused_f32), "fused_u8": kernel_address(fused_f32)}
# kernel name -> the address of its driver for generated bodies (fused_jit.py)
DRIVERS = {"fused_f32": <Py_ssize_t>drive_f32, "fused_f64": <Py_ssize_t>drive_f64}


def cpu_has(str isa) -> bool:
    """Whether this CPU runs the build of this kernel for ``isa`` ("baseline", "avx2",
    "avx512").

    >>> cpu_has("baseline")
    True
    """
    return bool(mg_fused_cpu_has(("baseline", "avx2", "avx512").index(isa)))


def max_threads() -> int:
    """The threads a fused kernel may use: OpenMP's maximum, 1 when built without OpenMP or in
    a forked child.

    >>> max_threads() >= 1
    True
    """
    return 1 if _forked else mg_fused_max_threads()


def call_kernel(name, list arrays, ints, floats) -> int:
    """Call kernel ``name`` (or the kernel at address ``name``, such as a generated one of
    fused_jit.py) on NumPy arrays (inputs, outputs, workspace); returns its status.

    For tests and benchmarks only: the executor builds its Calls itself.

    >>> call_kernel("fused_f32", [x, out, ws], ints, floats)  # doctest: +SKIP
    0
    """
    cdef kernel_fn f = <kernel_fn><Py_ssize_t>(KERNELS[name] if isinstance(name, str) else name)
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
