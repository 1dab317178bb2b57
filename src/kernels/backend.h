// The kernel backend: every piece of math the model, the strategies and the optimizer run on
// device buffers, as one table of function pointers chosen at start-up (`cpu`: ctitan's own
// kernels, oneDNN and OpenMP; `cuda`: kernels/cuda/ in a CUDA=1 build; `cpu_sim`: kernels/sim/). Code above kernels/ includes only this header, never kernels/kernels.h
// or a backend's own files, so nothing above this layer is tied to a device.
//
// Each member has the contract of the CPU function of the same name in kernels/kernels.h
// (shapes, accumulate-vs-overwrite, scratch sizes); that header is the CPU reference
// implementation, tested against float64, and the cpu table points at it.
//
// Buffers passed to a backend live on its device; host code never reads or writes them except
// through `copy_to_host` / `copy_from_host` (identity copies on the CPU).
//
// Scratch sizes come from the backend: a kernel that takes `scratch` has a `*_scratch_floats`
// member, and callers allocate what that member asks for on this device, never a size worked out
// from the host (the cpu attention sizes its per-thread tiles for omp_get_max_threads() at the
// time of the call -- its own decision, which a GPU backend makes differently).
#ifndef CT_KERNELS_BACKEND_H
#define CT_KERNELS_BACKEND_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/dtype.h"

// How linear_forward_f8 / linear_backward_f8 quantise their operands (contracts in
// kernels/cpu/linear_f8.h).
typedef enum { CT_F8_RECIPE_TENSORWISE = 0, CT_F8_RECIPE_ROWWISE, CT_F8_RECIPE_MXFP8 } ct_f8_recipe;

// How a linear layer's operands are split over tensor-parallel ranks, so that its 8-bit scales
// are the single-process layer's (NULL, or amax_max NULL: not split). A scale whose amax spans a
// split dimension is agreed on before any cast: the kernel computes the local amaxes, calls
// amax_max on them, and quantises with the result. The kernels never communicate; the caller's
// hook does (parallel/tensor_parallel.c: a MAX all-reduce over the tp group).
//   ic_split  IC is this rank's part (row-parallel, Megatron's wo / w2): inp (N, IC/tp), weight
//             (OC, IC/tp); forward rowwise and every tensorwise amax over IC are agreed.
//   oc_split  OC is this rank's part (column-parallel, wqkv / w13): weight (OC/tp, IC), dout
//             (N, OC/tp); backward rowwise (dinp) and every tensorwise amax over OC are agreed.
//   amax_max  amax (n, in the backend's memory) = its element-wise max over the ranks, in place,
//             blocking, called by every rank of the group in the same order. Each value handed
//             over is >= +0 or a positive NaN, so the max of their bit patterns as int32 is the
//             max of the values with NaN winning (as torch.amax).
// MXFP8's 32-element blocks need no agreement as long as no block straddles two ranks: the
// caller refuses a layout whose local contraction extents are not multiples of 32
// (parallel/precision_policy.c), and the kernels ignore `split` under that recipe.
typedef struct {
    bool ic_split, oc_split;
    void (*amax_max)(void *ctx, float *amax, long n);
    void *ctx;
} ct_f8_split;

