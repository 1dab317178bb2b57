// CPU kernels: pure math on local buffers (no communication, no allocation).
// Matmuls go through oneDNN's sgemm (measured: bench/bench_matmul); elementwise work is parallel
// with OpenMP. Every buffer is row-major float32 unless stated; shape comments use the model's
// letters: B batch, T sequence, C model dim, NH query heads, NKV kv heads, HS head size,
// F FFN hidden, V vocabulary, N = B*T rows.
//
// Gradient conventions: weight gradients ACCUMULATE (+=) so micro-batches add up; input
// gradients are OVERWRITTEN (=) unless the comment says "+=".
#ifndef CT_KERNELS_H
#define CT_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

// ---------------------------------------------------------------- matmul
// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major; op(X) = X^T when trans_x.
void ct_gemm(int trans_a, int trans_b, long M, long N, long K, float alpha, const float *A, long lda,
             const float *B, long ldb, float beta, float *C, long ldc);

// ct_gemm with work on whole rows around it, for the fused chains: before(ctx, r0, n) prepares
// rows [r0, r0 + n) of A (it may write them) right before they are multiplied, after(ctx, r0, n)
// takes rows [r0, r0 + n) of C right after they are final, on the thread that multiplies those
// rows, so that they are still in its cache. Either may be NULL. Every row goes through each hook
// exactly once; calls for disjoint rows run at the same time, on the threads of the product's
// team (a hook must not start a parallel region). When the product is more than one packing of B
// (N past one panel, or K too tall for it) the rows of C are not final until the last panel is
// done: then every row goes through before, then the product runs, then every row goes through
// after, each step over the threads. A not transposed (trans_a 0); C is ct_gemm's, bit for bit.
typedef struct {
    void (*before)(void *ctx, long r0, long n);
    void (*after)(void *ctx, long r0, long n);
    void *ctx;
} ct_gemm_row_hooks;
void ct_gemm_with_row_hooks(int trans_b, long M, long N, long K, float alpha, const float *A, long lda,
                            const float *B, long ldb, float beta, float *C, long ldc, const ct_gemm_row_hooks *hooks);

// Timing of ct_gemm's thread teams, off unless asked (bench/bench_gemm_team): *total_s sums the
// wall time of every product run by a team since timing was switched on, *wait_s the time from
// the first thread's end to the last one's -- what the team spends waiting for its slowest.
void ct_gemm_team_timing(int on);
void ct_gemm_team_timing_read(double *total_s, double *wait_s);

// Best GFLOP/s of an n×n×n sgemm through ct_gemm over `reps` runs: the fp32 peak MFU is
// measured against (kernels/cpu/peak.c).
double ct_cpu_matmul_peak_gflops(long n, int reps);

// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T
void ct_linear_forward(float *out, const float *inp, const float *weight, long N, long IC, long OC);
// dinp (N, IC) = dout (N, OC) @ weight (OC, IC)   (skipped when dinp is NULL)
// dweight (OC, IC) += dout^T @ inp                 (skipped when dweight is NULL)
void ct_linear_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                        long N, long IC, long OC);

// ---------------------------------------------------------------- embedding
// out (N, C) = wte[tokens[n] - vocab_start] for tokens in [vocab_start, vocab_start + V_local),
// zero rows for tokens outside (vocabulary-parallel embedding). wte (V_local, C).
// The same from a bf16 table wte16 (V_local, C): each row widened exactly.
void ct_embedding_forward_bf16(float *out, const int32_t *tokens, const uint16_t *wte16, long N, long C,
                               long vocab_start, long V_local);
void ct_embedding_forward(float *out, const int32_t *tokens, const float *wte, long N, long C, long vocab_start,
                          long V_local);
// dwte (V_local, C) += rows of dout (N, C) scattered by token (same vocabulary window).
void ct_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, long N, long C, long vocab_start,
                           long V_local);

