# Movement kernels: strided copy, concat, split, take, gather, pad, one_hot, fill, range, and the
# adjoints gradients need: slice_backward, pad_backward, index_add (of take), scatter_add (of
# gather).
#
# Design: moving data is copying bits, so every kernel that only moves elements is written once
# per element size (1, 2, 4 and 8 bytes) and the KERNELS table maps each dtype to the kernel of its
# size; one_hot, range and the accumulating adjoints, which compute values, are typed by dtype.
# The adjoints zero their whole output first, since it is an arena view that holds garbage.
#
# Parameter layouts: each kernel's ints are a fixed head (a struct below), then for most the
# variable-length arrays its comment names (shapes and strides of ndim entries, one row per
# input), then for some a fixed tail (another struct). A struct of Py_ssize_t fields has no
# padding, so it overlays the int array exactly; this module exports each struct's field names
# (the *_FIELDS tuples) and its limits (LIMITS), and the lowerings
# (mgegraph/_kernels/lowering/movement.py) pack the fields by name.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from .dtypes cimport int_t, num_t
from .abi cimport (Call, KERNEL_OK, KERNEL_INDEX_OUT_OF_RANGE, KERNEL_UNSUPPORTED, kernel_fn,
                   kernel_address)
from .nditer cimport MAX_DIMS, dims_ok, Odometer, odometer_init, odometer_next, count_rows
from .params cimport fields_of

ctypedef fused elem_t:
    uint8_t
    uint16_t
    uint32_t
    uint64_t

cdef enum PadMode:
    PAD_CONSTANT, PAD_EDGE, PAD_REFLECT, PAD_WRAP

PAD_MODES = {"constant": PAD_CONSTANT, "edge": PAD_EDGE, "reflect": PAD_REFLECT,
             "wrap": PAD_WRAP}
LIMITS = {"dims": MAX_DIMS}  # ndim of every strided, gather and pad layout


# -- parameter layouts ----------------------------------------------------------------------------
ctypedef struct Strided:        # strided, slice_backward: then shape[ndim], strides[ndim], a tail
    Py_ssize_t ndim
ctypedef struct StridedTail:    # strided: the input element the first output element reads
    Py_ssize_t offset
ctypedef struct SliceBackwardTail:  # the output element the first input element lands on
    Py_ssize_t offset, size
ctypedef struct Concat:         # then the row bytes of each of the count inputs
    Py_ssize_t count, outer
ctypedef struct Split:          # then one SplitPart per output
    Py_ssize_t count, outer, in_row
ctypedef struct SplitPart:      # the output's bytes [start, start + row) of each input row
    Py_ssize_t start, row
ctypedef struct Take:           # take's rows are bytes, index_add's are elements
    Py_ssize_t index64, outer, axis_length, row, count
ctypedef struct Gather:         # then shape, input strides, index strides [ndim each], a tail
    Py_ssize_t index64, ndim
ctypedef struct GatherTail:
    Py_ssize_t axis_length, axis_stride
ctypedef struct ScatterAddTail:
    Py_ssize_t axis_length, axis_stride, size
ctypedef struct Pad:            # then out shape, in shape, pad before, input strides [ndim each]
    Py_ssize_t mode, ndim, fill_bits
ctypedef struct Fill:
    Py_ssize_t count, value_bits
ctypedef struct OneHot:
    Py_ssize_t count, classes
ctypedef struct Range:
    Py_ssize_t count, end_exact
ctypedef struct RangeFloats:    # the floats of range
    double start, step, end


