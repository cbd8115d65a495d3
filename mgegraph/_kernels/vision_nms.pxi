# Non-maximum suppression of _kernels/vision.pyx, included there: the parameter block is
# described in its header.

# -- nms -------------------------------------------------------------------------------------
cdef inline const Py_ssize_t* sorted_order(const floating* scores, Py_ssize_t* scratch,
                                           Py_ssize_t n) noexcept nogil:
    # 0..n-1 by descending score, ties in index order: a bottom-up merge sort between the two
    # halves of scratch (2 n indices); returns the half the order ends in
    cdef Py_ssize_t* src = scratch
    cdef Py_ssize_t* dst = scratch + n
    cdef Py_ssize_t* swap
    cdef Py_ssize_t width = 1, lo, mid, hi, i, j, k
    for i in range(n):
        src[i] = i
    while width < n:
        lo = 0
        while lo < n:
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if j >= hi or (i < mid and not scores[src[j]] > scores[src[i]]):
                    dst[k] = src[i]
                    i += 1
                else:
                    dst[k] = src[j]
                    j += 1
            lo += 2 * width
        swap = src
        src = dst
        dst = swap
        width *= 2
    return src


cdef inline bint overlaps(const floating* a, const floating* b, double thresh) noexcept nogil:
    # IoU(a, b) > thresh as MegEngine tests it, without a division: boxes of no area never are
    cdef double w = min(a[2], b[2]) - max(a[0], b[0]), h = min(a[3], b[3]) - max(a[1], b[1])
    cdef double inter = (w if w > 0 else 0) * (h if h > 0 else 0)
    cdef double union = ((<double>a[2] - a[0]) * (<double>a[3] - a[1])
                         + (<double>b[2] - b[0]) * (<double>b[3] - b[1]) - inter)
    return inter > union * thresh


cdef inline int nms_impl(const floating* boxes,  # IN  (n, 4) x0, y0, x1, y1
                         const floating* scores,  # IN  (n,)
                         int* keep,               # OUT (max_output,) kept indices, then -1
                         Py_ssize_t* scratch,     # 2 n indices
                         const Nms* s, double thresh) noexcept nogil:
    cdef Py_ssize_t i, j, kept = 0, n = s.boxes
    cdef const Py_ssize_t* order
    cdef bint alive
    for i in range(n):
        if scores[i] != scores[i]:
            return KERNEL_BAD_VALUE
        for j in range(4):
            if boxes[4 * i + j] != boxes[4 * i + j]:
                return KERNEL_BAD_VALUE
    order = sorted_order(scores, scratch, n)
    for i in range(n):
        if kept >= s.max_output:
            break
        alive = True
        for j in range(kept):
            if overlaps(boxes + 4 * order[i], boxes + 4 * keep[j], thresh):
                alive = False
                break
        if alive:
            keep[kept] = <int>order[i]
            kept += 1
    for i in range(kept, s.max_output):
        keep[i] = -1
    return KERNEL_OK
