/* MobileNet-v2's block (1x1 expand 32 -> 192 + relu6, 3x3 depthwise + relu6, 1x1 project to 32,
 * the residual add at stride 1) on the kernels' own code (conv_pointwise.h, dw3.h), split among
 * threads as conv_pointwise.pxi and conv_depthwise.pxi split it: the pointwise layers by ranges
 * of cells beginning on cache lines, the depthwise by whole planes. Per layer and call it gives
 * the wall time, each thread's CPU time in its part and when the worker began its part after
 * the caller did, so a run tells a split that does more work on two threads (CPU time) from a
 * thread that starts late or is not scheduled (wall time beyond the slower thread's CPU time).
 * Built and driven by mobilenet_threads.py. */
#include <omp.h>
#include <stdlib.h>
#include <time.h>

#include "conv_pointwise.h"
#include "dw3.h"

enum { LAYERS = 4, FIGURES = 4, CIN = 32, EXPANDED = 192, LINE = 16 };

static float *x, *w1, *b1, *e, *w2, *b2, *d, *w3, *b3, *y, *out, *pads;
static ptrdiff_t cells, ocells, slot, stride_;
static dw3_geom geom;
static int isa;

static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static float* filled(ptrdiff_t n, float scale) {
    float* p = aligned_alloc(64, ((size_t)n * 4 + 63) / 64 * 64);
    for (ptrdiff_t i = 0; i < n; i++) p[i] = scale * ((float)((i * 7919) % 1000) / 500 - 1);
    return p;
}

/* buffers for a size x size input at stride 1 or 2, as the plans' (64-byte aligned) */
int block_setup(int size, int stride) {
    if (size < 3 || (stride != 1 && stride != 2)) return -1;
    int osize = (size - 1) / stride + 1;
    geom = (dw3_geom){size, size, osize, osize, stride, stride, 1, 1, 1};
    cells = (ptrdiff_t)size * size, ocells = (ptrdiff_t)osize * osize, stride_ = stride;
    slot = dw3_slot(&geom), isa = cpu_isa_widest();
    x = filled(CIN * cells, 2), e = filled(EXPANDED * cells, 0), d = filled(EXPANDED * ocells, 0);
    w1 = filled(EXPANDED * CIN, 0.3f), b1 = filled(EXPANDED, 0.1f), w2 = filled(EXPANDED * 9, 0.5f);
    b2 = filled(EXPANDED, 0.1f), w3 = filled(CIN * EXPANDED, 0.1f), b3 = filled(CIN, 0.1f);
    y = filled(CIN * ocells, 0), out = filled(CIN * ocells, 0), pads = filled(64 * slot, 0);
    return 0;
}

/* where thread t of nt begins a plane of n cells: on a cache line (the last ends at n) */
static ptrdiff_t cut(ptrdiff_t n, int t, int nt) { return t == nt ? n : n * t / nt / LINE * LINE; }

#define TIMED_PART(layer, body)                                                             \
    {                                                                                       \
        double wall = now(CLOCK_MONOTONIC);                                                 \
        _Pragma("omp parallel num_threads(nt)") {                                           \
            int t = omp_get_thread_num();                                                   \
            double began = now(CLOCK_MONOTONIC), cpu = now(CLOCK_THREAD_CPUTIME_ID);         \
            body;                                                                           \
            if (t < 2) f[(layer) * FIGURES + 1 + t] = now(CLOCK_THREAD_CPUTIME_ID) - cpu;     \
            if (t == 1) f[(layer) * FIGURES + 3] = began - wall;                            \
        }                                                                                   \
        f[(layer) * FIGURES] = now(CLOCK_MONOTONIC) - wall;                                 \
    }

/* one call of the block on nt threads; f: per layer, wall us, thread 0's and thread 1's CPU us,
 * the worker's start us after the caller's (0 on one thread) */
void block_run(int nt, double* f) {
    for (int i = 0; i < LAYERS * FIGURES; i++) f[i] = 0;
    TIMED_PART(0, pw_of(isa, CIN)(x, cells, CIN, w1, EXPANDED, b1, ACT_RELU6, e, cells,
                                  cut(cells, t, nt), cut(cells, t + 1, nt)))
    TIMED_PART(1, for (int p = EXPANDED * t / nt; p < EXPANDED * (t + 1) / nt; p++)
                      dw3_f32_of(isa)(e + p * cells, pads + t * slot, w2 + 9 * p, b2 + p,
                                      ACT_RELU6, d + p * ocells, &geom))
    TIMED_PART(2, pw_of(isa, EXPANDED)(d, ocells, EXPANDED, w3, CIN, b3, ACT_NONE, y, ocells,
                                       cut(ocells, t, nt), cut(ocells, t + 1, nt)))
    double wall = now(CLOCK_MONOTONIC);
    if (stride_ == 1)
        for (ptrdiff_t i = 0; i < CIN * cells; i++) out[i] = x[i] + y[i];
    f[3 * FIGURES] = f[3 * FIGURES + 1] = now(CLOCK_MONOTONIC) - wall;
}
