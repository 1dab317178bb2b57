// One SwiGLU row (internal to src/kernels/cpu): shared by ct_swiglu_forward, its bf16 form and
// the fused linear + SwiGLU kernel (fused.c), so all run the same vector code and give the same
// bits; and the backward's row, shared by ct_swiglu_backward and its bf16 form.
#ifndef CT_CPU_SWIGLU_ROW_H
#define CT_CPU_SWIGLU_ROW_H
#include "kernels/cpu/fastmath.h"

// o (F) = silu(g) * u = g sigmoid(g) u. The vector loops give each lane the scalar tail's bits.
static inline void ct_swiglu_row(float *o, const float *g, const float *u, long F) {
    long f = 0;
#ifdef CT_V16
    for (; f + 16 <= F; f += 16) {
        ct_v16f gv = ct_v16f_load(g + f);
        ct_v16f_store(o + f, gv * ct_fast_sigmoidf_v16(gv) * ct_v16f_load(u + f));
    }
#endif
    for (; f + 8 <= F; f += 8) {
        ct_v8f gv = ct_v8f_load(g + f);
        ct_v8f_store(o + f, gv * ct_fast_sigmoidf_v8(gv) * ct_v8f_load(u + f));
    }
    for (; f < F; f++) o[f] = g[f] * ct_fast_sigmoidf(g[f]) * u[f];
}

// dg, du (F) = the gradients of gate g and up u (F) from d (F), that of o:
// du = d silu(g), dg = d u silu'(g), silu'(g) = sig(g) (1 + g (1 - sig(g))).
static inline void ct_swiglu_backward_row(float *dg, float *du, const float *d, const float *g, const float *u,
                                          long F) {
    long f = 0;
#ifdef CT_V16
    for (; f + 16 <= F; f += 16) {
        ct_v16f gv = ct_v16f_load(g + f), dv = ct_v16f_load(d + f), s = ct_fast_sigmoidf_v16(gv);
        ct_v16f_store(du + f, dv * gv * s);
        ct_v16f_store(dg + f, dv * ct_v16f_load(u + f) * s * (1.0f + gv * (1.0f - s)));
    }
#endif
    for (; f + 8 <= F; f += 8) {
        ct_v8f gv = ct_v8f_load(g + f), dv = ct_v8f_load(d + f), s = ct_fast_sigmoidf_v8(gv);
        ct_v8f_store(du + f, dv * gv * s);
        ct_v8f_store(dg + f, dv * ct_v8f_load(u + f) * s * (1.0f + gv * (1.0f - s)));
    }
    for (; f < F; f++) {
        float s = ct_fast_sigmoidf(g[f]);
        du[f] = d[f] * g[f] * s;
        dg[f] = d[f] * u[f] * s * (1.0f + g[f] * (1.0f - s));
    }
}
#endif
