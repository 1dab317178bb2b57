// The whole model in one process, one micro-batch per call: one stage with every layer, local
// operations (no strategy), one activation slot. The reference path for tests, `ctitan eval`
// and checks of the generator; training runs stages through the executor instead.
#ifndef CT_RUNNER_H
#define CT_RUNNER_H
#include <stdint.h>

#include "model/stage.h"

typedef struct {
    ct_stage stage;
    double *loss_sum;  // (1) on the stage's device: the step's loss before it is read back
} ct_model_acts;

// Plans a stage of the whole model m for micro-batches (B, T) on backend k (its buffers on k's
// device; the weights, inputs and targets given to ct_model_step must be there too), or on the
// cpu backend (the tests' reference).
void ct_model_acts_init_on(ct_model_acts *a, const ct_kernels *k, const ct_model_config *m, long B, long T);
void ct_model_acts_init(ct_model_acts *a, const ct_model_config *m, long B, long T);
void ct_model_acts_free(ct_model_acts *a);

// One micro-batch: inputs, targets (B, T) (target -1 = ignored). Returns the SUM of token losses
// over valid targets (the caller divides by the step's count of valid tokens). With grads !=
// NULL also runs backward, adding (grad_scale ×) the gradients into grads; grad_scale is
// 1 / (valid tokens in the whole step), so accumulation over micro-batches yields the gradient
// of the mean loss.
double ct_model_step(ct_model_acts *a, ct_model_weights *w, ct_model_weights *grads, const int32_t *inputs,
                     const int32_t *targets, float grad_scale);
// The same with documents: docs (B, T) each token's document (attention kept inside it; NULL:
// causal), rope_pos (B, T) each token's RoPE position (NULL: 0..T-1), on the backend's device.
double ct_model_step_docs(ct_model_acts *a, ct_model_weights *w, ct_model_weights *grads, const int32_t *inputs,
                          const int32_t *targets, const int32_t *docs, const int32_t *rope_pos, float grad_scale);
#endif
