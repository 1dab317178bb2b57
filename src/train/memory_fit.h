// The start-up check that a run fits its machine: the planner's memory model of one rank against
// the memory this node has for each of its ranks, before the first big allocation.
#ifndef CT_MEMORY_FIT_H
#define CT_MEMORY_FIT_H
#include "core/config.h"
#include "model/model.h"

// CT_ERR naming the need by category, the memory available per rank and what to change, when
// the model under cfg's layout over world_size ranks needs more than this node has per rank.
ct_status ct_memory_fit_check(const ct_model_config *model, const ct_config *cfg, int world_size);

// Processes of this job on this node (the launcher's word; 1 without one): ranks that share
// the node's memory and cores (the peak's calibration key counts them too).
int ct_memory_fit_ranks_on_node(void);
#endif
