// The cuda backend's table: each member with its kernels.h contract, the device kernels of the
// *.cu files (cuda_kernels.h) or cuBLASLt (blas_cuda.c) behind it, and the orchestration the cpu
// functions do in C: the chunked output projection + cross-entropy, the fused forward chains
// (unfused here: the chain's kernels one after another), RoPE tables (made on the host with the
// cpu's function, so both backends rotate by the same floats), AdamW's bias corrections.
// Host round trips for results the contract returns to the host (losses, norms, the bad-target
// row): each synchronises the compute stream.
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

// ---- layers
// The per-chunk column sums of dweight go to the backend's small buffer (the table's contract
// has no scratch for rmsnorm): chunks x C floats, 4 MB at N 65536, C 8192.
static void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             const float *rstd, long N, long C) {
    long chunks = (N + CT_CUDA_RMSNORM_DW_ROWS - 1) / CT_CUDA_RMSNORM_DW_ROWS;
    float *part = dweight && N > 0 ? ct_cuda_small_buffer((size_t)(chunks * C) * sizeof(float)) : NULL;
    ct_cuda_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, part);
}
static void rope_tables(float *cos_tab, float *sin_tab, long max_T, long HS, double theta, double scale_factor,
                        double low_freq_factor, double high_freq_factor, long original_max_pos) {
    size_t n = (size_t)max_T * (size_t)(HS / 2);
    float *hc = malloc(n * sizeof(float)), *hs = malloc(n * sizeof(float));  // start-up only
    if (!hc || !hs) ct_fatal("cuda", "rope_tables: no host memory for %zu floats", 2 * n);
    ct_rope_tables(hc, hs, max_T, HS, theta, scale_factor, low_freq_factor, high_freq_factor, original_max_pos);
    ct_cuda_from_host(cos_tab, hc, n * sizeof(float));
    ct_cuda_from_host(sin_tab, hs, n * sizeof(float));
    free(hc);
    free(hs);
}

static void rope_forward(float *x, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
                         long B, long T, long H, long HS, long ld) {
    ct_cuda_rope(x, cos_tab, sin_tab, pos, pos_ld, B, T, H, HS, ld, 1.0f);
}
static void rope_backward(float *dx, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
                          long B, long T, long H, long HS, long ld) {
    ct_cuda_rope(dx, cos_tab, sin_tab, pos, pos_ld, B, T, H, HS, ld, -1.0f);
}

// The GPU kernels keep their state in registers: no scratch (one float so callers never
// allocate 0 bytes).
static long attention_scratch_floats(long Tq, long Tk, long HS) { return 1; }

static void check_heads(const char *what, long NH, long NKV, long HS) {
    if (HS > CT_CUDA_ATT_MAX_HS || HS < 1 || NKV < 1 || NH % NKV != 0)
        ct_fatal("cuda", "%s: head size %ld (at most %d) or heads %ld / kv heads %ld not supported", what, HS,
                 (int)CT_CUDA_ATT_MAX_HS, NH, NKV);
}

static void attention_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk,
                              const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                              const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS, float *scratch) {
    check_heads("attention_forward", NH, NKV, HS);
    ct_cuda_attention_forward(out, lse, q, ldq, k, ldk, v, ldv, q_pos, k_pos, q_doc, k_doc, B, Tq, Tk, NH, NKV, HS);
}

static void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, long ldq, const float *k, long ldk, const float *v,
                               long ldv, const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc,
                               const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS, float *scratch) {
    check_heads("attention_backward", NH, NKV, HS);
    ct_cuda_attention_backward(dq, dk, dv, dout, out, lse, q, ldq, k, ldk, v, ldv, q_pos, k_pos, q_doc, k_doc, B, Tq, Tk, NH,
                               NKV, HS);
}

// ---- output projection + cross-entropy
// scratch: logits (chunk_rows, V), then the row losses (chunk_rows doubles, aligned up to 8
// bytes: two floats of slack) and the running total (one double), then the bf16 copies of the
// products' inputs (bf16 only).
static long own_floats(long chunk_rows, long V) { return chunk_rows * V + 2 * chunk_rows + 4; }
static long xent_scratch_floats(long chunk_rows, long V, long C, bool bf16) {
    return own_floats(chunk_rows, V) + ct_head_products_floats(chunk_rows, V, C, bf16);
}

