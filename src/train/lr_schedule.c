#include "train/lr_schedule.h"

#include <math.h>

void ct_lr_schedule_init(ct_lr_schedule *s, double lr, int steps, int warmup_steps, double decay_ratio,
                         ct_cfg_decay decay_type, double min_lr_factor) {
    s->lr = lr;
    s->steps = steps;
    s->warmup_steps = warmup_steps < steps ? warmup_steps : steps;
    int after_warmup = steps - s->warmup_steps;
    int decay = decay_ratio < 0 ? after_warmup : (int)lround(steps * decay_ratio);
    s->decay_steps = decay < after_warmup ? decay : after_warmup;
    s->decay = decay_type;
    s->min_lr_factor = min_lr_factor;
}

double ct_lr_at(const ct_lr_schedule *s, int step) {
    if (step <= s->warmup_steps) return s->lr * step / (s->warmup_steps + 0.0);
    int decay_start = s->steps - s->decay_steps;
    if (step <= decay_start || s->decay_steps == 0) return s->lr;
    double progress = (double)(step - decay_start) / s->decay_steps;  // (0, 1]
    double f;
    switch (s->decay) {
    case CT_CFG_DECAY_SQRT: f = 1.0 - sqrt(progress); break;
    case CT_CFG_DECAY_COSINE: f = 0.5 * (1.0 + cos(M_PI * progress)); break;
    default: f = 1.0 - progress; break;
    }
    return s->lr * (s->min_lr_factor + (1.0 - s->min_lr_factor) * f);
}