// ---------------------------------------------------------------- RMSNorm
// out (N, C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps) kept for backward.
void ct_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, long N, long C, float eps);
// The same with out (N, C) in bf16: ct_rmsnorm_forward's fp32 values rounded to nearest even
// (its bits through ct_f32_to_bf16_array), rstd its bits; inp stays fp32 (the residual stream).
void ct_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *weight, long N, long C,
                             float eps);
// dinp (N, C) += ..., dweight (C) += ...  (either may be NULL: that half is skipped)
void ct_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         const float *rstd, long N, long C);

// ---------------------------------------------------------------- RoPE
// Rotation tables cos/sin (max_T, HS/2): angle(p, i) = p * freq_i, freq_i = theta^(-2i/HS),
// with Llama 3.1 scaling when scale_factor > 0 (factor 8, low 1, high 4, original 8192 in Llama 3.1).
void ct_rope_tables(float *cos_tab, float *sin_tab, long max_T, long HS, double theta, double scale_factor,
                    double low_freq_factor, double high_freq_factor, long original_max_pos);
// x (B, T, H, HS) rotated in place: pairs (x[2i], x[2i+1]) by angle(pos[b * pos_ld + t], i) (Meta's
// convention). pos gives each token's position: pos_ld 0, one (T) row shared by every sequence;
// pos_ld T, (B, T), a row per sequence (positions that restart at each document); pos NULL
// means 0..T-1 (pos_ld unused). Row stride of x between tokens is
// ld (>= H*HS) floats, so q and k can be rotated inside a fused qkv buffer.
void ct_rope_forward(float *x, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                     long T, long H, long HS, long ld);
// The inverse rotation, applied in place to the gradient.
// qkv16 (B·T, QKV) bf16 = round(RoPE on the q and k heads of qkv (B·T, QKV)), QKV = (NH + 2 NKV)
// HS: rope_forward's values, rounded once (kernels/backend.h qkv_rope_to_bf16).
void ct_qkv_rope_to_bf16(uint16_t *qkv16, const float *qkv, const float *cos_tab, const float *sin_tab,
                         const int32_t *pos, long pos_ld, long B, long T, long NH, long NKV, long HS);
void ct_rope_backward(float *dx, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                      long T, long H, long HS, long ld);

// ---------------------------------------------------------------- attention
// Causal grouped-query attention, tiled with an online softmax (FlashAttention-2 style).
// q (B, Tq, NH, HS) with token stride ldq; k, v (B, Tk, NKV, HS) with token strides ldk, ldv;
// out (B, Tq, NH, HS) contiguous; lse (B, NH, Tq) = log-sum-exp of each row's scaled scores
// (-INFINITY for a row that sees no key; its out row is 0). Query head h uses kv head
// h / (NH / NKV). Key j is visible to query i iff k_pos[j] <= q_pos[i] (NULL: 0..T-1) and,
// with document ids q_doc (B, Tq) / k_doc (B, Tk), q_doc[b, i] == k_doc[b, j] (document-causal,
// model.attn_mask_type block_causal; both NULL: causal), so a chunk of queries can attend to any
// chunk of keys (context parallel). Key tiles whose documents cannot meet the query tile's are
// skipped. Scale 1/sqrt(HS).
// scratch: ct_attention_scratch_floats() floats, for per-thread tiles and copies of a kv head's
// K, V (and in the backward dK, dV) rows (sized for omp_get_max_threads() at the time of the
// call; call the kernels with that many threads or fewer).
long ct_attention_scratch_floats(long Tq, long Tk, long HS);
void ct_attention_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk, const float *v,
                          long ldv, const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc,
                          const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS,
                          float *scratch);
// dq (same layout as q) +=, dk, dv (same layouts as k, v) +=. Recomputes scores per tile from
// lse; no (T, T) matrix is ever stored.
void ct_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, long ldq, const float *k, long ldk, const float *v, long ldv,
                           const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc, const int32_t *k_doc,
                           long B, long Tq, long Tk, long NH, long NKV, long HS, float *scratch);
