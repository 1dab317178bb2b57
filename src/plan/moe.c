// The planner's mixture-of-experts terms (plan/moe.h).
#include "plan/moe.h"

#include <stdlib.h>
#include <string.h>

#include "parallel/pipeline_schedules.h"
#include "parallel/pipeline_split.h"

ct_status ct_plan_moe_ep(const ct_model_config *m, const ct_config *c, int world, int *ep) {
    *ep = c->expert_parallel_degree > 1 ? c->expert_parallel_degree : 1;
    if (*ep == 1) return CT_OK;
    if (m->n_experts <= 0)
        return ct_set_error_at(CT_E_CONFIG, "parallelism.expert_parallel_degree",
                               "parallelism.expert_parallel_degree %d: model %s has no experts; set 1", *ep, m->flavor);
    int shard = ct_config_shard_degree(c, world) * c->context_extension_degree;
    if (m->n_experts % *ep || shard % *ep)
        return ct_set_error_at(CT_E_CONFIG, "parallelism.expert_parallel_degree",
                               "parallelism.expert_parallel_degree %d must divide the %d experts and data_shard x cp = "
                               "%d (the ranks it borrows)",
                               *ep, m->n_experts, shard);
    return CT_OK;
}

bool ct_plan_moe_routed(const ct_model_config *m, int layer) { return m->n_experts > 0 && layer >= m->n_dense_layers; }

// A hidden width rounded up to a multiple of tp (the dense family splits it over tp).
static int width(double units, int tp) {
    long w = (long)(units + 0.999999);
    return (int)((w + tp - 1) / tp * tp);
}

ct_status ct_plan_moe_standins(const ct_model_config *m, int ep, int tp, ct_model_config *weights,
                               ct_model_config *acts) {
    const ct_model_family *dense = ct_model_family_find("llama3");
    if (!dense) return ct_set_error("planner: no dense family to size a mixture-of-experts model with");
    double C = m->dim, F = m->ffn_hidden, E = m->n_experts, k = m->moe_top_k, S = m->n_shared_experts;
    *weights = *m, *acts = *m;
    weights->family = acts->family = dense;
    weights->n_experts = acts->n_experts = 0;
    weights->moe_top_k = acts->moe_top_k = 0;
    weights->n_shared_experts = acts->n_shared_experts = 0;
    weights->n_dense_layers = acts->n_dense_layers = 0;
    // Router (E x C) as E / 3 SwiGLU units of 3C weights each.
    double routed = (E / ep + S) * F + E / 3.0;
    double dense_w = m->n_dense_layers > 0 ? m->dense_ffn_hidden : 0;
    weights->ffn_hidden = width(routed > dense_w ? routed : dense_w, tp);
    double kept = (k + S) * F + 4.0 * k * C / 3.0;
    acts->ffn_hidden = width(kept > dense_w ? kept : dense_w, tp);
    return CT_OK;
}

void ct_plan_moe_block_numel(const ct_model_config *lm, int layer, int ep, double *dense, double *experts) {
    ct_param_spec p[CT_BLOCK_MAX_PARAMS];
    int n = lm->family->block_params(lm, layer, p);
    double all = 0;
    for (int i = 0; i < n; i++) all += (double)p[i].rows * p[i].cols;
    // The routed experts' w1 | w3 and w2 on this tp rank (lm's F is the tp-local one).
    double routed = ct_plan_moe_routed(lm, layer) ? 3.0 * lm->n_experts * lm->dim * lm->ffn_hidden : 0;
    *dense = all - routed;
    *experts = routed / ep;
}

double ct_plan_moe_a2a_bytes(double tokens, int top_k, int dim, double width, int ep) {
    return ep > 1 ? tokens * top_k * dim * width * (ep - 1.0) / ep : 0;
}

double ct_plan_moe_a2a_off_node(int ep, int tp, int per_node) {
    if (ep <= 1 || (long)ep * tp <= per_node) return 0;
    int in_node = per_node / tp > 1 ? per_node / tp : 1;  // EP peers (self included) per node
    return (double)(ep - in_node) / (ep - 1);
}

ct_status ct_plan_layers_on_pp_rank(const ct_config *c, int n_layers, int pp_rank, bool *out) {
    int pp = c->pipeline_degree, vpp = 1;
    ct_pp_placement placement = CT_PP_ROUND_ROBIN;
    if (pp > 1) {
        ct_pp_kind kind;
        if (ct_pp_kind_parse(c->pipeline_schedule, &kind)) return CT_ERR;
        vpp = c->pipeline_stages_per_rank > 0 ? c->pipeline_stages_per_rank : 1;
        if (kind == CT_PP_ZBV) vpp = 2;
        if (kind == CT_PP_GPIPE || kind == CT_PP_1F1B || kind == CT_PP_ZB_H1) vpp = 1;
        placement = ct_pp_kind_placement(kind);
    }
    int n_stages = pp * vpp;
    int *first = calloc((size_t)n_stages + 1, sizeof(int)), *rank = calloc((size_t)n_stages, sizeof(int));
    if (!first || !rank) ct_fatal("plan", "out of memory");
    ct_status st = ct_pp_split_layers(n_layers, n_stages, c->pipeline_layers_per_stage, c->pipeline_split_points, first);
    if (st == CT_OK) {
        ct_pp_stage_ranks(placement, pp, vpp, rank);
        memset(out, 0, (size_t)n_layers * sizeof *out);
        for (int s = 0; s < n_stages; s++)
            for (int l = first[s]; l < first[s + 1]; l++) out[l] = rank[s] == pp_rank;
    }
    free(first);
    free(rank);
    return st;
}
