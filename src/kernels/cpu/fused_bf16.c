// Fused chains under bf16 mixed precision (contracts in kernels.h, "fused forward chains in
// bf16"): the residual add with the RMSNorm after it writing the kept bf16 norm, the two
// matmuls whose fp32 product is only narrowed on its way to a kept bf16 activation -- w13 with
// the SwiGLU after it, wqkv with the RoPE after it -- and in the backward w2's input gradient,
// which only SwiGLU's backward reads.
//
// A product runs as one ct_gemm_bf16_epilogue_rows call on all threads: the thread that
// multiplies a block of rows narrows it, and applies SwiGLU or RoPE, right after the block's
// rows of the fp32 product are final. Where the product is one B panel and one K block (the
// model's K of 256-1024 with a panel as wide as 2F or QKV) the rows never leave the thread's own
// buffer: the (N, 2F) or (N, QKV) fp32 product is neither written to memory nor read back, which
// at a short K is what the unfused chain's matmul and pass spend most of their time on.
//
// The rows are the unfused kernels' rows (swiglu_row.h ct_swiglu_row_bf16, rope_row.h
// ct_qkv_rope_row_to_bf16, rmsnorm_row.h ct_rmsnorm_row_bf16), and the epilogue leaves the
// gemm's sums as they are, so every output is the unfused chain's bits (test_kernels_fused_bf16).
#include "core/error.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/rmsnorm_row.h"
#include "kernels/cpu/rope_row.h"
#include "kernels/cpu/swiglu_row.h"
#include "kernels/kernels.h"

// ------------------------------------------------------------------ residual + RMSNorm

void ct_residual_rmsnorm_forward_bf16(float *x_out, uint16_t *norm_out, float *rstd, const float *x,
                                      const float *residual_delta, const float *weight, long N, long C, float eps) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        ct_residual_add_row(x_out + n * C, x + n * C, residual_delta + n * C, C);  // (C), may alias either
        rstd[n] = ct_rmsnorm_row_bf16(norm_out + n * C, x_out + n * C, weight, C, eps);
    }
}

// ------------------------------------------------------------------ linear + SwiGLU

typedef struct {
    uint16_t *h, *h13_kept;
    long F;
} swiglu_rows_ctx;

static void swiglu_rows_after(void *p, long r0, long n, const float *rows, long ld) {
    const swiglu_rows_ctx *c = p;
    for (long i = 0; i < n; i++)
        ct_swiglu_row_bf16(c->h + (r0 + i) * c->F, c->h13_kept + (r0 + i) * 2 * c->F, rows + i * ld, c->F);
}

void ct_linear_swiglu_forward_bf16(uint16_t *h, uint16_t *h13_kept, float *h13, const uint16_t *inp,
                                   const uint16_t *W13, const void *W13_packed, long N, long C, long F) {
    if (N <= 0) return;
    swiglu_rows_ctx c = {h, h13_kept, F};
    ct_gemm_bf16_epilogue epi = {.rows = swiglu_rows_after, .ctx = &c};
    ct_gemm_bf16_epilogue_rows(0, 1, N, 2 * F, C, 1.0f, inp, C, W13, C, W13_packed, h13, 2 * F, &epi);
}

// ------------------------------------------------------------------ w2's input gradient + SwiGLU's backward

typedef struct {
    float *dh13;
    const uint16_t *h13_kept;
    long F;
} swiglu_back_ctx;

static void swiglu_back_rows(void *p, long r0, long n, const float *rows, long ld) {
    const swiglu_back_ctx *c = p;
    for (long i = 0; i < n; i++)
        ct_swiglu_backward_row_bf16(c->dh13 + (r0 + i) * 2 * c->F, rows + i * ld, c->h13_kept + (r0 + i) * 2 * c->F,
                                    c->F);
}

void ct_linear_swiglu_backward_bf16(float *dh13, float *dh, const uint16_t *dy, const uint16_t *W2,
                                    const void *W2_packed, const uint16_t *h13_kept, long N, long C, long F) {
    if (N <= 0) return;
    swiglu_back_ctx c = {dh13, h13_kept, F};
    ct_gemm_bf16_epilogue epi = {.rows = swiglu_back_rows, .ctx = &c};
    ct_gemm_bf16_epilogue_rows(0, 0, N, F, C, 1.0f, dy, C, W2, F, W2_packed, dh, F, &epi);
}

// ------------------------------------------------------------------ linear + RoPE

typedef struct {
    uint16_t *qkv16;
    long T, NH, NKV, HS;
    const float *cos_tab, *sin_tab;
    const int32_t *pos;  // row b of T positions at pos + b * pos_ld (NULL: 0..T-1)
    long pos_ld;
} rope_rows_ctx;

static void rope_rows_after(void *p, long r0, long m, const float *rows, long ld) {
    const rope_rows_ctx *c = p;
    long half = c->HS / 2, QKV = (c->NH + 2 * c->NKV) * c->HS;
    for (long i = 0; i < m; i++) {
        long n = r0 + i, t = n % c->T, pp = c->pos ? (long)c->pos[n / c->T * c->pos_ld + t] : t;
        const float *cs = c->cos_tab + pp * half, *sn = c->sin_tab + pp * half;  // (HS/2)
        ct_qkv_rope_row_to_bf16(c->qkv16 + n * QKV, rows + i * ld, c->NH, c->NKV, c->HS, cs, sn);
    }
}

void ct_linear_rope_forward_bf16(uint16_t *qkv16, float *qkv, const uint16_t *inp, const uint16_t *W,
                                 const void *W_packed, long N, long C,
                                 const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                                 long T, long NH, long NKV, long HS) {
    if (N != B * T) ct_fatal("ct_linear_rope_forward_bf16", "N=%ld is not B*T=%ld*%ld", N, B, T);
    if (N <= 0) return;
    long QKV = (NH + 2 * NKV) * HS;
    rope_rows_ctx c = {qkv16, T, NH, NKV, HS, cos_tab, sin_tab, pos, pos_ld};
    ct_gemm_bf16_epilogue epi = {.rows = rope_rows_after, .ctx = &c};
    ct_gemm_bf16_epilogue_rows(0, 1, N, QKV, C, 1.0f, inp, C, W, C, W_packed, qkv, QKV, &epi);
}