cdef Strided _strided
cdef StridedTail _strided_tail
cdef SliceBackwardTail _slice_backward_tail
cdef Concat _concat
cdef Split _split
cdef SplitPart _split_part
cdef Take _take
cdef Gather _gather
cdef GatherTail _gather_tail
cdef ScatterAddTail _scatter_add_tail
cdef Pad _pad
cdef Fill _fill
cdef OneHot _one_hot
cdef Range _range
cdef RangeFloats _range_floats
STRIDED_FIELDS = fields_of(_strided, sizeof(Strided))
STRIDED_TAIL_FIELDS = fields_of(_strided_tail, sizeof(StridedTail))
SLICE_BACKWARD_TAIL_FIELDS = fields_of(_slice_backward_tail, sizeof(SliceBackwardTail))
CONCAT_FIELDS = fields_of(_concat, sizeof(Concat))
SPLIT_FIELDS = fields_of(_split, sizeof(Split))
SPLIT_PART_FIELDS = fields_of(_split_part, sizeof(SplitPart))
TAKE_FIELDS = fields_of(_take, sizeof(Take))  # take and index_add
GATHER_FIELDS = fields_of(_gather, sizeof(Gather))  # gather and scatter_add
GATHER_TAIL_FIELDS = fields_of(_gather_tail, sizeof(GatherTail))
SCATTER_ADD_TAIL_FIELDS = fields_of(_scatter_add_tail, sizeof(ScatterAddTail))
PAD_FIELDS = fields_of(_pad, sizeof(Pad))  # pad and pad_backward
FILL_FIELDS = fields_of(_fill, sizeof(Fill))
ONE_HOT_FIELDS = fields_of(_one_hot, sizeof(OneHot))
RANGE_FIELDS = fields_of(_range, sizeof(Range))
RANGE_FLOAT_FIELDS = tuple(<dict>_range_floats)
if len(RANGE_FLOAT_FIELDS) * sizeof(double) != sizeof(RangeFloats):
    raise ImportError(f"parameter struct {RANGE_FLOAT_FIELDS} is not all double fields")


cdef inline const Py_ssize_t* after(const void* fields, size_t size) noexcept nogil:
    # the parameters that follow a struct of ``size`` bytes
    return <const Py_ssize_t*>(<const char*>fields + size)


# -- strided copy -------------------------------------------------------------------------------
cdef inline int strided_impl(const elem_t* x, elem_t* y, const Call* c) noexcept nogil:
    # ints: Strided, shape[ndim], input element strides[ndim] (any sign, 0 broadcasts),
    # StridedTail. The output is contiguous; transpose, broadcast_to and slicing are all this
    # one loop.
    if not dims_ok((<const Strided*>c.ints).ndim, 1):
        return KERNEL_UNSUPPORTED
    cdef int ndim = <int>(<const Strided*>c.ints).ndim
    cdef const Py_ssize_t* shape = after(c.ints, sizeof(Strided))
    cdef const Py_ssize_t* strides = shape + ndim
    cdef const StridedTail* tail = <const StridedTail*>(strides + ndim)
    cdef Py_ssize_t inner = shape[ndim - 1], s = strides[ndim - 1]
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef const elem_t* px
    cdef Odometer o
    odometer_init(&o, ndim, shape, strides, 1)
    x += tail.offset
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
    # ints: Strided, shape[ndim], output element strides[ndim] (any sign, never 0),
    # SliceBackwardTail. The adjoint of a slice: the contiguous input lands on a strided window
    # of a zeroed output. Slice steps are non-zero, so no two input elements share a destination.
    if not dims_ok((<const Strided*>c.ints).ndim, 1):
        return KERNEL_UNSUPPORTED
    cdef int ndim = <int>(<const Strided*>c.ints).ndim
    cdef const Py_ssize_t* shape = after(c.ints, sizeof(Strided))
    cdef const Py_ssize_t* strides = shape + ndim
    cdef const SliceBackwardTail* tail = <const SliceBackwardTail*>(strides + ndim)
    cdef Py_ssize_t inner = shape[ndim - 1], s = strides[ndim - 1]
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef elem_t* py
    cdef Odometer o
    memset(y, 0, tail.size * sizeof(elem_t))
    odometer_init(&o, ndim, shape, strides, 1)
    y += tail.offset
    for r in range(rows):
        py = y + o.offset[0]
        for i in range(inner):
            py[i * s] = x[i]
        x += inner
        odometer_next(&o)
    return KERNEL_OK


# -- concat and split: byte rows, independent of dtype --------------------------------------------
cdef int concat_bytes(const Call* c) noexcept nogil:
    # ints: Concat, row bytes of input 0, ..., of input count-1; bufs: the inputs, the output.
    cdef const Concat* p = <const Concat*>c.ints
    cdef const Py_ssize_t* rows = after(c.ints, sizeof(Concat))
    cdef Py_ssize_t n = p.count, outer = p.outer, o, k, row
    cdef char* y = c.bufs[n]
    for o in range(outer):
        for k in range(n):
            row = rows[k]
            memcpy(y, c.bufs[k] + o * row, row)
            y += row
    return KERNEL_OK


