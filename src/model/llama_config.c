#include "model/model.h"

#include <string.h>

typedef struct {
    const char *name;
    int dim, n_layers, n_heads, n_kv_heads, vocab_size, multiple_of;
    double ffn_dim_multiplier;
    double rope_theta;
} flavor_row;

// Meta's published dimensions (Llama 3 / 3.1) and TorchTitan's debug model.
static const flavor_row flavors[] = {
    {"debugmodel", 256, 6, 16, 16, 2048, 256, 0.0, 500000.0},
    {"8B", 4096, 32, 32, 8, 128256, 1024, 1.3, 500000.0},
    {"70B", 8192, 80, 64, 8, 128256, 4096, 1.3, 500000.0},
    {"405B", 16384, 126, 128, 8, 128256, 4096, 1.2, 500000.0},
};

int ct_llama3_ffn_hidden(int dim, int multiple_of, double ffn_dim_multiplier) {
    long hidden = 4L * dim;
    hidden = 2 * hidden / 3;
    if (ffn_dim_multiplier > 0) hidden = (long)(ffn_dim_multiplier * (double)hidden);
    hidden = (long)multiple_of * ((hidden + multiple_of - 1) / multiple_of);
    return (int)hidden;
}

ct_status ct_model_config_from(ct_model_config *m, const ct_config *c) {
    const flavor_row *f = NULL;
    for (size_t i = 0; i < sizeof flavors / sizeof flavors[0]; i++)
        if (!strcmp(flavors[i].name, c->flavor)) f = &flavors[i];
    if (!f) return ct_set_error("model.flavor: unknown flavor '%s' (debugmodel, 8B, 70B, 405B)", c->flavor);
    memset(m, 0, sizeof *m);
    strncpy(m->flavor, f->name, sizeof m->flavor - 1);
    m->dim = c->dim > 0 ? c->dim : f->dim;
    m->n_layers = c->n_layers > 0 ? c->n_layers : f->n_layers;
    m->n_heads = c->n_heads > 0 ? c->n_heads : f->n_heads;
    // kv heads follow the flavor unless overridden; with heads overridden below the flavor's kv
    // count, fall back to MHA so a small override stays valid.
    m->n_kv_heads = c->n_kv_heads > 0 ? c->n_kv_heads : f->n_kv_heads;
    if (c->n_kv_heads <= 0 && m->n_kv_heads > m->n_heads) m->n_kv_heads = m->n_heads;
    m->vocab_size = c->vocab_size > 0 ? c->vocab_size : f->vocab_size;
    m->multiple_of = c->multiple_of > 0 ? c->multiple_of : f->multiple_of;
    m->ffn_dim_multiplier = c->ffn_dim_multiplier > 0 ? c->ffn_dim_multiplier : f->ffn_dim_multiplier;
    m->norm_eps = c->norm_eps;
    m->rope_theta = c->rope_theta > 0 ? c->rope_theta : f->rope_theta;
    m->rope_scaling = c->rope_scaling;
    m->block_causal = !strcmp(c->attn_mask_type, "block_causal");
    m->document_positions = m->block_causal && !strcmp(c->rope_positions, "document");
    m->max_seq_len = c->seq_len;
    if (m->dim <= 0 || m->n_layers <= 0 || m->n_heads <= 0 || m->n_kv_heads <= 0 || m->vocab_size <= 0)
        return ct_set_error("model: dimensions must be positive");
    if (m->dim % m->n_heads)
        return ct_set_error("model.n_heads: %d heads do not divide model.dim %d", m->n_heads, m->dim);
    if (m->n_heads % m->n_kv_heads)
        return ct_set_error("model.n_kv_heads: %d kv heads do not divide %d heads", m->n_kv_heads, m->n_heads);
    m->head_dim = m->dim / m->n_heads;
    if (m->head_dim % 2) return ct_set_error("model: head dim %d must be even for RoPE", m->head_dim);
    m->ffn_hidden = c->ffn_hidden_dim > 0 ? c->ffn_hidden_dim
                                          : ct_llama3_ffn_hidden(m->dim, m->multiple_of, m->ffn_dim_multiplier);
    return CT_OK;
}

ct_status ct_model_config_local(const ct_model_config *m, int tp, ct_model_config *local) {
    *local = *m;
    if (tp <= 1) return CT_OK;
    const char *what[] = {"model.n_heads", "model.n_kv_heads", "FFN hidden size", "model.vocab_size"};
    int value[] = {m->n_heads, m->n_kv_heads, m->ffn_hidden, m->vocab_size};
    for (int i = 0; i < 4; i++)
        if (value[i] % tp)
            return ct_set_error("parallelism.compute_parallel_degree %d does not divide %s %d", tp, what[i], value[i]);
    local->n_heads /= tp;
    local->n_kv_heads /= tp;
    local->ffn_hidden /= tp;
    local->vocab_size /= tp;
    return CT_OK;
}

long ct_model_embedding_params(const ct_model_config *m) { return (long)m->vocab_size * m->dim; }

long ct_model_block_params(const ct_model_config *m) {
    long C = m->dim, HS = m->head_dim, F = m->ffn_hidden;
    long attn = C * (m->n_heads * HS) + 2 * C * (m->n_kv_heads * HS) + (m->n_heads * HS) * C;
    long ffn = 3 * C * F;
    return attn + ffn + 2 * C;
}

long ct_model_head_params(const ct_model_config *m) { return m->dim + (long)m->vocab_size * m->dim; }

long ct_model_num_params(const ct_model_config *m) {
    return ct_model_embedding_params(m) + m->n_layers * ct_model_block_params(m) + ct_model_head_params(m);
}

double ct_model_flops_per_token(const ct_model_config *m, long seq_len) {
    double n = (double)(ct_model_num_params(m) - ct_model_embedding_params(m));
    return 6.0 * n + 12.0 * m->n_layers * m->n_heads * m->head_dim * (double)seq_len;
}
