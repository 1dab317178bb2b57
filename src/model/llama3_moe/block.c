// The llama3_moe block. A routed block: Llama 3's attention half, then
//   out = x_mid + routed(norm2(x_mid)) + shared(norm2(x_mid))
// with routed the dropless experts (model/moe_layer.h) and shared the shared experts, one SwiGLU
// of hidden S·F at Llama 3's FFN views. A dense first block (layer < n_dense_layers) is Llama 3's
// block of FFN width dense_ffn_hidden. Both run Llama 3's own code for everything but the routed
// experts, with the model's ffn_hidden set to the block's FFN width (ffn_ctx): the dense block
// whole, the routed block's attention half and shared FFN forward (Llama 3's block forward with
// the shared width writes x_mid + shared into out) and the checkpointing kinds' recompute.
// Under tensor parallel the experts run on the rank's own residual rows (N_local of them: all N
// without sequence parallel, every tp rank routing the same tokens alike; its 1/tp under sequence
// parallel), whole on every tp rank, so they need no tp collective: under sequence parallel their
// weights' gradients are partial sums, which the tp strategy adds up as for any tensor tp ranks
// hold whole (parallel/tensor_parallel.h). Under bf16 mixed precision the attention half, dense
// blocks and shared experts compute as Llama 3's do, and the routed experts read the bf16 norm2
// and their weights' bf16 compute copies (t16) as model/moe_layer.h says; the router reads its
// weight's fp32 copy. Under 8-bit training the attention half, dense blocks and shared experts
// run Llama 3's 8-bit linears (model/linear.h), and the routed experts the same kernels expert
// by expert (model/moe_layer.h) on their fp32 weights, with scales taken on the rank's own rows
// and never agreed over tp (the experts are not split); the router stays fp32. The layer's
// load-balancing loss is weighted per call (ct_moe_layer.aux_weight).
#include <stdbool.h>

#include "core/memory.h"
#include "core/trace.h"
#include "model/llama3_moe/llama3_moe.h"

static ct_llama3_moe_work *W(const ct_block_ctx *c) { return c->work; }
static bool dense_block(const ct_model_config *m, int layer) { return layer < m->n_dense_layers; }
static long shared_width(const ct_model_config *m) { return (long)m->n_shared_experts * m->ffn_hidden; }

long ct_llama3_moe_ffn_width(const ct_model_config *m) {
    long d = m->n_dense_layers > 0 ? m->dense_ffn_hidden : 0, s = shared_width(m);
    return d > s ? d : s;
}

// The call as Llama 3's code sees a block of FFN width F: the context with the model's
// ffn_hidden set to F (in *m, which must outlive the context).
static ct_block_ctx ffn_ctx(const ct_block_ctx *c, ct_model_config *m, long F) {
    *m = *c->cfg;
    m->ffn_hidden = (int)F;
    ct_block_ctx f = *c;
    f.cfg = m;
    return f;
}

// The width Llama 3's code runs block `layer` with: the dense FFN's, or the shared experts'.
static long block_ffn(const ct_model_config *m, int layer) {
    return dense_block(m, layer) ? m->dense_ffn_hidden : shared_width(m);
}

// The routed experts' input: this rank's rows (N_local, C) of the gathered norm2 (N, C).
// norm2 is kept in the compute dtype: fp32, or bf16 under bf16.
static const void *routed_input(const ct_block_ctx *c, const ct_llama3_moe_acts *s) {
    bool sp = c->ops->tp.sequence_parallel && c->ops->tp.size > 1;
    long at = sp ? (long)c->ops->tp.rank * c->N_local * c->cfg->dim : 0;  // elements
    if (c->lin->prec.compute == CT_BF16) return (const uint16_t *)s->attn.norm2 + at;
    return (const float *)s->attn.norm2 + at;
}

