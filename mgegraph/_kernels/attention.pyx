# Scaled dot-product attention (mgegraph/ops/attention.py): the forward, out = softmax(q k^T
# scale + mask) v with lse = the rows' log-sum-exp, and the backward, dq, dk, dv.
#
# Parameter layout: the ints are the Attention struct below, whose field names this module
# exports (ATTENTION_FIELDS) for the lowering, mgegraph/_kernels/lowering/attention.py, to pack
# by name (shared block: mgegraph/kernel_abi/attention.py); the floats are [scale]. Buffers:
# forward q, k, v[, mask], then out, lse, then the workspace; backward q, k, v[, mask], out,
# lse, dout, then dq, dk, dv, then the workspace.
#
# Design: FlashAttention on the CPU. A unit of work is a tile of bq query rows of one (batch,
# head); the keys are walked in blocks of bk, each block's scores s = q k^T one BLAS GEMM into
# the thread's (bq, bk) scratch, masked, turned into probabilities against the row's running
# maximum (rescaling what the row has summed so far when the maximum grows: the online
# softmax), and added into the output rows by a second GEMM. So the workspace is threads x (bq
# x bk + 2 bq) elements whatever the length, and the plan's arena grows linearly with it.
# Under a causal mask a tile stops at its last row's key. The backward is FlashAttention-2's,
# recomputing each tile's probabilities as exp(s - lse), with D = rowsum(dout * out) kept in
# the workspace, and parallel over outputs no two threads share (no atomics). Where there are
# as many (batch, kv head) groups as threads, one pass per group: five GEMMs a tile, dq summed
# over the key tiles (at L = 1024, batch 4, 8 heads, one thread of a shared 2-core Xeon, the
# forward and backward took 1.14 s against 1.81 s in two passes; PyTorch 0.83 s). Else two
# passes, over query tiles for dq, then over key tiles for dk and dv (seven GEMMs a tile);
# both sum in the same order, so the bits are the same at any thread count. The BLAS runs
# single-threaded under each of our threads (blas_one_thread, as conv.pyx's GEMMs).
# A row with no key attended keeps its maximum at -inf: its output is 0, its lse -inf, and it
# adds nothing to any gradient.

from libc.math cimport log, INFINITY
from libc.string cimport memset
from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_address
from .blas cimport gemm, gemm_scaled
from .blas_table cimport blas_one_thread, blas_restore_threads
from .params cimport fields_of
from .parallel cimport parallel_for, team
from .scalar cimport vexp, vexpf

ctypedef struct Attention:
    Py_ssize_t batch, hq, hkv, lq, lk, e, ev   # q (batch, hq, lq, e), k/v (batch, hkv, lk, *)
    Py_ssize_t causal                          # key j > query i masked (top-left)
    Py_ssize_t mask                            # MASK_NONE, MASK_BOOL or MASK_ADD
    Py_ssize_t mask_b, mask_h, mask_i, mask_j  # the mask's element strides (0: broadcast)
    Py_ssize_t bq, bk                          # the tile: query rows x keys
    Py_ssize_t threads

cdef Attention _at
ATTENTION_FIELDS = fields_of(_at, sizeof(Attention))

cdef enum:
    LANES = 8      # the independent lanes of a row's max and sum: one AVX2 vector of float32

cdef enum:
    MASK_NONE = 0
    MASK_BOOL = 1
    MASK_ADD = 2
ATTENTION_MASKS = {"none": MASK_NONE, "bool": MASK_BOOL, "add": MASK_ADD}


ctypedef struct Tile:        # one (batch, head) and the rows or keys a part works on
    Py_ssize_t b, h, hk, first, count


cdef inline Tile tile_of(const Attention* s, Py_ssize_t unit, Py_ssize_t heads,
                         Py_ssize_t length, Py_ssize_t size) noexcept nogil:
    # unit -> (batch, head of `heads`, tile of `size` along `length`)
    cdef Py_ssize_t tiles = (length + size - 1) // size
    cdef Tile t
    t.b = unit // (heads * tiles)
    t.h = unit // tiles % heads
    t.first = unit % tiles * size
    t.count = min(size, length - t.first)
    t.hk = t.h
    return t