// The same attention in bf16 (kernels/cpu/attention_bf16_*.c): q, k, v and out hold bf16 values
// (uint16_t bits, the top half of an fp32), with the same layouts, strides, positions,
// documents, grouping and scratch (ct_attention_scratch_floats covers both) as above. The
// products take bf16 operands and sum in fp32: P is rounded to bf16 (nearest, ties to even)
// before O += P V, where P = exp(S - m) with m the running max after each key tile of 64 (the
// online softmax); the running max and sum, lse and the accumulator stay fp32, and out is O
// rounded to bf16 once. lse (B, NH, Tq) is fp32 (a bf16 lse would move every P of its row by up
// to 2^-8 relative times |lse|, rounding them all in one direction).
// The pair step the chosen set's bf16 attention takes: "vdpbf16ps" (AVX-512 BF16) or "fma" (its
// two roundings written out as FMAs). Sets with the same step give the same bits.
const char *ct_attention_bf16_path(void);
void ct_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *q, long ldq, const uint16_t *k, long ldk,
                               const uint16_t *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                               const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV,
                               long HS, float *scratch);
// dout (B, Tq, NH, HS) fp32 (the output projection's input gradient), out the forward's bf16
// output; dq, dk, dv fp32 +=, as ct_attention_backward (fp32: their sums run over whole key and
// query ranges, and the optimizer and reductions take them in fp32). dO is rounded to bf16 for
// the products; P = exp(S - lse) and dS = scale P (dP - D) are computed in fp32 and rounded to
// bf16 before the products that take them (dV += P^T dO; dQ += dS K, dK += dS^T Q);
// D = rowsum(bf16(dO) * out) in fp32.
void ct_attention_backward_bf16(float *dq, float *dk, float *dv, const float *dout, const uint16_t *out,
                                const float *lse, const uint16_t *q, long ldq, const uint16_t *k, long ldk,
                                const uint16_t *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH,
                                long NKV, long HS, float *scratch);
// Exact merge of a partial attention result into an accumulated one over the same queries (the
// context-parallel ring): o (B, C, NH, HS), l (B, NH, C) := the attention over the union of both
// key sets, l = log(exp l + exp l_part), o = exp(l - l_new) o + exp(l_part - l_new) o_part, with
// the weights taken relative to the larger lse in double. A row with l_part = -inf (its part saw
// no key) keeps o, l; a row with l = -inf takes the part's.
void ct_attention_merge(float *o, float *l, const float *o_part, const float *l_part, long B, long C, long NH,
                        long HS);

// ---------------------------------------------------------------- SwiGLU
// inp (N, 2F) holds [gate | up] = [w1 x | w3 x]; out (N, F) = silu(gate) * up.
void ct_swiglu_forward(float *out, const float *inp, long N, long F);
// dinp (N, 2F) = gradients of gate and up.
void ct_swiglu_backward(float *dinp, const float *dout, const float *inp, long N, long F);
// The same under bf16 mixed precision, where [gate | up] is kept in bf16 (h13_kept (N, 2F)) and
// the arithmetic stays fp32 on its exact widening:
// forward: h13 (N, 2F) fp32 rounded to nearest even into h13_kept (h13 NULL: h13_kept already
// holds the input), out (N, F) = ct_swiglu_forward of h13_kept's values, rounded to bf16 -- the
// bits of narrowing h13, widening it back, ct_swiglu_forward and narrowing out;
// backward: ct_swiglu_backward's bits on h13_kept's values, dinp (N, 2F) fp32.
void ct_swiglu_forward_bf16(uint16_t *out, uint16_t *h13_kept, const float *h13, long N, long F);
void ct_swiglu_backward_bf16(float *dinp, const float *dout, const uint16_t *h13_kept, long N, long F);

// ---------------------------------------------------------------- output projection + cross-entropy
// Fused and chunked: logits for `chunk_rows` rows at a time (x_chunk @ W^T, never (N, V) at once).
// x (N, C), W (V, C), targets (N) with -1 = ignore. Returns sum over valid rows of
// -log softmax(logits)[target] (in double). When dx != NULL also computes, with
// dlogits = (softmax - onehot) * grad_scale: dx (N, C) = dlogits @ W and dW (V, C) += dlogits^T x.
// bf16: W holds bf16 values, and the three products take bf16 inputs with fp32 accumulation
// (kernels/backend.h: ct_head_products). scratch: ct_xent_scratch_floats(chunk_rows, V, C, bf16) floats.
long ct_xent_scratch_floats(long chunk_rows, long V, long C, bool bf16);
double ct_xent_fused(float *dx, float *dW, const float *x, const void *W, const int32_t *targets, long N, long C,
                     long V, float grad_scale, long chunk_rows, bool bf16, float *scratch);
