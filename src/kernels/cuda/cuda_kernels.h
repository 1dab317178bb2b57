// The cuda backend's device kernels (internal to src/kernels/cuda): plain C launchers around the
// __global__ functions of the *.cu files, so the table (backend_cuda.c, C) never sees C++.
//
// Every launcher queues its work on the compute stream, which is the legacy default stream (0):
// the one stream everything in this backend and cuBLASLt calls run on, and the stream
// comm_nccl.c orders its own stream against with events (comm/ cannot include this header, so
// the stream is named by convention, not passed). Pointers are device pointers; shapes and
// conventions are those of the kernels.h function of the same name (accumulate vs overwrite).
// After each launch ct_cuda_launched checks for a launch error and ends the job with its name.
#ifndef CT_CUDA_KERNELS_H
#define CT_CUDA_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Fatal (through ct_fatal) when the last launch failed: "cuda: <what>: <error string>".
void ct_cuda_launched(const char *what);

// ---- elementwise (elementwise.cu)
void ct_cuda_add(float *y, const float *x, long n);                      // y += x
void ct_cuda_add_to(float *out, const float *a, const float *b, long n);  // out = a + b (may alias)
void ct_cuda_scale(float *y, float a, long n);                           // y *= a
// AdamW with the bias corrections bc1 = 1 - beta1^step, bc2 = 1 - beta2^step computed by the
// caller (in double, rounded to float, as the cpu does).
void ct_cuda_adamw(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1, float beta2,
                   float eps, float weight_decay, float bc1, float bc2, const float *grad_scale);
// *scale = ct_clip_factor of scalars (device), computed on the device.
void ct_cuda_clip_factor(float *scale, const double *scalars, double max_norm);
// parts (CT_CUDA_SUMSQ_PARTS doubles, device): part p = sum of x^2 over the p-th slice, in double.
enum { CT_CUDA_SUMSQ_PARTS = 256 };
void ct_cuda_sumsq_parts(double *parts, const float *x, long n);
void ct_cuda_f32_to_bf16(uint16_t *dst, const float *src, long n);  // nearest even, NaN kept quiet
void ct_cuda_bf16_to_f32(float *dst, const uint16_t *src, long n);

// ---- layers (layers.cu)
void ct_cuda_embedding_forward_bf16(float *out, const int32_t *tokens, const uint16_t *wte, long N, long C,
                                    long vocab_start, long V_local);
void ct_cuda_embedding_forward(float *out, const int32_t *tokens, const float *wte, long N, long C,
                               long vocab_start, long V_local);
void ct_cuda_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, long N, long C,
                                long vocab_start, long V_local);
void ct_cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, long N, long C,
                             float eps);
// part: CT_CUDA_RMSNORM_DW_ROWS-row chunks of N times C floats of device scratch (dweight only).
enum { CT_CUDA_RMSNORM_DW_ROWS = 128 };
void ct_cuda_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                              const float *weight, const float *rstd, long N, long C,
                              float *part);
// dir +1: forward rotation, -1: the inverse (backward).
void ct_cuda_rope(float *x, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                  long T, long H, long HS, long ld, float dir);
void ct_cuda_swiglu_forward(float *out, const float *inp, long N, long F);
// The bf16 forms (kernels/backend.h rmsnorm_forward_bf16, swiglu_forward_bf16 / _backward_bf16).
void ct_cuda_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *weight, long N, long C,
                                  float eps);
void ct_cuda_swiglu_forward_bf16(uint16_t *out, uint16_t *h13_kept, const float *h13, long N, long F);
void ct_cuda_swiglu_backward_bf16(float *dinp, const float *dout, const uint16_t *h13_kept, long N, long F);
void ct_cuda_swiglu_backward(float *dinp, const float *dout, const float *inp, long N, long F);

// ---- attention (attention.cu); HS <= CT_CUDA_ATT_MAX_HS. Head sizes 64 and 128 run the tiled
// kernels of attention_tiled.cu (same contracts; false: another head size, nothing launched).
enum { CT_CUDA_ATT_MAX_HS = 256 };
bool ct_cuda_attention_tiled_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk,
                                     const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                     const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH,
                                     long NKV, long HS);
bool ct_cuda_attention_tiled_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                      const float *lse, const float *q, long ldq, const float *k, long ldk,
                                      const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                      const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH,
                                      long NKV, long HS);
void ct_cuda_attention_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk,
                               const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                               const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS);
void ct_cuda_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                const float *lse, const float *q, long ldq, const float *k, long ldk,
                                const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS);
void ct_cuda_attention_merge(float *o, float *l, const float *o_part, const float *l_part, long B, long C, long NH,
                             long HS);

// ---- mixture of experts (moe.cu)
void ct_cuda_moe_router_forward(int32_t *ids, float *weights, float *scores, const float *logits, const float *bias,
                                long N, long E, long k, int sigmoid, int renorm);
void ct_cuda_moe_router_backward(float *dlogits, const float *dweights, const float *dscores, const float *scores,
                                 const int32_t *ids, long N, long E, long k, int sigmoid, int renorm);
void ct_cuda_moe_aux_loss(float *loss, float *dscores, const float *scores, const int32_t *ids, long N, long E, long k,
                          long group, float coef, int sigmoid);
