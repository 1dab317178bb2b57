// The llama3_moe block: Llama 3's attention half, then the routed experts on norm2's rows.
// fp32, no tensor parallelism (the family's supports), so N_local = N and nothing is reduced.
// The layer's load-balancing loss is weighted per call (ct_moe_layer.aux_weight).
#include <stdbool.h>

#include "core/trace.h"
#include "model/llama3_moe/llama3_moe.h"

static ct_llama3_moe_work *W(const ct_block_ctx *c) { return c->work; }

static ct_moe_params expert_params(const ct_model_config *m, const ct_block_weights *w) {
    return (ct_moe_params){.router = w->t[LLAMA3_MOE_ROUTER], .bias = m->moe_bias_rate > 0 ? w->t[LLAMA3_MOE_BIAS] : NULL,
                           .w13 = w->t[LLAMA3_MOE_W13], .w2 = w->t[LLAMA3_MOE_W2]};
}

static void block_forward(const ct_block_ctx *c, int layer, void *acts, const ct_block_weights *w, float *out) {
    ct_llama3_moe_acts *s = acts;
    ct_llama3_attention_forward(c, layer, &s->attn, w);  // x_mid, norm2 (N, C)
    ct_moe_params p = expert_params(c->cfg, w);
    // The load-balancing loss of this call's tokens, weighted by their share of the step's loss
    // (0 outside training: no loss, no gradient); its gradient comes back in the backward.
    ct_moe_layer *l = &W(c)->layer;
    l->aux_weight = (float)((double)c->N * c->token_weight);
    int span = ct_trace_begin2(CT_TRACE_KERNEL, "moe.forward", "layer", layer, NULL, 0);
    ct_moe_forward(l, &p, &s->moe, s->attn.norm2, out);  // (N, C)
    if (c->aux_sum && s->moe.aux_loss) c->k->add_inplace(c->aux_sum, s->moe.aux_loss, 1);
    ct_trace_end(span);
    span = ct_trace_begin2(CT_TRACE_KERNEL, "residual_add.forward", "layer", layer, NULL, 0);
    c->k->add_inplace(out, s->attn.x_mid, c->N * c->cfg->dim);
    ct_trace_end(span);
}

static void block_backward(const ct_block_ctx *c, int layer, const void *acts, const ct_block_weights *w,
                           ct_block_weights *g, void *keep, float *dres) {
    if (keep) ct_fatal("llama3_moe", "a split backward (the family does not support it)");
    const ct_llama3_moe_acts *s = acts;
    const ct_kernels *k = c->k;
    long N = c->N, C = c->cfg->dim;
    // out = x_mid + moe(norm2(x_mid)): dres is the gradient of both out and (through the
    // residual) x_mid; the experts' input gradient goes back through ffn_norm into it.
    ct_moe_params p = expert_params(c->cfg, w);
    ct_moe_grads gr = {.router = g->t[LLAMA3_MOE_ROUTER], .w13 = g->t[LLAMA3_MOE_W13], .w2 = g->t[LLAMA3_MOE_W2]};
    float *dn = c->dnorm;  // (N, C) gradient of norm2
    int span = ct_trace_begin2(CT_TRACE_KERNEL, "moe.backward", "layer", layer, NULL, 0);
    ct_moe_backward(&W(c)->layer, &p, (ct_moe_acts *)&s->moe, s->attn.norm2, dres, dn, &gr);
    ct_trace_end(span);
    span = ct_trace_begin2(CT_TRACE_KERNEL, "rmsnorm.backward", "layer", layer, NULL, 0);
    k->rmsnorm_backward(dres, g->t[LLAMA3_FFN_NORM], dn, s->attn.x_mid, w->t[LLAMA3_FFN_NORM], s->attn.rstd2, N, C);
    ct_trace_end(span);
    ct_llama3_attention_backward(c, layer, &s->attn, w, g, NULL, dres);
}

// ------------------------------------------------------------------ buffers

static int block_linears(const ct_block_ctx *c, ct_linear_shape *l) {
    const ct_model_config *m = c->cfg;
    long C = m->dim, Q = m->n_heads * m->head_dim, QKV = (m->n_heads + 2L * m->n_kv_heads) * m->head_dim;
    l[0] = (ct_linear_shape){C, QKV};
    l[1] = (ct_linear_shape){Q, C};
    return 2;  // the experts' grouped matmuls bring their own work rows (ct_moe_acts)
}

