# Movement kernels: strided copy, concat, split, take, gather, pad, one_hot, fill, range, and the
# adjoints gradients need: slice_backward, pad_backward, index_add (of take), scatter_add (of
# gather).
#
# Design: moving data is copying bits, so every kernel that only moves elements is written once
# per element size (1, 4 and 8 bytes) and the KERNELS table maps each dtype to the kernel of its
# size; one_hot, range and the accumulating adjoints, which compute values, are typed by dtype.
# The adjoints zero their whole output first, since it is an arena view that holds garbage.
# Parameter layouts are written by mgegraph.ops.movement (one lowering per op) and documented per
# kernel.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from .dtypes cimport int_t, num_t
from .abi cimport Call, KERNEL_OK, KERNEL_INDEX_OUT_OF_RANGE, kernel_fn, kernel_address
from .nditer cimport MAX_DIMS, Odometer, odometer_init, odometer_next, count_rows

ctypedef fused elem_t:
    uint8_t
    uint32_t
    uint64_t

cdef enum PadMode:
    PAD_CONSTANT, PAD_EDGE, PAD_REFLECT

PAD_MODES = {"constant": PAD_CONSTANT, "edge": PAD_EDGE, "reflect": PAD_REFLECT}


# -- strided copy -------------------------------------------------------------------------------
cdef inline int strided_impl(const elem_t* x, elem_t* y, const Call* c) noexcept nogil:
    # ints: [ndim, shape[ndim], input element strides[ndim] (any sign, 0 broadcasts), offset].
    # The output is contiguous; transpose, broadcast_to and slicing are all this one loop.
    cdef int ndim = <int>c.ints[0]
    cdef const Py_ssize_t* shape = c.ints + 1
    cdef Py_ssize_t inner = shape[ndim - 1], s = c.ints[2 * ndim]
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef const elem_t* px
    cdef Odometer o
    odometer_init(&o, ndim, shape, c.ints + 1 + ndim, 1)
    x += c.ints[1 + 2 * ndim]
    for r in range(rows):
        px = x + o.offset[0]
        if s == 1:
            memcpy(y, px, inner * sizeof(elem_t))
        elif s == 0:
            for i in range(inner):
                y[i] = px[0]
        else:
            for i in range(inner):
                y[i] = px[i * s]
        y += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline int slice_backward_impl(const elem_t* x, elem_t* y, const Call* c) noexcept nogil:
    # ints: [ndim, shape[ndim], output element strides[ndim] (any sign, never 0), offset, output
    # size]. The adjoint of a slice: the contiguous input lands on a strided window of a zeroed
    # output. Slice steps are non-zero, so no two input elements share a destination.
    cdef int ndim = <int>c.ints[0]
    cdef const Py_ssize_t* shape = c.ints + 1
    cdef Py_ssize_t inner = shape[ndim - 1], s = c.ints[2 * ndim]
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef elem_t* py
    cdef Odometer o
    memset(y, 0, c.ints[2 + 2 * ndim] * sizeof(elem_t))
    odometer_init(&o, ndim, shape, c.ints + 1 + ndim, 1)
    y += c.ints[1 + 2 * ndim]
    for r in range(rows):
        py = y + o.offset[0]
        for i in range(inner):
            py[i * s] = x[i]
        x += inner
        odometer_next(&o)
    return KERNEL_OK


# -- concat and split: byte rows, independent of dtype --------------------------------------------
cdef int concat_bytes(const Call* c) noexcept nogil:
    # ints: [n inputs, outer, row bytes of input 0, ..., of input n-1]; bufs: n inputs, output.
    cdef Py_ssize_t n = c.ints[0], outer = c.ints[1], o, k, row
    cdef char* y = c.bufs[n]
    for o in range(outer):
        for k in range(n):
            row = c.ints[2 + k]
            memcpy(y, c.bufs[k] + o * row, row)
            y += row
    return KERNEL_OK


cdef int split_bytes(const Call* c) noexcept nogil:
    # ints: [n outputs, outer, input row bytes, (start byte, row bytes) per output]; bufs: input,
    # n outputs. Output k holds bytes [start, start + row) of every input row; ranges may overlap.
    cdef Py_ssize_t n = c.ints[0], outer = c.ints[1], in_row = c.ints[2], o, k, start, row
    cdef const char* x = c.bufs[0]
    for k in range(n):
        start = c.ints[3 + 2 * k]
        row = c.ints[4 + 2 * k]
        for o in range(outer):
            memcpy(c.bufs[1 + k] + o * row, x + o * in_row + start, row)
    return KERNEL_OK


