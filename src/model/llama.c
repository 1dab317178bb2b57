#include "model/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

// ------------------------------------------------------------------ weight views

static float *tensor_at(const ct_param_table *t, float *group_block, long group_start, const char *name) {
    const ct_param *p = ct_param_find(t, name);
    if (!p) ct_fatal("model", "no parameter named %s", name);
    return group_block + (p->offset - group_start);
}

void ct_model_weights_point_group(ct_model_weights *w, const ct_param_table *t, int group, float *group_block) {
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

void ct_model_weights_init(ct_model_weights *w, const ct_param_table *t, const ct_model_config *m, float *block) {
    memset(w, 0, sizeof *w);
    w->blocks = ct_xcalloc((size_t)m->n_layers, sizeof(ct_block_weights));
    for (int g = 0; g < t->n_groups; g++) ct_model_weights_point_group(w, t, g, block + t->group_offset[g]);
}

void ct_model_weights_free(ct_model_weights *w) {
    free(w->blocks);
    w->blocks = NULL;
}

// ------------------------------------------------------------------ RoPE

void ct_model_rope_tables(const ct_kernels *k, const ct_model_config *m, float *cos_tab, float *sin_tab, long T) {
    // Llama 3.1 scaling: factor 8, low-frequency factor 1, high-frequency factor 4, original
    // context 8192. An angle depends only on the position, so a longer table repeats a shorter
    // one's values (training and generation build theirs at different lengths).
    k->rope_tables(cos_tab, sin_tab, T, m->head_dim, m->rope_theta, m->rope_scaling ? 8.0 : 0.0, 1.0, 4.0, 8192);
}
