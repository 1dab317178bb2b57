// AdamW state over one flat run of parameters (the whole model, or this rank's shard of it).
#ifndef CT_ADAMW_H
#define CT_ADAMW_H
#include "kernels/backend.h"

typedef struct {
    float *m;     // (n) first moment
    float *v;     // (n) second moment
    long n;
    long step;    // optimizer steps taken
    float beta1, beta2, eps, weight_decay;
} ct_adamw;

// m and v (n each) on k's device, zeroed.
void ct_adamw_init(ct_adamw *opt, const ct_kernels *k, long n, double beta1, double beta2, double eps,
                   double weight_decay);
void ct_adamw_free(ct_adamw *opt);
// One update of params (n) from grads (n), gradients multiplied by grad_scale (clipping) first.
// grad_scale: one float on k's device, the clip factor (0: the kernel writes nothing; the caller
// then takes the step back with ct_adamw_unstep once it knows).
void ct_adamw_step(ct_adamw *opt, const ct_kernels *k, float *params, const float *grads, double lr,
                   const float *grad_scale);
// The last step was skipped on the device: its count does not advance the bias corrections.
void ct_adamw_unstep(ct_adamw *opt);
#endif