# -- take (np.take) ---------------------------------------------------------------------------
cdef inline bint wrap_index(Py_ssize_t* i, Py_ssize_t n) noexcept nogil:
    # NumPy's rule: -n..n-1 are valid, negatives count from the end.
    if i[0] < 0:
        i[0] += n
    return 0 <= i[0] < n


cdef inline int take_rows(const char* x, const int_t* idx, char* y, const Call* c) noexcept nogil:
    # ints: [index is int64, outer, axis length n, inner row bytes, m indices]. x is viewed as
    # (outer, n, row) and y as (outer, m, row). Indices are checked first so no row is written
    # before an error is reported.
    cdef Py_ssize_t outer = c.ints[1], n = c.ints[2], row = c.ints[3], m = c.ints[4], o, j, i
    for j in range(m):
        i = idx[j]
        if not wrap_index(&i, n):
            return KERNEL_INDEX_OUT_OF_RANGE
    for o in range(outer):
        for j in range(m):
            i = idx[j]
            wrap_index(&i, n)
            memcpy(y, x + (o * n + i) * row, row)
            y += row
    return KERNEL_OK


cdef int take_bytes(const Call* c) noexcept nogil:
    if c.ints[0]:
        return take_rows(c.bufs[0], <const int64_t*>c.bufs[1], c.bufs[2], c)
    return take_rows(c.bufs[0], <const int32_t*>c.bufs[1], c.bufs[2], c)


cdef inline int index_add_impl(const num_t* x, const int_t* idx, num_t* y,
                               const Call* c) noexcept nogil:
    # ints: [index is int64, outer, axis length n, inner elements, m indices]. The adjoint of
    # take: x is (outer, m, inner), y is (outer, n, inner) and y[:, idx[j]] += x[:, j], so repeated
    # indices accumulate.
    cdef Py_ssize_t outer = c.ints[1], n = c.ints[2], inner = c.ints[3], m = c.ints[4]
    cdef Py_ssize_t o, j, i, k
    cdef num_t* row
    for j in range(m):
        i = idx[j]
        if not wrap_index(&i, n):
            return KERNEL_INDEX_OUT_OF_RANGE
    memset(y, 0, outer * n * inner * sizeof(num_t))
    for o in range(outer):
        for j in range(m):
            i = idx[j]
            wrap_index(&i, n)
            row = y + (o * n + i) * inner
            for k in range(inner):
                row[k] += x[k]
            x += inner
    return KERNEL_OK


cdef inline int index_add_typed(const num_t* x, num_t* y, const Call* c) noexcept nogil:
    if c.ints[0]:
        return index_add_impl(x, <const int64_t*>c.bufs[1], y, c)
    return index_add_impl(x, <const int32_t*>c.bufs[1], y, c)


# -- gather (np.take_along_axis) ------------------------------------------------------------------
cdef inline int gather_impl(const elem_t* x, const int_t* idx, elem_t* y,
                            const Call* c) noexcept nogil:
    # ints: [index is int64, ndim, shape[ndim], input strides[ndim] (0 on the gathered axis),
    #        index strides[ndim], axis length, axis stride]. Output contiguous.
    cdef int ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t n = c.ints[2 + 3 * ndim], axis_stride = c.ints[3 + 3 * ndim]
    cdef Py_ssize_t inner = shape[ndim - 1], sx = c.ints[1 + 2 * ndim], si = c.ints[1 + 3 * ndim]
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i, k
    cdef Odometer o
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 2)
    for r in range(rows):
        for i in range(inner):
            k = idx[o.offset[1] + i * si]
            if not wrap_index(&k, n):
                return KERNEL_INDEX_OUT_OF_RANGE
            y[i] = x[o.offset[0] + i * sx + k * axis_stride]
        y += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline int gather_sized(const elem_t* x, elem_t* y, const Call* c) noexcept nogil:
    if c.ints[0]:
        return gather_impl(x, <const int64_t*>c.bufs[1], y, c)
    return gather_impl(x, <const int32_t*>c.bufs[1], y, c)