typedef struct ct_kernels {
    const char *name;       // "cpu", "cuda"
    ct_device_kind device;  // where its buffers live

    // ---- memory on the device (bytes)
    void (*zero)(void *dst, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);                  // device -> device
    void (*copy_to_host)(void *host_dst, const void *src, size_t bytes);     // device -> host
    void (*copy_from_host)(void *dst, const void *host_src, size_t bytes);   // host -> device
    // device -> device, `rows` rows of row_bytes each, rows dst_pitch / src_pitch bytes apart
    // (a block of columns of a row-major matrix: cudaMemcpy2D's shape)
    void (*copy_2d)(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t row_bytes, long rows);
    // Returns once the device has finished every operation launched so far (the cpu's return
    // finished): what a profiled span waits for at each end, so that it times the device's work
    // rather than its launch.
    void (*synchronize)(void);

    // ---- matmul
    void (*gemm)(int trans_a, int trans_b, long M, long N, long K, float alpha, const float *A, long lda,
                 const float *B, long ldb, float beta, float *C, long ldc);
    void (*linear_forward)(float *out, const float *inp, const float *weight, long N, long IC, long OC);
    void (*linear_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                            long N, long IC, long OC);
    // Best fp32 matmul rate of this device in GFLOP/s (n×n×n, best of reps): what MFU divides by.
    double (*matmul_peak_gflops)(long n, int reps);

    // ---- layers
    void (*embedding_forward)(float *out, const int32_t *tokens, const float *wte, long N, long C, long vocab_start,
                              long V_local);
    // The same from a bf16 table (under bf16, FSDP's gathered compute copy): rows widened exactly.
    void (*embedding_forward_bf16)(float *out, const int32_t *tokens, const uint16_t *wte, long N, long C,
                                   long vocab_start, long V_local);
    void (*embedding_backward)(float *dwte, const float *dout, const int32_t *tokens, long N, long C,
                               long vocab_start, long V_local);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight, long N, long C,
                            float eps);
    void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             const float *rstd, long N, long C);
    // Under bf16 mixed precision the blocks keep a norm's output in bf16: out (N, C) bf16 = the
    // fp32 rmsnorm_forward's values rounded (nearest even), rstd as rmsnorm_forward's, inp fp32
    // (the residual stream stays fp32). May be NULL (a backend without it): callers then run
    // rmsnorm_forward into an fp32 buffer and f32_to_bf16.
    void (*rmsnorm_forward_bf16)(uint16_t *out, float *rstd, const float *inp, const float *weight, long N, long C,
                                 float eps);
    void (*rope_tables)(float *cos_tab, float *sin_tab, long max_T, long HS, double theta, double scale_factor,
                        double low_freq_factor, double high_freq_factor, long original_max_pos);
    // pos_ld 0: pos (T) shared by the B sequences; T: pos (B, T); pos NULL: 0..T-1 (kernels.h)
    void (*rope_forward)(float *x, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
          long B, long T, long H, long HS, long ld);
    void (*rope_backward)(float *dx, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
          long B, long T, long H, long HS, long ld);
    // Under bf16, the QKV product's rows into the kept bf16 copy in one pass: qkv16 (B·T, QKV) =
    // qkv (B·T, QKV, fp32) with rope_forward applied to its NH q heads and NKV k heads, every
    // value rounded to bf16 (nearest even): the bits of rope_forward twice, then f32_to_bf16.
    // QKV = (NH + 2 NKV) HS. May be NULL (a backend without it): callers take those two steps.
    void (*qkv_rope_to_bf16)(uint16_t *qkv16, const float *qkv, const float *cos_tab, const float *sin_tab,
                             const int32_t *pos, long pos_ld, long B, long T, long NH, long NKV, long HS);
    long (*attention_scratch_floats)(long Tq, long Tk, long HS);
    // q_doc (B, Tq), k_doc (B, Tk): document ids (key j visible to query i only within one
    // document as well), or both NULL (causal by position alone)
    void (*attention_forward)(float *out, float *lse, const float *q, long ldq, const float *k, long ldk,
                              const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                              const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV,
                              long HS, float *scratch);
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, long ldq, const float *k, long ldk, const float *v,
                               long ldv, const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc,
                               const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS,
                               float *scratch);
    // The bf16 attention (contracts in kernels.h: ct_attention_forward_bf16): q, k, v, out in
    // bf16, lse and the gradients fp32, the same scratch. NULL where a backend has none (cuda):
    // the caller then runs attention_forward / attention_backward on the fp32 values.
    void (*attention_forward_bf16)(uint16_t *out, float *lse, const uint16_t *q, long ldq, const uint16_t *k,
                                   long ldk, const uint16_t *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                   const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH,
                                   long NKV, long HS, float *scratch);
    void (*attention_backward_bf16)(float *dq, float *dk, float *dv, const float *dout, const uint16_t *out,
                                    const float *lse, const uint16_t *q, long ldq, const uint16_t *k, long ldk,
                                    const uint16_t *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                    const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH,
                                    long NKV, long HS, float *scratch);
    void (*attention_merge)(float *o, float *l, const float *o_part, const float *l_part, long B, long C, long NH,
                            long HS);
    void (*swiglu_forward)(float *out, const float *inp, long N, long F);
    void (*swiglu_backward)(float *dinp, const float *dout, const float *inp, long N, long F);
    // The same with [gate | up] kept in bf16 (kernels.h ct_swiglu_forward_bf16): forward narrows
    // h13 (fp32; NULL: h13_kept is the input) into h13_kept and writes out (N, F) in bf16, the
    // bits of narrow, widen, swiglu_forward, narrow; backward reads h13_kept, swiglu_backward's
    // bits on its values (cuda: expf for the cpu's polynomial, < 1.5 ulp apart before the
    // rounding). May be NULL (a backend without them): callers then go through fp32 copies with
    // f32_to_bf16 / bf16_to_f32 and the fp32 members (the same bits).
    void (*swiglu_forward_bf16)(uint16_t *out, uint16_t *h13_kept, const float *h13, long N, long F);
    void (*swiglu_backward_bf16)(float *dinp, const float *dout, const uint16_t *h13_kept, long N, long F);

    // ---- mixture of experts (contracts in kernels.h, "mixture of experts"); offsets host memory
    void (*moe_router_forward)(int32_t *ids, float *weights, float *scores, const float *logits, const float *bias,
                               long N, long E, long k, int sigmoid, int renorm);
    void (*moe_router_backward)(float *dlogits, const float *dweights, const float *dscores, const float *scores,
                                const int32_t *ids, long N, long E, long k, int sigmoid, int renorm);
    void (*moe_aux_loss)(float *loss, float *dscores, const float *scores, const int32_t *ids, long N, long E, long k,
                         long group, float coef, int sigmoid);
    void (*moe_bias_update)(float *bias, const int64_t *counts, long E, float rate);
    void (*moe_dispatch_plan)(int64_t *counts, int32_t *pos, const int32_t *ids, long N, long E, long k);
    void (*moe_permute)(float *x_sorted, const float *x, const int32_t *pos, long N, long k, long C);
    void (*moe_permute_backward)(float *dx, const float *dx_sorted, const int32_t *pos, long N, long k, long C);
    void (*moe_combine)(float *y, const float *y_sorted, const float *weights, const int32_t *pos, long N, long k,
                        long C);
    void (*moe_combine_backward)(float *dy_sorted, float *dweights, const float *dy, const float *y_sorted,
                                 const float *weights, const int32_t *pos, long N, long k, long C);
    void (*grouped_linear_forward)(float *out, const float *inp, const float *weight, const int64_t *offsets, long E,
                                   long IC, long OC);
    void (*grouped_linear_backward)(float *dinp, float *dweight, const float *dout, const float *inp,
                                    const float *weight, const int64_t *offsets, long E, long IC, long OC);
    // The same products under bf16 mixed precision (kernels.h): bf16 inputs, weight and output
    // gradient, fp32 accumulation; out, dinp fp32 (overwritten), dweight fp32 (accumulated).
    void (*grouped_linear_forward_bf16)(float *out, const uint16_t *inp, const uint16_t *weight,
                                        const int64_t *offsets, long E, long IC, long OC);
    void (*grouped_linear_backward_bf16)(float *dinp, float *dweight, const uint16_t *dout, const uint16_t *inp,
                                         const uint16_t *weight, const int64_t *offsets, long E, long IC, long OC);

    // ---- output projection + cross-entropy (whole vocabulary on this rank)
    // loss_sum: one double on this device that the SUM of the token losses is added to, so the
    // loss stays on the device until the step reads it (once, with the step's other scalars).
    long (*xent_scratch_floats)(long chunk_rows, long V, long C, bool bf16);
    // W (V, C): fp32, or bf16 values when bf16 (the gathered compute copy).
    void (*xent_fused)(double *loss_sum, float *dx, float *dW, const float *x, const void *W, const int32_t *targets,
                       long N, long C, long V, float grad_scale, long chunk_rows, bool bf16, float *scratch);
    // First row n whose target is outside [-1, V), or -1: so a caller can refuse bad targets
    // without reading device memory. NULL where the answer would be a read from the device in
    // every loss call (cuda): there the loss takes its targets as valid, which every caller's are
    // -- they come from the loader, which checks each shard's tokens against the model's
    // vocabulary when it opens it (data/shard.c), before any is copied to the device.
    long (*xent_bad_target)(const int32_t *targets, long N, long V);

    // ---- cross-entropy row pieces (vocabulary split over ranks): parallel/loss_parallel.c
    // reduces per-row max, sum-exp and target logit between these calls. z (R, V) is a chunk of
    // logits for the vocabulary slice [vocab_start, vocab_start + V); targets (R) global, -1 =
    // ignore; mx, sum, zt (R). Contracts in kernels.h (ct_xent_rows_*).
    void (*xent_rows_max)(float *mx, const float *z, const int32_t *targets, long R, long V);
    void (*xent_rows_exp_sum)(float *z, float *sum, float *zt, const float *mx, const int32_t *targets, long R,
                              long V, long vocab_start);
    void (*xent_rows_dlogits)(float *z, const float *sum, const int32_t *targets, long R, long V, long vocab_start,
                              float grad_scale);
    // loss_sum (one double on this device) += the rows' token losses
    void (*xent_rows_loss)(double *loss_sum, const float *mx, const float *sum, const float *zt,
                           const int32_t *targets, long R);
    // gather mode: G (P, R, V) whole rows; fixed-order sums (same bits on every rank); block
    // `mine` -> dlogits when dlogits != 0
    void (*xent_rows_gathered)(float *G, float *mx, float *sum, float *zt, const int32_t *targets, long P, long R,
                               long V, long mine, float grad_scale, int dlogits);

    // ---- optimizer and reductions
    // grad_scale: one float on this device, the clip factor (0: a skipped step, nothing written)
    void (*adamw_update)(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, long step, const float *grad_scale);
    // scale (one float) = the step's clip factor from scalars (loss sum, sum of squares), computed
    // on this device (ct_clip_factor's contract)
    void (*clip_factor)(float *scale, const double *scalars, double max_norm);
    // sum (one double on this device) += sum of x[i]^2 in double
    void (*sum_squares)(double *sum, const float *x, long n);
    void (*add_inplace)(float *y, const float *x, long n);
    void (*scale_inplace)(float *y, float a, long n);

    // ---- bf16 matmul (mixed precision): bf16 = uint16_t bits, contracts in kernels/cpu/gemm_bf16.h
    // C (fp32) = alpha op(A) op(B) + beta C with A, B in bf16 and fp32 accumulation (ct_gemm's shapes).
    void (*gemm_bf16)(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                      const uint16_t *B, long ldb, float beta, float *C, long ldc);
    // A B operand packed once for many products (kernels/cpu/gemm_bf16.h ct_gemm_bf16_packed*):
    // its bytes (0: this backend or path has no packed form; call gemm_bf16), packing it, and the
    // product from it, gemm_bf16's bits. May be NULL (none).
    size_t (*gemm_bf16_packed_bytes)(long K, long N);
    void (*gemm_bf16_pack_b)(int trans_b, long K, long N, const uint16_t *B, long ldb, void *dst);
    void (*gemm_bf16_packed)(int trans_a, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                             const void *packed_b, float beta, float *C, long ldc);
    // Best bf16 matmul rate in GFLOP/s (n×n×n, best of reps), as matmul_peak_gflops for fp32.
    double (*matmul_peak_gflops_bf16)(long n, int reps);
    // Which bf16 kernel runs, for the log: "amx", "avx512_bf16" or "fallback" (fp32 math).
    const char *(*bf16_gemm_path)(void);
    // How the 8-bit products run, for the log: on the cpu emulated (the codes decoded, then fp32
    // / bf16 products), on cuda through cuBLASLt's fp8 kernels (MXFP8: decoded on the device).
    const char *(*f8_gemm_path)(void);
    // dst (n) = src rounded to bf16, nearest even (the narrowing of every compute copy).
    void (*f32_to_bf16)(uint16_t *dst, const float *src, long n);

    // ---- float8 / MXFP8 matmuls (fp8 codes = uint8_t): contracts in kernels/cpu/gemm_f8.h.
    // Products of the 8-bit values, fp32 accumulation, scales applied after (a GPU fp8 matmul).
    long (*gemm_f8_scratch_floats)(long M, long N, long K, int with_beta);
    // C = op(A) op(B) / (s_a s_b) + beta C; scales tensorwise (1 + 1) or rowwise (M + N).
    void (*gemm_f8)(int trans_a, int trans_b, long M, long N, long K, const uint8_t *A, long lda, ct_dtype fmt_a,
                    const float *scale_a, const uint8_t *B, long ldb, ct_dtype fmt_b, const float *scale_b,
                    int rowwise, float beta, float *C, long ldc, float *scratch);
    // C (M, N) = A (M, K) B (N, K)^T + beta C, both blocked along K with e8m0 scales.
    void (*gemm_mxfp8)(long M, long N, long K, const uint8_t *A, const uint8_t *scale_a, ct_dtype fmt_a,
                       const uint8_t *B, const uint8_t *scale_b, ct_dtype fmt_b, float beta, float *C,
                       float *scratch);
    // out (N, OC) = inp @ weight^T with both quantised to e4m3 per recipe (kernels/cpu/linear_f8.h).
    // inp in inp_dtype, CT_F32 or CT_BF16 (the kept activation as it is: bf16 gives exactly what
    // its fp32 values give); weight fp32. Scratch sizes do not depend on inp_dtype.
    long (*f8_scratch_floats)(long N, long IC, long OC);
    // split: how tp splits the layer, for the scales (ct_f8_split above; NULL: not split).
    void (*linear_forward_f8)(float *out, const void *inp, ct_dtype inp_dtype, const float *weight, long N, long IC,
                              long OC, ct_f8_recipe recipe, const ct_f8_split *split, float *scratch);

    // ---- float8 backward (kernels/cpu/linear_f8.h) and bf16 widening
    // linear_backward's contract (dinp = dout @ weight, overwritten; dweight += dout^T @ inp;
    // either NULL to skip) with dout cast to e5m2, inp and weight to e4m3, scaled per recipe for
    // each matmul, split as for linear_forward_f8. scratch: f8_backward_scratch_floats(N, IC, OC)
    // floats, any recipe. inp in inp_dtype as for linear_forward_f8 (read only for dweight).
    long (*f8_backward_scratch_floats)(long N, long IC, long OC);
    void (*linear_backward_f8)(float *dinp, float *dweight, const float *dout, const void *inp, ct_dtype inp_dtype,
                               const float *weight, long N, long IC, long OC, ct_f8_recipe recipe,
                               const ct_f8_split *split, float *scratch);
    // dst (n) = the fp32 value of each bf16 src (exact: bits << 16).
    void (*bf16_to_f32)(float *dst, const uint16_t *src, long n);

    // ---- fused forward chains (fp32; contracts in kernels.h, "fused forward chains"): what
    // --compile.enable runs in place of the unfused calls. The matmuls go by row blocks, so a
    // block's rows are still in cache for the step before or after its gemm; results equal the
    // unfused chain bit for bit except the matmul, which agrees to fp32 gemm accuracy (on the
    // cpu it too is bit for bit). Each matmul kernel takes scratch of its *_scratch_floats size;
    // the cpu uses it only for an output that is not kept (passed as NULL), so with every output
    // kept it may be NULL there.
    // x_out = x + residual_delta (x_out may alias either), then rmsnorm_forward(norm_out, rstd, x_out).
    void (*residual_rmsnorm_forward)(float *x_out, float *norm_out, float *rstd, const float *x,
                                     const float *residual_delta, const float *weight, long N, long C, float eps);
    // norm_out, rstd = rmsnorm_forward(x); out (N, OC) = norm_out @ W^T (norm_out NULL: not kept).
    long (*rmsnorm_linear_scratch_floats)(long N, long C, long OC);
    void (*rmsnorm_linear_forward)(float *out, float *norm_out, float *rstd, const float *x,
                                   const float *norm_weight, const float *W, long N, long C, long OC, float eps,
                                   float *scratch);
    // rmsnorm_linear_forward into qkv (N, QKV), then RoPE as linear_rope_forward applies it
    // (scratch: rmsnorm_linear_scratch_floats(N, C, QKV) floats).
    void (*rmsnorm_linear_rope_forward)(float *qkv, float *norm_out, float *rstd, const float *x,
          const float *norm_weight, const float *W, long N, long C, long QKV, float eps, const float *cos_tab,
          const float *sin_tab, const int32_t *pos, long pos_ld, long B, long T, long NH, long NKV, long HS,
          float *scratch);
    // h13 (N, 2F) = inp @ W13^T, h (N, F) = swiglu_forward(h13) (h13 NULL: not kept).
    long (*linear_swiglu_scratch_floats)(long N, long C, long F);
    void (*linear_swiglu_forward)(float *h13, float *h, const float *inp, const float *W13, long N, long C, long F,
                                  float *scratch);
    // qkv (N, QKV) = inp @ W^T, then rope_forward on its NH q heads (column 0) and NKV k heads
    // (column NH*HS) with ld = QKV; N == B*T, pos / pos_ld as rope_forward.
    long (*linear_rope_scratch_floats)(long N, long C, long QKV);
    void (*linear_rope_forward)(float *qkv, const float *inp, const float *W, long N, long C, long QKV,
          const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B, long T, long NH,
          long NKV, long HS, float *scratch);

    // ---- fused forward chains in bf16 (contracts in kernels.h, "fused forward chains in bf16"):
    // what --compile.enable runs under bf16 mixed precision in place of the unfused calls, with
    // the unfused chain's bits. Each may be NULL (a backend without it): the unfused calls run.
    // x_out = x + residual_delta, then rmsnorm_forward_bf16(norm_out, rstd, x_out).
    void (*residual_rmsnorm_forward_bf16)(float *x_out, uint16_t *norm_out, float *rstd, const float *x,
                                          const float *residual_delta, const float *weight, long N, long C,
                                          float eps);
    // swiglu_forward_bf16(h, h13_kept, inp @ W13^T) (bf16 inputs); h13 (N, 2F) fp32 room for the
    // product, unspecified after. W13_packed: W13^T as gemm_bf16_pack_b packs it, or NULL.
    void (*linear_swiglu_forward_bf16)(uint16_t *h, uint16_t *h13_kept, float *h13, const uint16_t *inp,
                                       const uint16_t *W13, const void *W13_packed, long N, long C, long F);
    // swiglu_backward_bf16(dh13, dy @ W2, h13_kept) (dy, W2 bf16): w2's input gradient into
    // SwiGLU's backward; dh (N, F) fp32 room for the product, W2_packed as gemm_bf16_pack_b packs
    // W2 for that product, or NULL.
    void (*linear_swiglu_backward_bf16)(float *dh13, float *dh, const uint16_t *dy, const uint16_t *W2,
                                        const void *W2_packed, const uint16_t *h13_kept, long N, long C, long F);
    // qkv_rope_to_bf16(qkv16, inp @ W^T, ...) (bf16 inputs), QKV = (NH + 2 NKV) HS; qkv (N, QKV)
    // fp32 room for the product, unspecified after; N == B*T; W_packed as above.
    void (*linear_rope_forward_bf16)(uint16_t *qkv16, float *qkv, const uint16_t *inp, const uint16_t *W,
          const void *W_packed, long N, long C, const float *cos_tab, const float *sin_tab, const int32_t *pos,
          long pos_ld, long B, long T, long NH, long NKV, long HS);
} ct_kernels;

