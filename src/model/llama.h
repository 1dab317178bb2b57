// The Llama 3 model's tensors: views of the parameters (and gradients) of each layer group, the
// activations a block keeps for backward, and the RoPE tables. The math is in block.c (one
// transformer block) and stage.c (a range of blocks with the embedding and/or the head);
// strategies act through the stage's operations table and by what they put behind the views.
#ifndef CT_LLAMA_H
#define CT_LLAMA_H
#include <stdint.h>

#include "kernels/backend.h"

#include "model/model.h"
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
} ct_model_weights;

// Points a weights struct at the tensors of a flat block laid out by the registry.
void ct_model_weights_init(ct_model_weights *w, const ct_param_table *t, const ct_model_config *m, float *block);
// Re-points the views of one group (FSDP moves a group into a gathered buffer and back).
// `group_block` holds the group's elements, starting at its first tensor.
void ct_model_weights_point_group(ct_model_weights *w, const ct_param_table *t, int group, float *group_block);
void ct_model_weights_free(ct_model_weights *w);

// RoPE tables cos/sin (T, HS/2) for this model: rope_theta, and Llama 3.1's frequency scaling
// when cfg->rope_scaling (factor 8, low 1, high 4, original context 8192) -- the one place
// those constants live.
void ct_model_rope_tables(const ct_kernels *k, const ct_model_config *m, float *cos_tab, float *sin_tab, long T);

// Activations of one block kept for backward. N_l = rows of the residual stream on this rank
// (N, or N / tp under sequence parallel); the column-parallel region works on all N rows.
// The residual stream and the per-row statistics stay fp32; the matmul inputs and outputs
// (void *) are kept in the stage's compute dtype: fp32, or bf16 under mixed precision
// (model/linear.h).
typedef struct {
    float *x;      // (N_l, C) block input: the residual stream
    void *norm1;   // (N, C) attention_norm(x), gathered
    float *rstd1;  // (N_l)
    void *qkv;     // (N, QKV) after RoPE on the q and k parts
    void *att;     // (N, NH·HS) attention output, before wo
    float *lse;    // (B, NH, T) per-row log-sum-exp of the attention scores
    float *x_mid;  // (N_l, C) residual stream after attention
    void *norm2;   // (N, C) ffn_norm(x_mid), gathered
    float *rstd2;  // (N_l)
    void *h13;     // (N, 2F) [w1 x | w3 x]
    void *h;       // (N, F) silu(w1 x) * (w3 x)
    // Kept instead of qkv and h13 under per-op checkpointing (CT_AC_OPS), which recomputes k and
    // w3's output and puts the two back together in the shared qkv and h13 before the backward.
    void *qv;      // (N, NH·HS + NKV·HS) q | v, q after RoPE
    void *h1;      // (N, F) w1 x
} ct_block_acts;

#endif
