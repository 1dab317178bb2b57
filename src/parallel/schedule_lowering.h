// Lowering passes: each takes action lists that say what to compute and returns lists that also
// say how data and parameters move (sends and receives between ranks, gathers of sharded
// parameters), so that the executor runs a lowered list as it reads. They are pure functions of
// their lists and the stage placement, kept together here the way PyTorch's pipelining runtime
// keeps its passes together.
#ifndef CT_SCHEDULE_LOWERING_H
#define CT_SCHEDULE_LOWERING_H
#include <stdbool.h>

#include "parallel/schedule.h"

// Appends to `out` the compute order `compute` (F, B, I, W) of one rank with the sends and
// receives its stages need: a receive right before the action that reads it, a send right
// after the action that produced it, none between two stages of one rank (the executor copies
// there). Then the step's tail: REDUCE_GRADS (training only) and RESHARD.
// stage_rank: (n_stages) the pp rank running each stage.
void ct_schedule_add_comms(const ct_schedule *compute, const int *stage_rank, int n_stages, bool training,
                           ct_schedule *out);

// Appends to `out` pp rank me's forward-only list (evaluation): micro-batch by micro-batch through
// this rank's stages in model order, lowered by ct_schedule_add_comms. Receives block and sends
// do not, so this order cannot deadlock whatever the placement.
void ct_schedule_forward_only(const int *stage_rank, int n_stages, int me, int n_mb, ct_schedule *out);

// Rewrites *s so that data sharding gathers each stage once per step: UNSHARD before the stage's
// first action and RESHARD after its last, so its parameter groups are not gathered again for
// every micro-batch and its gradient is reduce-scattered once (TorchTitan keeps pipeline stages
// unsharded between forward and backward for the same reason). The price is the stage's whole
// parameters and gradient while it is held.
void ct_schedule_unshard_per_stage(ct_schedule *s, int n_stages);
#endif
