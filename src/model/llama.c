#include "model/llama.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/kernels.h"

// ------------------------------------------------------------------ weight views

static float *tensor_at(const ct_param_table *t, float *group_block, long group_start, const char *name) {
    const ct_param *p = ct_param_find(t, name);
    if (!p) ct_fatal("model", "no parameter named %s", name);
    return group_block + (p->offset - group_start);
}

void ct_llama_weights_point_group(ct_llama_weights *w, const ct_param_table *t, int group, float *group_block) {
    long start = t->group_offset[group];
    int L = t->n_groups - 2;
    if (group == 0) {
        w->tok_embeddings = tensor_at(t, group_block, start, "tok_embeddings.weight");
    } else if (group == L + 1) {
        w->norm = tensor_at(t, group_block, start, "norm.weight");
        w->output = tensor_at(t, group_block, start, "output.weight");
    } else {
        int l = group - 1;
        char name[CT_PARAM_NAME];
        ct_block_weights *b = &w->blocks[l];
#define AT(field, suffix)                                           \
    snprintf(name, sizeof name, "layers.%d.%s", l, suffix);         \
    b->field = tensor_at(t, group_block, start, name)
        AT(attn_norm, "attention_norm.weight");
        AT(wqkv, "attention.wq.weight");
        AT(wo, "attention.wo.weight");
        AT(ffn_norm, "ffn_norm.weight");
        AT(w13, "feed_forward.w1.weight");
        AT(w2, "feed_forward.w2.weight");
#undef AT
    }
}

void ct_llama_weights_init(ct_llama_weights *w, const ct_param_table *t, const ct_llama_config *m, float *block) {
    memset(w, 0, sizeof *w);
    w->blocks = ct_xcalloc((size_t)m->n_layers, sizeof(ct_block_weights));
    for (int g = 0; g < t->n_groups; g++) ct_llama_weights_point_group(w, t, g, block + t->group_offset[g]);
}

void ct_llama_weights_free(ct_llama_weights *w) {
    free(w->blocks);
    w->blocks = NULL;
}

// ------------------------------------------------------------------ activations

// Lays every buffer out from `base` (64-byte aligned slices) and returns the floats used. Run
// once on a NULL base to measure, then on the allocation.
static long carve(ct_llama_acts *a, float *base, long scratch) {
    const ct_llama_config *m = &a->cfg;
    long B = a->B, T = a->T, N = a->N, Nl = a->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long F = m->ffn_hidden, L = m->n_layers, QKV = a->qkv_dim;
    bool sp = a->tp.sequence_parallel;
    long used = 0;
#define TAKE(ptr, n)                               \
    do {                                           \
        ptr = base ? base + used : NULL;           \
        used += ((n) + 15) & ~15L;                 \
    } while (0)
    for (long l = 0; l < L; l++) {
        ct_block_acts *b = &a->blocks[l];
        TAKE(b->x, Nl * C);
        TAKE(b->norm1, N * C);
        TAKE(b->rstd1, Nl);
        TAKE(b->qkv, N * QKV);
        TAKE(b->att, N * NH * HS);
        TAKE(b->lse, B * NH * T);
        TAKE(b->x_mid, Nl * C);
        TAKE(b->norm2, N * C);
        TAKE(b->rstd2, Nl);
        TAKE(b->h13, N * 2 * F);
        TAKE(b->h, N * F);
    }
    TAKE(a->x_final, Nl * C);
    TAKE(a->norm_f, N * C);
    TAKE(a->rstd_f, Nl);
    TAKE(a->dres, Nl * C);
    TAKE(a->dnorm, N * C);
    TAKE(a->datt, N * NH * HS);
    TAKE(a->dqkv, N * QKV);
    TAKE(a->dh, N * F);
    TAKE(a->dh13, N * 2 * F);
    if (sp) {
        TAKE(a->tmp_local, Nl * C);
        TAKE(a->tmp_full, N * C);
    }
    TAKE(a->rope_cos, T * HS / 2);
    TAKE(a->rope_sin, T * HS / 2);
    TAKE(a->scratch, scratch);
#undef TAKE
    return used;
}