cdef int split_bytes(const Call* c) noexcept nogil:
    # ints: Split (in_row: input row bytes), SplitPart per output; bufs: the input, the count
    # outputs. Output k holds bytes [start, start + row) of every input row; ranges may overlap.
    cdef const Split* p = <const Split*>c.ints
    cdef const SplitPart* parts = <const SplitPart*>after(c.ints, sizeof(Split))
    cdef Py_ssize_t n = p.count, outer = p.outer, in_row = p.in_row, o, k, start, row
    cdef const char* x = c.bufs[0]
    for k in range(n):
        start = parts[k].start
        row = parts[k].row
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
    # ints: Take (row: inner row bytes). x is viewed as (outer, n = axis_length, row) and y as
    # (outer, m = count, row). Indices are checked first so no row is written before an error
    # is reported.
    cdef const Take* p = <const Take*>c.ints
    cdef Py_ssize_t outer = p.outer, n = p.axis_length, row = p.row, m = p.count, o, j, i
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
    if (<const Take*>c.ints).index64:
        return take_rows(c.bufs[0], <const int64_t*>c.bufs[1], c.bufs[2], c)
    return take_rows(c.bufs[0], <const int32_t*>c.bufs[1], c.bufs[2], c)


cdef inline int index_add_impl(const num_t* x, const int_t* idx, num_t* y,
                               const Call* c) noexcept nogil:
    # ints: Take (row: inner elements). The adjoint of take: x is (outer, m = count, inner), y is
    # (outer, n = axis_length, inner) and y[:, idx[j]] += x[:, j], so repeated indices accumulate.
    cdef const Take* p = <const Take*>c.ints
    cdef Py_ssize_t outer = p.outer, n = p.axis_length, inner = p.row, m = p.count
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
    if (<const Take*>c.ints).index64:
        return index_add_impl(x, <const int64_t*>c.bufs[1], y, c)
    return index_add_impl(x, <const int32_t*>c.bufs[1], y, c)


# -- gather (np.take_along_axis) ------------------------------------------------------------------
cdef inline int gather_impl(const elem_t* x, const int_t* idx, elem_t* y,
                            const Call* c) noexcept nogil:
    # ints: Gather, shape[ndim], input strides[ndim] (0 on the gathered axis), index
    # strides[ndim], GatherTail. Output contiguous.
    if not dims_ok((<const Gather*>c.ints).ndim, 1):
        return KERNEL_UNSUPPORTED
    cdef int ndim = <int>(<const Gather*>c.ints).ndim
    cdef const Py_ssize_t* shape = after(c.ints, sizeof(Gather))
    cdef const Py_ssize_t* strides = shape + ndim  # the input's, then the index's
    cdef const GatherTail* tail = <const GatherTail*>(strides + 2 * ndim)
    cdef Py_ssize_t n = tail.axis_length, axis_stride = tail.axis_stride
    cdef Py_ssize_t inner = shape[ndim - 1], sx = strides[ndim - 1], si = strides[2 * ndim - 1]
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i, k
    cdef Odometer o
    odometer_init(&o, ndim, shape, strides, 2)
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
    if (<const Gather*>c.ints).index64:
        return gather_impl(x, <const int64_t*>c.bufs[1], y, c)
    return gather_impl(x, <const int32_t*>c.bufs[1], y, c)


cdef inline int scatter_add_impl(const num_t* x, const int_t* idx, num_t* y,
                                 const Call* c) noexcept nogil:
    # ints: gather's layout with y as the gathered-from tensor, ScatterAddTail (gather's tail,
    # then y's size) for its tail. The adjoint of gather: walks x (gather's output shape) and
    # adds each element where gather read it, so repeated indices and axes along which y was
    # broadcast (stride 0) accumulate.
    if not dims_ok((<const Gather*>c.ints).ndim, 1):
        return KERNEL_UNSUPPORTED
    cdef int ndim = <int>(<const Gather*>c.ints).ndim
    cdef const Py_ssize_t* shape = after(c.ints, sizeof(Gather))
    cdef const Py_ssize_t* strides = shape + ndim  # y's, then the index's
    cdef const ScatterAddTail* tail = <const ScatterAddTail*>(strides + 2 * ndim)
    cdef Py_ssize_t n = tail.axis_length, axis_stride = tail.axis_stride
    cdef Py_ssize_t inner = shape[ndim - 1], sy = strides[ndim - 1], si = strides[2 * ndim - 1]
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i, k
    cdef Odometer o
    memset(y, 0, tail.size * sizeof(num_t))
    odometer_init(&o, ndim, shape, strides, 2)
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
    if (<const Gather*>c.ints).index64:
        return scatter_add_impl(x, <const int64_t*>c.bufs[1], y, c)
    return scatter_add_impl(x, <const int32_t*>c.bufs[1], y, c)


