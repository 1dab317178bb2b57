#include "model/runner.h"

#include <string.h>

#include "core/error.h"
#include "core/memory.h"

void ct_model_acts_init(ct_model_acts *a, const ct_model_config *m, long B, long T) {
    const ct_kernels *k = ct_kernels_get("cpu");
    if (!k) ct_fatal("model", "no cpu kernel backend in this build");
    ct_model_acts_init_on(a, k, m, B, T);
}

void ct_model_acts_init_on(ct_model_acts *a, const ct_kernels *k, const ct_model_config *m, long B, long T) {
    ct_stage_spec spec = {
        .k = k, .cfg = m, .layer_begin = 0, .layer_end = m->n_layers, .has_embedding = true, .has_head = true,
        .B = B, .T = T, .ops = ct_stage_ops_local(k),
    };
    ct_stage_init(&a->stage, &spec);
    ct_stage_plan_slots(&a->stage, 1, false);
    a->loss_sum = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OTHER, sizeof(double));
}

void ct_model_acts_free(ct_model_acts *a) {
    ct_stage_free(&a->stage);
    ct_mem_free(a->loss_sum);
}

double ct_model_step(ct_model_acts *a, ct_model_weights *w, ct_model_weights *grads, const int32_t *inputs,
                     const int32_t *targets, float grad_scale) {
    return ct_model_step_docs(a, w, grads, inputs, targets, NULL, NULL, grad_scale);
}

double ct_model_step_docs(ct_model_acts *a, ct_model_weights *w, ct_model_weights *grads, const int32_t *inputs,
                          const int32_t *targets, const int32_t *docs, const int32_t *rope_pos, float grad_scale) {
    ct_stage *s = &a->stage;
    ct_act_slot *slot = &s->slots[0];
    s->w = w;
    s->g = grads;
    slot->mb = 0;
    slot->inputs = inputs;
    slot->targets = targets;
    slot->docs = docs;
    slot->rope_pos = rope_pos;
    slot->loss_sum = a->loss_sum;
    s->k->zero(a->loss_sum, sizeof(double));
    ct_stage_forward(s, slot, grads != NULL, grad_scale);
    if (grads) ct_stage_backward(s, slot);
    slot->mb = -1;
    double loss;
    s->k->copy_to_host(&loss, a->loss_sum, sizeof loss);
    return loss;
}
