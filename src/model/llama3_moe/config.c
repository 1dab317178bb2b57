#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/float_formats.h"
#include "model/llama3_moe/llama3_moe.h"

typedef struct {
    const char *name;
    int dim, n_layers, n_heads, n_kv_heads, head_dim;  // head_dim 0: dim / n_heads
    int vocab_size, expert_hidden, n_experts, top_k;
    int n_shared, n_dense, dense_hidden;  // shared experts; dense first blocks and their FFN width
    int qk_norm;                          // per-head RMSNorm of q and k before RoPE (Qwen3)
    double rope_theta;
} flavor_row;

// debugmodel: the dense debug model's attention with 8 experts of hidden 256, 2 per token (about
// the dense model's active FLOPs per token).
// qwen3_30b_a3b: Qwen3-30B-A3B's published config.json (huggingface.co/Qwen/Qwen3-30B-A3B):
// hidden 2048, 48 layers, 32 heads of 128 (4096 wide, not hidden / heads), 4 kv heads, 128
// experts of hidden 768, 8 per token, vocabulary 151936, rope_theta 1e6, and its per-head
// QK-norm (2 x 128 weights a block).
// deepseek_v3_like: DeepSeek-V3's published config.json (huggingface.co/deepseek-ai/DeepSeek-V3)
// with grouped-query attention in place of multi-head latent attention: hidden 7168, 61 layers,
// 256 routed experts of hidden 2048, 8 per token, 1 shared expert, the first 3 layers dense of
// hidden 18432, vocabulary 129280, rope_theta 10000. Attention: V3's 128 heads of value width
// 128 as 128 query heads of 128, with 8 kv heads of 128 (Llama 3 70B / 405B's kv count, a
// 16:1 grouping): 249M parameters a block against MLA's 187M, and 2 x 8 x 128 cached values a
// token and layer against MLA's 576. No QK-norm (V3 norms MLA's compressed latents instead).
static const flavor_row flavors[] = {
    {"debugmodel", 256, 6, 16, 16, 0, 2048, 256, 8, 2, 0, 0, 0, 1, 500000.0},
    {"qwen3_30b_a3b", 2048, 48, 32, 4, 128, 151936, 768, 128, 8, 0, 0, 0, 1, 1000000.0},
    {"deepseek_v3_like", 7168, 61, 128, 8, 128, 129280, 2048, 256, 8, 1, 3, 18432, 0, 10000.0},
};

static ct_status config_from(ct_model_config *m, const ct_config *c) {
    const flavor_row *f = NULL;
    for (size_t i = 0; i < sizeof flavors / sizeof flavors[0]; i++)
        if (!strcmp(flavors[i].name, c->flavor)) f = &flavors[i];
    if (!f)
        return ct_set_error_at(CT_E_CONFIG, "model.flavor",
                               "model.flavor: unknown llama3_moe flavor '%s' (debugmodel, qwen3_30b_a3b, deepseek_v3_like)",
                               c->flavor);
    memset(m, 0, sizeof *m);
    strncpy(m->flavor, f->name, sizeof m->flavor - 1);
    m->dim = c->dim > 0 ? c->dim : f->dim;
    m->n_layers = c->n_layers > 0 ? c->n_layers : f->n_layers;
    m->n_heads = c->n_heads > 0 ? c->n_heads : f->n_heads;
    m->n_kv_heads = c->n_kv_heads > 0 ? c->n_kv_heads : f->n_kv_heads;
    if (c->n_kv_heads <= 0 && m->n_kv_heads > m->n_heads) m->n_kv_heads = m->n_heads;
    m->vocab_size = c->vocab_size > 0 ? c->vocab_size : f->vocab_size;
    m->ffn_hidden = c->ffn_hidden_dim > 0 ? c->ffn_hidden_dim : f->expert_hidden;
    // The experts, shared experts and dense first blocks: the flavor's (its dense count capped by a
    // smaller model.n_layers), or the model.moe.* settings (model/moe_settings.c checks their range).
    m->n_experts = c->moe_num_experts > 0 ? c->moe_num_experts : f->n_experts;
    m->moe_top_k = c->moe_top_k > 0 ? c->moe_top_k : f->top_k;
    m->n_shared_experts = c->moe_num_shared_experts >= 0 ? c->moe_num_shared_experts : f->n_shared;
    m->n_dense_layers = c->moe_num_dense_layers >= 0     ? c->moe_num_dense_layers
                        : f->n_dense < m->n_layers       ? f->n_dense
                                                         : m->n_layers;
    m->dense_ffn_hidden = c->moe_dense_ffn_hidden_dim > 0 ? c->moe_dense_ffn_hidden_dim : f->dense_hidden;
    if (m->n_dense_layers > 0 && m->dense_ffn_hidden <= 0)  // a flavor without dense blocks: Llama 3's rule
        m->dense_ffn_hidden = ct_llama3_ffn_hidden(m->dim, c->multiple_of > 0 ? c->multiple_of : 256,
                                                   c->ffn_dim_multiplier);
    m->qk_norm = f->qk_norm;
    m->rope_theta = c->rope_theta > 0 ? c->rope_theta : f->rope_theta;
    if (m->dim <= 0 || m->n_layers <= 0 || m->n_heads <= 0 || m->n_kv_heads <= 0 || m->vocab_size <= 0 ||
        m->ffn_hidden <= 0)
        return ct_set_error("model: dimensions must be positive");
    // A flavor's own head width stands unless the width or the heads are overridden.
    bool own_head = f->head_dim > 0 && c->dim <= 0 && c->n_heads <= 0;
    if (ct_model_config_attention(m, c, own_head ? f->head_dim : 0)) return CT_ERR;
    return CT_OK;
}

