// The buffers Llama 3's block needs (model/block.h's carve functions: the stage's workspace, one
// block's activations under each checkpointing kind, the split backward's record), its linear
// layers' shapes, and the checkpointing kinds' arithmetic the planner reads.
#include "core/error.h"
#include "model/llama3/llama3.h"

// ------------------------------------------------------------------ buffers

// Slices are taken 64-byte aligned (16 floats) from a base; a NULL base only measures.
#define TAKE(ptr, n)                            \
    do {                                        \
        ptr = base ? base + used : NULL;        \
        used += ((n) + 15) & ~15L;              \
    } while (0)
// n elements of the compute dtype (a kept matmul activation): half as many floats in bf16.
#define TAKE_ACT(ptr, n) TAKE(ptr, c->lin->prec.compute == CT_BF16 ? ((n) + 1) / 2 : (n))

int ct_llama3_block_linears(const ct_block_ctx *c, ct_linear_shape *l) {
    const ct_model_config *m = c->cfg;
    long C = m->dim, Q = m->n_heads * m->head_dim, F = m->ffn_hidden;
    l[CT_LINEAR_WQKV] = (ct_linear_shape){C, ct_llama3_qkv_dim(c->cfg)};
    l[CT_LINEAR_WO] = (ct_linear_shape){Q, C};
    l[CT_LINEAR_W13] = (ct_linear_shape){C, 2 * F};
    l[CT_LINEAR_W2] = (ct_linear_shape){F, C};
    return CT_BLOCK_LINEARS;
}

long ct_llama3_carve_work(const ct_block_ctx *c, unsigned kinds, void *work, float *base) {
    const ct_model_config *m = c->cfg;
    ct_llama3_work *wk = work;
    long N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads, F = m->ffn_hidden;
    long QKV = ct_llama3_qkv_dim(c->cfg), used = 0;
    if (c->lin->prec.compute == CT_BF16) {  // the fp32 work buffers; the norms and SwiGLU need theirs only without bf16 kernels
        const ct_kernels *k = c->k;
        if (!k->rmsnorm_forward_bf16) TAKE(wk->w_norm, N * C);
        TAKE(wk->w_qkv, N * QKV);
        TAKE(wk->w_att, N * NH * HS);
        if (!k->swiglu_forward_bf16 || !k->swiglu_backward_bf16) TAKE(wk->w_h13, N * 2 * F);
        if (!k->swiglu_forward_bf16) TAKE(wk->w_h, N * F);
    }
    // Recomputed activations: one block's worth, shared by every slot (planned for the policy).
    bool cheap = kinds & CT_AC_BIT(CT_AC_ELEMENTWISE), ops = kinds & CT_AC_BIT(CT_AC_OPS);
    bool full = kinds & CT_AC_BIT(CT_AC_FULL);
    ct_llama3_acts *rc = &wk->rc;
    if (cheap || ops || full) {
        TAKE_ACT(rc->norm1, N * C);
        TAKE_ACT(rc->norm2, N * C);
        TAKE_ACT(rc->h, N * F);
    }
    if (ops || full) {
        TAKE(rc->rstd1, Nl);
        TAKE_ACT(rc->qkv, N * QKV);
    }
    if (full) {
        TAKE_ACT(rc->att, N * NH * HS);
        TAKE(rc->lse, c->B * NH * c->T);
    }
    if (ops || full) {
        TAKE(rc->x_mid, Nl * C);
        TAKE(rc->rstd2, Nl);
        TAKE_ACT(rc->h13, N * 2 * F);
    }
    if (c->fused) {
        const ct_kernels *k = c->k;
        long f = k->rmsnorm_linear_scratch_floats(N, C, QKV), g = k->linear_swiglu_scratch_floats(N, C, F);
        long r = k->linear_rope_scratch_floats(N, C, QKV);
        TAKE(wk->fuse_scratch, f > g ? (f > r ? f : r) : (g > r ? g : r));
    }
    if (m->qk_norm) TAKE(wk->qk_tmp, 2 * N * (NH + m->n_kv_heads) * HS);
    TAKE(wk->datt, N * NH * HS);
    TAKE(wk->dqkv, N * QKV);
    TAKE(wk->dh, N * F);
    TAKE(wk->dh13, N * 2 * F);
    return used;
}

long ct_llama3_carve_attention(const ct_block_ctx *c, ct_llama3_acts *b, float *base) {
    const ct_model_config *m = c->cfg;
    long B = c->B, T = c->T, N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long used = 0;
    TAKE_ACT(b->norm1, N * C);
    TAKE(b->rstd1, Nl);
    TAKE_ACT(b->qkv, N * ct_llama3_qkv_dim(c->cfg));
    TAKE_ACT(b->att, N * NH * HS);
    TAKE(b->lse, B * NH * T);
    TAKE(b->x_mid, Nl * C);
    TAKE_ACT(b->norm2, N * C);
    TAKE(b->rstd2, Nl);
    if (m->qk_norm) {  // fp32: the norms run on the fp32 matmul output whatever the compute dtype
        long NKV = m->n_kv_heads;
        TAKE(b->q_raw, N * NH * HS);
        TAKE(b->k_raw, N * NKV * HS);
        TAKE(b->q_rstd, N * NH);
        TAKE(b->k_rstd, N * NKV);
    }
    return used;
}

