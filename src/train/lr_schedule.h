// Learning-rate schedule: linear warm-up, then warmup-stable-decay (WSD) with a linear, sqrt or
// cosine decay down to min_lr_factor × lr (the shape TorchTitan's lr_scheduler section describes).
#ifndef CT_LR_SCHEDULE_H
#define CT_LR_SCHEDULE_H
#include "core/config.h"

typedef struct {
    double lr;            // peak learning rate
    int steps;            // total optimizer steps
    int warmup_steps;     // steps 1..warmup ramp linearly up to lr
    int decay_steps;      // the last decay_steps steps decay to min_lr_factor × lr
    ct_cfg_decay decay;   // lr_scheduler.decay_type
    double min_lr_factor;
} ct_lr_schedule;

// decay_ratio < 0: every step after warm-up decays; else round(steps × decay_ratio) steps decay.
void ct_lr_schedule_init(ct_lr_schedule *s, double lr, int steps, int warmup_steps, double decay_ratio,
                         ct_cfg_decay decay_type, double min_lr_factor);
// Learning rate of optimizer step `step` (1-based).
double ct_lr_at(const ct_lr_schedule *s, int step);
#endif