cdef inline void scores(const Attention* s, const Call* c, const floating* q,
                        const floating* k, floating* sc, Py_ssize_t b, Py_ssize_t h,
                        Py_ssize_t i0, Py_ssize_t nq, Py_ssize_t j0,
                        Py_ssize_t nk) noexcept nogil:
    # sc (nq, nk) = q k^T scale for query rows i0.. and keys j0.. (q and k point at them), the
    # masks applied: -inf where not attended. The causal mask costs only the diagonal tiles.
    cdef const unsigned char* mb
    cdef const floating* ma
    cdef Py_ssize_t i, j
    cdef floating* row
    gemm_scaled(False, True, nq, nk, s.e, <floating>c.floats[0], q, s.e, k, s.e, 0, sc, nk)
    if s.mask == MASK_BOOL:
        for i in range(nq):
            row = sc + i * nk
            mb = <const unsigned char*>c.bufs[3] + b * s.mask_b + h * s.mask_h \
                + (i0 + i) * s.mask_i + j0 * s.mask_j
            for j in range(nk):
                row[j] = row[j] if mb[j * s.mask_j] else -INFINITY
    elif s.mask == MASK_ADD:
        for i in range(nq):
            row = sc + i * nk
            ma = <const floating*>c.bufs[3] + b * s.mask_b + h * s.mask_h \
                + (i0 + i) * s.mask_i + j0 * s.mask_j
            for j in range(nk):
                row[j] += ma[j * s.mask_j]
    if s.causal and j0 + nk - 1 > i0:
        for i in range(nq):
            for j in range(max(0, i0 + i - j0 + 1), nk):
                sc[i * nk + j] = -INFINITY


cdef inline floating row_max(const floating* x, Py_ssize_t n, floating start) noexcept nogil:
    # max(start, x[0..n)) in LANES independent lanes, which GCC vectorises (NaN is skipped here
    # and propagates through exp)
    cdef floating lanes[LANES]
    cdef Py_ssize_t j = 0, l
    for l in range(LANES):
        lanes[l] = start
    while j + LANES <= n:
        for l in range(LANES):
            lanes[l] = x[j + l] if x[j + l] > lanes[l] else lanes[l]
        j += LANES
    for l in range(LANES):
        start = lanes[l] if lanes[l] > start else start
    while j < n:
        start = x[j] if x[j] > start else start
        j += 1
    return start


cdef inline floating row_sum(const floating* x, Py_ssize_t n) noexcept nogil:
    # the sum in LANES lanes, the lanes then added in order: the same bits at any thread count
    cdef floating lanes[LANES]
    cdef floating total = 0
    cdef Py_ssize_t j = 0, l
    for l in range(LANES):
        lanes[l] = 0
    while j + LANES <= n:
        for l in range(LANES):
            lanes[l] += x[j + l]
        j += LANES
    for l in range(LANES):
        total += lanes[l]
    while j < n:
        total += x[j]
        j += 1
    return total


cdef inline floating fexp(floating x) noexcept nogil:
    # scalar.pxd's exp without libm calls, so that GCC vectorises the loops over a tile's rows
    if floating is float:
        return vexpf(x)
    return vexp(x)


cdef inline Py_ssize_t keys_seen(const Attention* s, Py_ssize_t last_row) noexcept nogil:
    # the keys a query tile ending at row last_row can attend: all, or 0..last_row when causal
    return min(s.lk, last_row + 1) if s.causal else s.lk


# -- forward ---------------------------------------------------------------------------------
cdef inline void online_softmax(floating* sc, Py_ssize_t nq, Py_ssize_t nk, floating* m,
                                floating* l, floating* o, Py_ssize_t ev) noexcept nogil:
    # scores -> probabilities against each row's running max m; the row's sum l and output
    # o rescaled when the max grows; a row still without an attended key stays all zero
    cdef Py_ssize_t i, j
    cdef floating mx, alpha
    cdef floating* row
    for i in range(nq):
        row = sc + i * nk
        mx = row_max(row, nk, m[i])
        if mx == -INFINITY:
            memset(row, 0, nk * sizeof(floating))
            continue
        alpha = fexp(m[i] - mx)
        for j in range(nk):
            row[j] = fexp(row[j] - mx)
        l[i] = l[i] * alpha + row_sum(row, nk)
        m[i] = mx
        if alpha != 1:
            for j in range(ev):
                o[i * ev + j] *= alpha