long ct_llama_xent_chunk_rows(long N) { return N < 256 ? N : 256; }

void ct_llama_acts_init(ct_llama_acts *a, const ct_llama_config *m, long B, long T) {
    ct_llama_acts_init_tp(a, m, B, T, NULL);
}

void ct_llama_acts_init_tp(ct_llama_acts *a, const ct_llama_config *m, long B, long T, const ct_tp_hooks *tp) {
    memset(a, 0, sizeof *a);
    a->cfg = *m;
    if (tp) a->tp = *tp;
    if (a->tp.size < 1) a->tp.size = 1;
    a->B = B;
    a->T = T;
    a->N = B * T;
    a->N_local = a->tp.sequence_parallel ? a->N / a->tp.size : a->N;
    long HS = m->head_dim;
    a->qkv_dim = (m->n_heads + 2L * m->n_kv_heads) * HS;
    a->xent_chunk_rows = ct_llama_xent_chunk_rows(a->N);
    long scratch = ct_attention_scratch_floats(T, T, HS);
    long xent = a->tp.output_loss ? a->tp.output_loss_scratch_floats
                                  : ct_xent_scratch_floats(a->xent_chunk_rows, m->vocab_size);
    if (xent > scratch) scratch = xent;
    a->blocks = ct_xcalloc((size_t)m->n_layers, sizeof(ct_block_acts));
    long total = carve(a, NULL, scratch);
    a->arena = ct_mem_alloc(CT_MEM_ACTIVATIONS, (size_t)total * sizeof(float));
    carve(a, a->arena, scratch);
    // Llama 3.1 RoPE scaling constants (factor 8, low 1, high 4, original context 8192).
    ct_rope_tables(a->rope_cos, a->rope_sin, T, HS, m->rope_theta, m->rope_scaling ? 8.0 : 0.0, 1.0, 4.0, 8192);
}

