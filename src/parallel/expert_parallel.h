// Expert parallelism: the MoE layer's exchange (model/moe_layer.h, ct_moe_ep_ops) over a comm
// group -- the per-expert counts, then the rows, each one all-to-all-v (comm/comm.h).
#ifndef CT_EXPERT_PARALLEL_H
#define CT_EXPERT_PARALLEL_H
#include "comm/comm.h"
#include "model/moe_layer.h"

// The ops for group g (which must outlive them).
ct_moe_ep_ops ct_expert_parallel_ops(ct_group *g);
#endif
