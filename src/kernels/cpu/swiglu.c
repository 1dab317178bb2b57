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
// A bf16 row goes through fp32 tiles of TILE columns on the thread's stack, widened exactly, and
// the fp32 row functions run on the tiles: the same float operations on the same values as the
// fp32 kernels on the widened row, so the same bits. A tile starts at a multiple of 16 columns,
// so each column falls in the same loop of the row function (16 lanes, 8 lanes or the scalar
// tail) as in a whole row.
#define TILE 512  // a multiple of 16; 6 KiB of tiles per thread in the forward

static inline void narrow(uint16_t *dst, const float *src, long n) {
    for (long i = 0; i < n; i++) dst[i] = ct_f32_to_bf16(src[i]);
}
static inline void widen(float *dst, const uint16_t *src, long n) {
    for (long i = 0; i < n; i++) dst[i] = ct_bf16_to_f32(src[i]);
}

void ct_swiglu_forward_bf16(uint16_t *out, uint16_t *h13_kept, const float *h13, long N, long F) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        uint16_t *g16 = h13_kept + n * 2 * F, *u16 = g16 + F, *o16 = out + n * F;  // (F) each
        float g[TILE], u[TILE], o[TILE];
        for (long f0 = 0; f0 < F; f0 += TILE) {
            long w = F - f0 < TILE ? F - f0 : TILE;
            if (h13) {
                narrow(g16 + f0, h13 + n * 2 * F + f0, w);
                narrow(u16 + f0, h13 + n * 2 * F + F + f0, w);
            }
            widen(g, g16 + f0, w);
            widen(u, u16 + f0, w);
            ct_swiglu_row(o, g, u, w);
            narrow(o16 + f0, o, w);
        }
    }
}

void ct_swiglu_backward_bf16(float *dinp, const float *dout, const uint16_t *h13_kept, long N, long F) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const uint16_t *g16 = h13_kept + n * 2 * F, *u16 = g16 + F;  // (F) each
        float *dg = dinp + n * 2 * F, *du = dg + F;                  // (F) each
        const float *d = dout + n * F;                               // (F)
        float g[TILE], u[TILE];
        for (long f0 = 0; f0 < F; f0 += TILE) {
            long w = F - f0 < TILE ? F - f0 : TILE;
            widen(g, g16 + f0, w);
            widen(u, u16 + f0, w);
            ct_swiglu_backward_row(dg + f0, du + f0, d + f0, g, u, w);
        }
    }
}
