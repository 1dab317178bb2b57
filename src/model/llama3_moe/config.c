#include <math.h>
#include <string.h>

#include "model/llama3_moe/llama3_moe.h"

typedef struct {
    const char *name;
    int dim, n_layers, n_heads, n_kv_heads, vocab_size, expert_hidden, n_experts, top_k;
    double rope_theta;
} flavor_row;

// debugmodel: the dense debug model's attention with 8 experts of hidden 256, 2 per token (about
// the dense model's active FLOPs per token).
static const flavor_row flavors[] = {
    {"debugmodel", 256, 6, 16, 16, 2048, 256, 8, 2, 500000.0},
};

static ct_status config_from(ct_model_config *m, const ct_config *c) {
    const flavor_row *f = NULL;
    for (size_t i = 0; i < sizeof flavors / sizeof flavors[0]; i++)
        if (!strcmp(flavors[i].name, c->flavor)) f = &flavors[i];
    if (!f) return ct_set_error("model.flavor: unknown llama3_moe flavor '%s' (debugmodel)", c->flavor);
    memset(m, 0, sizeof *m);
    strncpy(m->flavor, f->name, sizeof m->flavor - 1);
    m->dim = c->dim > 0 ? c->dim : f->dim;
    m->n_layers = c->n_layers > 0 ? c->n_layers : f->n_layers;
    m->n_heads = c->n_heads > 0 ? c->n_heads : f->n_heads;
    m->n_kv_heads = c->n_kv_heads > 0 ? c->n_kv_heads : f->n_kv_heads;
    if (c->n_kv_heads <= 0 && m->n_kv_heads > m->n_heads) m->n_kv_heads = m->n_heads;
    m->vocab_size = c->vocab_size > 0 ? c->vocab_size : f->vocab_size;
    m->ffn_hidden = c->ffn_hidden_dim > 0 ? c->ffn_hidden_dim : f->expert_hidden;
    m->n_experts = f->n_experts;
    m->moe_top_k = f->top_k;
    m->qk_norm = 1;  // Qwen3's per-head q and k norms
    m->norm_eps = c->norm_eps;
    m->rope_theta = c->rope_theta > 0 ? c->rope_theta : f->rope_theta;
    m->rope_scaling = c->rope_scaling;
    m->block_causal = c->attn_mask_type == CT_CFG_MASK_BLOCK_CAUSAL;
    m->document_positions = m->block_causal && c->rope_positions == CT_CFG_ROPE_DOCUMENT;
    m->max_seq_len = c->seq_len;
    if (m->dim <= 0 || m->n_layers <= 0 || m->n_heads <= 0 || m->n_kv_heads <= 0 || m->vocab_size <= 0 ||
        m->ffn_hidden <= 0)
        return ct_set_error("model: dimensions must be positive");
    if (m->dim % m->n_heads)
        return ct_set_error("model.n_heads: %d heads do not divide model.dim %d", m->n_heads, m->dim);
    if (m->n_heads % m->n_kv_heads)
        return ct_set_error("model.n_kv_heads: %d kv heads do not divide %d heads", m->n_kv_heads, m->n_heads);
    m->head_dim = m->dim / m->n_heads;
    if (m->head_dim % 2) return ct_set_error("model: head dim %d must be even for RoPE", m->head_dim);
    return CT_OK;
}

// Llama 3's attention tensors, then the router and the experts (the residual output w2 depth-
// scaled as Llama 3's is). Nothing splits over tp (the family does not run tp).
static int block_params(const ct_model_config *m, int layer, ct_param_spec p[CT_BLOCK_MAX_PARAMS]) {
    int n = ct_llama3_family.block_params(m, layer, p);
    while (n > 0 && p[n - 1].view != LLAMA3_FFN_NORM) n--;  // keep attention + ffn_norm
    long C = m->dim, F = m->ffn_hidden, E = m->n_experts;
    const double std = 0.02, std_out = 0.02 / sqrt(2.0 * m->n_layers);
    p[n++] = (ct_param_spec){"moe.router.weight", E, C, -1, CT_INIT_NORMAL, std, LLAMA3_MOE_ROUTER};
    p[n++] = (ct_param_spec){"moe.experts.w13.weight", E * 2 * F, C, -1, CT_INIT_NORMAL, std, LLAMA3_MOE_W13};
    p[n++] = (ct_param_spec){"moe.experts.w2.weight", E * C, F, -1, CT_INIT_NORMAL, std_out, LLAMA3_MOE_W2};
    return n;
}

// The parameters a token meets: attention, two norms, the router, and top_k experts of the E.
static double block_forward_flops_per_token(const ct_model_config *m) {
    double C = m->dim, HS = m->head_dim, F = m->ffn_hidden, NH = m->n_heads, NKV = m->n_kv_heads;
    double attn = C * (NH * HS) + 2 * C * (NKV * HS) + (NH * HS) * C + (m->qk_norm ? 2 * HS : 0);
    return 2.0 * (attn + 2 * C + m->n_experts * C + m->moe_top_k * 3 * C * F);
}

const ct_model_family ct_llama3_moe_family = {
    .name = "llama3_moe",
    .supports = 0,
    .config_from = config_from,
    .block_params = block_params,
    .block_forward_flops_per_token = block_forward_flops_per_token,
    .block = &ct_llama3_moe_block,
    .hf_model_type = "qwen3_moe",
};
