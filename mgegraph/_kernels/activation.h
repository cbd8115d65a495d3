/* The activations a GEMM or convolution applies in its epilogue (the ``activation`` attribute of
 * linear and conv2d; codes as kernel_abi.activations.ACTIVATIONS): each is bitwise the elementwise
 * op it replaces, so a fused plan gives the bits of the unfused one.
 *   ACT_RELU:  relu's "x <= 0 ? 0 : x" (NaN stays, -0 becomes +0);
 *   ACT_RELU6: clip(x, 0, 6) as m_clamp computes it, "t = x < 0 ? 0 : x; t > 6 ? 6 : t" (NaN
 *              stays, -0 stays -0).
 * ACT_VEC applies one to a GCC vector ``v`` of type VT whose lanes' bits are integer vector IT. */
#ifndef MG_ACTIVATION_H
#define MG_ACTIVATION_H

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_RELU6 = 2 };

static inline float act_f32(float v, int act) {
    if (act == ACT_RELU) return v <= 0 ? 0 : v;
    if (act == ACT_RELU6) {
        float t = v < 0 ? 0 : v;
        return t > 6 ? 6 : t;
    }
    return v;
}

static inline double act_f64(double v, int act) {
    if (act == ACT_RELU) return v <= 0 ? 0 : v;
    if (act == ACT_RELU6) {
        double t = v < 0 ? 0 : v;
        return t > 6 ? 6 : t;
    }
    return v;
}

#define ACT_VEC(VT, IT, v, act)                                                              \
    do {                                                                                     \
        if ((act) == ACT_RELU) {                                                             \
            (v) = (VT)((IT)(v) & ~(IT)((v) <= (VT){0}));                                     \
        } else if ((act) == ACT_RELU6) {                                                     \
            VT six_ = (VT){0} + 6;                                                           \
            VT t_ = (VT)((IT)(v) & ~(IT)((v) < (VT){0}));                                    \
            IT big_ = (IT)(t_ > six_);                                                       \
            (v) = (VT)(((IT)t_ & ~big_) | ((IT)six_ & big_));                                \
        }                                                                                    \
    } while (0)

#endif