// Where a backend's buffers live: its kind of device, the one this process drives (a rank drives
// one GPU, index 0 in memory accounting).
static inline ct_device ct_kernels_device(const ct_kernels *k) { return (ct_device){k->device, 0}; }

// The backend called `name` ("cpu"), or NULL when this build has none by that name. "cpu" is the
// chosen kernel set's table (below).
const ct_kernels *ct_kernels_get(const char *name);

// ---- cpu kernel sets (kernels/cpu/kernel_set.h): the cpu kernels are built once per level of
// the x86-64 instruction set, lowest first ("avx2", "avx512", "avx512_bf16", "amx"; "native" alone
// in a NATIVE=1 build), and one set runs at a time. At start-up the process takes the set named
// by the environment variable CTITAN_KERNEL_SET (a set the CPU lacks ends it with one line), else
// the highest set this CPU runs; every cpu kernel call, through the table or by a kernels.h name,
// reaches that set. Change it only while no kernel runs.
int ct_kernel_set_count(void);
const char *ct_kernel_set_name(int i);
// -1 when this build has no set called `name`.
int ct_kernel_set_find(const char *name);
// Whether this CPU has every instruction set i was compiled for.
bool ct_kernel_set_runnable(int i);
// The highest set this CPU runs, and the one the process took at start-up.
int ct_kernel_set_best(void);
int ct_kernel_set_at_start(void);
int ct_kernel_set_active(void);
// Checks that this CPU runs the set called `name` ("auto": the start-up choice) and returns its
// index, or -1 with one line that starts with `what` (the setting and its value, e.g.
// "training.kernel_set amx") and says what the CPU lacks and which sets it runs, or which sets
// the build has.
int ct_kernel_set_resolve(const char *name, const char *what);
// Makes set i (runnable) the one every call reaches.
void ct_kernel_set_install(int i);
// What the CPU lacks for set i, e.g. "AMX-TILE, AMX-BF16" ("" when runnable).
void ct_kernel_set_missing(int i, char *out, size_t n);