// The loss never leaves the device: the rows' losses are added to a running total in row order
// (the cpu's sum), and the total to *loss_sum. The targets are taken as valid (kernels/backend.h,
// xent_bad_target): checking them here would read the device back in every loss call.
static void xent_fused(double *loss_sum, float *dx, float *dW, const float *x, const void *W, const int32_t *targets,
                       long N, long C, long V, float grad_scale, long chunk_rows, bool bf16, float *scratch) {
    float *logits = scratch;  // (chunk_rows, V)
    uintptr_t at = ((uintptr_t)(scratch + chunk_rows * V) + 7) & ~(uintptr_t)7;
    double *row_loss = (double *)at;     // (chunk_rows)
    double *total = row_loss + chunk_rows;  // (1)
    ct_cuda_zero(total, sizeof *total);
    ct_head_products h =
        ct_head_products_begin(&ct_kernels_cuda, bf16, W, V, C, chunk_rows, scratch + own_floats(chunk_rows, V));
    for (long r0 = 0; r0 < N; r0 += chunk_rows) {
        long nr = N - r0 < chunk_rows ? N - r0 : chunk_rows;
        const float *xc = x + r0 * C;  // (nr, C)
        ct_head_logits(&h, logits, xc, W, nr);
        ct_cuda_xent_rows_fused(logits, row_loss, targets + r0, nr, V, grad_scale, dx != NULL);
        if (dx) ct_head_backward(&h, dx + r0 * C, dW, logits, xc, W, nr);
        ct_cuda_f64_add_in_order(total, row_loss, nr);
    }
    ct_cuda_f64_add_in_order(loss_sum, total, 1);
}

// ---- optimizer and reductions
static void adamw_update(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, long step, const float *grad_scale) {
    float bc1 = (float)(1.0 - pow((double)beta1, (double)step));  // as the cpu: in double, then float
    float bc2 = (float)(1.0 - pow((double)beta2, (double)step));
    ct_cuda_adamw(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);
}

// Parts per block, summed on the device in part order into a fresh total, which is added to *sum.
static void sum_squares(double *sum, const float *x, long n) {
    if (n <= 0) return;
    double *parts = ct_cuda_small_buffer((CT_CUDA_SUMSQ_PARTS + 1) * sizeof(double));
    double *total = parts + CT_CUDA_SUMSQ_PARTS;
    ct_cuda_sumsq_parts(parts, x, n);
    ct_cuda_zero(total, sizeof *total);
    ct_cuda_f64_add_in_order(total, parts, CT_CUDA_SUMSQ_PARTS);
    ct_cuda_f64_add_in_order(sum, total, 1);
}

static void f32_to_bf16(uint16_t *dst, const float *src, long n) { ct_cuda_f32_to_bf16(dst, src, n); }
static void bf16_to_f32(float *dst, const uint16_t *src, long n) { ct_cuda_bf16_to_f32(dst, src, n); }

// ---- fused forward chains, as the unfused kernels in sequence (same results by construction)
static void residual_rmsnorm_forward(float *x_out, float *norm_out, float *rstd, const float *x,
                                     const float *residual_delta, const float *weight, long N, long C, float eps) {
    ct_cuda_add_to(x_out, x, residual_delta, N * C);
    ct_cuda_rmsnorm_forward(norm_out, rstd, x_out, weight, N, C, eps);
}

static long rmsnorm_linear_scratch_floats(long N, long C, long OC) { return N * C; }

// The norm of x into norm_out, or into scratch when it is not kept; returns where it went (N, C).
static const float *norm_into(float *norm_out, float *scratch, float *rstd, const float *x, const float *norm_weight,
                              long N, long C, float eps, const char *who) {
    float *norm = norm_out ? norm_out : scratch;
    if (!norm) ct_fatal("cuda", "%s: norm_out and scratch are both NULL", who);
    ct_cuda_rmsnorm_forward(norm, rstd, x, norm_weight, N, C, eps);
    return norm;
}

static void rmsnorm_linear_forward(float *out, float *norm_out, float *rstd, const float *x,
                                   const float *norm_weight, const float *W, long N, long C, long OC, float eps,
                                   float *scratch) {
    const float *norm = norm_into(norm_out, scratch, rstd, x, norm_weight, N, C, eps, "rmsnorm_linear_forward");
    ct_cuda_linear_forward(out, norm, W, N, C, OC);
}

