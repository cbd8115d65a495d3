# Reductions over any set of axes: sum, prod, mean, var, max, min, argmax, argmin.
#
# Parameter layout (ints): the Reduce struct below, whose field names this module exports as
# REDUCE_FIELDS (the lowering, mgegraph/_kernels/lowering/reduce.py, packs them by name), then
#   kept shape[kept_ndim], kept strides[kept_ndim], ndr, reduced shape[ndr], reduced strides[ndr],
#   threads (what the lowering planned, parallel.threads_for; last, so the CUDA kernels that
#   read this layout from the front are unchanged)
# The input is read as (kept dims..., reduced dims...) through element strides, each group
# collapsed; the output is contiguous over the kept dims. Reduced positions are visited in C
# order, so argmax's index is the flat index within the reduced axes, as NumPy's.
#
# Design: outputs are made in chunks of up to CHUNK. When neighbouring outputs are neighbours in
# the input (kept innermost stride 1), a chunk is reduced "by columns": every reduced position
# updates the chunk's accumulators from one contiguous run, so reducing a leading axis streams
# memory instead of striding through it. Otherwise each output reduces its own block "by rows".
# Float sums accumulate in double, pairwise along rows as NumPy does; integer sums and products
# wrap in uint64 (well defined, and what NumPy's int64 arithmetic gives).
# Threads split the outputs, never a reduced axis: by columns, whole chunks (the chunks one
# thread makes, so each output's arithmetic is the same: a chunk of one reduces by rows); by
# rows, single outputs. Results are bitwise the same at any thread count.

from libc.math cimport NAN
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from .dtypes cimport any_t
from .abi cimport Call, KERNEL_OK, KERNEL_BAD_VALUE, KERNEL_UNSUPPORTED, kernel_fn, kernel_address
from .params cimport fields_of
from .nditer cimport dims_ok, Odometer, odometer_init, odometer_next, odometer_seek, count_rows
from .parallel cimport parallel_for, part_fn

ctypedef fused acc_t:
    double
    uint64_t

cdef enum:
    CHUNK = 1024

cdef enum ReduceOp:
    R_SUM, R_PROD, R_MEAN, R_VAR, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN

REDUCE_OPS = {"sum": R_SUM, "prod": R_PROD, "mean": R_MEAN, "var": R_VAR, "max": R_MAX,
              "min": R_MIN, "argmax": R_ARGMAX, "argmin": R_ARGMIN}

ctypedef struct Reduce:  # then the kept and reduced groups (the layout above)
    Py_ssize_t op, kept_ndim  # op: a ReduceOp

cdef Reduce _reduce
REDUCE_FIELDS = fields_of(_reduce, sizeof(Reduce))


ctypedef struct Layout:
    int ndr
    const Py_ssize_t* rshape
    const Py_ssize_t* rstride
    Py_ssize_t nred          # reduced elements per output
    Py_ssize_t n             # innermost reduced dim: length and stride
    Py_ssize_t s


cdef inline Py_ssize_t product(int ndim, const Py_ssize_t* shape) noexcept nogil:
    cdef Py_ssize_t p = 1
    cdef int d
    for d in range(ndim):
        p *= shape[d]
    return p


cdef inline void parse_reduced(const Py_ssize_t* p, Layout* L) noexcept nogil:
    # p points at ndr
    L.ndr = <int>p[0]
    L.rshape = p + 1
    L.rstride = p + 1 + L.ndr
    L.nred = product(L.ndr, L.rshape)
    L.n = L.rshape[L.ndr - 1]
    L.s = L.rstride[L.ndr - 1]


# -- scalar pieces --------------------------------------------------------------------------------
cdef inline double term(any_t v, double centre, bint squares) noexcept nogil:
    cdef double d
    if squares:
        d = <double>v - centre
        return d * d
    return <double>v


cdef inline double block8(const any_t* x, Py_ssize_t n, Py_ssize_t s, double centre,
                         bint squares) noexcept nogil:
    # 8 <= n <= 128 elements into 8 partial sums; inlined with s == 1 for contiguous rows
    cdef double r[8]
    cdef double total
    cdef Py_ssize_t i = 8, j
    for j in range(8):
        r[j] = term(x[j * s], centre, squares)
    while i + 8 <= n:
        for j in range(8):
            r[j] += term(x[(i + j) * s], centre, squares)
        i += 8
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        total += term(x[i * s], centre, squares)
        i += 1
    return total