cdef inline int forward_tiles(const Call* c, int part, Py_ssize_t lo, Py_ssize_t hi,
                              floating* tag) noexcept nogil:
    cdef const Attention* s = <const Attention*>c.ints
    cdef Py_ssize_t nb = inputs(s)
    cdef const floating* q = <const floating*>c.bufs[0]
    cdef const floating* k = <const floating*>c.bufs[1]
    cdef const floating* v = <const floating*>c.bufs[2]
    cdef floating* out = <floating*>c.bufs[nb]
    cdef floating* lse = <floating*>c.bufs[nb + 1]
    cdef floating* sc = <floating*>c.bufs[nb + 2] + part * (s.bq * s.bk + 2 * s.bq)
    cdef floating* m = sc + s.bq * s.bk
    cdef floating* l = m + s.bq
    cdef Py_ssize_t unit, i, j, j0, nk, kend, row0
    cdef const floating* kp
    cdef const floating* vp
    cdef floating* o
    cdef Tile t
    for unit in range(lo, hi):
        t = tile_of(s, unit, s.hq, s.lq, s.bq)
        t.hk = t.h // (s.hq // s.hkv)
        row0 = (t.b * s.hq + t.h) * s.lq + t.first
        kp = k + (t.b * s.hkv + t.hk) * s.lk * s.e
        vp = v + (t.b * s.hkv + t.hk) * s.lk * s.ev
        o = out + row0 * s.ev
        memset(o, 0, t.count * s.ev * sizeof(floating))
        for i in range(t.count):
            m[i], l[i] = -INFINITY, 0
        kend = keys_seen(s, t.first + t.count - 1)
        j0 = 0
        while j0 < kend:
            nk = min(s.bk, kend - j0)
            scores(s, c, q + row0 * s.e, kp + j0 * s.e, sc, t.b, t.h, t.first, t.count, j0, nk)
            online_softmax(sc, t.count, nk, m, l, o, s.ev)
            gemm(False, False, t.count, s.ev, nk, sc, vp + j0 * s.ev, o, True)
            j0 += nk
        for i in range(t.count):
            if l[i] == 0:
                lse[row0 + i] = -INFINITY
                continue
            lse[row0 + i] = m[i] + log(l[i])
            for j in range(s.ev):
                o[i * s.ev + j] /= l[i]
    return KERNEL_OK


# -- backward --------------------------------------------------------------------------------
cdef inline void probabilities(floating* sc, Py_ssize_t nq, Py_ssize_t nk,
                               const floating* lse) noexcept nogil:
    # masked scores -> p = exp(s - lse); a row with no key attended (lse -inf) all zero
    cdef Py_ssize_t i, j
    for i in range(nq):
        if lse[i] == -INFINITY:
            memset(sc + i * nk, 0, nk * sizeof(floating))
            continue
        for j in range(nk):
            sc[i * nk + j] = fexp(sc[i * nk + j] - lse[i])


cdef inline void score_gradient(floating* p, const floating* dp, Py_ssize_t nq, Py_ssize_t nk,
                                const floating* d) noexcept nogil:
    # p becomes ds = p (dp - D), the gradient of the scores (before the scale)
    cdef Py_ssize_t i, j
    for i in range(nq):
        for j in range(nk):
            p[i * nk + j] *= dp[i * nk + j] - d[i]


cdef inline floating* buffer(const Call* c, Py_ssize_t i, floating* tag) noexcept nogil:
    return <floating*>c.bufs[i]


cdef inline Py_ssize_t inputs(const Attention* s) noexcept nogil:
    # q, k, v and the mask when there is one
    return 3 if s.mask == MASK_NONE else 4


