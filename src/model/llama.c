#include "model/llama.h"

#include <math.h>
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

void ct_llama_acts_init(ct_llama_acts *a, const ct_llama_config *m, long B, long T) {
    memset(a, 0, sizeof *a);
    a->cfg = *m;
    a->B = B;
    a->T = T;
    a->N = B * T;
    long N = a->N, C = m->dim, HS = m->head_dim, NH = m->n_heads, F = m->ffn_hidden, L = m->n_layers;
    a->qkv_dim = (NH + 2L * m->n_kv_heads) * HS;
    a->xent_chunk_rows = N < 256 ? N : 256;
    long scratch = ct_attention_scratch_floats(T, T, HS);
    long xent = ct_xent_scratch_floats(a->xent_chunk_rows, m->vocab_size);
    if (xent > scratch) scratch = xent;

    // Sizes of every buffer, in floats, rounded to 16 floats (64 bytes) so each starts aligned.
#define R16(x) (((x) + 15) & ~15L)
    long per_block = R16(N * C) * 4 + R16(N) * 2 + R16(N * a->qkv_dim) + R16(N * NH * HS) + R16(B * NH * T) +
                     R16(N * 2 * F) + R16(N * F);
    long total = per_block * L + R16(N * C) * 4 + R16(N) + R16(N * NH * HS) + R16(N * a->qkv_dim) + R16(N * F) +
                 R16(N * 2 * F) + 2 * R16(T * HS / 2) + R16(scratch);
    a->arena = ct_mem_alloc(CT_MEM_ACTIVATIONS, (size_t)total * sizeof(float));
    float *p = a->arena;
#define TAKE(ptr, n)  \
    do {              \
        ptr = p;      \
        p += R16(n);  \
    } while (0)
    a->blocks = ct_xcalloc((size_t)L, sizeof(ct_block_acts));
    for (long l = 0; l < L; l++) {
        ct_block_acts *b = &a->blocks[l];
        TAKE(b->x, N * C);
        TAKE(b->norm1, N * C);
        TAKE(b->rstd1, N);
        TAKE(b->qkv, N * a->qkv_dim);
        TAKE(b->att, N * NH * HS);
        TAKE(b->lse, B * NH * T);
        TAKE(b->x_mid, N * C);
        TAKE(b->norm2, N * C);
        TAKE(b->rstd2, N);
        TAKE(b->h13, N * 2 * F);
        TAKE(b->h, N * F);
    }
    TAKE(a->x_final, N * C);
    TAKE(a->norm_f, N * C);
    TAKE(a->rstd_f, N);
    TAKE(a->dres, N * C);
    TAKE(a->dnorm, N * C);
    TAKE(a->datt, N * NH * HS);
    TAKE(a->dqkv, N * a->qkv_dim);
    TAKE(a->dh, N * F);
    TAKE(a->dh13, N * 2 * F);
    TAKE(a->rope_cos, T * HS / 2);
    TAKE(a->rope_sin, T * HS / 2);
    TAKE(a->scratch, scratch);
#undef TAKE
#undef R16
    if (p - a->arena > total) ct_fatal("model", "activation arena overflow");
    // Llama 3.1 RoPE scaling constants (factor 8, low 1, high 4, original context 8192).
    ct_rope_tables(a->rope_cos, a->rope_sin, T, HS, m->rope_theta, m->rope_scaling ? 8.0 : 0.0, 1.0, 4.0, 8192);
}

