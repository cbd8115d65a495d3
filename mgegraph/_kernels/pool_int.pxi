# Pooling of quantized int8 and uint8 values (included by pool.pyx: its Pool block): the binding
# of pool_int.h's planes, the C runtime's pool2d_i8 / pool2d_u8 too (its note says how they pool
# and round). pool2d_i8 / pool2d_u8: bufs x, y; floats[0] the zero point (the integer a padded
# cell counted by "average" holds: the real 0).
#
# Design: the forward poolings keep their input's quantization (ops/conv.py), so they work on
# the integers alone. Each output row's interior windows go through pool_int.h's vectorised row
# passes (AVX-512BW, AVX2 or portable C: the same integers), the rest through its per-window
# loop. The variant is the widest this CPU runs, or the one MGEGRAPH_INT8_ISA's int8 variant
# implies; set_int8_pool_isa changes it ("scalar": the per-window loop alone). Threads take
# contiguous runs of planes.
import os

from libc.stdint cimport int64_t

cdef extern from "pool_int.h":
    int PI_SCALAR, PI_ISAS
    const char* pi_isa_names[]
    int pi_isa_ok(int isa) noexcept nogil
    int pi_widest() noexcept nogil
    ctypedef struct pi_run:
        pool_block s
    pi_run pi_run_of(const pool_block* s, const void* x, void* y, int64_t zero_point,
                     int isa) noexcept nogil
    void pi_planes_i8(void* ctx, int64_t lo, int64_t hi) noexcept nogil
    void pi_planes_u8(void* ctx, int64_t lo, int64_t hi) noexcept nogil

INT8_POOL_ISAS = tuple(pi_isa_names[i].decode() for i in range(PI_ISAS))
# the pooling variant each of the int8 GEMM's variants (MGEGRAPH_INT8_ISA) implies
_FROM_GEMM_ISA = {"portable": "portable", "avx2": "avx2", "avxvnni": "avx2",
                  "avx512vnni": "avx512"}
cdef int _int_pool_isa = pi_widest()


def int8_pool_isas() -> tuple:
    """The int8 pooling variants this CPU runs, narrowest first.

    >>> int8_pool_isas()[:2]
    ('scalar', 'portable')
    """
    return tuple(name for i, name in enumerate(INT8_POOL_ISAS) if pi_isa_ok(i))


def set_int8_pool_isa(name=None) -> str:
    """Makes int8 pooling use variant ``name`` (None: the widest this CPU runs); returns the one
    used before. Every variant gives the same integers: this is for tests and benchmarks."""
    global _int_pool_isa
    before = INT8_POOL_ISAS[_int_pool_isa]
    if name is None:
        _int_pool_isa = pi_widest()
        return before
    if name not in INT8_POOL_ISAS:
        raise ValueError(f"unknown int8 pooling variant {name!r}; one of {INT8_POOL_ISAS}")
    if not pi_isa_ok(INT8_POOL_ISAS.index(name)):
        raise ValueError(f"this CPU does not run the {name} int8 pooling variant; it runs "
                         f"{int8_pool_isas()}")
    _int_pool_isa = INT8_POOL_ISAS.index(name)
    return before


if os.environ.get("MGEGRAPH_INT8_ISA") in _FROM_GEMM_ISA:  # qgemm.pyx refuses other names
    set_int8_pool_isa(_FROM_GEMM_ISA[os.environ["MGEGRAPH_INT8_ISA"]])


cdef int int_planes_i8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    pi_planes_i8(ctx, lo, hi)
    return KERNEL_OK
cdef int int_planes_u8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    pi_planes_u8(ctx, lo, hi)
    return KERNEL_OK


cdef inline int int_pool2d(const Call* c, part_fn planes) noexcept nogil:
    cdef const Pool* s = <const Pool*>c.ints
    cdef pi_run r = pi_run_of(<const pool_block*>s, c.bufs[0], c.bufs[1], <int64_t>c.floats[0],
                              _int_pool_isa)
    return parallel_for(s.threads, s.planes, planes, &r)


cdef int pool2d_i8(const Call* c) noexcept nogil:
    return int_pool2d(c, int_planes_i8)
cdef int pool2d_u8(const Call* c) noexcept nogil:
    return int_pool2d(c, int_planes_u8)
