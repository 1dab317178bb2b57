// DeepSeek-V3's auxiliary-loss-free load balancing, the trainer's part: each block's choosing
// bias ("layers.N.moe.expert_bias", model.moe.load_balance_coeff > 0) is a tensor of the model
// -- sharded, gathered, checkpointed and resumed like any parameter -- that the optimizer does
// not train: its values are kept before the optimizer step and put back after it (AdamW's weight
// decay would otherwise shrink them; their gradient is zero), then moved by
//
//   bias_e += rate · sign(mean_e' load_e' - load_e)
//
// with load the step's (token, expert) pairs of that block over every rank of the job, so every
// copy of a bias takes the same update and replicas stay identical.
#ifndef CT_MOE_BIAS_H
#define CT_MOE_BIAS_H
#include <stdint.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "parallel/param_store.h"

typedef struct {
    int n;               // this rank's pieces of choosing biases (0: nothing to do)
    long *offset;        // (n) where each piece starts in the store's params
    long *first, *count; // (n) its first expert and how many
    int *layer;          // (n) its block
    float *kept;         // (Σ count) device: the values before the optimizer step
    float *delta;        // (E) device: one block's update
    int64_t *counts;     // (E) device: one block's load
    long E;
    float rate;
} ct_moe_bias;

// Finds the bias pieces of st (none unless m->moe_bias_rate > 0) and allocates on k's device.
void ct_moe_bias_init(ct_moe_bias *b, const ct_param_store *st, const ct_kernels *k, const ct_model_config *m);
void ct_moe_bias_free(ct_moe_bias *b);
// Before the optimizer step: the biases' values of params (the store's) kept.
void ct_moe_bias_keep(const ct_moe_bias *b, const ct_kernels *k, const float *params);
// After it: the kept values back in params, then, with load (L, E host: the step's pairs per
// block and expert over the job; NULL for a step that made no update), each block's move.
void ct_moe_bias_step(const ct_moe_bias *b, const ct_kernels *k, float *params, const int64_t *load);
#endif