cdef inline int scatter_add_impl(const num_t* x, const int_t* idx, num_t* y,
                                 const Call* c) noexcept nogil:
    # ints: gather's layout with y as the gathered-from tensor, then y's size. The adjoint of
    # gather: walks x (gather's output shape) and adds each element where gather read it, so
    # repeated indices and axes along which y was broadcast (stride 0) accumulate.
    cdef int ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t n = c.ints[2 + 3 * ndim], axis_stride = c.ints[3 + 3 * ndim]
    cdef Py_ssize_t inner = shape[ndim - 1], sy = c.ints[1 + 2 * ndim], si = c.ints[1 + 3 * ndim]
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i, k
    cdef Odometer o
    memset(y, 0, c.ints[4 + 3 * ndim] * sizeof(num_t))
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 2)
    for r in range(rows):
        for i in range(inner):
            k = idx[o.offset[1] + i * si]
            if not wrap_index(&k, n):
                return KERNEL_INDEX_OUT_OF_RANGE
            y[o.offset[0] + i * sy + k * axis_stride] += x[i]
        x += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline int scatter_add_typed(const num_t* x, num_t* y, const Call* c) noexcept nogil:
    if c.ints[0]:
        return scatter_add_impl(x, <const int64_t*>c.bufs[1], y, c)
    return scatter_add_impl(x, <const int32_t*>c.bufs[1], y, c)


