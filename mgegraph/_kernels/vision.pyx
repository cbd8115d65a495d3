# Detection and geometry kernels over NCHW images: a point sampler (grid_sample, remap and their
# gradients), region pooling (roi_align, roi_pooling and their gradients) and non-maximum
# suppression. The rest of the family: ops/vision.py (meaning), kernel_abi/vision.py (the
# blocks and how each op's attributes map onto the sampler), lowering/vision.py, and the CUDA
# twin csrc_cuda/vision.cu, which gives these kernels' results bitwise. This file holds the
# parameter blocks and the entry points; the kernels are in vision_sample.pxi (the sampler),
# vision_roi.pxi (regions) and vision_nms.pxi; the volume sampler (grid_sample3d, Sample3) is
# vision_sample3d.pxi, the 2-D sampler's axis rules on three axes.
#
# Parameter layouts (ints): the Sample, Roi and Nms structs below, whose field names this module
# exports (SAMPLE_FIELDS, ROI_FIELDS, NMS_FIELDS) with the codes of their enums; floats:
#   sample:                  bufs: x (n, c, h, w), grid (n, oh, ow, 2), y (n, c, oh, ow)
#   sample_backward_data:    bufs: grid, dy, dx
#   sample_backward_points:  bufs: x, grid, dy, dgrid
#       floats: [the constant border's value]
#   roi:                     bufs: x, rois (k, 5), y (k, c, oh, ow)
#   roi_backward:            bufs: x, rois, dy, dx
#   roi_backward_rois:       bufs: x, rois, dy, drois (roi_align only)
#       floats: [scale, offset]
#   nms:                     bufs: boxes (n, 4), scores (n,), keep (max_output,) int32,
#                            workspace (2 * n indices)     floats: [iou threshold]
#
# Design: coordinates and weights are computed in double for both dtypes, so float32 results
# stay within an ulp or two of PyTorch's and MegEngine's float arithmetic, and the CUDA twin
# repeats the same operations. Scatters (the data gradients) run per plane (sampler) or per
# channel (regions), each thread owning whole planes of dx and adding in one fixed order, so
# results are bitwise the same at any thread count; forward passes split over output points.
# remap also reads uint8 images (sample_u8, vision_sample_u8.pxi): the sampler's sums in double,
# rounded by pixels.pxd's round_u8.

from libc.math cimport INFINITY, NAN, ceil, fabs, floor, fmod, isfinite, nearbyint, round
from libc.string cimport memset
from cython cimport floating

from .abi cimport Call, KERNEL_BAD_VALUE, KERNEL_INDEX_OUT_OF_RANGE, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for
from .pixels cimport pixel_t, round_u8
from libc.stdint cimport uint8_t

ctypedef struct Sample:
    Py_ssize_t coord, coord_pad, interp, border, n, c, h, w, oh, ow, threads

ctypedef struct Sample3:  # the volume sampler's (vision_sample3d.pxi): Sample's, one more axis
    Py_ssize_t coord, coord_pad, interp, border, n, c, d, h, w, od, oh, ow, threads

ctypedef struct Roi:
    Py_ssize_t kind, mode, n, c, h, w, k, oh, ow, sh, sw, threads

ctypedef struct Nms:
    Py_ssize_t boxes, max_output

cdef enum Coord:
    C_ALIGNED, C_UNALIGNED, C_PIXEL
cdef enum CoordPad:
    PAD_NONE, PAD_CLIP, PAD_REFLECT
cdef enum Interp:
    I_NEAREST, I_LINEAR, I_CUBIC
cdef enum Border:
    B_CONSTANT, B_REPLICATE, B_REFLECT, B_REFLECT_101, B_WRAP
cdef enum RoiKind:
    R_ALIGN, R_ALIGN_ONNX, R_POOLING
cdef enum RoiMode:
    M_AVERAGE, M_MAX

COORDS = {"aligned": C_ALIGNED, "unaligned": C_UNALIGNED, "pixel": C_PIXEL}
COORD_PADS = {"none": PAD_NONE, "clip": PAD_CLIP, "reflect": PAD_REFLECT}
INTERPS = {"nearest": I_NEAREST, "linear": I_LINEAR, "cubic": I_CUBIC}
BORDERS = {"constant": B_CONSTANT, "replicate": B_REPLICATE, "reflect": B_REFLECT,
           "reflect_101": B_REFLECT_101, "wrap": B_WRAP}
ROI_KINDS = {"align": R_ALIGN, "align_onnx": R_ALIGN_ONNX, "pooling": R_POOLING}
ROI_MODES = {"average": M_AVERAGE, "max": M_MAX}

cdef Sample _sample
cdef Roi _roi
cdef Nms _nms
cdef Sample3 _sample3
SAMPLE3_FIELDS = fields_of(_sample3, sizeof(Sample3))
SAMPLE_FIELDS = fields_of(_sample, sizeof(Sample))
ROI_FIELDS = fields_of(_roi, sizeof(Roi))
NMS_FIELDS = fields_of(_nms, sizeof(Nms))

