// The run's precision from its settings (mixed_precision, mixed_precision_reduce is FSDP's,
// quantization.*): the compute dtype, and which block linears run in 8 bits. The trainer takes it
// before parallelizing (parallel/parallelize.h carries it to the stages) and the planner's memory
// model takes the same, so both size the same linears. It sits with the parallel strategies
// because what an 8-bit recipe can do depends on how tensor parallel splits the matmuls.
#ifndef CT_PRECISION_POLICY_H
#define CT_PRECISION_POLICY_H
#include <stdint.h>

#include "core/config.h"
#include "core/error.h"
#include "model/linear.h"
#include "model/model.h"

// The precision for the whole model m under tp ranks: *f8 (m->n_layers, allocated here, NULL when
// nothing runs in 8 bits; the caller frees it) says which block linears are 8-bit, and
// p->f8_layers points at it. CT_ERR with one line on a filter that would put the output projection
// in 8 bits, or MXFP8 under a tp degree that leaves a rank's share of a split contraction dimension
// (heads x head_dim, kv heads x head_dim, FFN hidden) not a multiple of 32.
ct_status ct_precision_policy(const ct_config *c, const ct_model_config *m, int tp, ct_precision *p, uint8_t **f8);
#endif