cdef inline int query_tiles(const Call* c, int part, Py_ssize_t lo, Py_ssize_t hi,
                            floating* tag) noexcept nogil:
    # dq of query tiles [lo, hi), and their rows' D
    cdef const Attention* s = <const Attention*>c.ints
    cdef Py_ssize_t nb = inputs(s)
    cdef const floating* q = buffer(c, 0, tag)
    cdef const floating* k = buffer(c, 1, tag)
    cdef const floating* v = buffer(c, 2, tag)
    cdef const floating* lse = buffer(c, nb + 1, tag)
    cdef const floating* dout = buffer(c, nb + 2, tag)
    cdef const floating* out = buffer(c, nb, tag)
    cdef floating* dq = buffer(c, nb + 3, tag)
    cdef floating* d = buffer(c, nb + 6, tag)      # D = rowsum(dout * out) per query row
    cdef floating* p = d + s.batch * s.hq * s.lq + part * 2 * s.bq * s.bk
    cdef floating* dp = p + s.bq * s.bk
    cdef floating scale = <floating>c.floats[0]
    cdef Py_ssize_t unit, i, j, j0, nk, kend, row0, kv
    cdef floating total
    cdef Tile t
    for unit in range(lo, hi):
        t = tile_of(s, unit, s.hq, s.lq, s.bq)
        kv = t.b * s.hkv + t.h // (s.hq // s.hkv)
        row0 = (t.b * s.hq + t.h) * s.lq + t.first
        for i in range(t.count):
            total = 0
            for j in range(s.ev):
                total += dout[(row0 + i) * s.ev + j] * out[(row0 + i) * s.ev + j]
            d[row0 + i] = total
        memset(dq + row0 * s.e, 0, t.count * s.e * sizeof(floating))
        kend = keys_seen(s, t.first + t.count - 1)
        j0 = 0
        while j0 < kend:
            nk = min(s.bk, kend - j0)
            scores(s, c, q + row0 * s.e, k + (kv * s.lk + j0) * s.e, p, t.b, t.h, t.first,
                   t.count, j0, nk)
            probabilities(p, t.count, nk, lse + row0)
            gemm(False, True, t.count, nk, s.ev, dout + row0 * s.ev,
                 v + (kv * s.lk + j0) * s.ev, dp, False)
            score_gradient(p, dp, t.count, nk, d + row0)
            gemm(False, False, t.count, s.e, nk, p, k + (kv * s.lk + j0) * s.e,
                 dq + row0 * s.e, True)
            j0 += nk
        for i in range(t.count * s.e):
            dq[row0 * s.e + i] *= scale
    return KERNEL_OK


cdef inline int key_tiles(const Call* c, int part, Py_ssize_t lo, Py_ssize_t hi,
                          floating* tag) noexcept nogil:
    # dk and dv of key tiles [lo, hi): every query head of the key's group, in order
    cdef const Attention* s = <const Attention*>c.ints
    cdef Py_ssize_t nb = inputs(s)
    cdef const floating* q = buffer(c, 0, tag)
    cdef const floating* k = buffer(c, 1, tag)
    cdef const floating* v = buffer(c, 2, tag)
    cdef const floating* lse = buffer(c, nb + 1, tag)
    cdef const floating* dout = buffer(c, nb + 2, tag)
    cdef floating* dk = buffer(c, nb + 4, tag)
    cdef floating* dv = buffer(c, nb + 5, tag)
    cdef floating* d = buffer(c, nb + 6, tag)      # the rows' D, from query_tiles
    cdef floating* p = d + s.batch * s.hq * s.lq + part * 2 * s.bq * s.bk
    cdef floating* dp = p + s.bq * s.bk
    cdef floating scale = <floating>c.floats[0]
    cdef Py_ssize_t group = s.hq // s.hkv
    cdef Py_ssize_t unit, i, h, i0, nq, key0, row0
    cdef Tile t
    for unit in range(lo, hi):
        t = tile_of(s, unit, s.hkv, s.lk, s.bk)
        key0 = (t.b * s.hkv + t.h) * s.lk + t.first
        memset(dk + key0 * s.e, 0, t.count * s.e * sizeof(floating))
        memset(dv + key0 * s.ev, 0, t.count * s.ev * sizeof(floating))
        for h in range(t.h * group, (t.h + 1) * group):
            i0 = 0
            while i0 < s.lq:
                nq = min(s.bq, s.lq - i0)
                if s.causal and i0 + nq - 1 < t.first:  # these rows see none of the tile's keys
                    i0 += nq
                    continue
                row0 = (t.b * s.hq + h) * s.lq + i0
                scores(s, c, q + row0 * s.e, k + key0 * s.e, p, t.b, h, i0, nq, t.first,
                       t.count)
                probabilities(p, nq, t.count, lse + row0)
                gemm(True, False, t.count, s.ev, nq, p, dout + row0 * s.ev,
                     dv + key0 * s.ev, True)
                gemm(False, True, nq, t.count, s.ev, dout + row0 * s.ev, v + key0 * s.ev,
                     dp, False)
                score_gradient(p, dp, nq, t.count, d + row0)
                gemm(True, False, t.count, s.e, nq, p, q + row0 * s.e, dk + key0 * s.e,
                     True)
                i0 += nq
        for i in range(t.count * s.e):
            dk[key0 * s.e + i] *= scale
    return KERNEL_OK


