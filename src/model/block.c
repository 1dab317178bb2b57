#include "model/block.h"

#include <stdbool.h>

// ------------------------------------------------------------------ tensor-parallel edges

static bool seq_parallel(const ct_block_ctx *c) { return c->ops->tp.sequence_parallel != 0; }

// f: local rows of the residual stream -> the full rows the column-parallel matmuls read.
// Without sequence parallel the two are one buffer and nothing moves.
static void gather_rows(const ct_block_ctx *c, const float *local, float *full) {
    if (c->ops->tp.gather_rows && seq_parallel(c))
        c->ops->tp.gather_rows(c->ops->tp.ctx, local, full, c->N_local, c->cfg->dim);
}

// g: partial sums of a row-parallel matmul -> reduced local rows (in place without sequence
// parallel).
static void reduce_rows(const ct_block_ctx *c, float *full, float *local) {
    if (c->ops->tp.reduce_rows) c->ops->tp.reduce_rows(c->ops->tp.ctx, full, local, c->N_local, c->cfg->dim);
}

// Where a norm's output goes before gather_rows: straight into the full buffer unless sequence
// parallel splits the rows.
static float *norm_out(const ct_block_ctx *c, float *full) { return seq_parallel(c) ? c->tmp_local : full; }
// Where a row-parallel matmul writes its partial sums: into the local buffer itself (reduced in
// place) unless sequence parallel reduce-scatters them.
static float *partial_out(const ct_block_ctx *c, float *local) { return seq_parallel(c) ? c->tmp_full : local; }

static ct_attention_args attention_args(const ct_block_ctx *c, int layer, const ct_block_acts *s) {
    const ct_llama_config *m = c->cfg;
    long HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads, QKV = c->qkv_dim;
    ct_attention_args a = {
        .layer = layer, .B = c->B, .Tq = c->T, .Tk = c->T, .NH = NH, .NKV = NKV, .HS = HS,
        .q = s->qkv, .k = s->qkv + NH * HS, .v = s->qkv + (NH + NKV) * HS, .ldq = QKV, .ldk = QKV, .ldv = QKV,
        .q_pos = c->pos, .k_pos = c->pos, .out = s->att, .lse = s->lse, .scratch = c->scratch,
    };
    return a;
}

// ------------------------------------------------------------------ forward

void ct_block_forward(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w, float *out) {
    const ct_kernels *k = c->k;
    const ct_llama_config *m = c->cfg;
    long B = c->B, T = c->T, N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long NKV = m->n_kv_heads, F = m->ffn_hidden, QKV = c->qkv_dim;
    float *q = s->qkv, *kk = s->qkv + NH * HS;

    float *n1 = norm_out(c, s->norm1);
    k->rmsnorm_forward(n1, s->rstd1, s->x, w->attn_norm, Nl, C, (float)m->norm_eps);
    gather_rows(c, n1, s->norm1);                           // (N, C)
    k->linear_forward(s->qkv, s->norm1, w->wqkv, N, C, QKV);  // (N, QKV) this rank's heads
    k->rope_forward(q, c->rope_cos, c->rope_sin, c->pos, B, T, NH, HS, QKV);
    k->rope_forward(kk, c->rope_cos, c->rope_sin, c->pos, B, T, NKV, HS, QKV);
    ct_attention_args a = attention_args(c, layer, s);
    c->ops->attention.forward(c->ops->attention.ctx, &a);
    float *y = partial_out(c, s->x_mid);
    k->linear_forward(y, s->att, w->wo, N, NH * HS, C);  // (N, C) partial over tp
    reduce_rows(c, y, s->x_mid);                         // (N_l, C)
    k->add_inplace(s->x_mid, s->x, Nl * C);

    float *n2 = norm_out(c, s->norm2);
    k->rmsnorm_forward(n2, s->rstd2, s->x_mid, w->ffn_norm, Nl, C, (float)m->norm_eps);
    gather_rows(c, n2, s->norm2);
    k->linear_forward(s->h13, s->norm2, w->w13, N, C, 2 * F);  // (N, 2F)
    k->swiglu_forward(s->h, s->h13, N, F);                     // (N, F)
    y = partial_out(c, out);
    k->linear_forward(y, s->h, w->w2, N, F, C);  // (N, C) partial over tp
    reduce_rows(c, y, out);
    k->add_inplace(out, s->x_mid, Nl * C);
}

// ------------------------------------------------------------------ backward

// The residual gradient on all N rows, as the row-parallel matmul's output gradient: gathered
// under sequence parallel (into `keep` when the split backward keeps it), else dres itself --
// copied when kept, because dres changes before the weight pass runs.
static const float *output_grad(const ct_block_ctx *c, float *dres, float *keep) {
    if (seq_parallel(c)) {
        float *dy = keep ? keep : c->tmp_full;
        gather_rows(c, dres, dy);  // backward of g
        return dy;
    }
    if (!keep) return dres;
    c->k->copy(keep, dres, (size_t)(c->N * c->cfg->dim) * sizeof(float));
    return keep;
}

