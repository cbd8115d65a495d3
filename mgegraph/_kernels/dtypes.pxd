# Fused types shared by the kernel modules: C types of the dtypes mgegraph supports.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t

ctypedef fused num_t:   # the numeric dtypes
    float
    double
    int32_t
    int64_t

ctypedef fused int_t:   # the integer dtypes (also index dtypes)
    int32_t
    int64_t

ctypedef fused any_t:   # every dtype; bool is uint8_t
    float
    double
    int32_t
    int64_t
    uint8_t


# The elementwise kernels (ew_ops.pxd, elementwise.pyx) also run the small integers; the other
# modules keep the fused types above, so they compile no small-integer kernels they do not have.
ctypedef fused ew_num_t:   # num_t and the small integers (with bool, which is uint8_t too)
    float
    double
    int32_t
    int64_t
    uint8_t
    int8_t
    int16_t

ctypedef fused ew_int_t:   # the integer dtypes of ew_num_t
    int32_t
    int64_t
    uint8_t
    int8_t
    int16_t
