#include "model/weights.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

// ------------------------------------------------------------------ weight views

void ct_model_weights_point_group(ct_model_weights *w, const ct_param_table *t, int group, float *group_block,
                                  const long *at_of) {
    long start = t->group_offset[group];
    int L = t->n_groups - 2;
    for (int i = t->group_first[group]; i < t->group_first[group + 1]; i++) {
        const ct_param *p = &t->params[i];
        if (p->view < 0) continue;  // inside the matrix the previous tensor's view starts
        float *at = group_block + (at_of ? at_of[i] : p->offset - start);
        if (group == 0) w->tok_embeddings = at, w->tok_embeddings16 = NULL;
        else if (group == L + 1 && p->view == 0) w->norm = at;
        else if (group == L + 1) w->output = at, w->output16 = NULL;
        else w->blocks[group - 1].t[p->view] = at, w->blocks[group - 1].t16[p->view] = NULL;
    }
}

void ct_model_weights_point_group_bf16(ct_model_weights *w, const ct_param_table *t, int group, float *group_f32,
                                       const long *f32_at, const uint16_t *group_bf16, const long *at_of) {
    long start = t->group_offset[group];
    int L = t->n_groups - 2;
    for (int i = t->group_first[group]; i < t->group_first[group + 1]; i++) {
        const ct_param *p = &t->params[i];
        if (p->view < 0) continue;
        float *at = f32_at[i] >= 0 ? group_f32 + f32_at[i] : NULL;
        const uint16_t *at16 = p->read_bf16 ? group_bf16 + (at_of ? at_of[i] : p->offset - start) : NULL;
        if (group == 0) w->tok_embeddings = at, w->tok_embeddings16 = at16;
        else if (group == L + 1 && p->view == 0) w->norm = at;
        else if (group == L + 1) w->output = at, w->output16 = at16;
        else w->blocks[group - 1].t[p->view] = at, w->blocks[group - 1].t16[p->view] = at16;
    }
}

void ct_model_weights_init(ct_model_weights *w, const ct_param_table *t, const ct_model_config *m, float *block) {
    memset(w, 0, sizeof *w);
    w->blocks = ct_xcalloc((size_t)m->n_layers, sizeof(ct_block_weights));
    for (int g = 0; g < t->n_groups; g++) ct_model_weights_point_group(w, t, g, block + t->group_offset[g], NULL);
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