cdef double FAR = 4503599627370496.0  # 2**52: past it every double is an integer


include "vision_sample.pxi"
include "vision_sample_u8.pxi"
include "vision_roi.pxi"
include "vision_nms.pxi"
include "vision_sample3d.pxi"


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef int sample_f32(const Call* c) noexcept nogil:
    return run_sample(c, S_FORWARD, c.bufs[0], c.bufs[1], NULL, c.bufs[2], True)
cdef int sample_f64(const Call* c) noexcept nogil:
    return run_sample(c, S_FORWARD, c.bufs[0], c.bufs[1], NULL, c.bufs[2], False)
cdef int sample_backward_data_f32(const Call* c) noexcept nogil:
    return run_sample(c, S_DATA, NULL, c.bufs[0], c.bufs[1], c.bufs[2], True)
cdef int sample_backward_data_f64(const Call* c) noexcept nogil:
    return run_sample(c, S_DATA, NULL, c.bufs[0], c.bufs[1], c.bufs[2], False)
cdef int sample_backward_points_f32(const Call* c) noexcept nogil:
    return run_sample(c, S_POINTS, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[3], True)
cdef int sample_backward_points_f64(const Call* c) noexcept nogil:
    return run_sample(c, S_POINTS, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[3], False)
cdef int roi_kernel_f32(const Call* c) noexcept nogil:
    return run_roi(c, P_FORWARD, True)
cdef int roi_kernel_f64(const Call* c) noexcept nogil:
    return run_roi(c, P_FORWARD, False)
cdef int roi_backward_f32(const Call* c) noexcept nogil:
    return run_roi(c, P_DATA, True)
cdef int roi_backward_f64(const Call* c) noexcept nogil:
    return run_roi(c, P_DATA, False)
cdef int roi_backward_rois_f32(const Call* c) noexcept nogil:
    return run_roi(c, P_BOXES, True)
cdef int roi_backward_rois_f64(const Call* c) noexcept nogil:
    return run_roi(c, P_BOXES, False)
cdef int nms_f32(const Call* c) noexcept nogil:
    return nms_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <int*>c.bufs[2],
                    <Py_ssize_t*>c.bufs[3], <const Nms*>c.ints, c.floats[0])
cdef int nms_f64(const Call* c) noexcept nogil:
    return nms_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <int*>c.bufs[2],
                    <Py_ssize_t*>c.bufs[3], <const Nms*>c.ints, c.floats[0])
cdef int sample3d_f32(const Call* c) noexcept nogil:
    return run_sample3d(c, S_FORWARD, c.bufs[0], c.bufs[1], NULL, c.bufs[2], True)
cdef int sample3d_f64(const Call* c) noexcept nogil:
    return run_sample3d(c, S_FORWARD, c.bufs[0], c.bufs[1], NULL, c.bufs[2], False)
cdef int sample3d_backward_data_f32(const Call* c) noexcept nogil:
    return run_sample3d(c, S_DATA, NULL, c.bufs[0], c.bufs[1], c.bufs[2], True)
cdef int sample3d_backward_data_f64(const Call* c) noexcept nogil:
    return run_sample3d(c, S_DATA, NULL, c.bufs[0], c.bufs[1], c.bufs[2], False)
cdef int sample3d_backward_points_f32(const Call* c) noexcept nogil:
    return run_sample3d(c, S_POINTS, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[3], True)
cdef int sample3d_backward_points_f64(const Call* c) noexcept nogil:
    return run_sample3d(c, S_POINTS, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[3], False)

KERNELS = {
    "sample_f32": kernel_address(sample_f32), "sample_f64": kernel_address(sample_f64),
    "sample_backward_data_f32": kernel_address(sample_backward_data_f32),
    "sample_backward_data_f64": kernel_address(sample_backward_data_f64),
    "sample_backward_points_f32": kernel_address(sample_backward_points_f32),
    "sample_backward_points_f64": kernel_address(sample_backward_points_f64),
    "roi_f32": kernel_address(roi_kernel_f32), "roi_f64": kernel_address(roi_kernel_f64),
    "roi_backward_f32": kernel_address(roi_backward_f32),
    "roi_backward_f64": kernel_address(roi_backward_f64),
    "roi_backward_rois_f32": kernel_address(roi_backward_rois_f32),
    "roi_backward_rois_f64": kernel_address(roi_backward_rois_f64),
    "nms_f32": kernel_address(nms_f32), "nms_f64": kernel_address(nms_f64),
    "sample_u8": kernel_address(sample_u8),
}
# the volume sampler (vision_sample3d.pxi)
KERNELS.update({
    "sample3d_f32": kernel_address(sample3d_f32), "sample3d_f64": kernel_address(sample3d_f64),
    "sample3d_backward_data_f32": kernel_address(sample3d_backward_data_f32),
    "sample3d_backward_data_f64": kernel_address(sample3d_backward_data_f64),
    "sample3d_backward_points_f32": kernel_address(sample3d_backward_points_f32),
    "sample3d_backward_points_f64": kernel_address(sample3d_backward_points_f64),
})
