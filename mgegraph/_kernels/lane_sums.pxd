# Sums of runs in double, in independent lanes, shared by the norm kernels (nn.pyx: layer and
# batch norm; norm.pyx: group norm).
#
# Design: a sum keeps LANES partial sums, as the lanes of an inner loop with no reduction in it
# (lane l only ever adds to itself), so the compiler vectorises them without reassociating
# anything; independent adds are also faster and more accurate than one running sum. Three sums
# at once (the gradients' grad_sums) take GRAD_LANES: more would not fit the 16 SSE registers.

from cython cimport floating

cdef enum:
    LANES = 8
    GRAD_LANES = 4


cdef inline double lanes_total(double* acc, Py_ssize_t n) noexcept nogil:
    # pairwise, halving acc[:n] in place; n a power of two
    cdef Py_ssize_t l
    while n > 1:
        n //= 2
        for l in range(n):
            acc[l] += acc[l + n]
    return acc[0]


cdef inline double run_sum(const floating* x, Py_ssize_t n, double centre,
                           bint squares) noexcept nogil:
    # The sum over a run of x - centre, or of its squares
    cdef double acc[LANES]
    cdef double d
    cdef const floating* px
    cdef Py_ssize_t q, l, i, whole = n - n % LANES
    for l in range(LANES):
        acc[l] = 0
    for q in range(whole // LANES):
        px = x + q * LANES
        if squares:  # loop-invariant: the compiler hoists it out of the loop
            for l in range(LANES):
                d = px[l] - centre
                acc[l] += d * d
        else:
            for l in range(LANES):
                acc[l] += px[l] - centre
    for i in range(whole, n):
        d = x[i] - centre
        acc[i - whole] += d * d if squares else d
    return lanes_total(acc, LANES)