void ct_cuda_moe_bias_update(float *bias, const int64_t *counts, long E, float rate);
void ct_cuda_moe_dispatch_plan(int64_t *counts, int32_t *pos, const int32_t *ids, long N, long E, long k);
void ct_cuda_moe_permute(float *x_sorted, const float *x, const int32_t *pos, long N, long k, long C);
void ct_cuda_moe_permute_backward(float *dx, const float *dx_sorted, const int32_t *pos, long N, long k, long C);
void ct_cuda_moe_combine(float *y, const float *y_sorted, const float *weights, const int32_t *pos, long N, long k,
                         long C);
void ct_cuda_moe_combine_backward(float *dy_sorted, float *dweights, const float *dy, const float *y_sorted,
                                  const float *weights, const int32_t *pos, long N, long k, long C);

// ---- cross-entropy rows (xent.cu)
// The whole-vocabulary row step of ct_xent_fused on R rows of logits z (R, V): row_loss[r] (double)
// = lse - z[t] (0 for an ignored row); when want_grad, z becomes dlogits (ignored rows zero).
void ct_cuda_xent_rows_fused(float *z, double *row_loss, const int32_t *targets, long R, long V, float grad_scale,
                             int want_grad);
void ct_cuda_xent_rows_max(float *mx, const float *z, const int32_t *targets, long R, long V);
void ct_cuda_xent_rows_exp_sum(float *z, float *sum, float *zt, const float *mx, const int32_t *targets, long R,
                               long V, long vocab_start);
void ct_cuda_xent_rows_dlogits(float *z, const float *sum, const int32_t *targets, long R, long V,
                               long vocab_start, float grad_scale);
// *acc (one device double) += x[0] + ... + x[n-1], one thread, as a running total in index order.
void ct_cuda_f64_add_in_order(double *acc, const double *x, long n);
// loss_sum (one device double) += ct_xent_rows_loss of the rows, computed on the device.
void ct_cuda_xent_rows_loss(double *loss_sum, const float *mx, const float *sum, const float *zt,
                            const int32_t *targets, long R);

// Gather mode (ct_xent_rows_gathered): G (P, R, V) whole rows, one block per row; the row's sum
// is the slices' block sums added in slice order, an order fixed by the ids alone.
void ct_cuda_xent_rows_gathered(float *G, float *mx, float *sum, float *zt, const int32_t *targets, long P, long R,
                                long V, long mine, float grad_scale, int dlogits);

// ---- 8-bit quantisation (f8.cu): the casts of core/float_formats.h, bit for bit. x is fp32, or
// bf16 when `bf16` (widened exactly as it is read). Amaxes are written as max |x| with any NaN
// as the positive quiet NaN (the form ct_f8_split's amax_max takes).
// amax (1) = max |x| over n elements.
void ct_cuda_f8_amax(float *amax, const void *x, bool bf16, long n);
// amax (rows) per row / amax (cols) per column of x (rows, cols).
void ct_cuda_f8_amax_rows(float *amax, const void *x, bool bf16, long rows, long cols);
void ct_cuda_f8_amax_cols(float *amax, const void *x, bool bf16, long rows, long cols);
// s (n): amaxes -> scales in place (ct_f8_scale_from_amax; pow2: rounded down to powers of two).
void ct_cuda_f8_scales(float *s, long n, bool e4m3, bool pow2);
// Which scale each element of ct_cuda_f8_cast takes: s[0], s[its row of x], s[its column of x].
enum { CT_CUDA_F8_SCALE_ONE = 0, CT_CUDA_F8_SCALE_ROW = 1, CT_CUDA_F8_SCALE_COL = 2 };
// q (out_rows, ld) codes = saturating cast of x' * scale, x' = x (rows, cols) or its transpose;
// columns past x''s width up to ld are zero codes (the padding cuBLASLt's fp8 layout needs).
void ct_cuda_f8_cast(uint8_t *q, long ld, const void *x, bool bf16, long rows, long cols, bool transpose,
                     const float *s, int smode, bool e4m3);
// y (out_rows, K) = x' quantised to MX (32-element blocks along each row of x' = x or x^T, e8m0
// scales, ct_mx_quantize_rows) and decoded again: each element's exact fp32 value.
void ct_cuda_mx_dequant(float *y, const void *x, bool bf16, long rows, long cols, bool transpose, bool e4m3);
// y (rows, K) = MX codes q (rows, K) times their e8m0 scales (rows, nblocks(K)).
void ct_cuda_mx_decode(float *y, const uint8_t *q, const uint8_t *scales, long rows, long K, bool e4m3);
// dst (rows, ld_dst) = the codes of src as (rows, K) (trans: src holds (K, rows)), zero-padded.
void ct_cuda_f8_repack(uint8_t *dst, long ld_dst, const uint8_t *src, long ld_src, long rows, long K, bool trans);
// C (M, N) = acc * ((1/s_a) (1/s_b)) (+ beta C): kernels/cpu/gemm_f8.c's epilogue, the same float
// operations; scales tensorwise (one each) or rowwise (scale_a[M], scale_b[N]).
void ct_cuda_f8_epilogue(float *C, long ldc, const float *acc, long ld_acc, long M, long N, const float *scale_a,
                         const float *scale_b, bool rowwise, float beta);

#ifdef __cplusplus
}
#endif
#endif
