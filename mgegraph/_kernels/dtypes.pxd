# Fused types shared by the kernel modules: C types of the dtypes mgegraph supports.

from libc.stdint cimport int32_t, int64_t, uint8_t

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