cdef double pairwise(const any_t* x, Py_ssize_t n, Py_ssize_t s, double centre,
                     bint squares) noexcept nogil:
    # NumPy's pairwise summation: error grows like log(n) instead of n.
    cdef double total = 0
    cdef Py_ssize_t i, half
    if n < 8:
        for i in range(n):
            total += term(x[i * s], centre, squares)
        return total
    if n <= 128:
        if s == 1:
            return block8(x, n, 1, centre, squares)
        return block8(x, n, s, centre, squares)
    half = n // 2
    half -= half % 8
    return (pairwise(x, half, s, centre, squares)
            + pairwise(x + half * s, n - half, s, centre, squares))


cdef inline acc_t fold_step(acc_t acc, any_t v, bint mul) noexcept nogil:
    # acc_t is uint64_t only for integer inputs: the cast wraps negative values modulo 2**64.
    if mul:
        return acc * <acc_t>v
    return acc + <acc_t>v


cdef inline bint beats(any_t v, any_t best, bint want_max) noexcept nogil:
    # NaN beats every number and nothing beats NaN, so the first NaN wins, as in NumPy.
    if any_t is float or any_t is double:
        if v != v:
            return best == best
    if want_max:
        return v > best
    return v < best


cdef inline any_t pick(any_t v, any_t best, bint want_max) noexcept nogil:
    # branch-free select (maxss/minss); NaN is never picked here and is tracked on the side
    if want_max:
        return v if v > best else best
    return v if v < best else best


cdef inline any_t row_extreme(const any_t* x, Py_ssize_t n, Py_ssize_t s, bint want_max,
                              any_t best) noexcept nogil:
    # Eight independent lanes (vectorisable when inlined with s == 1); NaN is flagged on the
    # side and returned when the row holds one.
    cdef any_t m[8]
    cdef uint8_t nan[8]
    cdef Py_ssize_t i = 0, j
    cdef any_t v
    for j in range(8):
        m[j] = best
        if any_t is float or any_t is double:
            nan[j] = 0
    while i + 8 <= n:
        for j in range(8):
            v = x[(i + j) * s]
            m[j] = pick(v, m[j], want_max)
            if any_t is float or any_t is double:
                nan[j] |= v != v
        i += 8
    while i < n:
        v = x[i * s]
        m[0] = pick(v, m[0], want_max)
        if any_t is float or any_t is double:
            nan[0] |= v != v
        i += 1
    for j in range(1, 8):
        m[0] = pick(m[j], m[0], want_max)
    if any_t is float or any_t is double:
        for j in range(8):
            if nan[j]:
                return <any_t>NAN
    return m[0]


# -- one output at a time ("rows") ----------------------------------------------------------------
cdef double block_sum(const any_t* x, const Layout* L, double centre, bint squares) noexcept nogil:
    cdef Py_ssize_t r, rows = count_rows(L.ndr, L.rshape)
    cdef double acc = 0
    cdef Odometer o
    odometer_init(&o, L.ndr, L.rshape, L.rstride, 1)
    for r in range(rows):
        acc += pairwise(x + o.offset[0], L.n, L.s, centre, squares)
        odometer_next(&o)
    return acc


cdef acc_t block_fold(const any_t* x, const Layout* L, acc_t acc, bint mul) noexcept nogil:
    cdef Py_ssize_t r, i, rows = count_rows(L.ndr, L.rshape)
    cdef const any_t* px
    cdef Odometer o
    odometer_init(&o, L.ndr, L.rshape, L.rstride, 1)
    for r in range(rows):
        px = x + o.offset[0]
        for i in range(L.n):
            acc = fold_step(acc, px[i * L.s], mul)
        odometer_next(&o)
    return acc


cdef any_t block_extreme(const any_t* x, const Layout* L, bint want_max) noexcept nogil:
    # The block is not empty; NaN is sticky from the first row that has one.
    cdef Py_ssize_t r, rows = count_rows(L.ndr, L.rshape)
    cdef any_t b = x[0]
    cdef Odometer o
    odometer_init(&o, L.ndr, L.rshape, L.rstride, 1)
    for r in range(rows):
        if (any_t is float or any_t is double) and b != b:
            break
        if L.s == 1:
            b = row_extreme(x + o.offset[0], L.n, 1, want_max, b)
        else:
            b = row_extreme(x + o.offset[0], L.n, L.s, want_max, b)
        odometer_next(&o)
    return b


