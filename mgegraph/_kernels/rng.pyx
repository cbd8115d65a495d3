# Random draws (mgegraph/ops/random.py): rng_uniform, rng_gamma and rng_poisson.
#
# Parameter layout: the ints are the Rng struct below, whose field names this module exports
# (RNG_FIELDS) for the lowering, mgegraph/kernel_abi/random.py, to pack by name; no floats.
# Buffers: rng_uniform step, out; rng_gamma alpha, step, out; rng_poisson lam, step, out
# (alpha and lam already of the output's shape; step one int64, the stream's counter).
#
# Design: the samplers are rng_sample.h's, shared with csrc_cuda/rng.cu, so both devices draw
# the same numbers: element i depends on (seed, step, i) only. One thread: a draw is a source
# of new values, cheap next to the ops that read them. A gamma alpha <= 0 or a Poisson lam < 0
# (or NaN) is refused (KERNEL_BAD_VALUE); the Python layer checks numbers given as numbers.

from libc.stdint cimport int64_t, uint64_t

from .abi cimport Call, KERNEL_BAD_VALUE, KERNEL_OK, kernel_address
from .params cimport fields_of

cdef extern from "rng_sample.h" nogil:
    uint64_t mg_rng_key(uint64_t seed, int64_t step)
    double mg_rng_u53(uint64_t key, uint64_t i, uint64_t j)
    float mg_rng_u24(uint64_t key, uint64_t i)
    double mg_rng_gamma(uint64_t key, uint64_t i, double alpha)
    double mg_rng_poisson(uint64_t key, uint64_t i, double lam)

ctypedef struct Rng:                # out has size elements
    Py_ssize_t size, seed

cdef Rng _rng
RNG_FIELDS = fields_of(_rng, sizeof(Rng))


cdef inline uint64_t key_of(const Call* c, int step_buf) noexcept nogil:
    cdef const Rng* s = <const Rng*>c.ints
    return mg_rng_key(<uint64_t>s.seed, (<const int64_t*>c.bufs[step_buf])[0])


cdef int rng_uniform_f32(const Call* c) noexcept nogil:
    cdef const Rng* s = <const Rng*>c.ints
    cdef uint64_t key = key_of(c, 0)
    cdef float* out = <float*>c.bufs[1]
    cdef Py_ssize_t i
    for i in range(s.size):
        out[i] = mg_rng_u24(key, i)
    return KERNEL_OK


cdef int rng_uniform_f64(const Call* c) noexcept nogil:
    cdef const Rng* s = <const Rng*>c.ints
    cdef uint64_t key = key_of(c, 0)
    cdef double* out = <double*>c.bufs[1]
    cdef Py_ssize_t i
    for i in range(s.size):
        out[i] = mg_rng_u53(key, i, 0)
    return KERNEL_OK


ctypedef fused real:
    float
    double


cdef inline int gamma_impl(const Call* c, real* tag) noexcept nogil:
    cdef const Rng* s = <const Rng*>c.ints
    cdef const real* alpha = <const real*>c.bufs[0]
    cdef real* out = <real*>c.bufs[2]
    cdef uint64_t key = key_of(c, 1)
    cdef Py_ssize_t i
    for i in range(s.size):
        if not alpha[i] > 0:  # NaN too
            return KERNEL_BAD_VALUE
        out[i] = <real>mg_rng_gamma(key, i, alpha[i])
    return KERNEL_OK


cdef inline int poisson_impl(const Call* c, real* tag) noexcept nogil:
    cdef const Rng* s = <const Rng*>c.ints
    cdef const real* lam = <const real*>c.bufs[0]
    cdef real* out = <real*>c.bufs[2]
    cdef uint64_t key = key_of(c, 1)
    cdef Py_ssize_t i
    for i in range(s.size):
        if not lam[i] >= 0:  # NaN too
            return KERNEL_BAD_VALUE
        out[i] = <real>mg_rng_poisson(key, i, lam[i])
    return KERNEL_OK


cdef int rng_gamma_f32(const Call* c) noexcept nogil:
    return gamma_impl(c, <float*>NULL)
cdef int rng_gamma_f64(const Call* c) noexcept nogil:
    return gamma_impl(c, <double*>NULL)
cdef int rng_poisson_f32(const Call* c) noexcept nogil:
    return poisson_impl(c, <float*>NULL)
cdef int rng_poisson_f64(const Call* c) noexcept nogil:
    return poisson_impl(c, <double*>NULL)


KERNELS = {
    "rng_uniform_f32": kernel_address(rng_uniform_f32),
    "rng_uniform_f64": kernel_address(rng_uniform_f64),
    "rng_gamma_f32": kernel_address(rng_gamma_f32),
    "rng_gamma_f64": kernel_address(rng_gamma_f64),
    "rng_poisson_f32": kernel_address(rng_poisson_f32),
    "rng_poisson_f64": kernel_address(rng_poisson_f64),
}