void ct_llama_acts_free(ct_llama_acts *a) {
    ct_mem_free(a->arena);
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

// ------------------------------------------------------------------ tensor-parallel edges

// f: local rows of the residual stream -> the full rows the column-parallel matmuls read.
static void gather_rows(const ct_llama_acts *a, const float *local, float *full) {
    if (a->tp.gather_rows && a->tp.sequence_parallel)
        a->tp.gather_rows(a->tp.ctx, local, full, a->N_local, a->cfg.dim);
}

// g: partial sums of a row-parallel matmul -> reduced local rows (in place without sequence parallel).
static void reduce_rows(const ct_llama_acts *a, float *full, float *local) {
    if (a->tp.reduce_rows) a->tp.reduce_rows(a->tp.ctx, full, local, a->N_local, a->cfg.dim);
}

// Where a norm's output goes before gather_rows: straight into the full buffer unless sequence
// parallel splits the rows.
static float *norm_out(const ct_llama_acts *a, float *full) { return a->tp.sequence_parallel ? a->tmp_local : full; }
// Where a row-parallel matmul writes its partial sums: into the local buffer itself (reduced in
// place) unless sequence parallel reduce-scatters them.
static float *partial_out(const ct_llama_acts *a, float *local) {
    return a->tp.sequence_parallel ? a->tmp_full : local;
}

// ------------------------------------------------------------------ one block

static void block_forward(ct_llama_acts *a, ct_block_acts *s, const ct_block_weights *w, float *out) {
    const ct_llama_config *m = &a->cfg;
    long B = a->B, T = a->T, N = a->N, Nl = a->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long NKV = m->n_kv_heads, F = m->ffn_hidden, QKV = a->qkv_dim;
    float *q = s->qkv, *k = s->qkv + NH * HS, *v = s->qkv + (NH + NKV) * HS;

    float *n1 = norm_out(a, s->norm1);
    ct_rmsnorm_forward(n1, s->rstd1, s->x, w->attn_norm, Nl, C, (float)m->norm_eps);
    gather_rows(a, n1, s->norm1);                              // (N, C)
    ct_linear_forward(s->qkv, s->norm1, w->wqkv, N, C, QKV);  // (N, QKV) this rank's heads
    ct_rope_forward(q, a->rope_cos, a->rope_sin, NULL, B, T, NH, HS, QKV);
    ct_rope_forward(k, a->rope_cos, a->rope_sin, NULL, B, T, NKV, HS, QKV);
    ct_attention_forward(s->att, s->lse, q, QKV, k, QKV, v, QKV, NULL, NULL, B, T, T, NH, NKV, HS, a->scratch);
    float *y = partial_out(a, s->x_mid);
    ct_linear_forward(y, s->att, w->wo, N, NH * HS, C);  // (N, C) partial over tp
    reduce_rows(a, y, s->x_mid);                         // (N_l, C)
    ct_add_inplace(s->x_mid, s->x, Nl * C);

    float *n2 = norm_out(a, s->norm2);
    ct_rmsnorm_forward(n2, s->rstd2, s->x_mid, w->ffn_norm, Nl, C, (float)m->norm_eps);
    gather_rows(a, n2, s->norm2);
    ct_linear_forward(s->h13, s->norm2, w->w13, N, C, 2 * F);  // (N, 2F)
    ct_swiglu_forward(s->h, s->h13, N, F);                     // (N, F)
    y = partial_out(a, out);
    ct_linear_forward(y, s->h, w->w2, N, F, C);  // (N, C) partial over tp
    reduce_rows(a, y, out);
    ct_add_inplace(out, s->x_mid, Nl * C);
}

// dres (N_l, C): on entry the gradient of the block's output, on exit that of its input.
static void block_backward(ct_llama_acts *a, const ct_block_acts *s, const ct_block_weights *w,
                           ct_block_weights *g) {
    const ct_llama_config *m = &a->cfg;
    long B = a->B, T = a->T, N = a->N, Nl = a->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long NKV = m->n_kv_heads, F = m->ffn_hidden, QKV = a->qkv_dim;
    const float *q = s->qkv, *k = s->qkv + NH * HS, *v = s->qkv + (NH + NKV) * HS;
    float *dq = a->dqkv, *dk = a->dqkv + NH * HS, *dv = a->dqkv + (NH + NKV) * HS;
    float *dy = partial_out(a, a->dres);  // (N, C): the residual gradient on all rows

    // feed-forward: out = x_mid + g(w2(swiglu(w13(f(norm2(x_mid))))))
    gather_rows(a, a->dres, dy);  // backward of g
    ct_linear_backward(a->dh, g->w2, dy, s->h, w->w2, N, F, C);
    ct_swiglu_backward(a->dh13, a->dh, s->h13, N, F);
    ct_linear_backward(a->dnorm, g->w13, a->dh13, s->norm2, w->w13, N, C, 2 * F);
    float *dn = norm_out(a, a->dnorm);
    reduce_rows(a, a->dnorm, dn);  // backward of f: sum the partial input gradients over tp
    ct_rmsnorm_backward(a->dres, g->ffn_norm, dn, s->x_mid, w->ffn_norm, s->rstd2, Nl, C);

    // attention: x_mid = x + g(wo(attention(rope(wqkv(f(norm1(x)))))))
    gather_rows(a, a->dres, dy);
    ct_linear_backward(a->datt, g->wo, dy, s->att, w->wo, N, NH * HS, C);
    memset(a->dqkv, 0, (size_t)(N * QKV) * sizeof(float));
    ct_attention_backward(dq, dk, dv, a->datt, s->att, s->lse, q, QKV, k, QKV, v, QKV, NULL, NULL, B, T, T, NH,
                          NKV, HS, a->scratch);
    ct_rope_backward(dq, a->rope_cos, a->rope_sin, NULL, B, T, NH, HS, QKV);
    ct_rope_backward(dk, a->rope_cos, a->rope_sin, NULL, B, T, NKV, HS, QKV);
    ct_linear_backward(a->dnorm, g->wqkv, a->dqkv, s->norm1, w->wqkv, N, C, QKV);
    reduce_rows(a, a->dnorm, dn);
    ct_rmsnorm_backward(a->dres, g->attn_norm, dn, s->x, w->attn_norm, s->rstd1, Nl, C);
}

// ------------------------------------------------------------------ the model

static void hook(const ct_llama_hooks *h, int before, int group, int phase) {
    if (!h) return;
    void (*fn)(void *, int, int) = before ? h->before_group : h->after_group;
    if (fn) fn(h->ctx, group, phase);
}

static double output_loss(ct_llama_acts *a, float *dx, float *dW, const float *W, const int32_t *targets,
                          float grad_scale) {
    const ct_llama_config *m = &a->cfg;
    if (a->tp.output_loss)
        return a->tp.output_loss(a->tp.ctx, dx, dW, a->norm_f, W, targets, a->N, m->dim, m->vocab_size,
                                 (long)a->tp.rank * m->vocab_size, grad_scale, a->xent_chunk_rows, a->scratch);
    return ct_xent_fused(dx, dW, a->norm_f, W, targets, a->N, m->dim, m->vocab_size, grad_scale, a->xent_chunk_rows,
                         a->scratch);
}

double ct_llama_step(ct_llama_acts *a, ct_llama_weights *w, ct_llama_weights *grads, const int32_t *inputs,
                     const int32_t *targets, float grad_scale, const ct_llama_hooks *hooks) {
    const ct_llama_config *m = &a->cfg;
    long N = a->N, Nl = a->N_local, C = m->dim, V = m->vocab_size, vocab_start = (long)a->tp.rank * V;
    int L = m->n_layers, head = L + 1;

    // Embedding: this rank's vocabulary rows (zeros for other tokens), summed over tp.
    hook(hooks, 1, 0, CT_FORWARD);
    float *x0 = a->blocks[0].x, *e = partial_out(a, x0);
    ct_embedding_forward(e, inputs, w->tok_embeddings, N, C, vocab_start, V);
    reduce_rows(a, e, x0);
    hook(hooks, 0, 0, CT_FORWARD);
    for (int l = 0; l < L; l++) {
        hook(hooks, 1, 1 + l, CT_FORWARD);
        block_forward(a, &a->blocks[l], &w->blocks[l], l + 1 < L ? a->blocks[l + 1].x : a->x_final);
        hook(hooks, 0, 1 + l, CT_FORWARD);
    }

    // Output head: final norm, then output projection fused with cross-entropy (and its backward).
    hook(hooks, 1, head, CT_FORWARD);
    float *nf = norm_out(a, a->norm_f);
    ct_rmsnorm_forward(nf, a->rstd_f, a->x_final, w->norm, Nl, C, (float)m->norm_eps);
    gather_rows(a, nf, a->norm_f);
    if (!grads) {
        double loss = output_loss(a, NULL, NULL, w->output, targets, 0.0f);
        hook(hooks, 0, head, CT_FORWARD);
        return loss;
    }
    double loss = output_loss(a, a->dnorm, grads->output, w->output, targets, grad_scale);
    float *dn = norm_out(a, a->dnorm);
    reduce_rows(a, a->dnorm, dn);  // dx of the vocabulary-split projection is partial over tp
    memset(a->dres, 0, (size_t)(Nl * C) * sizeof(float));
    ct_rmsnorm_backward(a->dres, grads->norm, dn, a->x_final, w->norm, a->rstd_f, Nl, C);
    hook(hooks, 0, head, CT_BACKWARD);

    for (int l = L - 1; l >= 0; l--) {
        hook(hooks, 1, 1 + l, CT_BACKWARD);
        block_backward(a, &a->blocks[l], &w->blocks[l], &grads->blocks[l]);
        hook(hooks, 0, 1 + l, CT_BACKWARD);
    }
    hook(hooks, 1, 0, CT_BACKWARD);
    float *dx0 = partial_out(a, a->dres);
    gather_rows(a, a->dres, dx0);
    ct_embedding_backward(grads->tok_embeddings, dx0, inputs, N, C, vocab_start, V);
    hook(hooks, 0, 0, CT_BACKWARD);
    return loss;
}