// The router (and bias) in fp32; the experts in fp32, or under bf16 their gathered bf16 copies
// (and their fp32 widening, which FSDP adds when 8-bit layers run). The routed experts are the
// block's feed-forward: they run in 8 bits when the policy's filter leaves the layer's
// feed_forward.w1 / w3 (their w13) and feed_forward.w2 (their w2) in 8 bits.
static ct_moe_params expert_params(const ct_block_ctx *c, int layer, const ct_block_weights *w) {
    const ct_precision *pr = &c->lin->prec;
    return (ct_moe_params){.router = w->t[LLAMA3_MOE_ROUTER],
                           .bias = c->cfg->moe_bias_rate > 0 ? w->t[LLAMA3_MOE_BIAS] : NULL,
                           .w13 = w->t[LLAMA3_MOE_W13], .w2 = w->t[LLAMA3_MOE_W2],
                           .w13_16 = w->t16[LLAMA3_MOE_W13], .w2_16 = w->t16[LLAMA3_MOE_W2],
                           .f8_w13 = ct_precision_f8(pr, layer, CT_LINEAR_W13),
                           .f8_w2 = ct_precision_f8(pr, layer, CT_LINEAR_W2)};
}

// y (N_local, C) = the routed experts of this rank's rows of norm2. A training forward (its loss weight or its loss sum
// set) weights the load-balancing loss by its tokens' share of the step's loss and keeps that
// weight in the record; a call without them -- a full recompute before the backward, or an
// evaluation -- reuses the kept weight, so a recompute computes the same gradient of the loss
// as the forward did, and adds nothing to the loss sum (NULL there).
static void routed_forward(const ct_block_ctx *c, int layer, ct_llama3_moe_acts *s, const ct_block_weights *w,
                           float *y) {
    ct_moe_params p = expert_params(c, layer, w);
    ct_moe_layer *l = &W(c)->layer;
    if (c->aux_sum || c->token_weight != 0) s->aux_weight = (float)((double)c->N_local * c->token_weight);
    l->aux_weight = s->aux_weight;
    int span = ct_trace_begin2(CT_TRACE_KERNEL, "moe.forward", "layer", layer, NULL, 0);
    ct_moe_forward(l, &p, &s->moe, routed_input(c, s), y);  // (N_local, C)
    if (c->aux_sum && s->moe.aux_loss) c->k->add_inplace(c->aux_sum, s->moe.aux_loss, 1);
    ct_trace_end(span);
}

static void block_forward(const ct_block_ctx *c, int layer, void *acts, const ct_block_weights *w, float *out) {
    ct_llama3_moe_acts *s = acts;
    const ct_model_config *m = c->cfg;
    long NC = c->N_local * m->dim;
    ct_model_config fm;
    ct_block_ctx f = ffn_ctx(c, &fm, block_ffn(m, layer));
    s->dense = dense_block(m, layer);
    if (s->dense) {
        ct_llama3_block.forward(&f, layer, &s->attn, w, out);
        return;
    }
    if (fm.ffn_hidden > 0) {
        // out = x_mid + shared(norm2), keeping h13 and h (or w1's half) as the kind says.
        ct_llama3_block.forward(&f, layer, &s->attn, w, out);
        routed_forward(c, layer, s, w, W(c)->tmp);
        int span = ct_trace_begin2(CT_TRACE_KERNEL, "residual_add.forward", "layer", layer, NULL, 0);
        c->k->add_inplace(out, W(c)->tmp, NC);
        ct_trace_end(span);
        return;
    }
    ct_llama3_attention_forward(c, layer, &s->attn, w);  // x_mid (N_local, C), norm2 (N, C)
    routed_forward(c, layer, s, w, out);
    int span = ct_trace_begin2(CT_TRACE_KERNEL, "residual_add.forward", "layer", layer, NULL, 0);
    c->k->add_inplace(out, s->attn.x_mid, NC);
    ct_trace_end(span);
}

// Before the backward of a selectively checkpointed block: Llama 3's recompute at the block's
// FFN width (norms, SwiGLU, and under per-op k, wo's output and the w3 half), the routed experts'
// activations being kept whole. A routed block without shared experts has no w3 half: per-op
// checkpointing recomputes its attention half's forward instead (the same values, kept att
// included).
static void block_recompute(const ct_block_ctx *c, int layer, ct_ac_kind kind, void *acts, const ct_block_weights *w) {
    ct_llama3_moe_acts *s = acts;
    ct_model_config fm;
    ct_block_ctx f = ffn_ctx(c, &fm, block_ffn(c->cfg, layer));
    if (fm.ffn_hidden == 0 && kind == CT_AC_OPS) ct_llama3_attention_forward(c, layer, &s->attn, w);
    else ct_llama3_block.recompute(&f, layer, kind, &s->attn, w);
}