cdef inline int head_groups(const Call* c, int part, Py_ssize_t lo, Py_ssize_t hi,
                            floating* tag) noexcept nogil:
    # the whole backward of (batch, kv head) units [lo, hi) in one pass: FlashAttention-2's five
    # GEMMs per tile, dq summed over the key tiles as query_tiles sums it (no other unit
    # writes these rows), dk and dv over the group's heads and query tiles as key_tiles does,
    # so the bits are the two passes'
    cdef const Attention* s = <const Attention*>c.ints
    cdef Py_ssize_t nb = inputs(s)
    cdef const floating* q = buffer(c, 0, tag)
    cdef const floating* k = buffer(c, 1, tag)
    cdef const floating* v = buffer(c, 2, tag)
    cdef const floating* out = buffer(c, nb, tag)
    cdef const floating* lse = buffer(c, nb + 1, tag)
    cdef const floating* dout = buffer(c, nb + 2, tag)
    cdef floating* dq = buffer(c, nb + 3, tag)
    cdef floating* dk = buffer(c, nb + 4, tag)
    cdef floating* dv = buffer(c, nb + 5, tag)
    cdef floating* d = buffer(c, nb + 6, tag)
    cdef floating* p = d + s.batch * s.hq * s.lq + part * 2 * s.bq * s.bk
    cdef floating* dp = p + s.bq * s.bk
    cdef floating scale = <floating>c.floats[0]
    cdef Py_ssize_t group = s.hq // s.hkv
    cdef Py_ssize_t unit, b, hk, h, i, j, j0, nk, i0, nq, row0, key0, rows
    cdef floating total
    for unit in range(lo, hi):
        b, hk = unit // s.hkv, unit % s.hkv
        row0 = (b * s.hq + hk * group) * s.lq     # the group's query rows are contiguous
        rows = group * s.lq
        for i in range(row0, row0 + rows):
            total = 0
            for j in range(s.ev):
                total += dout[i * s.ev + j] * out[i * s.ev + j]
            d[i] = total
        memset(dq + row0 * s.e, 0, rows * s.e * sizeof(floating))
        key0 = (b * s.hkv + hk) * s.lk
        memset(dk + key0 * s.e, 0, s.lk * s.e * sizeof(floating))
        memset(dv + key0 * s.ev, 0, s.lk * s.ev * sizeof(floating))
        j0 = 0
        while j0 < s.lk:
            nk = min(s.bk, s.lk - j0)
            for h in range(hk * group, (hk + 1) * group):
                i0 = 0
                while i0 < s.lq:
                    nq = min(s.bq, s.lq - i0)
                    if s.causal and i0 + nq - 1 < j0:   # the tile's rows see none of the keys
                        i0 += nq
                        continue
                    one_tile(s, c, q, k, v, lse, dout, dq, dk, dv, d, p, dp, b, h, i0, nq,
                             key0 + j0, j0, nk)
                    i0 += nq
            j0 += nk
        for i in range(rows * s.e):
            dq[row0 * s.e + i] *= scale
        for i in range(s.lk * s.e):
            dk[key0 * s.e + i] *= scale
    return KERNEL_OK


cdef inline void one_tile(const Attention* s, const Call* c, const floating* q,
                          const floating* k, const floating* v, const floating* lse,
                          const floating* dout, floating* dq, floating* dk, floating* dv,
                          const floating* d, floating* p, floating* dp, Py_ssize_t b,
                          Py_ssize_t h, Py_ssize_t i0, Py_ssize_t nq, Py_ssize_t key,
                          Py_ssize_t j0, Py_ssize_t nk) noexcept nogil:
    # query rows i0.. of head h against keys j0.. (key: their row in k): dv, dk and dq summed
    cdef Py_ssize_t row = (b * s.hq + h) * s.lq + i0
    scores(s, c, q + row * s.e, k + key * s.e, p, b, h, i0, nq, j0, nk)
    probabilities(p, nq, nk, lse + row)
    gemm(True, False, nk, s.ev, nq, p, dout + row * s.ev, dv + key * s.ev, True)
    gemm(False, True, nq, nk, s.ev, dout + row * s.ev, v + key * s.ev, dp, False)
    score_gradient(p, dp, nq, nk, d + row)
    gemm(True, False, nk, s.e, nq, p, q + row * s.e, dk + key * s.e, True)
    gemm(False, False, nq, s.e, nk, p, k + key * s.e, dq + row * s.e, True)


