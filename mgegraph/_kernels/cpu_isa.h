/* The instruction sets the hand-vectorised kernels (conv_tile.h, gemv_row.h) are built for, each
 * through GCC's target attribute: 0 baseline, 1 AVX2 + FMA, 2 AVX-512F + FMA. */
#ifndef MG_CPU_ISA_H
#define MG_CPU_ISA_H

/* whether this CPU runs instruction set ``isa`` */
static inline int cpu_isa_ok(int isa) {
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    if (isa == 1) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == 2) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#endif
    return isa == 0;
}

/* the widest instruction set this CPU runs */
static inline int cpu_isa_widest(void) { return cpu_isa_ok(2) ? 2 : cpu_isa_ok(1) ? 1 : 0; }

#endif