// The shared experts' backward: their weights' gradients added into g, and their input gradient
// added into dn (N, C); dres (N, C) is the gradient of their output.
static void shared_backward(const ct_block_ctx *c, int layer, const ct_llama3_acts *s, const ct_block_weights *w,
                            ct_block_weights *g, const float *dres, float *dn) {
    const ct_linear_ctx *L = c->lin;
    long N = c->N, C = c->cfg->dim, SF = shared_width(c->cfg);
    ct_llama3_work *wk = &W(c)->attn;
    ct_device dev = {c->k->device, 0};
    ct_tensor h = ct_tensor_make(s->h, L->prec.compute, dev, N, SF);
    ct_tensor norm2 = ct_tensor_make(s->norm2, L->prec.compute, dev, N, C);
    int span = ct_trace_begin2(CT_TRACE_KERNEL, "shared_experts.w2.backward", "layer", layer, NULL, 0);
    ct_linear_bwd(L, ct_precision_f8(&L->prec, layer, CT_LINEAR_W2), NULL, wk->dh, g->t[LLAMA3_W2], dres, h,
                  ct_block_weight(w, LLAMA3_W2), C);  // (N, SF)
    ct_trace_end(span);
    span = ct_trace_begin2(CT_TRACE_KERNEL, "swiglu.backward", "layer", layer, NULL, 0);
    ct_llama3_swiglu_backward(c, wk->dh13, wk->dh, s->h13, SF);  // (N, 2SF)
    ct_trace_end(span);
    span = ct_trace_begin2(CT_TRACE_KERNEL, "shared_experts.w13.backward", "layer", layer, NULL, 0);
    ct_linear_bwd(L, ct_precision_f8(&L->prec, layer, CT_LINEAR_W13), NULL, W(c)->tmp, g->t[LLAMA3_W13], wk->dh13,
                  norm2, ct_block_weight(w, LLAMA3_W13), 2 * SF);  // (N, C)
    ct_trace_end(span);
    c->k->add_inplace(dn, W(c)->tmp, N * C);
}

static void block_backward(const ct_block_ctx *c, int layer, const void *acts, const ct_block_weights *w,
                           ct_block_weights *g, void *keep, float *dres) {
    if (keep) ct_fatal("llama3_moe", "a split backward (the family does not support it)");
    const ct_llama3_moe_acts *s = acts;
    const ct_kernels *k = c->k;
    long N = c->N_local, C = c->cfg->dim;
    if (dense_block(c->cfg, layer)) {
        ct_model_config fm;
        ct_block_ctx f = ffn_ctx(c, &fm, c->cfg->dense_ffn_hidden);
        ct_llama3_block.backward(&f, layer, &s->attn, w, g, NULL, dres);
        return;
    }
    // out = x_mid + routed(norm2(x_mid)) + shared(norm2(x_mid)): dres is the gradient of out, of
    // both FFNs' outputs and (through the residual) of x_mid; both input gradients go back
    // through ffn_norm into it.
    ct_moe_params p = expert_params(c, layer, w);
    ct_moe_grads gr = {.router = g->t[LLAMA3_MOE_ROUTER], .w13 = g->t[LLAMA3_MOE_W13], .w2 = g->t[LLAMA3_MOE_W2]};
    float *dn = c->dnorm;  // (N_local, C) gradient of this rank's rows of norm2
    int span = ct_trace_begin2(CT_TRACE_KERNEL, "moe.backward", "layer", layer, NULL, 0);
    ct_moe_backward(&W(c)->layer, &p, (ct_moe_acts *)&s->moe, routed_input(c, s), dres, dn, &gr);
    ct_trace_end(span);
    if (shared_width(c->cfg) > 0) shared_backward(c, layer, &s->attn, w, g, dres, dn);
    span = ct_trace_begin2(CT_TRACE_KERNEL, "rmsnorm.backward", "layer", layer, NULL, 0);
    k->rmsnorm_backward(dres, g->t[LLAMA3_FFN_NORM], dn, s->attn.x_mid, w->t[LLAMA3_FFN_NORM], s->attn.rstd2, N, C);
    ct_trace_end(span);
    ct_llama3_attention_backward(c, layer, &s->attn, w, g, NULL, dres);
}