static long linear_rope_scratch_floats(long N, long C, long QKV) { return 0; }
static void linear_rope_forward(float *qkv, const float *inp, const float *W, long N, long C, long QKV,
                                const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                                long T, long NH, long NKV, long HS, float *scratch) {
    if (N != B * T) ct_fatal("cuda", "linear_rope_forward: N %ld is not B %ld x T %ld", N, B, T);
    ct_cuda_linear_forward(qkv, inp, W, N, C, QKV);
    ct_cuda_rope(qkv, cos_tab, sin_tab, pos, pos_ld, B, T, NH, HS, QKV, 1.0f);
    ct_cuda_rope(qkv + NH * HS, cos_tab, sin_tab, pos, pos_ld, B, T, NKV, HS, QKV, 1.0f);
}

static void rmsnorm_linear_rope_forward(float *qkv, float *norm_out, float *rstd, const float *x,
                                        const float *norm_weight, const float *W, long N, long C, long QKV, float eps,
                                        const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
                                        long B, long T, long NH, long NKV, long HS, float *scratch) {
    if (N != B * T) ct_fatal("cuda", "rmsnorm_linear_rope_forward: N %ld is not B %ld x T %ld", N, B, T);
    const float *norm = norm_into(norm_out, scratch, rstd, x, norm_weight, N, C, eps, "rmsnorm_linear_rope_forward");
    linear_rope_forward(qkv, norm, W, N, C, QKV, cos_tab, sin_tab, pos, pos_ld, B, T, NH, NKV, HS, NULL);
}

static long linear_swiglu_scratch_floats(long N, long C, long F) { return N * 2 * F; }
static void linear_swiglu_forward(float *h13, float *h, const float *inp, const float *W13, long N, long C, long F,
                                  float *scratch) {
    float *g = h13 ? h13 : scratch;  // (N, 2F)
    if (!g) ct_fatal("cuda", "linear_swiglu_forward: h13 and scratch are both NULL");
    ct_cuda_linear_forward(g, inp, W13, N, C, 2 * F);
    ct_cuda_swiglu_forward(h, g, N, F);
}

// One cuBLAS product per expert: the sizes are on the host (kernels.h).
static void grouped_linear_forward(float *out, const float *inp, const float *weight, const int64_t *offsets, long E,
                                   long IC, long OC) {
    for (long e = 0; e < E; e++) {
        long r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n > 0) ct_cuda_linear_forward(out + r0 * OC, inp + r0 * IC, weight + e * OC * IC, n, IC, OC);
    }
}
static void grouped_linear_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                    const float *weight, const int64_t *offsets, long E, long IC, long OC) {
    for (long e = 0; e < E; e++) {
        long r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n > 0)
            ct_cuda_linear_backward(dinp ? dinp + r0 * IC : NULL, dweight ? dweight + e * OC * IC : NULL,
                                    dout + r0 * OC, inp + r0 * IC, weight + e * OC * IC, n, IC, OC);
    }
}
// The bf16 products as the dense linear layers take them (model/linear.c): cuBLAS bf16 inputs,
// fp32 accumulation, one call per expert and direction.
static void grouped_linear_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
                                        const int64_t *offsets, long E, long IC, long OC) {
    for (long e = 0; e < E; e++) {
        long r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n > 0)  // out (n, OC) = inp (n, IC) @ W_e (OC, IC)^T
            ct_cuda_gemm_bf16(0, 1, n, OC, IC, 1.0f, inp + r0 * IC, IC, weight + e * OC * IC, IC, 0.0f,
                              out + r0 * OC, OC);
    }
}
static void grouped_linear_backward_bf16(float *dinp, float *dweight, const uint16_t *dout, const uint16_t *inp,
                                         const uint16_t *weight, const int64_t *offsets, long E, long IC, long OC) {
    for (long e = 0; e < E; e++) {
        long r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n <= 0) continue;
        const uint16_t *g = dout + r0 * OC, *W = weight + e * OC * IC;
        if (dinp)  // dinp (n, IC) = dout (n, OC) @ W_e (OC, IC)
            ct_cuda_gemm_bf16(0, 0, n, IC, OC, 1.0f, g, OC, W, IC, 0.0f, dinp + r0 * IC, IC);
        if (dweight)  // dW_e (OC, IC) += dout^T @ inp (n, IC)
            ct_cuda_gemm_bf16(1, 0, OC, IC, n, 1.0f, g, OC, inp + r0 * IC, IC, 1.0f, dweight + e * OC * IC, IC);
    }
}

static const char *f8_gemm_path(void) {
    return "on cuda (float8: cuBLASLt fp8 products; MXFP8: codes decoded on the device, fp32 products)";
}