// ---- the output layer's products (kernels/head_products.c), over a table: the three products
// of one chunk of rows that every loss kernel runs (the cpu and cuda backends' fused
// cross-entropy, the vocabulary-parallel loss), in one of two precisions:
//   fp32  z = x W^T, dx = z W, dW += z^T x, all in fp32 (the table's gemm);
//   bf16  the same products on the table's gemm_bf16 (bf16 inputs, fp32 accumulation), as the
//         blocks' linear layers take them under --mixed_precision bf16: W is the bf16 compute copy
//         (FSDP's gathered bf16 group: no copy of it is made) and x holds bf16 values already (the
//         head's input is rounded before the call), so narrowing it is exact. The dlogits z
//         (fp32) are rounded to bf16 for the two backward products, as every other gradient
//         entering a bf16 matmul is (and as PyTorch's autocast rounds them). Carrying z as two
//         bf16 parts (hi + lo, about 2^-17 of z) would double the backward's products -- a
//         tenth of a bench S step -- for a precision no other gradient has. The vocabulary-parallel loss's dlogits differ from one process's in the last
//         fp32 bit, which can round the other way: narrow noise the layouts' parity bounds
//         measure (tests/error_model.h).
//         The softmax, the loss and the dlogits themselves stay fp32.
typedef struct {
    const ct_kernels *k;
    long V, C;
    const uint16_t *W16;  // (V, C) W in bf16 (the caller's); NULL: fp32 products
    uint16_t *x16;  // (chunk_rows, C) the chunk's rows narrowed (by ct_head_logits)
    uint16_t *z16;  // (chunk_rows, V) the chunk's dlogits rounded to bf16 (by ct_head_backward)
} ct_head_products;