// ------------------------------------------------------------------ buffers

static int block_linears(const ct_block_ctx *c, ct_linear_shape *l) {
    const ct_model_config *m = c->cfg;
    long C = m->dim, Q = m->n_heads * m->head_dim, QKV = ct_llama3_qkv_dim(m);
    long F = ct_llama3_moe_ffn_width(m);
    l[CT_LINEAR_WQKV] = (ct_linear_shape){C, QKV};
    l[CT_LINEAR_WO] = (ct_linear_shape){Q, C};
    if (F == 0) return 2;  // the routed experts' grouped matmuls bring their own work rows (ct_moe_acts)
    l[CT_LINEAR_W13] = (ct_linear_shape){C, 2 * F};
    l[CT_LINEAR_W2] = (ct_linear_shape){F, C};
    return CT_BLOCK_LINEARS;
}

static bool has_routed(const ct_model_config *m) { return m->n_dense_layers < m->n_layers; }

// Llama 3's workspace at the widest FFN (with the recompute buffers of the kinds), the routed
// output's rows, and the expert layer -- its spec built here only.
static long carve_work(const ct_block_ctx *c, unsigned kinds, void *work, float *base) {
    ct_llama3_moe_work *wk = work;
    const ct_model_config *m = c->cfg;
    ct_model_config fm;
    ct_block_ctx f = ffn_ctx(c, &fm, ct_llama3_moe_ffn_width(m));
    long used = ct_llama3_block.carve_work(&f, kinds, &wk->attn, base);
    wk->tmp = base ? base + used : NULL;
    used += (c->N_local * m->dim + 15) & ~15L;
    if (base) {
        ct_moe_layer_spec spec = {.k = c->k, .C = m->dim, .F = m->ffn_hidden, .E = m->n_experts,
                                  .topk = m->moe_top_k, .sigmoid = m->moe_sigmoid, .renorm = m->moe_route_norm,
                                  .N = c->N_local, .aux_coef = (float)m->moe_aux_coeff,
                                  .aux_group = m->moe_aux_per_sequence ? c->T : 0, .ep = c->ops->experts,
                                  .bf16 = c->lin->prec.compute == CT_BF16, .f8 = c->lin->prec.quantized,
                                  .recipe = c->lin->prec.recipe};
        if (ct_moe_layer_init(&wk->layer, &spec)) ct_fatal("llama3_moe", "%s", ct_last_error());
    }
    return used;
}

// Llama 3's record at the widest FFN under the kind (a dense block's h13 / h, or the shared
// experts' at the front of the same buffers), then the routed experts' buffers: the record's own,
// or under full checkpointing the workspace's, which the recompute refills before each backward.
static long carve_acts(const ct_block_ctx *c, ct_ac_kind kind, float *x, void *acts, float *base) {
    ct_llama3_moe_acts *b = acts;
    ct_model_config fm;
    ct_block_ctx f = ffn_ctx(c, &fm, ct_llama3_moe_ffn_width(c->cfg));
    long used = ct_llama3_block.carve_acts(&f, kind, x, &b->attn, base);
    if (!base || !has_routed(c->cfg)) return used;
    ct_llama3_moe_work *wk = W(c);
    if (wk->moe_scratch_users++ == 0)
        wk->moe_scratch = ct_mem_alloc_on(ct_kernels_device(c->k), CT_MEM_ACTIVATIONS,
                                          (size_t)ct_moe_scratch_floats(&wk->layer) * sizeof(float));
    b->work = wk;
    if (kind == CT_AC_FULL) {
        if (wk->rc_moe_users++ == 0) ct_moe_acts_init(&wk->layer, &wk->rc_moe, wk->moe_scratch);
        b->moe = wk->rc_moe;
        b->shared = &wk->rc_moe, b->shared_users = &wk->rc_moe_users;
    } else {
        ct_moe_acts_init(&wk->layer, &b->moe, wk->moe_scratch);
        b->shared = NULL, b->shared_users = NULL;
    }
    return used;
}

static void expert_counts(const void *acts, long n_experts, int64_t *counts) {
    const ct_llama3_moe_acts *s = acts;
    if (s->dense) return;  // a dense first block routes nothing
    const int64_t *last = s->moe.host_counts;  // this rank's pairs (host)
    for (long e = 0; e < n_experts; e++) counts[e] += last[e];
}