const ct_kernels ct_kernels_cuda = {
    .name = "cuda",
    .device = CT_DEVICE_CUDA,

    .zero = ct_cuda_zero,
    .copy = ct_cuda_copy,
    .copy_to_host = ct_cuda_to_host,
    .copy_from_host = ct_cuda_from_host,
    .copy_2d = ct_cuda_copy_2d,
    .synchronize = ct_cuda_synchronize,

    .gemm = ct_cuda_gemm,
    .linear_forward = ct_cuda_linear_forward,
    .linear_backward = ct_cuda_linear_backward,
    .matmul_peak_gflops = ct_cuda_matmul_peak_gflops,

    .embedding_forward = ct_cuda_embedding_forward,
    .embedding_forward_bf16 = ct_cuda_embedding_forward_bf16,
    .embedding_backward = ct_cuda_embedding_backward,
    .rmsnorm_forward = ct_cuda_rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .rope_tables = rope_tables,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .attention_scratch_floats = attention_scratch_floats,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_merge = ct_cuda_attention_merge,
    .swiglu_forward = ct_cuda_swiglu_forward,
    .swiglu_backward = ct_cuda_swiglu_backward,
    .rmsnorm_forward_bf16 = ct_cuda_rmsnorm_forward_bf16,
    .swiglu_forward_bf16 = ct_cuda_swiglu_forward_bf16,
    .swiglu_backward_bf16 = ct_cuda_swiglu_backward_bf16,
    .moe_router_forward = ct_cuda_moe_router_forward,
    .moe_router_backward = ct_cuda_moe_router_backward,
    .moe_aux_loss = ct_cuda_moe_aux_loss,
    .moe_bias_update = ct_cuda_moe_bias_update,
    .moe_dispatch_plan = ct_cuda_moe_dispatch_plan,
    .moe_permute = ct_cuda_moe_permute,
    .moe_permute_backward = ct_cuda_moe_permute_backward,
    .moe_combine = ct_cuda_moe_combine,
    .moe_combine_backward = ct_cuda_moe_combine_backward,
    .grouped_linear_forward = grouped_linear_forward,
    .grouped_linear_backward = grouped_linear_backward,
    .grouped_linear_forward_bf16 = grouped_linear_forward_bf16,
    .grouped_linear_backward_bf16 = grouped_linear_backward_bf16,

    .xent_scratch_floats = xent_scratch_floats,
    .xent_fused = xent_fused,

    .xent_rows_max = ct_cuda_xent_rows_max,
    .xent_rows_exp_sum = ct_cuda_xent_rows_exp_sum,
    .xent_rows_dlogits = ct_cuda_xent_rows_dlogits,
    .xent_rows_loss = ct_cuda_xent_rows_loss,
    .xent_rows_gathered = ct_cuda_xent_rows_gathered,

    .adamw_update = adamw_update,
    .clip_factor = ct_cuda_clip_factor,
    .sum_squares = sum_squares,
    .add_inplace = ct_cuda_add,
    .scale_inplace = ct_cuda_scale,

    .gemm_bf16 = ct_cuda_gemm_bf16,
    .matmul_peak_gflops_bf16 = ct_cuda_matmul_peak_gflops_bf16,
    .bf16_gemm_path = ct_cuda_bf16_gemm_path,
    .f8_gemm_path = f8_gemm_path,
    .f32_to_bf16 = f32_to_bf16,

    .gemm_f8_scratch_floats = ct_cuda_gemm_f8_scratch_floats,
    .gemm_f8 = ct_cuda_gemm_f8,
    .gemm_mxfp8 = ct_cuda_gemm_mxfp8,
    .f8_scratch_floats = ct_cuda_f8_scratch_floats,
    .linear_forward_f8 = ct_cuda_linear_forward_f8,

    .f8_backward_scratch_floats = ct_cuda_f8_backward_scratch_floats,
    .linear_backward_f8 = ct_cuda_linear_backward_f8,
    .bf16_to_f32 = bf16_to_f32,

    .residual_rmsnorm_forward = residual_rmsnorm_forward,
    .rmsnorm_linear_scratch_floats = rmsnorm_linear_scratch_floats,
    .rmsnorm_linear_forward = rmsnorm_linear_forward,
    .rmsnorm_linear_rope_forward = rmsnorm_linear_rope_forward,
    .linear_swiglu_scratch_floats = linear_swiglu_scratch_floats,
    .linear_swiglu_forward = linear_swiglu_forward,
    .linear_rope_scratch_floats = linear_rope_scratch_floats,
    .linear_rope_forward = linear_rope_forward,
};
