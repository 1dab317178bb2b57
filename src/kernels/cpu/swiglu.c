// SwiGLU (Shazeer 2020): out = silu(gate) * up, with [gate | up] side by side in one (N, 2F) row
// so a single fused w1|w3 matmul produces both.
#include <stdint.h>

#include "core/float_formats.h"
#include "kernels/cpu/swiglu_row.h"
#include "kernels/kernels.h"

void ct_swiglu_forward(float *out, const float *inp, long N, long F) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) ct_swiglu_row(out + n * F, inp + n * 2 * F, inp + n * 2 * F + F, F);
}

void ct_swiglu_backward(float *dinp, const float *dout, const float *inp, long N, long F) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const float *g = inp + n * 2 * F;  // (2F): gate | up
        float *dg = dinp + n * 2 * F;      // (2F)
        ct_swiglu_backward_row(dg, dg + F, dout + n * F, g, g + F, F);
    }
}

// ------------------------------------------------------------------ bf16 rows
// (the rows: swiglu_row.h ct_swiglu_row_bf16)

void ct_swiglu_forward_bf16(uint16_t *out, uint16_t *h13_kept, const float *h13, long N, long F) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++)
        ct_swiglu_row_bf16(out + n * F, h13_kept + n * 2 * F, h13 ? h13 + n * 2 * F : NULL, F);
}

void ct_swiglu_backward_bf16(float *dinp, const float *dout, const uint16_t *h13_kept, long N, long F) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) ct_swiglu_backward_row_bf16(dinp + n * 2 * F, dout + n * F, h13_kept + n * 2 * F, F);
}
