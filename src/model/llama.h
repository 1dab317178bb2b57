// The Llama 3 model: forward, loss and backward of one micro-batch, written once against the
// shapes of the buffers it is handed. Parallel strategies do not copy this code: they act in
// the hooks (before/after each parameter group) and by what they put behind the weight views.
#ifndef CT_LLAMA_H
#define CT_LLAMA_H
#include <stdint.h>

#include "model/llama_config.h"
#include "model/params.h"

// Views of one transformer block's tensors inside a flat block (parameters or gradients).
typedef struct {
    float *attn_norm;  // (C)
    float *wqkv;       // (QKV, C) with QKV = (NH + 2·NKV)·HS: wq | wk | wv, one matrix
    float *wo;         // (C, NH·HS)
    float *ffn_norm;   // (C)
    float *w13;        // (2F, C): w1 | w3
    float *w2;         // (C, F)
} ct_block_weights;

typedef struct {
    float *tok_embeddings;     // (V, C)
    ct_block_weights *blocks;  // (L)
    float *norm;               // (C)
    float *output;             // (V, C)
} ct_llama_weights;

// Points a weights struct at the tensors of a flat block laid out by the registry.
void ct_llama_weights_init(ct_llama_weights *w, const ct_param_table *t, const ct_llama_config *m, float *block);
// Re-points the views of one group (FSDP moves a group into a gathered buffer and back).
// `group_block` holds the group's elements, starting at its first tensor.
void ct_llama_weights_point_group(ct_llama_weights *w, const ct_param_table *t, int group, float *group_block);
void ct_llama_weights_free(ct_llama_weights *w);

// Activations of one block kept for backward. N_l = rows of the residual stream on this rank
// (N, or N / tp under sequence parallel); the column-parallel region works on all N rows.
typedef struct {
    float *x;      // (N_l, C) block input: the residual stream
    float *norm1;  // (N, C) attention_norm(x), gathered
    float *rstd1;  // (N_l)
    float *qkv;    // (N, QKV) after RoPE on the q and k parts
    float *att;    // (N, NH·HS) attention output, before wo
    float *lse;    // (B, NH, T) per-row log-sum-exp of the attention scores
    float *x_mid;  // (N_l, C) residual stream after attention
    float *norm2;  // (N, C) ffn_norm(x_mid), gathered
    float *rstd2;  // (N_l)
    float *h13;    // (N, 2F) [w1 x | w3 x]
    float *h;      // (N, F) silu(w1 x) * (w3 x)
} ct_block_acts;

// Called around each parameter group (0 embedding, 1..L blocks, L+1 final norm + output). The
// fused output head runs its forward and backward at once: it sees before(FORWARD) then
// after(BACKWARD). A strategy may re-point weight and gradient views in `before`.
enum { CT_FORWARD = 0, CT_BACKWARD = 1 };
typedef struct {
    void *ctx;
    void (*before_group)(void *ctx, int group, int phase);
    void (*after_group)(void *ctx, int group, int phase);
} ct_llama_hooks;

// Tensor (compute) parallelism, Megatron style. The model computes with this rank's heads, FFN
// columns and vocabulary slice, and calls two hooks at the edges of the parallel regions:
//   gather_rows  the f operator: before a column-parallel matmul, the residual stream's local
//                rows (N_l, C) become the full rows (N, C) every tp rank multiplies. Without
//                sequence parallel N_l = N and it is the identity (local == full).
//                Its backward is reduce_rows.
//   reduce_rows  the g operator: after a row-parallel matmul, the partial sums (N, C) of every
//                tp rank are summed into local rows: all-reduce in place (local == full), or
//                reduce-scatter under sequence parallel. Its backward is gather_rows.
// and output_loss for the vocabulary-split output layer + cross-entropy (ct_xent_fused's
// contract; dx comes back as this rank's partial sum). A run without tp passes NULL: identity.
typedef struct {
    void *ctx;
    int size, rank;              // tp degree and this rank's place
    int sequence_parallel;       // the residual stream holds N / size rows per rank
    void (*gather_rows)(void *ctx, const float *local, float *full, long local_rows, long C);
    void (*reduce_rows)(void *ctx, float *full, float *local, long local_rows, long C);
    double (*output_loss)(void *ctx, float *dx, float *dW, const float *x, const float *W, const int32_t *targets,
                          long N, long C, long V_local, long vocab_start, float grad_scale, long chunk_rows,
                          float *scratch);
    long output_loss_scratch_floats;
} ct_tp_hooks;

// Everything one micro-batch of shape (B, T) needs, planned once at start-up.
typedef struct {
    ct_llama_config cfg;        // this rank's dimensions (ct_llama_config_local under tp)
    ct_tp_hooks tp;             // size 1: no tensor parallelism
    long B, T, N;               // N = B·T
    long N_local;               // rows of the residual stream here: N, or N / tp under sequence parallel
    long qkv_dim;               // (NH + 2·NKV)·HS
    ct_block_acts *blocks;      // (L)
    float *x_final;             // (N_l, C) residual stream after the last block
    float *norm_f;              // (N, C) final norm, gathered
    float *rstd_f;              // (N_l)
    float *dres;                // (N_l, C) gradient of the residual stream
    float *dnorm;               // (N, C)
    float *datt;                // (N, NH·HS)
    float *dqkv;                // (N, QKV)
    float *dh;                  // (N, F)
    float *dh13;                // (N, 2F)
    float *tmp_local;           // (N_local, C) sequence parallel: a norm's output before gathering
    float *tmp_full;            // (N, C) sequence parallel: partial sums before reduce-scatter
    float *rope_cos, *rope_sin; // (T, HS/2)
    float *scratch;             // attention tiles / logits chunk
    long xent_chunk_rows;
    float *arena;               // the one allocation all of the above live in
} ct_llama_acts;

void ct_llama_acts_init(ct_llama_acts *a, const ct_llama_config *m, long B, long T);
// Rows of logits the output loss computes at a time, for N = B·T rows (sizes its scratch).
long ct_llama_xent_chunk_rows(long N);
// Under tensor parallelism: m is this rank's config (ct_llama_config_local), tp the hooks.
void ct_llama_acts_init_tp(ct_llama_acts *a, const ct_llama_config *m, long B, long T, const ct_tp_hooks *tp);
void ct_llama_acts_free(ct_llama_acts *a);

// One micro-batch: inputs, targets (B, T) (target -1 = ignored). Returns the SUM of token losses
// over valid targets (the caller divides by the step's global count of valid tokens).
// With grads != NULL also runs backward, adding (grad_scale ×) the gradients into grads;
// grad_scale is 1 / (valid tokens in the whole step), so accumulation over micro-batches and
// ranks yields the gradient of the mean loss. hooks may be NULL.
double ct_llama_step(ct_llama_acts *a, ct_llama_weights *w, ct_llama_weights *grads, const int32_t *inputs,
                     const int32_t *targets, float grad_scale, const ct_llama_hooks *hooks);
#endif