// First row n whose target is outside [-1, V) (a caller bug), or -1 when all are valid.
long ct_xent_bad_target(const int32_t *targets, long N, long V);

// ---------------------------------------------------------------- cross-entropy row pieces
// The softmax of a row split over a vocabulary sharded across ranks (kernels/cpu/xent_rows.c):
// parallel/loss_parallel.c reduces per-row numbers between these calls. z (R, V) holds R rows of
// logits for the slice of ids [vocab_start, vocab_start + V); targets (R) are global ids, -1 =
// ignore. The per-row arithmetic is ct_xent_fused's.
// mx (R) = max_j z[r][j]; 0 for an ignored row (harmless in a MAX over slices).
void ct_xent_rows_max(float *mx, const float *z, const int32_t *targets, long R, long V);
// With mx (R) the row max over the whole vocabulary: z[r] = exp(z[r] - mx[r]) in place,
// sum (R) = Σ_j of the new z[r], zt (R) = the target's logit (before the exp) when the target is
// in this slice, else 0. Ignored rows: z untouched, sum = zt = 0.
void ct_xent_rows_exp_sum(float *z, float *sum, float *zt, const float *mx, const int32_t *targets, long R, long V,
                          long vocab_start);
// With z = exp(z - max) (from ct_xent_rows_exp_sum) and sum (R) the whole-vocabulary sum of it:
// z = dlogits = z / sum * grad_scale, minus grad_scale at the target when it is in this slice;
// ignored rows zero.
void ct_xent_rows_dlogits(float *z, const float *sum, const int32_t *targets, long R, long V, long vocab_start,
                          float grad_scale);
// Σ over valid rows, in row order and in double, of mx + log(sum) - zt: the rows' loss, the
// same bits wherever the same (reduced) numbers are passed.
double ct_xent_rows_loss(const float *mx, const float *sum, const float *zt, const int32_t *targets, long R);
// Gather mode: G (P, R, V) holds whole rows, block p the slice of ids [p·V, (p+1)·V). Writes mx,
// sum (of exp(z - mx)), zt (R) over the whole rows (ignored rows: 0), summing in an order fixed
// by the ids alone, so every rank holding the same G gets the same bits; when dlogits != 0,
// block `mine` becomes its dlogits (as ct_xent_rows_dlogits with vocab_start = mine·V).
void ct_xent_rows_gathered(float *G, float *mx, float *sum, float *zt, const int32_t *targets, long P, long R,
                           long V, long mine, float grad_scale, int dlogits);

// ---------------------------------------------------------------- fused forward chains
// (kernels/cpu/fused.c) Each does the work of a chain of the kernels above so that a block's rows
// are still in cache for the next step of the chain. A matmul whose input and output are kept is
// one ct_gemm_with_row_hooks product on all threads: the thread that multiplies a block of rows
// runs the step before (the norm) or after (SwiGLU, RoPE) on just those rows (on all rows, around
// the product, when the product is more than one packing of the weight). When the norm's or the
// gemm's output is not kept, the chain runs per row block through scratch instead (blocks of at
// most 256 rows handed out to the threads, one single-threaded ct_gemm each; with fewer blocks than
// threads, on all rows at once). ct_gemm sums each element the same way whichever rows a call
// covers and whoever computes them, and the residual add, norm, SwiGLU and RoPE are the unfused
// kernels' float operations: every output is the unfused chain's bits.
// scratch (only for an output that is not kept, else it may be NULL): the kernel's *_scratch_floats
// floats, a block per thread, sized for omp_get_max_threads() at the time of the call (as
// ct_attention_scratch_floats).
//
// x_out (N, C) = x + residual_delta (ct_add_inplace's sum), then norm_out (N, C) and rstd (N)
// as ct_rmsnorm_forward(norm_out, rstd, x_out, weight, ...): one pass over the rows, the same
// bits as the two calls. x_out may alias x or residual_delta; norm_out aliases none of them.
void ct_residual_rmsnorm_forward(float *x_out, float *norm_out, float *rstd, const float *x,
                                 const float *residual_delta, const float *weight, long N, long C, float eps);
