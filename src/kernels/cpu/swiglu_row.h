// One SwiGLU row (internal to src/kernels/cpu): shared by ct_swiglu_forward, its bf16 form and
// the fused linear + SwiGLU kernel (fused.c), so all run the same vector code and give the same
// bits; and the backward's row, shared by ct_swiglu_backward and its bf16 form.
#ifndef CT_CPU_SWIGLU_ROW_H
#define CT_CPU_SWIGLU_ROW_H
#include <stdint.h>

#include "core/float_formats.h"
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

// ---- bf16 rows
// A bf16 row goes through fp32 tiles of CT_SWIGLU_BF16_TILE columns on the thread's stack,
// widened exactly, and the fp32 row functions run on the tiles: the same float operations on the
// same values as the fp32 kernels on the widened row, so the same bits. A tile starts at a
// multiple of 16 columns, so each column falls in the same loop of the row function (16 lanes,
// 8 lanes or the scalar tail) as in a whole row.
#define CT_SWIGLU_BF16_TILE 512  // a multiple of 16; 6 KiB of tiles per thread in the forward

static inline void ct_narrow_bf16(uint16_t *dst, const float *src, long n) {
    for (long i = 0; i < n; i++) dst[i] = ct_f32_to_bf16(src[i]);
}
static inline void ct_widen_bf16(float *dst, const uint16_t *src, long n) {
    for (long i = 0; i < n; i++) dst[i] = ct_bf16_to_f32(src[i]);
}

// One row of ct_swiglu_forward_bf16: h13 (2F) fp32 [gate | up] narrowed into h13_kept (2F)
// (h13 NULL: h13_kept already holds it), o16 (F) = swiglu of h13_kept's values, narrowed.
static inline void ct_swiglu_row_bf16(uint16_t *o16, uint16_t *h13_kept, const float *h13, long F) {
    enum { TILE = CT_SWIGLU_BF16_TILE };
    uint16_t *g16 = h13_kept, *u16 = h13_kept + F;  // (F) each
    float g[TILE], u[TILE], o[TILE];
    for (long f0 = 0; f0 < F; f0 += TILE) {
        long w = F - f0 < TILE ? F - f0 : TILE;
        if (h13) {
            ct_narrow_bf16(g16 + f0, h13 + f0, w);
            ct_narrow_bf16(u16 + f0, h13 + F + f0, w);
        }
        ct_widen_bf16(g, g16 + f0, w);
        ct_widen_bf16(u, u16 + f0, w);
        ct_swiglu_row(o, g, u, w);
        ct_narrow_bf16(o16 + f0, o, w);
    }
}

// One row of ct_swiglu_backward_bf16: dinp (2F) = the gradients of gate and up from d (F), the
// output's, with [gate | up] as kept in h13_kept (2F) bf16.
static inline void ct_swiglu_backward_row_bf16(float *dinp, const float *d, const uint16_t *h13_kept, long F) {
    enum { TILE = CT_SWIGLU_BF16_TILE };
    const uint16_t *g16 = h13_kept, *u16 = h13_kept + F;  // (F) each
    float *dg = dinp, *du = dinp + F;                      // (F) each
    float g[TILE], u[TILE];
    for (long f0 = 0; f0 < F; f0 += TILE) {
        long w = F - f0 < TILE ? F - f0 : TILE;
        ct_widen_bf16(g, g16 + f0, w);
        ct_widen_bf16(u, u16 + f0, w);
        ct_swiglu_backward_row(dg + f0, du + f0, d + f0, g, u, w);
    }
}
#endif