static long carve_work(const ct_block_ctx *c, unsigned kinds, void *work, float *base) {
    ct_llama3_moe_work *wk = work;
    if (kinds & ~CT_AC_BIT(CT_AC_NONE)) ct_fatal("llama3_moe", "activation checkpointing (the family does not support it)");
    long used = ct_llama3_carve_attention_work(c, &wk->attn, base);
    if (base) {
        const ct_model_config *m = c->cfg;
        ct_moe_layer_spec spec = {.k = c->k, .C = m->dim, .F = m->ffn_hidden, .E = m->n_experts,
                                  .topk = m->moe_top_k, .sigmoid = m->moe_sigmoid, .renorm = m->moe_route_norm,
                                  .N = c->N, .aux_coef = (float)m->moe_aux_coeff,
                                  .aux_group = m->moe_aux_per_sequence ? c->T : 0, .ep = c->ops->experts};
        if (ct_moe_layer_init(&wk->layer, &spec)) ct_fatal("llama3_moe", "%s", ct_last_error());
    }
    return used;
}

static long carve_acts(const ct_block_ctx *c, ct_ac_kind kind, float *x, void *acts, float *base) {
    ct_llama3_moe_acts *b = acts;
    if (kind != CT_AC_NONE) ct_fatal("llama3_moe", "activation checkpointing (the family does not support it)");
    b->attn.x = x;
    long used = ct_llama3_carve_attention(c, &b->attn, base);
    if (base) ct_moe_acts_init(&W(c)->layer, &b->moe);
    return used;
}

static void expert_counts(const void *acts, long n_experts, int64_t *counts) {
    const int64_t *last = ((const ct_llama3_moe_acts *)acts)->moe.host_counts;  // this rank's pairs (host)
    for (long e = 0; e < n_experts; e++) counts[e] += last[e];
}

static void release_acts(void *acts) { ct_moe_acts_free(&((ct_llama3_moe_acts *)acts)->moe); }

// What carve_acts takes per token: Llama 3's attention half with nothing checkpointed (with the
// q and k norms' inputs and statistics under qk_norm), and the expert layer's (router logits and
// scores, the token's k choices sent and received back, each expert row's input, h13, h and
// output, and with the load-balancing loss its gradient in the scores).
static double kept_bytes_per_token(const ct_ac_shape *s, ct_ac_kind kind) {
    const ct_model_config *m = s->cfg;
    double C = m->dim, Q = (double)m->n_heads * m->head_dim, KV = (double)m->n_kv_heads * m->head_dim;
    double E = m->n_experts, K = m->moe_top_k, F = m->ffn_hidden;
    double attn = 2 * 4 * C + 2 * 4 + 4 * (2 * C + Q + 2 * KV + Q) + 4.0 * m->n_heads;
    if (m->qk_norm) attn += 4 * (Q + KV) + 4.0 * (m->n_heads + m->n_kv_heads);  // q, k unnormed; rstd
    double moe = 4 * (2 * E) + K * (4 + 4 + 4) + 4 * K * (2 * C + C + 2 * F + F + C);
    if (m->moe_aux_coeff > 0) moe += 4 * E;  // the load-balancing loss's gradient in the scores
    return kind == CT_AC_NONE ? attn + moe : 0;
}

static double recompute_flops_per_token(const ct_ac_shape *s, ct_ac_kind kind, long seq_len) {
    (void)s, (void)kind, (void)seq_len;
    return 0;  // nothing is recomputed: the family does not checkpoint
}

const ct_block_ops ct_llama3_moe_block = {
    .acts_size = sizeof(ct_llama3_moe_acts),
    .wgrad_size = 0,
    .work_size = sizeof(ct_llama3_moe_work),
    .linears = block_linears,
    .carve_work = carve_work,
    .carve_acts = carve_acts,
    .carve_wgrad = NULL,
    .release_acts = release_acts,
    .forward = block_forward,
    .recompute = NULL,
    .backward = block_backward,
    .backward_weight = NULL,
    .kept_bytes_per_token = kept_bytes_per_token,
    .recompute_flops_per_token = recompute_flops_per_token,
    .expert_counts = expert_counts,
};
