// The model.moe.* settings: a mixture-of-experts family's router (score function, renormalised
// weights) and load balancing (the auxiliary loss, the choosing bias's update rate), checked and
// copied into the model's dimensions where the blocks read them; and the range of its structure's
// counts (shared experts, dense first blocks and their width), which the family's config_from
// reads.
#include <math.h>

#include "model/model.h"

static ct_status negative(const char *name, double v) {
    return ct_set_error_at(CT_E_CONFIG, name, "%s %g: expected a finite number >= 0 (0 = off)", name, v);
}

ct_status ct_model_config_moe(ct_model_config *m, const ct_config *c) {
    if (!(c->moe_aux_loss_coeff >= 0) || !isfinite(c->moe_aux_loss_coeff))
        return negative("model.moe.aux_loss_coeff", c->moe_aux_loss_coeff);
    if (!(c->moe_load_balance_coeff >= 0) || !isfinite(c->moe_load_balance_coeff))
        return negative("model.moe.load_balance_coeff", c->moe_load_balance_coeff);
    if (c->moe_num_experts < 0 || c->moe_top_k < 0)
        return ct_set_error_at(CT_E_CONFIG, c->moe_num_experts < 0 ? "model.moe.num_experts" : "model.moe.top_k",
                               "%s %d: expected a count > 0 (0 = the flavor's)",
                               c->moe_num_experts < 0 ? "model.moe.num_experts" : "model.moe.top_k",
                               c->moe_num_experts < 0 ? c->moe_num_experts : c->moe_top_k);
    if (m->n_experts > 1024)  // the router's per-token sort (kernels/moe_rows.h)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.num_experts",
                               "model.moe.num_experts %d: at most 1024 experts a block", m->n_experts);
    if (m->n_experts > 0 && m->moe_top_k > m->n_experts)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.top_k",
                               "model.moe.top_k %d: more than the model's %d experts (model.moe.num_experts)",
                               m->moe_top_k, m->n_experts);
    if (c->moe_num_shared_experts < -1)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.num_shared_experts",
                               "model.moe.num_shared_experts %d: expected a count >= 0 (-1 = the flavor's)",
                               c->moe_num_shared_experts);
    if (c->moe_num_dense_layers < -1)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.num_dense_layers",
                               "model.moe.num_dense_layers %d: expected a count >= 0 (-1 = the flavor's)",
                               c->moe_num_dense_layers);
    if (c->moe_dense_ffn_hidden_dim < 0)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.dense_ffn_hidden_dim",
                               "model.moe.dense_ffn_hidden_dim %d: expected a size > 0 (0 = the flavor's)",
                               c->moe_dense_ffn_hidden_dim);
    if (m->n_experts > 0 && m->n_dense_layers > m->n_layers)
        return ct_set_error_at(CT_E_CONFIG, "model.moe.num_dense_layers",
                               "model.moe.num_dense_layers %d: more than the model's %d blocks (model.n_layers)",
                               m->n_dense_layers, m->n_layers);
    if (m->n_experts <= 0) {  // a dense family: none of them may be set
        const char *set = c->moe_score_func != CT_CFG_SCORE_SOFTMAX ? "model.moe.score_func"
                          : c->moe_num_experts > 0                 ? "model.moe.num_experts"
                          : c->moe_top_k > 0                       ? "model.moe.top_k"
                          : c->moe_num_shared_experts >= 0         ? "model.moe.num_shared_experts"
                          : c->moe_num_dense_layers >= 0           ? "model.moe.num_dense_layers"
                          : c->moe_dense_ffn_hidden_dim > 0        ? "model.moe.dense_ffn_hidden_dim"
                          : !c->moe_route_norm                     ? "model.moe.route_norm"
                          : c->moe_aux_loss_coeff > 0              ? "model.moe.aux_loss_coeff"
                          : c->moe_aux_loss_level != CT_CFG_AUX_SEQUENCE ? "model.moe.aux_loss_level"
                          : c->moe_load_balance_coeff > 0          ? "model.moe.load_balance_coeff"
                                                                   : NULL;
        if (set)
            return ct_set_error_at(CT_E_CONFIG, set, "%s: model.name %s has no experts to route (model.name llama3_moe "
                                   "has)", set, c->model_name);
        return CT_OK;
    }
    m->moe_sigmoid = c->moe_score_func == CT_CFG_SCORE_SIGMOID;
    m->moe_route_norm = c->moe_route_norm;
    m->moe_aux_coeff = c->moe_aux_loss_coeff;
    m->moe_aux_per_sequence = c->moe_aux_loss_level == CT_CFG_AUX_SEQUENCE;
    m->moe_bias_rate = c->moe_load_balance_coeff;
    return CT_OK;
}