void ct_llama_acts_free(ct_llama_acts *a) {
    ct_mem_free(a->arena);
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

// ------------------------------------------------------------------ one block

static void block_forward(ct_llama_acts *a, ct_block_acts *s, const ct_block_weights *w, float *out) {
    const ct_llama_config *m = &a->cfg;
    long B = a->B, T = a->T, N = a->N, C = m->dim, HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads;
    long F = m->ffn_hidden, QKV = a->qkv_dim;
    float *q = s->qkv, *k = s->qkv + NH * HS, *v = s->qkv + (NH + NKV) * HS;

    ct_rmsnorm_forward(s->norm1, s->rstd1, s->x, w->attn_norm, N, C, (float)m->norm_eps);
    ct_linear_forward(s->qkv, s->norm1, w->wqkv, N, C, QKV);  // (N, QKV)
    ct_rope_forward(q, a->rope_cos, a->rope_sin, NULL, B, T, NH, HS, QKV);
    ct_rope_forward(k, a->rope_cos, a->rope_sin, NULL, B, T, NKV, HS, QKV);
    ct_attention_forward(s->att, s->lse, q, QKV, k, QKV, v, QKV, NULL, NULL, B, T, T, NH, NKV, HS, a->scratch);
    ct_linear_forward(s->x_mid, s->att, w->wo, N, NH * HS, C);  // (N, C)
    ct_add_inplace(s->x_mid, s->x, N * C);

    ct_rmsnorm_forward(s->norm2, s->rstd2, s->x_mid, w->ffn_norm, N, C, (float)m->norm_eps);
    ct_linear_forward(s->h13, s->norm2, w->w13, N, C, 2 * F);  // (N, 2F)
    ct_swiglu_forward(s->h, s->h13, N, F);                     // (N, F)
    ct_linear_forward(out, s->h, w->w2, N, F, C);              // (N, C)
    ct_add_inplace(out, s->x_mid, N * C);
}

// dres (N, C): on entry the gradient of the block's output, on exit that of its input.
static void block_backward(ct_llama_acts *a, const ct_block_acts *s, const ct_block_weights *w,
                           ct_block_weights *g) {
    const ct_llama_config *m = &a->cfg;
    long B = a->B, T = a->T, N = a->N, C = m->dim, HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads;
    long F = m->ffn_hidden, QKV = a->qkv_dim;
    const float *q = s->qkv, *k = s->qkv + NH * HS, *v = s->qkv + (NH + NKV) * HS;
    float *dq = a->dqkv, *dk = a->dqkv + NH * HS, *dv = a->dqkv + (NH + NKV) * HS;

    // feed-forward: out = x_mid + w2(swiglu(w13(norm2(x_mid))))
    ct_linear_backward(a->dh, g->w2, a->dres, s->h, w->w2, N, F, C);
    ct_swiglu_backward(a->dh13, a->dh, s->h13, N, F);
    ct_linear_backward(a->dnorm, g->w13, a->dh13, s->norm2, w->w13, N, C, 2 * F);
    ct_rmsnorm_backward(a->dres, g->ffn_norm, a->dnorm, s->x_mid, w->ffn_norm, s->rstd2, N, C);

    // attention: x_mid = x + wo(attention(rope(wqkv(norm1(x)))))
    ct_linear_backward(a->datt, g->wo, a->dres, s->att, w->wo, N, NH * HS, C);
    memset(a->dqkv, 0, (size_t)(N * QKV) * sizeof(float));
    ct_attention_backward(dq, dk, dv, a->datt, s->att, s->lse, q, QKV, k, QKV, v, QKV, NULL, NULL, B, T, T, NH,
                          NKV, HS, a->scratch);
    ct_rope_backward(dq, a->rope_cos, a->rope_sin, NULL, B, T, NH, HS, QKV);
    ct_rope_backward(dk, a->rope_cos, a->rope_sin, NULL, B, T, NKV, HS, QKV);
    ct_linear_backward(a->dnorm, g->wqkv, a->dqkv, s->norm1, w->wqkv, N, C, QKV);
    ct_rmsnorm_backward(a->dres, g->attn_norm, a->dnorm, s->x, w->attn_norm, s->rstd1, N, C);
}

// ------------------------------------------------------------------ the model

static void hook(const ct_llama_hooks *h, int before, int group, int phase) {
    if (!h) return;
    void (*fn)(void *, int, int) = before ? h->before_group : h->after_group;
    if (fn) fn(h->ctx, group, phase);
}

double ct_llama_step(ct_llama_acts *a, ct_llama_weights *w, ct_llama_weights *grads, const int32_t *inputs,
                     const int32_t *targets, float grad_scale, const ct_llama_hooks *hooks) {
    const ct_llama_config *m = &a->cfg;
    long N = a->N, C = m->dim, V = m->vocab_size;
    int L = m->n_layers, head = L + 1;

    hook(hooks, 1, 0, CT_FORWARD);
    ct_embedding_forward(a->blocks[0].x, inputs, w->tok_embeddings, N, C, 0, V);
    hook(hooks, 0, 0, CT_FORWARD);
    for (int l = 0; l < L; l++) {
        hook(hooks, 1, 1 + l, CT_FORWARD);
        block_forward(a, &a->blocks[l], &w->blocks[l], l + 1 < L ? a->blocks[l + 1].x : a->x_final);
        hook(hooks, 0, 1 + l, CT_FORWARD);
    }

    // Output head: final norm, then output projection fused with cross-entropy (and its backward).
    hook(hooks, 1, head, CT_FORWARD);
    ct_rmsnorm_forward(a->norm_f, a->rstd_f, a->x_final, w->norm, N, C, (float)m->norm_eps);
    if (!grads) {
        double loss = ct_xent_fused(NULL, NULL, a->norm_f, w->output, targets, N, C, V, 0.0f, a->xent_chunk_rows,
                                    a->scratch);
        hook(hooks, 0, head, CT_FORWARD);
        return loss;
    }
    double loss = ct_xent_fused(a->dnorm, grads->output, a->norm_f, w->output, targets, N, C, V, grad_scale,
                                a->xent_chunk_rows, a->scratch);
    memset(a->dres, 0, (size_t)(N * C) * sizeof(float));
    ct_rmsnorm_backward(a->dres, grads->norm, a->dnorm, a->x_final, w->norm, a->rstd_f, N, C);
    hook(hooks, 0, head, CT_BACKWARD);

    for (int l = L - 1; l >= 0; l--) {
        hook(hooks, 1, 1 + l, CT_BACKWARD);
        block_backward(a, &a->blocks[l], &w->blocks[l], &grads->blocks[l]);
        hook(hooks, 0, 1 + l, CT_BACKWARD);
    }
    hook(hooks, 1, 0, CT_BACKWARD);
    ct_embedding_backward(grads->tok_embeddings, a->dres, inputs, N, C, 0, V);
    hook(hooks, 0, 0, CT_BACKWARD);
    return loss;
}