static void release_acts(void *acts) {
    ct_llama3_moe_acts *b = acts;
    if (b->shared) {
        if (--*b->shared_users == 0) ct_moe_acts_free(b->shared);
    } else if (b->moe.logits) {
        ct_moe_acts_free(&b->moe);
    }
    if (b->work && --b->work->moe_scratch_users == 0) {
        ct_mem_free(b->work->moe_scratch);
        b->work->moe_scratch = NULL;
    }
    b->work = NULL;
}

// ------------------------------------------------------------------ the checkpointing policies' arithmetic

// Llama 3's figures for a block of FFN width F (the attention half is the same in every block).
static double llama3_kept(const ct_ac_shape *s, ct_ac_kind kind, long F) {
    ct_model_config m = *s->cfg;
    m.ffn_hidden = (int)F;
    ct_ac_shape a = *s;
    a.cfg = &m;
    return ct_llama3_block.kept_bytes_per_token(&a, kind);
}
static double llama3_recompute(const ct_ac_shape *s, ct_ac_kind kind, long F, long seq_len) {
    ct_model_config m = *s->cfg;
    m.ffn_hidden = (int)F;
    ct_ac_shape a = *s;
    a.cfg = &m;
    return ct_llama3_block.recompute_flops_per_token(&a, kind, seq_len);
}

// What carve_acts takes per token: Llama 3's record under the kind at the widest FFN (every
// record has room for a dense block's FFN and the shared experts'), with the q and k norms'
// inputs and statistics under qk_norm; and unless the kind is full, the expert layer's (router
// logits and scores, the token's k choices sent and received back, each expert row's input,
// h13 and h -- in the compute dtype -- and output, and with the load-balancing loss its gradient
// in the scores).
static double kept_bytes_per_token(const ct_ac_shape *s, ct_ac_kind kind) {
    const ct_model_config *m = s->cfg;
    double Q = (double)m->n_heads * m->head_dim, KV = (double)m->n_kv_heads * m->head_dim;
    double C = m->dim, E = m->n_experts, K = m->moe_top_k, F = m->ffn_hidden;
    double kept = llama3_kept(s, kind, ct_llama3_moe_ffn_width(m));
    if (m->qk_norm && kind == CT_AC_NONE) kept += 4 * (Q + KV) + 4.0 * (m->n_heads + m->n_kv_heads);  // q, k unnormed; rstd
    double b = s->compute_bytes;
    double moe = 4 * (2 * E) + K * (4 + 4 + 4) + 4 * K * (2 * C + C) + b * K * (C + 2 * F + F);
    if (m->moe_aux_coeff > 0) moe += 4 * E;  // the load-balancing loss's gradient in the scores
    return kept + (kind != CT_AC_FULL && has_routed(m) ? moe : 0);
}

// The mean over the blocks, as block_forward_flops_per_token counts: a dense block recomputes as
// Llama 3's of its width; a routed block as Llama 3's of the shared width (its attention half
// again under per-op without shared experts), and under full also its router and top_k experts.
static double recompute_flops_per_token(const ct_ac_shape *s, ct_ac_kind kind, long seq_len) {
    const ct_model_config *m = s->cfg;
    double C = m->dim, Q = (double)m->n_heads * m->head_dim, KV = (double)m->n_kv_heads * m->head_dim;
    double L = m->n_layers, Ld = m->n_dense_layers, SF = shared_width(m);
    double dense = llama3_recompute(s, kind, m->dense_ffn_hidden, seq_len);
    double routed = llama3_recompute(s, kind, (long)SF, seq_len);
    if (kind == CT_AC_OPS && SF == 0) routed = 2 * C * (Q + 2 * KV) + 2 * Q * C + 4.0 * Q * (double)seq_len;
    if (kind == CT_AC_FULL) routed += 2 * C * m->n_experts + 2.0 * m->moe_top_k * 3 * C * m->ffn_hidden;
    return (Ld * dense + (L - Ld) * routed) / L;
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
    .recompute = block_recompute,
    .backward = block_backward,
    .backward_weight = NULL,
    .kept_bytes_per_token = kept_bytes_per_token,
    .recompute_flops_per_token = recompute_flops_per_token,
    .expert_counts = expert_counts,
};
