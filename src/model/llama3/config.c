#include <math.h>
#include <string.h>

#include "model/llama3/llama3.h"

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

static ct_status config_from(ct_model_config *m, const ct_config *c) {
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
    m->rope_theta = c->rope_theta > 0 ? c->rope_theta : f->rope_theta;
    if (m->dim <= 0 || m->n_layers <= 0 || m->n_heads <= 0 || m->n_kv_heads <= 0 || m->vocab_size <= 0)
        return ct_set_error("model: dimensions must be positive");
    if (ct_model_config_attention(m, c, 0)) return CT_ERR;
    m->ffn_hidden = c->ffn_hidden_dim > 0 ? c->ffn_hidden_dim
                                          : ct_llama3_ffn_hidden(m->dim, m->multiple_of, m->ffn_dim_multiplier);
    return CT_OK;
}

// Per layer: attention_norm, wq | wk | wv (one (NH + 2 NKV)·HS x C matrix), wo, with qk_norm the
// q and k norms (HS each), ffn_norm,
// w1 | w3 (2F x C), w2. Megatron's split under tp: wq, wk, wv, w1, w3 by rows (heads, FFN
// columns), wo and w2 by columns, norms replicated. Initialisation (GPT-2 / Megatron style):
// norms 1, matrices normal(0, 0.02), the residual outputs wo and w2 normal(0, 0.02 / sqrt(2 L)).
static int block_params(const ct_model_config *m, int layer, ct_param_spec p[CT_BLOCK_MAX_PARAMS]) {
    (void)layer;
    long C = m->dim, HS = m->head_dim, F = m->ffn_hidden, NH = m->n_heads, NKV = m->n_kv_heads;
    const double std = 0.02, std_out = 0.02 / sqrt(2.0 * m->n_layers);
    int n = 0;
    p[n++] = (ct_param_spec){"attention_norm.weight", C, 1, -1, CT_INIT_ONES, 0, LLAMA3_ATTN_NORM, false, false};
    p[n++] = (ct_param_spec){"attention.wq.weight", NH * HS, C, 0, CT_INIT_NORMAL, std, LLAMA3_WQKV, true, false};
    p[n++] = (ct_param_spec){"attention.wk.weight", NKV * HS, C, 0, CT_INIT_NORMAL, std, -1, true, false};
    p[n++] = (ct_param_spec){"attention.wv.weight", NKV * HS, C, 0, CT_INIT_NORMAL, std, -1, true, false};
    p[n++] = (ct_param_spec){"attention.wo.weight", C, NH * HS, 1, CT_INIT_NORMAL, std_out, LLAMA3_WO, true, false};
    if (m->qk_norm) {  // each head's q and k normed before RoPE, every head by the same weights
        p[n++] = (ct_param_spec){"attention.q_norm.weight", HS, 1, -1, CT_INIT_ONES, 0, LLAMA3_Q_NORM, false, false};
        p[n++] = (ct_param_spec){"attention.k_norm.weight", HS, 1, -1, CT_INIT_ONES, 0, LLAMA3_K_NORM, false, false};
    }
    p[n++] = (ct_param_spec){"ffn_norm.weight", C, 1, -1, CT_INIT_ONES, 0, LLAMA3_FFN_NORM, false, false};
    p[n++] = (ct_param_spec){"feed_forward.w1.weight", F, C, 0, CT_INIT_NORMAL, std, LLAMA3_W13, true, false};
    p[n++] = (ct_param_spec){"feed_forward.w3.weight", F, C, 0, CT_INIT_NORMAL, std, -1, true, false};
    p[n++] = (ct_param_spec){"feed_forward.w2.weight", C, F, 1, CT_INIT_NORMAL, std_out, LLAMA3_W2, true, false};
    return n;
}

// 2 FLOPs per weight of every matrix a token passes and per norm weight (the norms' count is
// the convention of the 6·N rule: every parameter, embedding excluded).
static double block_forward_flops_per_token(const ct_model_config *m) {
    double C = m->dim, HS = m->head_dim, F = m->ffn_hidden, NH = m->n_heads, NKV = m->n_kv_heads;
    double attn = C * (NH * HS) + 2 * C * (NKV * HS) + (NH * HS) * C;
    return 2.0 * (attn + 3 * C * F + 2 * C);
}

const ct_model_family ct_llama3_family = {
    .name = "llama3",
    .supports = CT_FAMILY_TP | CT_FAMILY_BF16 | CT_FAMILY_8BIT | CT_FAMILY_CHECKPOINTING | CT_FAMILY_SPLIT_BACKWARD,
    .config_from = config_from,
    .block_params = block_params,
    .block_forward_flops_per_token = block_forward_flops_per_token,
    .block = &ct_llama3_block,
    .hf_model_type = "llama",
};