cdef int64_t block_find(const any_t* x, const Layout* L, any_t target) noexcept nogil:
    # Flat index of the first element equal to target (or the first NaN when target is NaN):
    # with target the block's extreme, that is NumPy's argmax/argmin.
    cdef Py_ssize_t r, i, j = 0, rows = count_rows(L.ndr, L.rshape)
    cdef const any_t* px
    cdef Odometer o
    odometer_init(&o, L.ndr, L.rshape, L.rstride, 1)
    for r in range(rows):
        px = x + o.offset[0]
        for i in range(L.n):
            if px[i * L.s] == target:
                return j + i
            if any_t is float or any_t is double:
                if target != target and px[i * L.s] != px[i * L.s]:
                    return j + i
        j += L.n
        odometer_next(&o)
    return 0


# -- cnt neighbouring outputs at once ("columns") -------------------------------------------------
cdef void cols_sum(const any_t* x, const Layout* L, Py_ssize_t cnt, double* acc,
                   const double* centre) noexcept nogil:
    cdef Py_ssize_t r, i, b, rows = count_rows(L.ndr, L.rshape)
    cdef const any_t* px
    cdef double d
    cdef Odometer o
    for b in range(cnt):
        acc[b] = 0
    odometer_init(&o, L.ndr, L.rshape, L.rstride, 1)
    for r in range(rows):
        for i in range(L.n):
            px = x + o.offset[0] + i * L.s
            if centre == NULL:
                for b in range(cnt):
                    acc[b] += <double>px[b]
            else:
                for b in range(cnt):
                    d = <double>px[b] - centre[b]
                    acc[b] += d * d
        odometer_next(&o)


cdef void cols_fold(const any_t* x, const Layout* L, Py_ssize_t cnt, acc_t* acc,
                    bint mul) noexcept nogil:
    cdef Py_ssize_t r, i, b, rows = count_rows(L.ndr, L.rshape)
    cdef const any_t* px
    cdef Odometer o
    for b in range(cnt):
        acc[b] = 1 if mul else 0
    odometer_init(&o, L.ndr, L.rshape, L.rstride, 1)
    for r in range(rows):
        for i in range(L.n):
            px = x + o.offset[0] + i * L.s
            for b in range(cnt):
                acc[b] = fold_step(acc[b], px[b], mul)
        odometer_next(&o)


cdef void cols_extreme(const any_t* x, const Layout* L, Py_ssize_t cnt, bint want_max,
                       any_t* best) noexcept nogil:
    # branch-free over the chunk, NaNs flagged on the side
    cdef Py_ssize_t r, i, b, rows = count_rows(L.ndr, L.rshape)
    cdef uint8_t nan[CHUNK]
    cdef const any_t* px
    cdef Odometer o
    for b in range(cnt):
        best[b] = x[b]
        if any_t is float or any_t is double:
            nan[b] = 0
    odometer_init(&o, L.ndr, L.rshape, L.rstride, 1)
    for r in range(rows):
        for i in range(L.n):
            px = x + o.offset[0] + i * L.s
            for b in range(cnt):
                best[b] = pick(px[b], best[b], want_max)
                if any_t is float or any_t is double:
                    nan[b] |= px[b] != px[b]
        odometer_next(&o)
    if any_t is float or any_t is double:
        for b in range(cnt):
            if nan[b]:
                best[b] = <any_t>NAN


cdef void cols_arg(const any_t* x, const Layout* L, Py_ssize_t cnt, bint want_max,
                   any_t* best, int64_t* idx) noexcept nogil:
    cdef Py_ssize_t r, i, b, j = 0, rows = count_rows(L.ndr, L.rshape)
    cdef const any_t* px
    cdef Odometer o
    for b in range(cnt):
        best[b] = x[b]
        idx[b] = 0
    odometer_init(&o, L.ndr, L.rshape, L.rstride, 1)
    for r in range(rows):
        for i in range(L.n):
            px = x + o.offset[0] + i * L.s
            for b in range(cnt):
                if beats(px[b], best[b], want_max):
                    best[b] = px[b]
                    idx[b] = j
            j += 1
        odometer_next(&o)