# -- entry points ----------------------------------------------------------------------------
cdef enum:
    FORWARD = 0
    QUERIES = 1
    KEYS = 2
    HEADS = 3


cdef inline int in_part(int kind, const Call* c, int part, Py_ssize_t lo, Py_ssize_t hi,
                        floating* tag) noexcept nogil:
    # every thread of the region calls the BLAS single-threaded (blas_table.pxd)
    cdef int previous = blas_one_thread(), status
    if kind == FORWARD:
        status = forward_tiles(c, part, lo, hi, tag)
    elif kind == QUERIES:
        status = query_tiles(c, part, lo, hi, tag)
    elif kind == HEADS:
        status = head_groups(c, part, lo, hi, tag)
    else:
        status = key_tiles(c, part, lo, hi, tag)
    blas_restore_threads(previous)
    return status


cdef inline Py_ssize_t tiles(Py_ssize_t length, Py_ssize_t size) noexcept nogil:
    return (length + size - 1) // size


cdef int fwd_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return in_part(FORWARD, <const Call*>c, part, lo, hi, <float*>NULL)
cdef int fwd_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return in_part(FORWARD, <const Call*>c, part, lo, hi, <double*>NULL)
cdef int dq_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return in_part(QUERIES, <const Call*>c, part, lo, hi, <float*>NULL)
cdef int dq_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return in_part(QUERIES, <const Call*>c, part, lo, hi, <double*>NULL)
cdef int dkv_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return in_part(KEYS, <const Call*>c, part, lo, hi, <float*>NULL)
cdef int dkv_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return in_part(KEYS, <const Call*>c, part, lo, hi, <double*>NULL)
cdef int heads_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return in_part(HEADS, <const Call*>c, part, lo, hi, <float*>NULL)
cdef int heads_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return in_part(HEADS, <const Call*>c, part, lo, hi, <double*>NULL)


cdef inline int forward_call(const Call* c, bint f32) noexcept nogil:
    cdef const Attention* s = <const Attention*>c.ints
    cdef int previous = blas_one_thread(), status
    status = parallel_for(s.threads, s.batch * s.hq * tiles(s.lq, s.bq),
                          fwd_f32 if f32 else fwd_f64, <void*>c)
    blas_restore_threads(previous)
    return status


cdef inline int backward_call(const Call* c, bint f32) noexcept nogil:
    cdef const Attention* s = <const Attention*>c.ints
    cdef int previous = blas_one_thread(), status
    if s.batch * s.hkv >= team(s.threads, s.batch * s.hkv * tiles(s.lk, s.bk)):
        # a (batch, kv head) per thread at least: one pass, five GEMMs a tile
        status = parallel_for(s.threads, s.batch * s.hkv, heads_f32 if f32 else heads_f64,
                              <void*>c)
        blas_restore_threads(previous)
        return status
    status = parallel_for(s.threads, s.batch * s.hq * tiles(s.lq, s.bq),
                          dq_f32 if f32 else dq_f64, <void*>c)
    if status == KERNEL_OK:  # the key tiles read every row's D
        status = parallel_for(s.threads, s.batch * s.hkv * tiles(s.lk, s.bk),
                              dkv_f32 if f32 else dkv_f64, <void*>c)
    blas_restore_threads(previous)
    return status


cdef int attention_f32(const Call* c) noexcept nogil:
    return forward_call(c, True)
cdef int attention_f64(const Call* c) noexcept nogil:
    return forward_call(c, False)
cdef int attention_backward_f32(const Call* c) noexcept nogil:
    return backward_call(c, True)
cdef int attention_backward_f64(const Call* c) noexcept nogil:
    return backward_call(c, False)

KERNELS = {
    "attention_f32": kernel_address(attention_f32),
    "attention_f64": kernel_address(attention_f64),
    "attention_backward_f32": kernel_address(attention_backward_f32),
    "attention_backward_f64": kernel_address(attention_backward_f64),
}
