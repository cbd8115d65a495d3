/* conv2d_backward_data (the transposed convolution, the data gradient) as the forward
 * convolution it is at stride 1: the layout conv.pyx's tiled and Winograd paths read
 * (conv_blocked.pxi's blocked_backward and pack_blocks, conv_winograd.pxi's wino_backward and
 * wino_filter) and the C runtime's (deploy/csrc/kernels/conv2d_f32.c), one source for both.
 *
 * dx (batch, cin, h, w) is dy (batch, cout, oh, ow) zero-padded by d (k - 1) - p on each side
 * (which must not be negative), convolved at stride 1 by the filters transposed (dx's channels
 * are that convolution's outputs, dy's its inputs) and turned by 180 degrees: its tap (i, j)
 * reads the padded dy at (i dh, j dw) from the output cell and weighs it by the filter's tap
 * (kh - 1 - i, kw - 1 - j).
 *
 * conv_shape is a convolution's sizes as plain integers, the first fields of conv.pyx's Conv
 * struct and of the C runtime's int64 parameter block (kernel_abi/conv.py's FIELDS), in their
 * order: each executor fills one from its own and asks conv_data_as_forward for the forward
 * convolution the data gradient is. */
#ifndef MG_CONV_DATA_H
#define MG_CONV_DATA_H

#include <stddef.h>

/* the padding of dy on one axis: kernel k, dilation d, the forward convolution's padding p */
static inline ptrdiff_t conv_data_pad(ptrdiff_t k, ptrdiff_t d, ptrdiff_t p) {
    return d * (k - 1) - p;
}

/* Where the data gradient's weight of its output channel o (dx's, within group g), input
 * channel c (dy's, within the group) and tap t (i * kw + j) lies in the forward filters w
 * (cout, cin / groups, kh, kw): nc dy channels and no dx channels per group, taps = kh * kw. */
static inline ptrdiff_t conv_data_weight(ptrdiff_t g, ptrdiff_t o, ptrdiff_t c, ptrdiff_t t,
                                         ptrdiff_t nc, ptrdiff_t no, ptrdiff_t taps) {
    return ((g * nc + c) * no + o) * taps + taps - 1 - t;
}

/* the sizes of a convolution: x (batch, cin, h, w), y (batch, cout, oh, ow), the kernel,
 * strides, paddings, dilations and groups */
typedef struct {
    ptrdiff_t batch, cin, h, w, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups;
} conv_shape;

/* t = the forward convolution that the data gradient of s is: dy's channels in, dx's out, dy's
 * planes padded by conv_data_pad, at stride 1 (the kernel, dilations and groups s's); 0 where
 * it is none (a stride above 1, or a padding past d (k - 1)), t filled all the same */
static inline int conv_data_as_forward(const conv_shape* s, conv_shape* t) {
    *t = *s;
    t->cin = s->cout, t->cout = s->cin;
    t->h = s->oh, t->w = s->ow, t->oh = s->h, t->ow = s->w;
    t->ph = conv_data_pad(s->kh, s->dh, s->ph);
    t->pw = conv_data_pad(s->kw, s->dw, s->pw);
    return s->sh == 1 && s->sw == 1 && t->ph >= 0 && t->pw >= 0;
}

#endif