long ct_llama3_carve_acts(const ct_block_ctx *c, ct_ac_kind kind, float *x, void *acts, float *base) {
    const ct_model_config *m = c->cfg;
    ct_llama3_acts *b = acts;
    long B = c->B, T = c->T, N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long F = m->ffn_hidden, QKV = ct_llama3_qkv_dim(c->cfg), used = 0;
    if (base) *b = ((ct_llama3_work *)c->work)->rc;  // what the block does not keep lives in the shared recompute buffers
    b->x = x;
    // The checkpointing kinds recompute q and k without the per-head norms (the families with
    // qk_norm do not checkpoint: their supports).
    if (m->qk_norm && kind != CT_AC_NONE) ct_fatal("llama3", "qk_norm with activation checkpointing");
    if (kind == CT_AC_FULL) return used;
    if (kind == CT_AC_OPS) {
        TAKE_ACT(b->qv, N * (NH + m->n_kv_heads) * HS);
        TAKE_ACT(b->att, N * NH * HS);
        TAKE(b->lse, B * NH * T);
        TAKE_ACT(b->h1, N * F);
        return used;
    }
    if (kind == CT_AC_NONE) {
        used = ct_llama3_carve_attention(c, b, base);
    } else {
        TAKE(b->rstd1, Nl);
        TAKE_ACT(b->qkv, N * QKV);
        TAKE_ACT(b->att, N * NH * HS);
        TAKE(b->lse, B * NH * T);
        TAKE(b->x_mid, Nl * C);
        TAKE(b->rstd2, Nl);
    }
    TAKE_ACT(b->h13, N * 2 * F);
    if (kind == CT_AC_NONE) TAKE_ACT(b->h, N * F);
    return used;
}

long ct_llama3_carve_wgrad(const ct_block_ctx *c, void *keep, float *base) {
    ct_llama3_wgrad *w = keep;
    long N = c->N, Nl = c->N_local, C = c->cfg->dim, F = c->cfg->ffn_hidden, used = 0;
    TAKE(w->dy_ffn, N * C);
    TAKE(w->dh13, N * 2 * F);
    TAKE(w->dn2, Nl * C);
    TAKE(w->dy_att, N * C);
    TAKE(w->dqkv, N * ct_llama3_qkv_dim(c->cfg));
    TAKE(w->dn1, Nl * C);
    return used;
}
#undef TAKE_ACT
#undef TAKE

// ------------------------------------------------------------------ the checkpointing policies' arithmetic

// What ct_llama3_carve_acts takes, per token (tests/test_checkpointing.c holds it to hand counts).
double ct_llama3_kept_bytes_per_token(const ct_ac_shape *s, ct_ac_kind kind) {
    const ct_model_config *m = s->cfg;
    double c = s->compute_bytes, C = m->dim, Q = (double)m->n_heads * m->head_dim;
    double KV = (double)m->n_kv_heads * m->head_dim, F = m->ffn_hidden;
    double r = s->seq_parallel_tp > 1 ? 1.0 / s->seq_parallel_tp : 1.0;  // residual rows per token
    double x = 4 * C * r, rstd = 4 * r, lse = 4.0 * m->n_heads;
    switch (kind) {
    case CT_AC_NONE: return 2 * x + 2 * rstd + c * (2 * C + Q + 2 * KV + Q + 3 * F) + lse;
    case CT_AC_ELEMENTWISE: return 2 * x + 2 * rstd + c * (Q + 2 * KV + Q + 2 * F) + lse;
    case CT_AC_OPS: return x + c * (Q + KV + Q + F) + lse;
    case CT_AC_FULL: return x;
    default: return 0;
    }
}

double ct_llama3_recompute_flops_per_token(const ct_ac_shape *s, ct_ac_kind kind, long seq_len) {
    const ct_model_config *m = s->cfg;
    double C = m->dim, Q = (double)m->n_heads * m->head_dim, KV = (double)m->n_kv_heads * m->head_dim;
    double F = m->ffn_hidden;
    switch (kind) {
    case CT_AC_OPS: return 2 * C * KV + 2 * Q * C + 2 * C * F;  // wk, wo, w3
    case CT_AC_FULL:  // every matmul, and attention's two products (q·k and p·v) over the sequence
        return 2 * C * (Q + 2 * KV) + 2 * Q * C + 2 * C * 2 * F + 2 * F * C + 4.0 * Q * (double)seq_len;
    default: return 0;
    }
}
