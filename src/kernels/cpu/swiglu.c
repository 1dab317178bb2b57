// SwiGLU (Shazeer 2020): out = silu(gate) * up, with [gate | up] side by side in one (N, 2F) row
// so a single fused w1|w3 matmul produces both.
#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/swiglu_row.h"
#include "kernels/kernels.h"

void ct_swiglu_forward(float *out, const float *inp, long N, long F) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) ct_swiglu_row(out + n * F, inp + n * 2 * F, inp + n * 2 * F + F, F);
}

// d silu(g)/dg = sig(g) (1 + g (1 - sig(g)))
void ct_swiglu_backward(float *dinp, const float *dout, const float *inp, long N, long F) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const float *g = inp + n * 2 * F, *u = g + F;  // (F), (F)
        const float *d = dout + n * F;                 // (F)
        float *dg = dinp + n * 2 * F, *du = dg + F;    // (F), (F)
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
}