# -- pad -----------------------------------------------------------------------------------------
cdef inline Py_ssize_t pad_source(int mode, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    # j is an output index minus the padding before; returns the input index it reads, or -1
    # where a constant is written. Reflect is periodic with period 2(n-1), which is what NumPy's
    # repeated reflection gives for pads wider than the axis.
    cdef Py_ssize_t p
    if 0 <= j < n:
        return j
    if mode == PAD_CONSTANT:
        return -1
    if mode == PAD_EDGE or n == 1:
        return 0 if j < 0 else n - 1
    p = 2 * (n - 1)
    j = j % p
    if j < 0:
        j += p
    return p - j if j >= n else j


cdef inline Py_ssize_t pad_row_base(int mode, int last, const Py_ssize_t* index,
                                     const Py_ssize_t* before, const Py_ssize_t* in_shape,
                                     const Py_ssize_t* strides) noexcept nogil:
    # The input offset of the row an output row reads (all dims but the last), or -1 for a
    # constant row.
    cdef Py_ssize_t base = 0, j
    cdef int d
    for d in range(last):
        j = pad_source(mode, index[d] - before[d], in_shape[d])
        if j < 0:
            return -1
        base += j * strides[d]
    return base


cdef inline void next_index(int last, Py_ssize_t* index, const Py_ssize_t* shape) noexcept nogil:
    cdef int d = last - 1
    while d >= 0:
        index[d] += 1
        if index[d] < shape[d]:
            return
        index[d] = 0
        d -= 1


cdef inline int pad_impl(const elem_t* x, elem_t* y, const Call* c) noexcept nogil:
    # ints: [mode, ndim, fill bits, out shape[ndim], in shape[ndim], pad before[ndim],
    #        input strides[ndim]]. Walks output rows with an index vector, since the mapping from
    # output to input index is not linear.
    cdef int mode = <int>c.ints[0], ndim = <int>c.ints[1], d
    cdef elem_t fill = <elem_t>c.ints[2]
    cdef const Py_ssize_t* out_shape = c.ints + 3
    cdef const Py_ssize_t* in_shape = out_shape + ndim
    cdef const Py_ssize_t* before = in_shape + ndim
    cdef const Py_ssize_t* strides = before + ndim
    cdef Py_ssize_t index[MAX_DIMS]
    cdef Py_ssize_t inner = out_shape[ndim - 1], rows = count_rows(ndim, out_shape), r, i, j, base
    cdef int last = ndim - 1
    for d in range(ndim):
        index[d] = 0
    for r in range(rows):
        base = pad_row_base(mode, last, index, before, in_shape, strides)
        for i in range(inner):
            j = pad_source(mode, i - before[last], in_shape[last]) if base >= 0 else -1
            y[i] = fill if j < 0 else x[base + j * strides[last]]
        y += inner
        next_index(last, index, out_shape)
    return KERNEL_OK


cdef inline int pad_backward_impl(const num_t* x, num_t* y, const Call* c) noexcept nogil:
    # ints: pad's layout, x being the padded shape and y the unpadded one. The adjoint of pad:
    # every padded element adds into the input element it was read from (edge and reflect read
    # some elements many times); constant elements are dropped.
    cdef int mode = <int>c.ints[0], ndim = <int>c.ints[1], d
    cdef const Py_ssize_t* out_shape = c.ints + 3
    cdef const Py_ssize_t* in_shape = out_shape + ndim
    cdef const Py_ssize_t* before = in_shape + ndim
    cdef const Py_ssize_t* strides = before + ndim
    cdef Py_ssize_t index[MAX_DIMS]
    cdef Py_ssize_t inner = out_shape[ndim - 1], rows = count_rows(ndim, out_shape), r, i, j, base
    cdef Py_ssize_t size = 1
    cdef int last = ndim - 1
    for d in range(ndim):
        index[d] = 0
        size *= in_shape[d]
    memset(y, 0, size * sizeof(num_t))
    for r in range(rows):
        base = pad_row_base(mode, last, index, before, in_shape, strides)
        if base >= 0:
            for i in range(inner):
                j = pad_source(mode, i - before[last], in_shape[last])
                if j >= 0:
                    y[base + j * strides[last]] += x[i]
        x += inner
        next_index(last, index, out_shape)
    return KERNEL_OK


# -- fills -----------------------------------------------------------------------------------
cdef inline int fill_impl(elem_t* y, const Call* c) noexcept nogil:
    # ints: [count, value bits]
    cdef Py_ssize_t n = c.ints[0], i
    cdef elem_t v = <elem_t>c.ints[1]
    for i in range(n):
        y[i] = v
    return KERNEL_OK


cdef inline int one_hot_impl(const int_t* x, int_t* y, const Call* c) noexcept nogil:
    # ints: [count, num_classes]; y is (count, num_classes) and is written whole.
    cdef Py_ssize_t n = c.ints[0], classes = c.ints[1], i, j
    for i in range(n):
        if not 0 <= x[i] < classes:
            return KERNEL_INDEX_OUT_OF_RANGE
        for j in range(classes):
            y[j] = 0
        y[x[i]] = 1
        y += classes
    return KERNEL_OK


cdef inline int range_impl(num_t* y, const Call* c) noexcept nogil:
    # ints: [count, end is exact]; floats: [start, step, end]. Computed in double as
    # start + i * step (NumPy's arange and linspace); linspace pins its last value to end.
    cdef Py_ssize_t n = c.ints[0], i
    cdef double start = c.floats[0], step = c.floats[1]
    for i in range(n):
        y[i] = <num_t>(start + i * step)
    if c.ints[1] and n > 0:
        y[n - 1] = <num_t>c.floats[2]
    return KERNEL_OK


# -- entry points ----------------------------------------------------------------------------
cdef int strided_1(const Call* c) noexcept nogil:
    return strided_impl(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[1], c)
cdef int strided_4(const Call* c) noexcept nogil:
    return strided_impl(<const uint32_t*>c.bufs[0], <uint32_t*>c.bufs[1], c)
cdef int strided_8(const Call* c) noexcept nogil:
    return strided_impl(<const uint64_t*>c.bufs[0], <uint64_t*>c.bufs[1], c)

cdef int slice_backward_1(const Call* c) noexcept nogil:
    return slice_backward_impl(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[1], c)
cdef int slice_backward_4(const Call* c) noexcept nogil:
    return slice_backward_impl(<const uint32_t*>c.bufs[0], <uint32_t*>c.bufs[1], c)
cdef int slice_backward_8(const Call* c) noexcept nogil:
    return slice_backward_impl(<const uint64_t*>c.bufs[0], <uint64_t*>c.bufs[1], c)

cdef int gather_1(const Call* c) noexcept nogil:
    return gather_sized(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[2], c)
cdef int gather_4(const Call* c) noexcept nogil:
    return gather_sized(<const uint32_t*>c.bufs[0], <uint32_t*>c.bufs[2], c)
cdef int gather_8(const Call* c) noexcept nogil:
    return gather_sized(<const uint64_t*>c.bufs[0], <uint64_t*>c.bufs[2], c)

cdef int pad_1(const Call* c) noexcept nogil:
    return pad_impl(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[1], c)
cdef int pad_4(const Call* c) noexcept nogil:
    return pad_impl(<const uint32_t*>c.bufs[0], <uint32_t*>c.bufs[1], c)
cdef int pad_8(const Call* c) noexcept nogil:
    return pad_impl(<const uint64_t*>c.bufs[0], <uint64_t*>c.bufs[1], c)

cdef int fill_1(const Call* c) noexcept nogil:
    return fill_impl(<uint8_t*>c.bufs[0], c)
cdef int fill_4(const Call* c) noexcept nogil:
    return fill_impl(<uint32_t*>c.bufs[0], c)
cdef int fill_8(const Call* c) noexcept nogil:
    return fill_impl(<uint64_t*>c.bufs[0], c)

cdef int one_hot_i32(const Call* c) noexcept nogil:
    return one_hot_impl(<const int32_t*>c.bufs[0], <int32_t*>c.bufs[1], c)
cdef int one_hot_i64(const Call* c) noexcept nogil:
    return one_hot_impl(<const int64_t*>c.bufs[0], <int64_t*>c.bufs[1], c)

cdef int range_f32(const Call* c) noexcept nogil:
    return range_impl(<float*>c.bufs[0], c)
cdef int range_f64(const Call* c) noexcept nogil:
    return range_impl(<double*>c.bufs[0], c)
cdef int range_i32(const Call* c) noexcept nogil:
    return range_impl(<int32_t*>c.bufs[0], c)
cdef int range_i64(const Call* c) noexcept nogil:
    return range_impl(<int64_t*>c.bufs[0], c)


# The accumulating adjoints: bufs are (values, [indices,] output); typed by the value dtype.
cdef int index_add_f32(const Call* c) noexcept nogil:
    return index_add_typed(<const float*>c.bufs[0], <float*>c.bufs[2], c)
cdef int index_add_f64(const Call* c) noexcept nogil:
    return index_add_typed(<const double*>c.bufs[0], <double*>c.bufs[2], c)
cdef int index_add_i32(const Call* c) noexcept nogil:
    return index_add_typed(<const int32_t*>c.bufs[0], <int32_t*>c.bufs[2], c)
cdef int index_add_i64(const Call* c) noexcept nogil:
    return index_add_typed(<const int64_t*>c.bufs[0], <int64_t*>c.bufs[2], c)

cdef int scatter_add_f32(const Call* c) noexcept nogil:
    return scatter_add_typed(<const float*>c.bufs[0], <float*>c.bufs[2], c)
cdef int scatter_add_f64(const Call* c) noexcept nogil:
    return scatter_add_typed(<const double*>c.bufs[0], <double*>c.bufs[2], c)
cdef int scatter_add_i32(const Call* c) noexcept nogil:
    return scatter_add_typed(<const int32_t*>c.bufs[0], <int32_t*>c.bufs[2], c)
cdef int scatter_add_i64(const Call* c) noexcept nogil:
    return scatter_add_typed(<const int64_t*>c.bufs[0], <int64_t*>c.bufs[2], c)

cdef int pad_backward_f32(const Call* c) noexcept nogil:
    return pad_backward_impl(<const float*>c.bufs[0], <float*>c.bufs[1], c)
cdef int pad_backward_f64(const Call* c) noexcept nogil:
    return pad_backward_impl(<const double*>c.bufs[0], <double*>c.bufs[1], c)
cdef int pad_backward_i32(const Call* c) noexcept nogil:
    return pad_backward_impl(<const int32_t*>c.bufs[0], <int32_t*>c.bufs[1], c)
cdef int pad_backward_i64(const Call* c) noexcept nogil:
    return pad_backward_impl(<const int64_t*>c.bufs[0], <int64_t*>c.bufs[1], c)



def _by_size(family, one, four, eight):
    """Dtype-named entries for a kernel written per element size."""
    return {f"{family}_bool": one, f"{family}_f32": four, f"{family}_i32": four,
            f"{family}_f64": eight, f"{family}_i64": eight}


def _by_dtype(family, f32, f64, i32, i64):
    return {f"{family}_f32": f32, f"{family}_f64": f64, f"{family}_i32": i32,
            f"{family}_i64": i64}


KERNELS = {
    **_by_size("strided", kernel_address(strided_1), kernel_address(strided_4), kernel_address(strided_8)),
    **_by_size("slice_backward", kernel_address(slice_backward_1), kernel_address(slice_backward_4),
               kernel_address(slice_backward_8)),
    **_by_size("gather", kernel_address(gather_1), kernel_address(gather_4), kernel_address(gather_8)),
    **_by_size("pad", kernel_address(pad_1), kernel_address(pad_4), kernel_address(pad_8)),
    **_by_size("fill", kernel_address(fill_1), kernel_address(fill_4), kernel_address(fill_8)),
    **_by_size("concat", *[kernel_address(concat_bytes)] * 3),
    **_by_size("split", *[kernel_address(split_bytes)] * 3),
    **_by_size("take", *[kernel_address(take_bytes)] * 3),
    "one_hot_i32": kernel_address(one_hot_i32), "one_hot_i64": kernel_address(one_hot_i64),
    "range_f32": kernel_address(range_f32), "range_f64": kernel_address(range_f64),
    "range_i32": kernel_address(range_i32), "range_i64": kernel_address(range_i64),
    **_by_dtype("index_add", kernel_address(index_add_f32), kernel_address(index_add_f64), kernel_address(index_add_i32),
                kernel_address(index_add_i64)),
    **_by_dtype("scatter_add", kernel_address(scatter_add_f32), kernel_address(scatter_add_f64),
                kernel_address(scatter_add_i32), kernel_address(scatter_add_i64)),
    **_by_dtype("pad_backward", kernel_address(pad_backward_f32), kernel_address(pad_backward_f64),
                kernel_address(pad_backward_i32), kernel_address(pad_backward_i64)),
}
