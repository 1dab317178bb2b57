// Llama 3: pre-norm blocks of grouped-query attention with RoPE and a SwiGLU feed-forward,
// RMSNorm before each. The family's flavors and dimensions (config.c), its parameters
// (config.c: ct_llama3_family.block_params) and its block (block.c: forward, the checkpointing
// kinds' recompute, backward, split backward; buffers.c: what they need carved).
//
// Letters: B micro-batch, T sequence, N = B·T rows, N_l rows of the residual stream on this
// rank (N, or N / tp under sequence parallel), C model dim, NH / NKV heads / kv heads on this
// rank, HS head dim, QKV = (NH + 2·NKV)·HS, F FFN hidden on this rank.
#ifndef CT_LLAMA3_H
#define CT_LLAMA3_H
#include "model/block.h"
#include "model/model.h"

extern const ct_model_family ct_llama3_family;
extern const ct_block_ops ct_llama3_block;

// Meta's FFN rule: hidden = 2/3 * 4 * dim, times ffn_dim_multiplier if set, rounded up to a
// multiple of multiple_of (8B: 4096 -> 14336; debugmodel: 256 -> 768).
int ct_llama3_ffn_hidden(int dim, int multiple_of, double ffn_dim_multiplier);

// QKV: the width of the fused q | k | v product on this rank.
static inline long ct_llama3_qkv_dim(const ct_model_config *m) { return (m->n_heads + 2L * m->n_kv_heads) * m->head_dim; }

// A block's weight views (ct_block_weights.t[...]).
enum {
    LLAMA3_ATTN_NORM,  // (C)
    LLAMA3_WQKV,       // (QKV, C): wq | wk | wv, one matrix
    LLAMA3_WO,         // (C, NH·HS)
    LLAMA3_FFN_NORM,   // (C)
    LLAMA3_W13,        // (2F, C): w1 | w3
    LLAMA3_W2,         // (C, F)
    LLAMA3_Q_NORM,     // (HS) qk_norm only: every q head's norm weight
    LLAMA3_K_NORM,     // (HS) qk_norm only: every k head's
    LLAMA3_VIEWS
};

// Activations of one block kept for backward. The residual stream and the per-row statistics
// stay fp32 -- the stream sums every block's output, and a bf16 stream would lose up to 2^-9 of
// itself at each add; the matmul inputs and outputs (void *) are kept in the stage's compute
// dtype: fp32, or bf16 under mixed precision (model/linear.h). What a checkpointing kind does not
// keep points into the workspace's shared recompute buffers.
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
    // qk_norm only (NULL otherwise): q and k as wqkv wrote them, before their per-head norm, and
    // the norm's statistics, one per head row.
    float *q_raw;   // (N, NH·HS)
    float *k_raw;   // (N, NKV·HS)
    float *q_rstd;  // (N·NH)
    float *k_rstd;  // (N·NKV)
} ct_llama3_acts;

// What backward_input keeps for backward_weight: the gradients flowing into each weight's
// matmul and norm (the matmul inputs are the forward activations, already kept).
typedef struct {
    float *dy_ffn;  // (N, C) gradient of w2's output (gathered under sequence parallel)
    float *dh13;    // (N, 2F) gradient of w13's output
    float *dn2;     // (N_l, C) gradient of ffn_norm's output, reduced over tp
    float *dy_att;  // (N, C) gradient of wo's output
    float *dqkv;    // (N, QKV) gradient of wqkv's output (after RoPE's backward)
    float *dn1;     // (N_l, C) gradient of attention_norm's output
} ct_llama3_wgrad;

// The stage's shared buffers for its Llama 3 blocks, valid inside one action.
typedef struct {
    float *datt;            // (N, NH·HS)
    float *dqkv;            // (N, QKV)
    float *dh;              // (N, F)
    float *dh13;            // (N, 2F); under bf16 also the forward's w13 product before it is kept
    // bf16 only: fp32 work buffers for activations kept in bf16 (NULL in fp32, where the kept
    // buffers are the work buffers): each is computed here, narrowed into the slot, and widened
    // again for the kernels that read fp32 (attention). The norms and SwiGLU read and write their
    // bf16 copies themselves (kernels/backend.h *_bf16); w_norm, w_h13 and w_h are carved only
    // for a backend without those kernels (NULL otherwise).
    float *w_norm;          // (N, C)
    float *w_qkv;           // (N, QKV)
    float *w_att;           // (N, NH·HS)
    float *w_h13;           // (N, 2F)
    float *w_h;             // (N, F)
    float *fuse_scratch;    // the fused kernels' (--compile.enable)
    float *qk_tmp;          // (2, N, (NH + NKV)·HS) qk_norm only: the per-head norms' contiguous rows
    ct_llama3_acts rc;      // recomputed activations, one block's worth shared by every slot (x
                            // unused): what the checkpointing kinds recompute
} ct_llama3_work;

// The attention half of a block, for families built on Llama 3's attention (the feed-forward
// theirs): x -> norm1 -> wqkv -> (qk_norm: each head of q and of k normed) -> RoPE -> attention
// -> wo -> x_mid = x + that, then norm2 of x_mid into s->norm2 (s->rstd2); and its backward,
// from dres = the gradient of x_mid (norm2's backward already added) to that of x. gw: where
// weight gradients go now (its views NULL when keep holds what the weight pass needs instead).
void ct_llama3_attention_forward(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w);
void ct_llama3_attention_backward(const ct_block_ctx *c, int layer, const ct_llama3_acts *s, const ct_block_weights *w,
                                  ct_block_weights *gw, ct_llama3_wgrad *keep, float *dres);
// dh13 (N, 2F) = SwiGLU's backward from dh (N, F), the gradient of h, at FFN width F (<= the
// workspace's), reading h13 (N, 2F) as kept: fp32, or bf16 under bf16.
void ct_llama3_swiglu_backward(const ct_block_ctx *c, float *dh13, const float *dh, const void *h13, long F);
// The block's buffers and shapes (buffers.c), as ct_llama3_block's members (model/block.h's
// ct_block_ops says what each carves).
int ct_llama3_block_linears(const ct_block_ctx *c, ct_linear_shape *out);
long ct_llama3_carve_work(const ct_block_ctx *c, unsigned kinds, void *work, float *base);
long ct_llama3_carve_acts(const ct_block_ctx *c, ct_ac_kind kind, float *x, void *acts, float *base);
long ct_llama3_carve_wgrad(const ct_block_ctx *c, void *keep, float *base);
double ct_llama3_kept_bytes_per_token(const ct_ac_shape *s, ct_ac_kind kind);
double ct_llama3_recompute_flops_per_token(const ct_ac_shape *s, ct_ac_kind kind, long seq_len);
// What the attention half keeps with nothing checkpointed (norm1 .. rstd2 of b, and the qk_norm
// buffers when the model has them), carved as ct_block_ops's carve functions do.
long ct_llama3_carve_attention(const ct_block_ctx *c, ct_llama3_acts *b, float *base);
#endif