# -- pad -----------------------------------------------------------------------------------------
cdef inline Py_ssize_t pad_source(int mode, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    # j is an output index minus the padding before; returns the input index it reads, or -1
    # where a constant is written. Reflect is periodic with period 2(n-1), which is what NumPy's
    # repeated reflection gives for pads wider than the axis; wrap with period n.
    cdef Py_ssize_t p
    if 0 <= j < n:
        return j
    if mode == PAD_CONSTANT:
        return -1
    if mode == PAD_WRAP:
        j = j % n
        return j + n if j < 0 else j
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
    # ints: Pad (mode: a PadMode), out shape[ndim], in shape[ndim], pad before[ndim], input
    # strides[ndim]. Walks output rows with an index vector, since the mapping from output to
    # input index is not linear.
    cdef const Pad* p = <const Pad*>c.ints
    if not dims_ok(p.ndim, 1):
        return KERNEL_UNSUPPORTED
    cdef int mode = <int>p.mode, ndim = <int>p.ndim, d
    cdef elem_t fill = <elem_t>p.fill_bits
    cdef const Py_ssize_t* out_shape = after(c.ints, sizeof(Pad))
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
    cdef const Pad* p = <const Pad*>c.ints
    if not dims_ok(p.ndim, 1):
        return KERNEL_UNSUPPORTED
    cdef int mode = <int>p.mode, ndim = <int>p.ndim, d
    cdef const Py_ssize_t* out_shape = after(c.ints, sizeof(Pad))
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
    # ints: Fill
    cdef const Fill* p = <const Fill*>c.ints
    cdef Py_ssize_t n = p.count, i
    cdef elem_t v = <elem_t>p.value_bits
    for i in range(n):
        y[i] = v
    return KERNEL_OK


cdef inline int one_hot_impl(const int_t* x, int_t* y, const Call* c) noexcept nogil:
    # ints: OneHot; y is (count, classes) and is written whole.
    cdef const OneHot* p = <const OneHot*>c.ints
    cdef Py_ssize_t n = p.count, classes = p.classes, i, j
    for i in range(n):
        if not 0 <= x[i] < classes:
            return KERNEL_INDEX_OUT_OF_RANGE
        for j in range(classes):
            y[j] = 0
        y[x[i]] = 1
        y += classes
    return KERNEL_OK


cdef inline int range_impl(num_t* y, const Call* c) noexcept nogil:
    # ints: Range; floats: RangeFloats. Computed in double as start + i * step (NumPy's arange
    # and linspace); linspace pins its last value to end (end_exact).
    cdef const Range* p = <const Range*>c.ints
    cdef const RangeFloats* f = <const RangeFloats*>c.floats
    cdef Py_ssize_t n = p.count, i
    cdef double start = f.start, step = f.step
    for i in range(n):
        y[i] = <num_t>(start + i * step)
    if p.end_exact and n > 0:
        y[n - 1] = <num_t>f.end
    return KERNEL_OK


# -- entry points ----------------------------------------------------------------------------
cdef int strided_1(const Call* c) noexcept nogil:
    return strided_impl(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[1], c)
cdef int strided_2(const Call* c) noexcept nogil:
    return strided_impl(<const uint16_t*>c.bufs[0], <uint16_t*>c.bufs[1], c)
cdef int strided_4(const Call* c) noexcept nogil:
    return strided_impl(<const uint32_t*>c.bufs[0], <uint32_t*>c.bufs[1], c)
cdef int strided_8(const Call* c) noexcept nogil:
    return strided_impl(<const uint64_t*>c.bufs[0], <uint64_t*>c.bufs[1], c)

cdef int slice_backward_1(const Call* c) noexcept nogil:
    return slice_backward_impl(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[1], c)
cdef int slice_backward_2(const Call* c) noexcept nogil:
    return slice_backward_impl(<const uint16_t*>c.bufs[0], <uint16_t*>c.bufs[1], c)
cdef int slice_backward_4(const Call* c) noexcept nogil:
    return slice_backward_impl(<const uint32_t*>c.bufs[0], <uint32_t*>c.bufs[1], c)
cdef int slice_backward_8(const Call* c) noexcept nogil:
    return slice_backward_impl(<const uint64_t*>c.bufs[0], <uint64_t*>c.bufs[1], c)

cdef int gather_1(const Call* c) noexcept nogil:
    return gather_sized(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[2], c)
cdef int gather_2(const Call* c) noexcept nogil:
    return gather_sized(<const uint16_t*>c.bufs[0], <uint16_t*>c.bufs[2], c)
cdef int gather_4(const Call* c) noexcept nogil:
    return gather_sized(<const uint32_t*>c.bufs[0], <uint32_t*>c.bufs[2], c)
cdef int gather_8(const Call* c) noexcept nogil:
    return gather_sized(<const uint64_t*>c.bufs[0], <uint64_t*>c.bufs[2], c)

cdef int pad_1(const Call* c) noexcept nogil:
    return pad_impl(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[1], c)
cdef int pad_2(const Call* c) noexcept nogil:
    return pad_impl(<const uint16_t*>c.bufs[0], <uint16_t*>c.bufs[1], c)
cdef int pad_4(const Call* c) noexcept nogil:
    return pad_impl(<const uint32_t*>c.bufs[0], <uint32_t*>c.bufs[1], c)
cdef int pad_8(const Call* c) noexcept nogil:
    return pad_impl(<const uint64_t*>c.bufs[0], <uint64_t*>c.bufs[1], c)

cdef int fill_1(const Call* c) noexcept nogil:
    return fill_impl(<uint8_t*>c.bufs[0], c)
cdef int fill_2(const Call* c) noexcept nogil:
    return fill_impl(<uint16_t*>c.bufs[0], c)
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



def _by_size(family, one, four, eight, two=None):
    """Dtype-named entries for a kernel written per element size (``two`` also gives the small
    integers and the half types theirs; concat, split and take move rows of bytes, whatever
    the size)."""
    small = {f"{family}_u8": one, f"{family}_i8": one, f"{family}_i16": two,
             f"{family}_f16": two, f"{family}_bf16": two} if two else {}
    return {f"{family}_bool": one, f"{family}_f32": four, f"{family}_i32": four,
            f"{family}_f64": eight, f"{family}_i64": eight, **small}


def _by_dtype(family, f32, f64, i32, i64):
    return {f"{family}_f32": f32, f"{family}_f64": f64, f"{family}_i32": i32,
            f"{family}_i64": i64}


KERNELS = {
    **_by_size("strided", kernel_address(strided_1), kernel_address(strided_4),
               kernel_address(strided_8), kernel_address(strided_2)),
    **_by_size("slice_backward", kernel_address(slice_backward_1), kernel_address(slice_backward_4),
               kernel_address(slice_backward_8), kernel_address(slice_backward_2)),
    **_by_size("gather", kernel_address(gather_1), kernel_address(gather_4),
               kernel_address(gather_8), kernel_address(gather_2)),
    **_by_size("pad", kernel_address(pad_1), kernel_address(pad_4), kernel_address(pad_8),
               kernel_address(pad_2)),
    **_by_size("fill", kernel_address(fill_1), kernel_address(fill_4), kernel_address(fill_8),
               kernel_address(fill_2)),
    **_by_size("concat", *[kernel_address(concat_bytes)] * 4),
    **_by_size("split", *[kernel_address(split_bytes)] * 4),
    **_by_size("take", *[kernel_address(take_bytes)] * 4),
    "one_hot_i32": kernel_address(one_hot_i32), "one_hot_i64": kernel_address(one_hot_i64),
    "range_f32": kernel_address(range_f32), "range_f64": kernel_address(range_f64),
    "range_i32": kernel_address(range_i32), "range_i64": kernel_address(range_i64),
    **_by_dtype("index_add", kernel_address(index_add_f32), kernel_address(index_add_f64),
                kernel_address(index_add_i32), kernel_address(index_add_i64)),
    **_by_dtype("scatter_add", kernel_address(scatter_add_f32), kernel_address(scatter_add_f64),
                kernel_address(scatter_add_i32), kernel_address(scatter_add_i64)),
    **_by_dtype("pad_backward", kernel_address(pad_backward_f32), kernel_address(pad_backward_f64),
                kernel_address(pad_backward_i32), kernel_address(pad_backward_i64)),
}
