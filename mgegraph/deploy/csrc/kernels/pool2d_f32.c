/* pool2d_f32: max, the two averages and the adaptive windows over float32 planes: the passes of
 * _kernels/pool.h, which pool.pyx runs too (one source: the same bits, NaN, ties and signed
 * zeros included; its note says how the windows are walked): the max built for the baseline,
 * the averages for the baseline and AVX2, the widest this CPU runs picked (aarch64's baseline
 * being NEON). The parameter block of kernel_abi/pool.py's FIELDS; bufs x, y. The gradients are
 * pool2d_backward_f32.c's, the int8 and uint8 poolings pool2d_i8.c's: a plan's library holds the
 * files it calls. */
#include "pool_c.h"

POOL_BASE_PART(max_part, pool_max_f32)
POOL_PARTS(avg_part, pool_avg_f32)

int mgr_pool2d_f32(const mgr_call* call) {
    pool_block s = pool_block_of(call);
    int is_max = pool_is_max(&s);
    pool_run run = pool_run_of(is_max ? POOL_R_MAX : POOL_R_AVG, &s, call->bufs[0],
                               call->bufs[0], call->bufs[1], call->bufs[1], call->bufs[1]);
    pool_parts(is_max ? max_part(&run) : avg_part(&run), &run, &s, 1, 4);
    return MGR_KERNEL_OK;
}

const char* mgr_pool2d_f32_check(const mgr_check_args* x) {
    if (x->n_bufs != 2 || x->n_ints != POOL_FIELDS || x->n_floats != 0)
        return "wants buffers x, y, 17 ints and no floats";
    return pool_check(x, 0, 4);
}
