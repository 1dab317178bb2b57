// Spin waits for another thread of a team (attention's ordered adds, ct_gemm's shared passes).
#ifndef CT_KERNELS_CPU_SPIN_H
#define CT_KERNELS_CPU_SPIN_H
#include <sched.h>

// One turn of a spin wait: a pause, and after 1,000 turns a yield -- the thread waited for may
// have lost its core (more ranks x threads than cores). *spins starts at 0 for each wait.
static inline void ct_spin_turn(int *spins) {
    if (++*spins > 1000) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

#endif