# -- a chunk of outputs: pick rows or columns, then store in the output dtype ---------------------
cdef void chunk_moments(int op, const any_t* x, Py_ssize_t so, Py_ssize_t cnt, const Layout* L,
                        char* y) noexcept nogil:
    # sum of floats, mean, var: double accumulators; var is two-pass (mean, then deviations).
    cdef double acc[CHUNK]
    cdef double centre[CHUNK]
    cdef Py_ssize_t b
    cdef double n = <double>L.nred
    cdef bint columns = so == 1 and cnt > 1
    if columns:
        cols_sum(x, L, cnt, acc, NULL)
    else:
        for b in range(cnt):
            acc[b] = block_sum(x + b * so, L, 0, False)
    if op != R_SUM:
        for b in range(cnt):
            acc[b] = acc[b] / n  # 0 / 0 is NaN for an empty reduction, as NumPy's mean
    if op == R_VAR:
        for b in range(cnt):
            centre[b] = acc[b]
        if columns:
            cols_sum(x, L, cnt, acc, centre)
        else:
            for b in range(cnt):
                acc[b] = block_sum(x + b * so, L, centre[b], True)
        for b in range(cnt):
            acc[b] = acc[b] / n
    for b in range(cnt):
        if any_t is float:
            (<float*>y)[b] = <float>acc[b]
        else:
            (<double*>y)[b] = acc[b]  # float64 inputs, and mean/var of integers


cdef void chunk_fold(int op, const any_t* x, Py_ssize_t so, Py_ssize_t cnt, const Layout* L,
                     char* y, acc_t* acc) noexcept nogil:
    # products, and sums of integers (acc_t is uint64_t; results are int64 as NumPy's)
    cdef Py_ssize_t b
    cdef bint mul = op == R_PROD
    if so == 1 and cnt > 1:
        cols_fold(x, L, cnt, acc, mul)
    else:
        for b in range(cnt):
            acc[b] = block_fold(x + b * so, L, <acc_t>(1 if mul else 0), mul)
    for b in range(cnt):
        if any_t is float:
            (<float*>y)[b] = <float>acc[b]
        elif acc_t is double:
            (<double*>y)[b] = acc[b]
        else:
            (<int64_t*>y)[b] = <int64_t>acc[b]


cdef void chunk_extreme(bint want_max, bint want_index, const any_t* x, Py_ssize_t so,
                        Py_ssize_t cnt, const Layout* L, char* y) noexcept nogil:
    cdef any_t best[CHUNK]
    cdef int64_t idx[CHUNK]
    cdef Py_ssize_t b
    if so == 1 and cnt > 1 and want_index:
        cols_arg(x, L, cnt, want_max, best, idx)
    elif so == 1 and cnt > 1:
        cols_extreme(x, L, cnt, want_max, best)
    else:
        for b in range(cnt):
            best[b] = block_extreme(x + b * so, L, want_max)
            if want_index:
                idx[b] = block_find(x + b * so, L, best[b])
    for b in range(cnt):
        if want_index:
            (<int64_t*>y)[b] = idx[b]
        else:
            (<any_t*>y)[b] = best[b]


cdef void reduce_chunk(int op, const any_t* x, Py_ssize_t so, Py_ssize_t cnt, const Layout* L,
                       char* y) noexcept nogil:
    cdef uint64_t scratch[CHUNK]  # one 8-byte accumulator per output: double or uint64
    if op >= R_MAX:
        chunk_extreme(op == R_MAX or op == R_ARGMAX, op >= R_ARGMAX, x, so, cnt, L, y)
    elif op == R_PROD and (any_t is float or any_t is double):
        chunk_fold(op, x, so, cnt, L, y, <double*>scratch)
    elif op == R_PROD or (op == R_SUM and not (any_t is float or any_t is double)):
        chunk_fold(op, x, so, cnt, L, y, scratch)
    else:
        chunk_moments(op, x, so, cnt, L, y)


cdef inline Py_ssize_t out_itemsize(int op, any_t zero) noexcept nogil:
    # Mirrors mgegraph.ops.reduce.result_dtype: max/min keep the dtype, arg* give int64, the
    # rest keep float32 and give 8-byte int64/float64 otherwise.
    if op == R_MAX or op == R_MIN:
        return sizeof(any_t)
    if op < R_ARGMAX and any_t is float:
        return 4
    return 8


# -- driver ---------------------------------------------------------------------------------------
ctypedef struct ReduceRun:
    # one reduction, for the parts parallel_for runs; a unit is `per` outputs of a kept row (one
    # chunk by columns, one output by rows), `nper` units to a row of `last` outputs
    int op, ndo
    const Py_ssize_t* oshape
    const Py_ssize_t* ostride
    Py_ssize_t last, so, item, per, nper
    Layout L
    const void* x
    char* y