// What the trainer refuses of a configuration the planner still sizes (it plans what ctitan would
// run with them).
static ct_status trainable(const ct_model_config *m, const ct_config *c) {
    if (c->ckpt_last_save_in_hf && m->n_shared_experts > 0)
        return ct_set_error_at(CT_E_CONFIG, "checkpoint.last_save_in_hf",
                               "checkpoint.last_save_in_hf: Qwen3-MoE has no shared experts; set "
                               "model.moe.num_shared_experts 0 or export none");
    // The shared experts are one fused w1 | w3 matrix, which does not split over tp as Llama 3's
    // column-parallel w1 and w3 do.
    if (m->n_shared_experts > 0 && c->compute_parallel_degree > 1)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.num_shared_experts",
                               "model.moe.num_shared_experts %d with parallelism.compute_parallel_degree %d: its "
                               "blocks do not run shared experts split over tp yet; set one of them back (0, 1)",
                               m->n_shared_experts, c->compute_parallel_degree);
    // Llama 3's checkpointing kinds recompute q and k without the per-head norms.
    if (m->qk_norm && (c->ac_mode != CT_CFG_AC_NONE || c->ac_selective))
        return ct_set_error_at(CT_E_CONFIG, "activation_checkpoint.mode",
                               "model.name llama3_moe: its blocks do not run activation_checkpoint.mode other than none "
                               "with qk_norm yet (model.flavor %s norms each head's q and k); set "
                               "activation_checkpoint.mode none",
                               m->flavor);
    return CT_OK;
}

// Llama 3's attention tensors, then the router and the experts (the residual output w2 depth-
// scaled as Llama 3's is), the choosing bias under auxiliary-loss-free balancing, the shared experts as one SwiGLU of
// S·F; a dense first block is Llama 3's block of the dense FFN width. Under tp the attention and
// the dense blocks split as Llama 3's; the router, the shared and the routed experts do not (every
// tp rank holds them whole and runs them on its own rows).
static int block_params(const ct_model_config *m, int layer, ct_param_spec p[CT_BLOCK_MAX_PARAMS]) {
    if (layer < m->n_dense_layers) {
        ct_model_config dense = *m;
        dense.ffn_hidden = m->dense_ffn_hidden;
        return ct_llama3_family.block_params(&dense, layer, p);
    }
    int n = ct_llama3_family.block_params(m, layer, p);
    while (n > 0 && p[n - 1].view != LLAMA3_FFN_NORM) n--;  // keep attention + ffn_norm
    long C = m->dim, F = m->ffn_hidden, E = m->n_experts, SF = (long)m->n_shared_experts * m->ffn_hidden;
    const double std = 0.02, std_out = 0.02 / sqrt(2.0 * m->n_layers);
    p[n++] = (ct_param_spec){"moe.router.weight", E, C, -1, CT_INIT_NORMAL, std, LLAMA3_MOE_ROUTER, false, false};
    if (m->moe_bias_rate > 0)  // starts at zero; not trained (train/moe_bias.c moves it)
        p[n++] = (ct_param_spec){"moe.expert_bias", E, 1, -1, CT_INIT_NORMAL, 0.0, LLAMA3_MOE_BIAS, false, false};
    if (SF > 0) {  // at Llama 3's FFN views: the block runs them as Llama 3's FFN of width S·F
        p[n++] = (ct_param_spec){"moe.shared_experts.w13.weight", 2 * SF, C, -1, CT_INIT_NORMAL, std, LLAMA3_W13, false, false};
        p[n++] = (ct_param_spec){"moe.shared_experts.w2.weight", C, SF, -1, CT_INIT_NORMAL, std_out, LLAMA3_W2, false, false};
    }
    // The routed experts last (ct_param_spec.expert), read in bf16 under bf16 by the grouped
    // matmuls; the router and the bias stay fp32 (the router's scores are computed in fp32, as
    // TorchTitan keeps them).
    p[n++] = (ct_param_spec){"moe.experts.w13.weight", E * 2 * F, C, -1, CT_INIT_NORMAL, std, LLAMA3_MOE_W13, true, true};
    p[n++] = (ct_param_spec){"moe.experts.w2.weight", E * C, F, -1, CT_INIT_NORMAL, std_out, LLAMA3_MOE_W2, true, true};
    return n;
}

// The parameters a token meets, the mean over the blocks: attention and two norms in each; in a
// routed block the router, top_k experts of the E and the shared experts; in a dense first block
// its SwiGLU.
static double block_forward_flops_per_token(const ct_model_config *m) {
    double C = m->dim, HS = m->head_dim, F = m->ffn_hidden, NH = m->n_heads, NKV = m->n_kv_heads;
    double attn = C * (NH * HS) + 2 * C * (NKV * HS) + (NH * HS) * C + (m->qk_norm ? 2 * HS : 0);
    double routed = m->n_experts * C + (m->moe_top_k + m->n_shared_experts) * 3 * C * F;
    double dense = 3 * C * (double)m->dense_ffn_hidden, L = m->n_layers, Ld = m->n_dense_layers;
    return 2.0 * (attn + 2 * C + ((L - Ld) * routed + Ld * dense) / L);
}

const ct_model_family ct_llama3_moe_family = {
    .name = "llama3_moe",
    .supports = CT_FAMILY_CHECKPOINTING | CT_FAMILY_TP | CT_FAMILY_BF16 | CT_FAMILY_8BIT,
    .config_from = config_from,
    .trainable = trainable,
    .block_params = block_params,
    .block_forward_flops_per_token = block_forward_flops_per_token,
    .block = &ct_llama3_moe_block,
    .hf_model_type = "qwen3_moe",
};