// norm_out (N, C), rstd (N) = ct_rmsnorm_forward(x, norm_weight) (the same bits), then
// out (N, OC) = norm_out @ W (OC, C)^T, each row block normalised right before the product reads
// it. norm_out NULL: the normalised rows are not kept (they go through scratch, which may be NULL
// when norm_out is given).
long ct_rmsnorm_linear_scratch_floats(long N, long C, long OC);
void ct_rmsnorm_linear_forward(float *out, float *norm_out, float *rstd, const float *x, const float *norm_weight,
                               const float *W, long N, long C, long OC, float eps, float *scratch);
// ct_rmsnorm_linear_forward into qkv (N, QKV), then RoPE on each row block once its rows are
// final, as ct_linear_rope_forward (below) applies it: the whole chain norm -> QKV matmul -> RoPE
// of a block without sequence parallel, the same bits as the three unfused calls given the
// product. N == B*T (else ct_fatal). scratch: ct_rmsnorm_linear_scratch_floats(N, C, QKV) floats
// (only used when norm_out is NULL).
void ct_rmsnorm_linear_rope_forward(float *qkv, float *norm_out, float *rstd, const float *x,
                                    const float *norm_weight, const float *W, long N, long C, long QKV, float eps,
                                    const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
                                    long B, long T, long NH, long NKV, long HS, float *scratch);
// h13 (N, 2F) = inp (N, C) @ W13 (2F, C)^T ([gate | up], ct_linear_forward's product), then
// h (N, F) = ct_swiglu_forward(h13) of each row block right after its rows of h13 are final (the
// same bits given h13). h13 NULL: not kept (the blocks go through scratch, which may be NULL when
// h13 is given).
long ct_linear_swiglu_scratch_floats(long N, long C, long F);
void ct_linear_swiglu_forward(float *h13, float *h, const float *inp, const float *W13, long N, long C, long F,
                              float *scratch);
// qkv (N, QKV) = inp (N, C) @ W (QKV, C)^T, then RoPE on each row block once its rows are final:
// the NH query heads at column 0 and the NKV key heads at column NH*HS, as
// ct_rope_forward(qkv, ..., B, T, NH, HS, QKV) and ct_rope_forward(qkv + NH*HS, ..., NKV, HS, QKV)
// (the same bits given the product); the values (and any columns past (NH + 2 NKV) HS) are left
// as the matmul wrote them. Rows are (B, T): N == B*T (else ct_fatal); pos and pos_ld as
// ct_rope_forward. scratch: ct_linear_rope_scratch_floats floats (0 on the cpu: NULL is fine).
long ct_linear_rope_scratch_floats(long N, long C, long QKV);
void ct_linear_rope_forward(float *qkv, const float *inp, const float *W, long N, long C, long QKV,
                            const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                            long T, long NH, long NKV, long HS, float *scratch);

// ---------------------------------------------------------------- fused forward chains in bf16
// (kernels/cpu/fused_bf16.c) Under bf16 mixed precision a block keeps the norms', w13's and
// SwiGLU's and wqkv's outputs in bf16; these run the chains that narrow into them. A matmul is
// one ct_gemm_bf16_epilogue_rows product on all threads (gemm_bf16.h): the thread that
// multiplies a block of rows narrows it and runs SwiGLU / RoPE on it right after its rows are
// final, from its cache. Every output is the unfused chain's bits.
//
// x_out (N, C) = x + residual_delta, then norm_out (N, C) bf16 and rstd (N) as
// ct_rmsnorm_forward_bf16(norm_out, rstd, x_out, weight, ...). x_out may alias x or residual_delta.
void ct_residual_rmsnorm_forward_bf16(float *x_out, uint16_t *norm_out, float *rstd, const float *x,
                                      const float *residual_delta, const float *weight, long N, long C, float eps);