// Floats of scratch the bf16 copies take (0 for fp32): x16 and z16, each 16-float aligned.
long ct_head_products_floats(long chunk_rows, long V, long C, bool bf16);

// Set up for one loss call over W (V, C): fp32, or bf16 values under bf16, whose copies of the
// chunk's rows go to scratch (ct_head_products_floats(chunk_rows, V, C, true) floats, on k's
// device).
ct_head_products ct_head_products_begin(const ct_kernels *k, bool bf16, const void *W, long V, long C,
                                        long chunk_rows, float *scratch);

// z (nr, V) = xc W^T for a chunk xc (nr, C), nr <= chunk_rows.
void ct_head_logits(const ct_head_products *h, float *z, const float *xc, const void *W, long nr);

// dx (nr, C) = z W (when dx) and dW (V, C) += z^T xc, z (nr, V) the chunk's dlogits: after the
// ct_head_logits call of the same chunk (bf16 reuses its narrowed rows).
void ct_head_backward(const ct_head_products *h, float *dx, float *dW, const float *z, const float *xc,
                      const void *W, long nr);
// The same under bf16 from dlogits a loss kernel rounded into h->z16 itself ((nr, V), each as
// the table's f32_to_bf16 rounds it): the fused loss writes them there as it makes them, where
// ct_head_backward would read the fp32 chunk once more to round it.
void ct_head_backward_rounded(const ct_head_products *h, float *dx, float *dW, long nr);
#endif
