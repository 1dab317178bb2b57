#include "model/model.h"

#include <stdio.h>
#include <string.h>

#include "model/llama3/llama3.h"
#include "model/llama3_moe/llama3_moe.h"

static const ct_model_family *const families[] = {&ct_llama3_family, &ct_llama3_moe_family, NULL};

const ct_model_family *const *ct_model_families(void) { return families; }

const ct_model_family *ct_model_family_find(const char *name) {
    for (int i = 0; families[i]; i++)
        if (!strcmp(families[i]->name, name)) return families[i];
    return NULL;
}

// The settings the family's blocks cannot run, refused by name.
static ct_status supported(const ct_model_family *f, const ct_config *c) {
    const char *no = NULL;
    if (!(f->supports & CT_FAMILY_TP) && c->compute_parallel_degree > 1) no = "parallelism.compute_parallel_degree > 1";
    else if (!(f->supports & CT_FAMILY_BF16) && c->mixed_precision != CT_CFG_FP32) no = "mixed_precision bf16";
    else if (!(f->supports & CT_FAMILY_8BIT) && (c->float8 || c->mxfp8)) no = "quantization.float8 / mxfp8";
    else if (!(f->supports & CT_FAMILY_CHECKPOINTING) && (c->ac_mode != CT_CFG_AC_NONE || c->ac_selective))
        no = "activation_checkpoint.mode other than none";
    else if (!(f->supports & CT_FAMILY_SPLIT_BACKWARD) &&
             (strstr(c->pipeline_schedule, "zb") || strstr(c->pipeline_schedule, "ZeroBubble")))
        no = "a zero-bubble pipeline_schedule (split backward)";
    else if (!f->hf_model_type && c->ckpt_last_save_in_hf) no = "checkpoint.last_save_in_hf (no Hugging Face layout)";
    if (no) return ct_set_error("model.name %s: its blocks do not run %s yet; choose another setting or model.name llama3",
                                f->name, no);
    return CT_OK;
}

ct_status ct_model_config_plan(ct_model_config *m, const ct_config *c) {
    const ct_model_family *f = ct_model_family_find(c->model_name);
    if (!f) {
        char names[128] = "";
        for (int i = 0; families[i]; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", families[i]->name);
        return ct_set_error("model.name: unknown model family '%s' (%s)", c->model_name, names);
    }
    if (f->config_from(m, c) || ct_model_config_moe(m, c)) return CT_ERR;
    m->family = f;
    return CT_OK;
}

ct_status ct_model_config_from(ct_model_config *m, const ct_config *c) {
    if (ct_model_config_plan(m, c)) return CT_ERR;
    int ep = c->expert_parallel_degree;
    if (ep > 1 && m->n_experts == 0)
        return ct_set_error_at(CT_E_CONFIG, "parallelism.expert_parallel_degree",
                               "parallelism.expert_parallel_degree %d: model.name %s has no experts; set 1", ep,
                               m->family->name);
    if (ep > 1 && m->n_experts % ep)
        return ct_set_error_at(CT_E_CONFIG, "parallelism.expert_parallel_degree",
                               "parallelism.expert_parallel_degree %d does not divide the model's %d experts", ep,
                               m->n_experts);
    if (m->moe_aux_coeff > 0 && c->compute_parallel_degree > 1 && c->sequence_parallel)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.aux_loss_coeff",
                               "model.moe.aux_loss_coeff %g with parallelism.compute_parallel_degree %d under "
                               "sequence_parallel.enable: the load-balancing loss needs a sequence's tokens on one "
                               "rank; set one of them back (0, 1, false)",
                               m->moe_aux_coeff, c->compute_parallel_degree);
    if (m->moe_aux_coeff > 0 && c->context_extension_degree > 1)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.aux_loss_coeff",
                               "model.moe.aux_loss_coeff %g with parallelism.context_parallel_degree %d: the load-"
                               "balancing loss needs a sequence's tokens on one rank; set one of them back (0, 1)",
                               m->moe_aux_coeff, c->context_extension_degree);
    if (c->ckpt_last_save_in_hf && m->n_experts > 0 && (m->moe_sigmoid || !m->moe_route_norm || m->moe_bias_rate > 0))
        return ct_set_error_at(CT_E_CONFIG, "checkpoint.last_save_in_hf",
                               "checkpoint.last_save_in_hf: Qwen3-MoE routes by softmax with renormalised weights and no "
                               "choosing bias, not as model.moe.score_func / route_norm / load_balance_coeff say here");
    if (m->family->trainable && m->family->trainable(m, c)) return CT_ERR;
    return supported(m->family, c);
}

