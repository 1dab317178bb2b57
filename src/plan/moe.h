// A mixture-of-experts model as the planner sees it: expert parallelism's degree, the dense
// models the memory model sizes in its place, the tensors one rank gathers, and the bytes of
// the dispatch and combine all-to-alls.
//
// Expert parallelism (parallelism.expert_parallel_degree, TorchTitan's name and scheme): the
// routed experts of each block split over `ep` ranks borrowed from data sharding x context
// parallel (ep divides dp_shard x cp; the ep ranks are the innermost of that group, so they span
// ep x tp consecutive ranks); each expert's weights are then FSDP-sharded over the
// dp_shard x cp / ep ranks outside the EP group, while attention, norms, the router and the
// shared experts shard over all dp_shard x cp. Experts split over tp as a dense FFN does (expert
// tensor parallel = tp).
#ifndef CT_PLAN_MOE_H
#define CT_PLAN_MOE_H
#include <stdbool.h>

#include "core/config.h"
#include "model/model.h"

// c's expert parallel degree, checked against m and the layout: 1 for a dense model; CT_ERR
// naming parallelism.expert_parallel_degree when it does not divide the experts or dp_shard x cp.
ct_status ct_plan_moe_ep(const ct_model_config *m, const ct_config *c, int world, int *ep);

// The dense models (the dense family of the same attention) whose sizing stands in for a routed
// one's: `weights`' blocks are as large as the largest group one rank gathers (attention, norms,
// router, E/ep experts and the shared ones), `acts`' feed-forward keeps per token what the routed
// layer keeps (k + S experts' hidden values, and the k rows sent to the experts, each one's
// input, output and combined copy: 4kC values, a SwiGLU unit keeping 3).
ct_status ct_plan_moe_standins(const ct_model_config *m, int ep, int tp, ct_model_config *weights,
                               ct_model_config *acts);

// Of block `layer`'s parameters on one tp rank (lm: ct_model_config_local), those sharded over
// all dp_shard x cp ranks and those of the experts this EP rank holds (E/ep of them).
void ct_plan_moe_block_numel(const ct_model_config *lm, int layer, int ep, double *dense, double *experts);

// True when block `layer` routes its tokens to experts (false: dense family or dense first block).
bool ct_plan_moe_routed(const ct_model_config *m, int layer);

// Bytes one rank sends in one all-to-all of a routed layer (dispatch or combine): its N tokens'
// k rows of C values, `width` bytes each, less the (1/ep) that stay on the rank.
double ct_plan_moe_a2a_bytes(double tokens, int top_k, int dim, double width, int ep);

// Of one rank's all-to-all peers, the fraction on other nodes: the EP group spans ep x tp
// consecutive ranks, nodes of `per_node`.
double ct_plan_moe_a2a_off_node(int ep, int tp, int per_node);

// Whether pp rank r of c's pipeline holds block `layer`, for each of n_layers: out[layer].
ct_status ct_plan_layers_on_pp_rank(const ct_config *c, int n_layers, int pp_rank, bool *out);
#endif