cdef inline Py_ssize_t first_output(const ReduceRun* r, Py_ssize_t unit) noexcept nogil:
    # the flat index of the first output of unit `unit` (the row's end for its last unit + 1)
    cdef Py_ssize_t at = (unit % r.nper) * r.per
    return (unit // r.nper) * r.last + (at if at < r.last else r.last)


cdef inline int outputs_part(const ReduceRun* r, Py_ssize_t lo, Py_ssize_t hi,
                             any_t* tag) noexcept nogil:
    # units [lo, hi) of r (tag, always NULL, picks the dtype): their outputs in chunks of up to
    # CHUNK, cut where one thread cuts them (unit boundaries are on that grid)
    cdef Py_ssize_t first = first_output(r, lo), end = first_output(r, hi)
    cdef Py_ssize_t row = first // r.last, start = first - row * r.last, cnt
    cdef char* y = r.y + first * r.item
    cdef Odometer o
    odometer_init(&o, r.ndo, r.oshape, r.ostride, 1)
    odometer_seek(&o, row)
    while first < end:
        cnt = min(min(r.last - start, <Py_ssize_t>CHUNK), end - first)
        reduce_chunk(r.op, <const any_t*>r.x + o.offset[0] + start * r.so, r.so, cnt, &r.L, y)
        y += cnt * r.item
        first += cnt
        start += cnt
        if start == r.last:
            start = 0
            odometer_next(&o)
    return KERNEL_OK


cdef int part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return outputs_part(<const ReduceRun*>c, lo, hi, <float*>NULL)
cdef int part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return outputs_part(<const ReduceRun*>c, lo, hi, <double*>NULL)
cdef int part_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return outputs_part(<const ReduceRun*>c, lo, hi, <int32_t*>NULL)
cdef int part_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return outputs_part(<const ReduceRun*>c, lo, hi, <int64_t*>NULL)
cdef int part_bool(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return outputs_part(<const ReduceRun*>c, lo, hi, <uint8_t*>NULL)


cdef int reduce_impl(const any_t* x, char* y, const Call* c, part_fn part) noexcept nogil:
    cdef const Reduce* s = <const Reduce*>c.ints
    if not dims_ok(s.kept_ndim, 1) or not dims_ok((<const Py_ssize_t*>(s + 1))[2 * s.kept_ndim], 1):
        return KERNEL_UNSUPPORTED  # the kept and the reduced groups each fit an Odometer
    cdef ReduceRun r
    r.op, r.ndo, r.x, r.y = <int>s.op, <int>s.kept_ndim, x, y
    r.oshape = <const Py_ssize_t*>(s + 1)
    r.ostride = r.oshape + r.ndo
    r.last, r.so = r.oshape[r.ndo - 1], r.ostride[r.ndo - 1]
    r.item = out_itemsize(r.op, <any_t>0)
    if r.op < R_SUM or r.op > R_ARGMIN:
        return KERNEL_UNSUPPORTED
    parse_reduced(r.oshape + 2 * r.ndo, &r.L)
    if product(r.ndo, r.oshape) == 0:
        return KERNEL_OK
    if r.L.nred == 0 and r.op >= R_MAX:
        return KERNEL_BAD_VALUE  # refused at build time; kept so a bad plan cannot read past
    r.per = CHUNK if r.so == 1 else 1
    r.nper = (r.last + r.per - 1) // r.per
    cdef Py_ssize_t threads = r.L.rstride[r.L.ndr]  # the field after the reduced strides
    return parallel_for(threads, count_rows(r.ndo, r.oshape) * r.nper, part, &r)


# -- entry points ---------------------------------------------------------------------------------
cdef int reduce_f32(const Call* c) noexcept nogil:
    return reduce_impl(<const float*>c.bufs[0], c.bufs[1], c, part_f32)
cdef int reduce_f64(const Call* c) noexcept nogil:
    return reduce_impl(<const double*>c.bufs[0], c.bufs[1], c, part_f64)
cdef int reduce_i32(const Call* c) noexcept nogil:
    return reduce_impl(<const int32_t*>c.bufs[0], c.bufs[1], c, part_i32)
cdef int reduce_i64(const Call* c) noexcept nogil:
    return reduce_impl(<const int64_t*>c.bufs[0], c.bufs[1], c, part_i64)
cdef int reduce_bool(const Call* c) noexcept nogil:
    return reduce_impl(<const uint8_t*>c.bufs[0], c.bufs[1], c, part_bool)

KERNELS = {
    "reduce_f32": kernel_address(reduce_f32), "reduce_f64": kernel_address(reduce_f64),
    "reduce_i32": kernel_address(reduce_i32), "reduce_i64": kernel_address(reduce_i64),
    "reduce_bool": kernel_address(reduce_bool),
    # uint8 is read as bool is (uint8_t): sums in uint64, max/min/argmax by value
    "reduce_u8": kernel_address(reduce_bool),
}
