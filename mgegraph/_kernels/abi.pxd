# The one calling convention between the executor and every CPU kernel.
#
# Design: a kernel is a C function over raw buffer pointers and integer/float parameters that the
# op's lowering computed once at compile time (shapes, strides, opcodes). The executor keeps a C
# array of (function, Call) pairs, so running a plan calls C functions in a loop with the GIL
# released and touches no Python object. Kernels never allocate: scratch space is a workspace
# buffer planned like any other.

ctypedef struct Call:
    char** bufs                # inputs, then outputs, then the workspace (when the op has one)
    const Py_ssize_t* ints     # integer parameters, laid out by the op's lowering
    const double* floats       # float parameters (scalars such as eps, slope, clip bounds)

ctypedef int (*kernel_fn)(const Call* call) noexcept nogil

# Status codes a kernel returns; the executor turns them into a KernelError naming the node.
cdef enum:
    KERNEL_OK = 0
    KERNEL_INDEX_OUT_OF_RANGE = 1
    KERNEL_BAD_VALUE = 2
    KERNEL_UNSUPPORTED = 3
    KERNEL_NEGATIVE_POWER = 4  # integer pow by a negative exponent (NumPy raises too)
    KERNEL_NOT_A_NUMBER = 5    # a NaN met where an integer must stand for it (quantize)
    KERNEL_OUT_OF_MEMORY = 6   # the kernel's scratch memory could not be had (malloc failed)
    KERNEL_TIMED_OUT = 7       # a collective waited longer than its timeout for the other ranks
    KERNEL_COLLECTIVE_FAILED = 8  # MPI returned an error from a collective


cdef inline object kernel_address(kernel_fn f):
    """The address a module's KERNELS table holds for ``f`` (read back by the executor)."""
    return <Py_ssize_t>f