// The product inp (N, C) @ W13 (2F, C)^T (ct_gemm_bf16's), then ct_swiglu_forward_bf16(h,
// h13_kept, product, N, F) on each row block: h13_kept (N, 2F) and h (N, F) bf16. h13 (N, 2F)
// fp32 is room the product may go through; what it holds after is unspecified. W13_packed:
// W13^T packed beforehand (gemm_bf16.h ct_gemm_bf16_pack_b), read instead of W13; NULL: W13.
void ct_linear_swiglu_forward_bf16(uint16_t *h, uint16_t *h13_kept, float *h13, const uint16_t *inp,
                                   const uint16_t *W13, const void *W13_packed, long N, long C, long F);
// dh13 (N, 2F) fp32 = ct_swiglu_backward_bf16(dh13, dy @ W2, h13_kept, N, F): w2's input gradient
// (dy (N, C) bf16, W2 (C, F) bf16; ct_gemm_bf16's product) handed to SwiGLU's backward row block
// by row block. dh (N, F) fp32 is room the product may go through (unspecified after); W2_packed:
// W2 packed as the B operand of that product (ct_gemm_bf16_pack_b, trans_b 0), or NULL.
void ct_linear_swiglu_backward_bf16(float *dh13, float *dh, const uint16_t *dy, const uint16_t *W2,
                                    const void *W2_packed, const uint16_t *h13_kept, long N, long C, long F);
// The product inp (N, C) @ W (QKV, C)^T, QKV = (NH + 2 NKV) HS, then ct_qkv_rope_to_bf16(qkv16,
// product, ...) on each row block: qkv16 (N, QKV) bf16. qkv (N, QKV) fp32 is room the product
// may go through (unspecified after). N == B*T (else ct_fatal); pos and pos_ld as ct_rope_forward.
// W_packed as W13_packed above.
void ct_linear_rope_forward_bf16(uint16_t *qkv16, float *qkv, const uint16_t *inp, const uint16_t *W,
                                 const void *W_packed, long N, long C,
                                 const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                                 long T, long NH, long NKV, long HS);

// ---------------------------------------------------------------- mixture of experts
// E experts, k chosen per token; a "pair" is (token n, choice j), p = n·k + j. Rows sorted by
// expert: the N·k pairs in expert order (expert e's rows are [offsets[e], offsets[e + 1]),
// offsets the exclusive prefix sum of counts), within an expert in pair order.
//
// Router. scores (N, E) = softmax(logits) or, with sigmoid, sigmoid(logits) per row; ids (N, k)
// the k experts of highest score + bias (bias (E) or NULL: it only chooses, as DeepSeek-V3's
// load-balancing bias), in descending order of that sum, ties to the lower id; weights (N, k)
// their scores, divided by their sum when renorm.
void ct_moe_router_forward(int32_t *ids, float *weights, float *scores, const float *logits, const float *bias, long N,
                           long E, long k, int sigmoid, int renorm);
// dlogits (N, E) from dweights (N, k), through the renormalisation, plus dscores (N, E; NULL:
// none, e.g. the auxiliary loss's), then through the score function.
void ct_moe_router_backward(float *dlogits, const float *dweights, const float *dscores, const float *scores,
                            const int32_t *ids, long N, long E, long k, int sigmoid, int renorm);
// The load-balancing loss over groups of `group` tokens (a sequence; N or 0: the whole batch),
// E <= 1024: f_e = E / (k G) · (tokens of the group choosing e), P_e = the group's mean
// normalised score (s under softmax, s / Σ_e s under sigmoid), loss (one device float, written)
// = the mean over groups of coef Σ_e f_e P_e, dscores (N, E) its gradient with the choice held.
void ct_moe_aux_loss(float *loss, float *dscores, const float *scores, const int32_t *ids, long N, long E, long k,
                     long group, float coef, int sigmoid);
