#include "model/weights.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

// ------------------------------------------------------------------ weight views

void ct_model_weights_point_group(ct_model_weights *w, const ct_param_table *t, int group, float *group_block) {
    long start = t->group_offset[group];
    int L = t->n_groups - 2;
    for (int i = t->group_first[group]; i < t->group_first[group + 1]; i++) {
        const ct_param *p = &t->params[i];
        if (p->view < 0) continue;  // inside the matrix the previous tensor's view starts
        float *at = group_block + (p->offset - start);
        if (group == 0) w->tok_embeddings = at;
        else if (group == L + 1) *(p->view == 0 ? &w->norm : &w->output) = at;
        else w->blocks[group - 1].t[p->view] = at;
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