// A column-parallel matmul's input gradient (N, C) is partial over tp; reduce it into the norm's
// output gradient (N_l, C). Returns that gradient; `kept` receives it in the split backward.
static const float *norm_grad(const ct_block_ctx *c, float **dfull, float *kept) {
    float *dn = kept ? kept : norm_out(c, c->dnorm);
    *dfull = seq_parallel(c) ? c->dnorm : dn;  // where the matmul writes (N, C)
    return dn;
}

void ct_block_backward(const ct_block_ctx *c, int layer, const ct_block_acts *s, const ct_block_weights *w,
                       ct_block_weights *g, ct_block_wgrad_inputs *keep, float *dres) {
    const ct_kernels *k = c->k;
    const ct_llama_config *m = c->cfg;
    long B = c->B, T = c->T, N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long NKV = m->n_kv_heads, F = m->ffn_hidden, QKV = c->qkv_dim;
    bool split = keep != NULL;
    ct_block_weights none = {0};
    ct_block_weights *gw = split ? &none : g;  // weight gradients now, or later from `keep`
    float *dh13 = split ? keep->dh13 : c->dh13;
    float *dqkv = split ? keep->dqkv : c->dqkv;
    float *dfull;

    // feed-forward: out = x_mid + g(w2(swiglu(w13(f(norm2(x_mid))))))
    const float *dy = output_grad(c, dres, split ? keep->dy_ffn : NULL);
    k->linear_backward(c->dh, gw->w2, dy, s->h, w->w2, N, F, C);
    k->swiglu_backward(dh13, c->dh, s->h13, N, F);
    const float *dn = norm_grad(c, &dfull, split ? keep->dn2 : NULL);
    k->linear_backward(dfull, gw->w13, dh13, s->norm2, w->w13, N, C, 2 * F);
    reduce_rows(c, dfull, (float *)dn);  // backward of f: sum the partial input gradients over tp
    k->rmsnorm_backward(dres, gw->ffn_norm, dn, s->x_mid, w->ffn_norm, s->rstd2, Nl, C);

    // attention: x_mid = x + g(wo(attention(rope(wqkv(f(norm1(x)))))))
    dy = output_grad(c, dres, split ? keep->dy_att : NULL);
    k->linear_backward(c->datt, gw->wo, dy, s->att, w->wo, N, NH * HS, C);
    k->zero(dqkv, (size_t)(N * QKV) * sizeof(float));
    ct_attention_args a = attention_args(c, layer, s);
    float *dq = dqkv, *dk = dqkv + NH * HS, *dv = dqkv + (NH + NKV) * HS;
    c->ops->attention.backward(c->ops->attention.ctx, &a, c->datt, dq, dk, dv);
    k->rope_backward(dq, c->rope_cos, c->rope_sin, c->pos, B, T, NH, HS, QKV);
    k->rope_backward(dk, c->rope_cos, c->rope_sin, c->pos, B, T, NKV, HS, QKV);
    dn = norm_grad(c, &dfull, split ? keep->dn1 : NULL);
    k->linear_backward(dfull, gw->wqkv, dqkv, s->norm1, w->wqkv, N, C, QKV);
    reduce_rows(c, dfull, (float *)dn);
    k->rmsnorm_backward(dres, gw->attn_norm, dn, s->x, w->attn_norm, s->rstd1, Nl, C);
}

void ct_block_backward_weight(const ct_block_ctx *c, const ct_block_acts *s, const ct_block_wgrad_inputs *kept,
                              ct_block_weights *g) {
    const ct_kernels *k = c->k;
    const ct_llama_config *m = c->cfg;
    long N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads, F = m->ffn_hidden;
    long QKV = c->qkv_dim;
    // The same gemms and column passes the combined backward runs, so the gradients are the
    // same bits whichever way a schedule computes them.
    k->linear_backward(NULL, g->w2, kept->dy_ffn, s->h, NULL, N, F, C);
    k->linear_backward(NULL, g->w13, kept->dh13, s->norm2, NULL, N, C, 2 * F);
    k->rmsnorm_backward(NULL, g->ffn_norm, kept->dn2, s->x_mid, NULL, s->rstd2, Nl, C);
    k->linear_backward(NULL, g->wo, kept->dy_att, s->att, NULL, N, NH * HS, C);
    k->linear_backward(NULL, g->wqkv, kept->dqkv, s->norm1, NULL, N, C, QKV);
    k->rmsnorm_backward(NULL, g->attn_norm, kept->dn1, s->x, NULL, s->rstd1, Nl, C);
}