// bias (E) += rate where an expert's count (E, the step's pairs) is below the mean, -= above.
void ct_moe_bias_update(float *bias, const int64_t *counts, long E, float rate);
// counts (E) pairs per expert; pos (N, k) each pair's row in expert order.
void ct_moe_dispatch_plan(int64_t *counts, int32_t *pos, const int32_t *ids, long N, long E, long k);
// x_sorted (N·k, C): row pos[p] = x[p / k]. Backward: dx (N, C) = Σ_j dx_sorted[pos[n·k + j]].
void ct_moe_permute(float *x_sorted, const float *x, const int32_t *pos, long N, long k, long C);
void ct_moe_permute_backward(float *dx, const float *dx_sorted, const int32_t *pos, long N, long k, long C);
// y (N, C) = Σ_j weights[n, j] · y_sorted[pos[n·k + j]]. Backward: dy_sorted[pos[p]] =
// weights[p] · dy[n] (every row of dy_sorted written), dweights[p] = <dy[n], y_sorted[pos[p]]>.
void ct_moe_combine(float *y, const float *y_sorted, const float *weights, const int32_t *pos, long N, long k, long C);
void ct_moe_combine_backward(float *dy_sorted, float *dweights, const float *dy, const float *y_sorted,
                             const float *weights, const int32_t *pos, long N, long k, long C);
// Grouped linear over the experts: rows [offsets[e], offsets[e + 1]) of inp (rows, IC) times
// expert e's weight (OC, IC) of weight (E, OC, IC), as ct_linear_forward / _backward per expert
// (dinp overwritten on those rows, dweight accumulated; either NULL: skipped). offsets (E + 1)
// are host memory: a backend issues one product per expert and needs the sizes where it issues.
void ct_grouped_linear_forward(float *out, const float *inp, const float *weight, const int64_t *offsets, long E,
                               long IC, long OC);
void ct_grouped_linear_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                                const int64_t *offsets, long E, long IC, long OC);
// The same under bf16 mixed precision, on gemm_bf16 per expert: inp (rows, IC), weight (E, OC, IC)
// and dout (rows, OC) in bf16 (the caller narrows its fp32 output gradient, as the dense linear
// layers do), products accumulated in fp32; out and dinp fp32 overwritten on the experts' rows,
// dweight fp32 accumulated (FSDP's fp32 full gradient).
void ct_grouped_linear_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight, const int64_t *offsets,
                                    long E, long IC, long OC);
void ct_grouped_linear_backward_bf16(float *dinp, float *dweight, const uint16_t *dout, const uint16_t *inp,
                                     const uint16_t *weight, const int64_t *offsets, long E, long IC, long OC);

// ---------------------------------------------------------------- AdamW and reductions
// Decoupled weight decay (Loshchilov & Hutter): p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p),
// with g = grad * grad_scale (clipping factor), step >= 1 for the bias corrections.
// Fused: one pass over the shard reads param, grad, m, v and writes param, m, v once each; the
// clipping scale is applied to each gradient value as it is read (grad is left untouched).
// grad_scale: one float in the kernel's memory (the clip factor computed there); 0 means the step
// is skipped (a non-finite loss or norm, ct_clip_factor): nothing is written.
void ct_adamw_update(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1, float beta2,
                     float eps, float weight_decay, long step, const float *grad_scale);
// The step's clip factor from its scalars (loss sum, gradients' sum of squares; doubles), where
// they are: norm = sqrt(sum of squares); *scale = 0 when the loss sum or the norm is not finite
// (no update may happen), else max_norm / (norm + 1e-6) when max_norm > 0 and norm > max_norm,
// else 1 -- worked out in double, then rounded to float.
void ct_clip_factor(float *scale, const double *scalars, double max_norm);
// sum of squares, accumulated in double
double ct_sum_squares(const float *x, long n);
// y (n) += x (n)
void ct_add_inplace(float *y, const float *x, long n);
// y (n) *= a
void ct_scale_inplace(float *y, float a, long n);
#endif
