# Image pixels for the kernels that resample images (resize, the point sampler of remap): the
# float dtypes and uint8, a camera's frame. A uint8 result is computed in double like a float
# one, then stored by round_u8: one rule for every resampling kernel on every device (the CUDA
# twin is csrc_cuda/pixels_u8.cuh).

from libc.math cimport nearbyint
from libc.stdint cimport uint8_t

ctypedef fused pixel_t:
    float
    double
    uint8_t


cdef inline uint8_t round_u8(double v) noexcept nogil:
    # Nearest, ties to even (nearbyint in the default rounding mode), saturated to [0, 255]:
    # the overshoot of a cubic tap clips instead of wrapping, and NaN (a remap point that is
    # not finite) gives 0
    if not v > 0:
        return 0
    if v >= 255:
        return 255
    return <uint8_t>nearbyint(v)


cdef inline void store_pixel(pixel_t* y, Py_ssize_t i, double v) noexcept nogil:
    if pixel_t is uint8_t:
        y[i] = round_u8(v)
    else:
        y[i] = <pixel_t>v
