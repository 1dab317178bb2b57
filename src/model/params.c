#include "model/params.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

// Adds a tensor of global shape (rows, cols); tp_dim says which dimension this rank holds
// 1/tp of (the tp_rank-th slice), -1 for a replicated tensor.
static void add(ct_param_table *t, int *cap, const char *name, long rows, long cols, int group, ct_init_kind init,
                double std, int tp_dim, int tp_rank, int tp_size) {
    if (t->count == *cap) ct_fatal("params", "registry overflow");
    ct_param *p = &t->params[t->count++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols > 1 ? 2 : 1;
    p->global_shape[0] = rows;
    p->global_shape[1] = cols;
    p->tp_dim = tp_size > 1 ? tp_dim : -1;
    if (p->tp_dim == 0) rows /= tp_size;
    if (p->tp_dim == 1) cols /= tp_size;
    p->tp_start = p->tp_dim == 0 ? tp_rank * rows : p->tp_dim == 1 ? tp_rank * cols : 0;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = rows * cols;
    p->offset = t->total;
    p->group = group;
    p->init = init;
    p->init_std = std;
    t->total += p->numel;
}

ct_status ct_param_count(const ct_model_config *m, int *n_tensors, long *n_elements) {
#define POSITIVE(f) \
    if (m->f <= 0) return ct_set_error("model: " #f " %d must be positive", m->f)
    POSITIVE(dim);
    POSITIVE(n_layers);
    POSITIVE(n_heads);
    POSITIVE(n_kv_heads);
    POSITIVE(head_dim);
    POSITIVE(ffn_hidden);
    POSITIVE(vocab_size);
#undef POSITIVE
    // t->count is an int: 3 + 9 L must fit (L near INT_MAX once wrapped the multiply).
    if (m->n_layers > (INT_MAX - 3) / 9)
        return ct_set_error("model: n_layers %d: the registry holds at most %d layers", m->n_layers, (INT_MAX - 3) / 9);
    const long C = m->dim, HS = m->head_dim, F = m->ffn_hidden, V = m->vocab_size;
    const long NH = m->n_heads, NKV = m->n_kv_heads;
    // Per layer: two norms (C), wq/wk/wv ((NH + 2 NKV) HS x C), wo (C x NH HS), w1/w3/w2 (3 F C).
    // Every factor is below 2^31 (so 3 F, 2 V, NH + 2 NKV fit a long); every product and sum
    // after that is checked, whatever the config (the caller may not have validated it).
    long heads, qkv_rows, wo_cols, qkv, wo, ffn, layer, layers, emb, total;
    if (__builtin_add_overflow(NH, 2 * NKV, &heads) || __builtin_mul_overflow(heads, HS, &qkv_rows) ||
        __builtin_mul_overflow(NH, HS, &wo_cols) || __builtin_mul_overflow(qkv_rows, C, &qkv) ||
        __builtin_mul_overflow(C, wo_cols, &wo) || __builtin_mul_overflow(3 * F, C, &ffn) ||
        __builtin_add_overflow(qkv, wo, &layer) || __builtin_add_overflow(layer, ffn, &layer) ||
        __builtin_add_overflow(layer, 2 * C, &layer) || __builtin_mul_overflow(layer, (long)m->n_layers, &layers) ||
        __builtin_mul_overflow(2 * V, C, &emb) || __builtin_add_overflow(emb, C, &emb) ||
        __builtin_add_overflow(layers, emb, &total))
        return ct_set_error("model: dim %d, n_layers %d, n_heads %d, n_kv_heads %d, ffn_hidden %d, vocab_size %d: "
                            "the parameter count overflows",
                            m->dim, m->n_layers, m->n_heads, m->n_kv_heads, m->ffn_hidden, m->vocab_size);
    *n_tensors = 3 + 9 * m->n_layers;
    *n_elements = total;
    return CT_OK;
}

void ct_param_table_build(ct_param_table *t, const ct_model_config *m) { ct_param_table_build_tp(t, m, 0, 1); }

void ct_param_table_build_tp(ct_param_table *t, const ct_model_config *m, int tp_rank, int tp_size) {
    memset(t, 0, sizeof *t);
    long C = m->dim, HS = m->head_dim, F = m->ffn_hidden, V = m->vocab_size;
    long NH = m->n_heads, NKV = m->n_kv_heads;
    t->tp_rank = tp_rank;
    t->tp_size = tp_size;
    int cap;
    long n_elements;
    // Callers validate dimensions first; this catches the one that did not, before the
    // registry's int and long arithmetic can overflow or a wrapped count reaches calloc.
    if (ct_param_count(m, &cap, &n_elements) != CT_OK) ct_fatal("params", "%s", ct_last_error());
    t->params = ct_xcalloc((size_t)cap, sizeof(ct_param));
    t->n_groups = m->n_layers + 2;
    t->group_offset = ct_xcalloc((size_t)t->n_groups + 1, sizeof(long));
    const double std = 0.02, std_out = 0.02 / sqrt(2.0 * m->n_layers);
    char name[CT_PARAM_NAME];

    t->group_offset[0] = 0;
    add(t, &cap, "tok_embeddings.weight", V, C, 0, CT_INIT_NORMAL, std, 0, tp_rank, tp_size);
    for (int l = 0; l < m->n_layers; l++) {
        int g = 1 + l;
        t->group_offset[g] = t->total;
#define P(suffix, rows, cols, init, s, split)                       \
    snprintf(name, sizeof name, "layers.%d.%s", l, suffix);        \
    add(t, &cap, name, rows, cols, g, init, s, split, tp_rank, tp_size)
        P("attention_norm.weight", C, 1, CT_INIT_ONES, 0, -1);
        P("attention.wq.weight", NH * HS, C, CT_INIT_NORMAL, std, 0);  // column-parallel: heads
        P("attention.wk.weight", NKV * HS, C, CT_INIT_NORMAL, std, 0);
        P("attention.wv.weight", NKV * HS, C, CT_INIT_NORMAL, std, 0);
        P("attention.wo.weight", C, NH * HS, CT_INIT_NORMAL, std_out, 1);  // row-parallel
        P("ffn_norm.weight", C, 1, CT_INIT_ONES, 0, -1);
        P("feed_forward.w1.weight", F, C, CT_INIT_NORMAL, std, 0);
        P("feed_forward.w3.weight", F, C, CT_INIT_NORMAL, std, 0);
        P("feed_forward.w2.weight", C, F, CT_INIT_NORMAL, std_out, 1);
#undef P
    }
    t->group_offset[m->n_layers + 1] = t->total;
    add(t, &cap, "norm.weight", C, 1, m->n_layers + 1, CT_INIT_ONES, 0, -1, tp_rank, tp_size);
    add(t, &cap, "output.weight", V, C, m->n_layers + 1, CT_INIT_NORMAL, std, 0, tp_rank, tp_size);
    t->group_offset[t->n_groups] = t->total;
}

void ct_param_table_free(ct_param_table *t) {
    free(t->params);
    free(t->group_offset);
    memset(t, 0, sizeof *t);
}

const ct_param *ct_param_find(const ct_param_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (!strcmp(t->params[i].name, name)) return &t->params[i];
    return NULL;
}

long ct_param_global_index(const ct_param *p, long local) {
    if (p->tp_dim == 0) return p->tp_start * p->shape[1] + local;
    if (p->tp_dim == 1) {
        long row = local / p->shape[1], col = local % p->shape[1];
        return row * p->global_shape[1] + p->tp_start + col;
    }
    return local;
}

void ct_param_init_range(const ct_param *p, uint64_t seed, long begin, long n, float *dst) {
    if (p->init == CT_INIT_ONES) {
        for (long i = 0; i < n; i++) dst[i] = 1.0f;
        return;
    }
    uint64_t key = ct_rng_key(seed, p->name);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        dst[i] = (float)(p->init_std * ct_rng_normal(key, (uint64_t)ct_param_global_index(p, begin + i)));
}

void ct_param_init_global(const ct_param *p, uint64_t seed, long global_begin, long n, float *dst) {
    if (p->init == CT_INIT_ONES) {
        for (long i = 0; i < n; i++) dst[i] = 1.0f;
        return;
    }
    uint64_t key = ct_rng_key(seed, p->name);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) dst[i] = (float)(p->init_std * ct_rng_normal(key, (uint64_t)(global_begin + i)));
}

void ct_param_init_all(const ct_param_table *t, uint64_t seed, float *block) {
    for (int i = 0; i < t->count; i++) {
        const ct_param *p = &t->params[i];
        ct_param_init_range(p, seed, 0, p->numel, block + p->offset);
    }
}
