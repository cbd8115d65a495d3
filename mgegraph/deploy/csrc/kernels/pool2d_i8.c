/* pool2d_i8 and pool2d_u8: the quantized integers' poolings of _kernels/pool_int.h, which
 * pool_int.pxi runs too (one source: the same integers; its note says how they pool and round),
 * on its vectorised rows of the widest variant this CPU runs (AVX-512BW, AVX2, portable C: the
 * same integers), the planes split among the threads they pay for. The parameter block of
 * kernel_abi/pool.py's FIELDS and floats[0], the zero point (the counted padding's value);
 * bufs x, y. */
#include "pool_c.h"
#include "pool_int.h"

static void planes_i8(void* ctx, int64_t lo, int64_t hi) { pi_planes_i8(ctx, lo, hi); }
static void planes_u8(void* ctx, int64_t lo, int64_t hi) { pi_planes_u8(ctx, lo, hi); }

static int pool_int(const mgr_call* call, pool_part_fn planes) {
    pool_block s = pool_block_of(call);
    pi_run run = pi_run_of(&s, call->bufs[0], call->bufs[1], (int64_t)call->floats[0],
                           pi_widest());
    pool_parts(planes, &run, &s, 1, 1);
    return MGR_KERNEL_OK;
}

int mgr_pool2d_i8(const mgr_call* call) { return pool_int(call, planes_i8); }
int mgr_pool2d_u8(const mgr_call* call) { return pool_int(call, planes_u8); }

/* floats[0], the zero point: an integer of the dtype's range (the counted padding's value) */
static const char* pool_int_check(const mgr_check_args* x, int64_t dtype, double lo, double hi) {
    if (x->n_bufs != 2 || x->n_ints != POOL_FIELDS || x->n_floats != 1)
        return "wants buffers x, y, 17 ints and one float (the zero point)";
    double z = x->floats[0];
    if (!(z >= lo && z <= hi) || z != (double)(int64_t)z)
        return "the zero point is not an integer of the dtype's range";
    const char* why = pool_check(x, dtype, 1);
    if (why) return why;
    const pool_block* s = (const pool_block*)x->ints;
    int64_t window; /* an average's padding times the zero point stays an int64: 2^40 cells */
    if (!pool_is_adaptive(s) &&
        (!mgr_muladd(0, s->kh, s->kw, &window) || window > ((int64_t)1 << 40)))
        return "a window of more cells than an average sums";
    return NULL;
}

const char* mgr_pool2d_i8_check(const mgr_check_args* x) {
    return pool_int_check(x, 5, -128, 127);
}
const char* mgr_pool2d_u8_check(const mgr_check_args* x) { return pool_int_check(x, 4, 0, 255); }