ct_status ct_model_config_attention(ct_model_config *m, const ct_config *c, int head_dim) {
    m->norm_eps = c->norm_eps;
    m->rope_scaling = c->rope_scaling;
    m->block_causal = c->attn_mask_type == CT_CFG_MASK_BLOCK_CAUSAL;
    m->document_positions = m->block_causal && c->rope_positions == CT_CFG_ROPE_DOCUMENT;
    m->max_seq_len = c->seq_len;
    if (head_dim <= 0 && m->dim % m->n_heads)
        return ct_set_error("model.n_heads: %d heads do not divide model.dim %d", m->n_heads, m->dim);
    if (m->n_heads % m->n_kv_heads)
        return ct_set_error("model.n_kv_heads: %d kv heads do not divide %d heads", m->n_kv_heads, m->n_heads);
    m->head_dim = head_dim > 0 ? head_dim : m->dim / m->n_heads;
    if (m->head_dim % 2) return ct_set_error("model: head dim %d must be even for RoPE", m->head_dim);
    return CT_OK;
}

ct_status ct_model_config_local(const ct_model_config *m, int tp, ct_model_config *local) {
    *local = *m;
    if (tp <= 1) return CT_OK;
    // The q/k norm weights are replicated but each rank sees only its heads: their gradients
    // would need a sum over tp that the tp strategy makes only under sequence parallel.
    if (m->qk_norm)
        return ct_set_error_at(CT_E_CONFIG, "parallelism.compute_parallel_degree",
                               "parallelism.compute_parallel_degree %d: a model with per-head q/k norms runs without "
                               "tensor parallelism; set it to 1",
                               tp);
    // A mixture of experts' ffn_hidden is each routed expert's: experts are not split over tp
    // (expert tensor parallel 1), every tp rank holds them whole.
    const char *what[] = {"model.n_heads", "model.n_kv_heads", "FFN hidden size", "model.vocab_size"};
    int value[] = {m->n_heads, m->n_kv_heads, m->n_experts > 0 ? tp : m->ffn_hidden, m->vocab_size};
    for (int i = 0; i < 4; i++)
        if (value[i] % tp)
            return ct_set_error("parallelism.compute_parallel_degree %d does not divide %s %d", tp, what[i], value[i]);
    local->n_heads /= tp;
    local->n_kv_heads /= tp;
    if (m->n_experts == 0) local->ffn_hidden /= tp;
    if (m->dense_ffn_hidden % tp)
        return ct_set_error("parallelism.compute_parallel_degree %d does not divide the dense blocks' FFN hidden size %d",
                            tp, m->dense_ffn_hidden);
    local->dense_ffn_hidden /= tp;
    local->vocab_size /= tp;
    return CT_OK;
}

long ct_model_embedding_params(const ct_model_config *m) { return (long)m->vocab_size * m->dim; }

static long block_params(const ct_model_config *m, int layer) {
    ct_param_spec specs[CT_BLOCK_MAX_PARAMS];
    int n = m->family->block_params(m, layer, specs);
    long total = 0;
    for (int i = 0; i < n; i++) total += specs[i].rows * specs[i].cols;
    return total;
}

long ct_model_block_params(const ct_model_config *m) { return block_params(m, m->n_layers - 1); }
long ct_model_head_params(const ct_model_config *m) { return m->dim + (long)m->vocab_size * m->dim; }

long ct_model_num_params(const ct_model_config *m) {
    long blocks = 0;
    for (int l = 0; l < m->n_layers; l++) blocks += block_params(m, l);
    return ct_model_embedding_params(m) + blocks + ct_model_head_params(m);
}

long ct_model_active_params(const ct_model_config *m) {
    long idle = 0;  // per routed block: the experts a token is not sent to, w1 | w3 and w2 each
    if (m->n_experts > 0)
        idle = (long)(m->n_layers - m->n_dense_layers) * (m->n_experts - m->moe_top_k) * 3L * m->dim * m->ffn_hidden;
    return ct_model_num_params(m) - idle;
}

double ct_model_flops_per_token(const ct_model_config *m, long seq_len) {
    // forward 2 FLOPs per multiply-add, backward twice the forward: 3 x the forward's
    double head = 2.0 * ((double)m->vocab_size * m->dim + m->dim);
    double forward = m->n_layers * m->family->block_forward_flops_per_token(m) + head;
    return 3.0 * forward + 12.0 * m->n_layers * m->n_heads * m->head_dim * (double)seq_len;
}
