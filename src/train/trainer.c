#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static ct_loader *open_loader(const ct_trainer *t, const char *source, const char *split, bool sequential) {
    ct_loader_config lc = {
        .source = source,
        .split = split,
        .seq_len = t->cfg.seq_len,
        .global_batch = t->cfg.micro_batch_size,  // one micro-batch per call
        .dp_rank = 0,
        .dp_size = 1,
        .seed = (uint64_t)t->cfg.seed,
        .vocab_size = (uint32_t)t->model.vocab_size,
        .sequential = sequential,
    };
    return ct_loader_open(&lc);
}

static double measure_peak_flops(const ct_config *cfg) {
    if (cfg->peak_tflops > 0) return cfg->peak_tflops * 1e12;
    double table = ct_config_peak_flops(cfg);
    if (table > 0) return table;
    return ct_cpu_matmul_peak_gflops(2048, 3) * 1e9;  // the CPU's measured fp32 matmul peak
}

ct_status ct_trainer_init(ct_trainer *t, const ct_config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    if (ct_llama_config_from(&t->model, cfg)) return CT_ERR;
    ct_param_table_build(&t->table, &t->model);

    t->local_numel = t->table.total;
    t->params = ct_mem_alloc(CT_MEM_PARAMS, (size_t)t->local_numel * sizeof(float));
    t->grads = ct_mem_alloc(CT_MEM_GRADS, (size_t)t->local_numel * sizeof(float));
    ct_param_init_all(&t->table, (uint64_t)cfg->seed, t->params);
    ct_llama_weights_init(&t->weights, &t->table, &t->model, t->params);
    ct_llama_weights_init(&t->grad_views, &t->table, &t->model, t->grads);
    ct_adamw_init(&t->adam, t->local_numel, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
    ct_lr_schedule_init(&t->schedule, cfg->lr, cfg->steps, cfg->warmup_steps, cfg->decay_ratio, cfg->decay_type,
                        cfg->min_lr_factor);
    ct_llama_acts_init(&t->acts, &t->model, cfg->micro_batch_size, cfg->seq_len);

    t->train_data = open_loader(t, cfg->dataset, "train", false);
    if (!t->train_data) return CT_ERR;
    if (cfg->val_enable) {
        t->val_data = open_loader(t, cfg->val_dataset[0] ? cfg->val_dataset : cfg->dataset, "val", true);
        if (!t->val_data) return CT_ERR;
    }
    long tokens = (long)cfg->gradient_accumulation_steps * cfg->micro_batch_size * cfg->seq_len;
    t->inputs = ct_mem_alloc(CT_MEM_OTHER, (size_t)tokens * sizeof(int32_t));
    t->targets = ct_mem_alloc(CT_MEM_OTHER, (size_t)tokens * sizeof(int32_t));

    t->flops_per_token = ct_llama_flops_per_token(&t->model, cfg->seq_len);
    t->peak_flops = measure_peak_flops(cfg);
    return CT_OK;
}

void ct_trainer_free(ct_trainer *t) {
    ct_metrics_close(&t->log);
    if (t->train_data) ct_loader_free(t->train_data);
    if (t->val_data) ct_loader_free(t->val_data);
    ct_mem_free(t->inputs);
    ct_mem_free(t->targets);
    ct_llama_acts_free(&t->acts);
    ct_adamw_free(&t->adam);
    ct_llama_weights_free(&t->weights);
    ct_llama_weights_free(&t->grad_views);
    ct_mem_free(t->params);
    ct_mem_free(t->grads);
    ct_param_table_free(&t->table);
}

double ct_trainer_step(ct_trainer *t) {
    const ct_config *c = &t->cfg;
    double t0 = ct_now_seconds();
    long mb_tokens = (long)c->micro_batch_size * c->seq_len;
    int accum = c->gradient_accumulation_steps;

    // Read every micro-batch first: the loss is normalised by the valid tokens of the whole step.
    long valid = 0;
    for (int i = 0; i < accum; i++) {
        int32_t *in = t->inputs + i * mb_tokens, *tg = t->targets + i * mb_tokens;
        ct_loader_next_batch(t->train_data, in, tg);
        for (long j = 0; j < mb_tokens; j++) valid += tg[j] >= 0;
    }
    float grad_scale = valid ? 1.0f / (float)valid : 0.0f;

    memset(t->grads, 0, (size_t)t->local_numel * sizeof(float));
    double loss_sum = 0;
    for (int i = 0; i < accum; i++)
        loss_sum += ct_llama_step(&t->acts, &t->weights, &t->grad_views, t->inputs + i * mb_tokens,
                                  t->targets + i * mb_tokens, grad_scale, NULL);

    double norm = sqrt(ct_sum_squares(t->grads, t->local_numel));
    double clip = (c->max_norm > 0 && norm > c->max_norm) ? c->max_norm / (norm + 1e-6) : 1.0;
    double lr = ct_lr_at(&t->schedule, t->step + 1);
    ct_adamw_step(&t->adam, t->params, t->grads, lr, clip);
    t->step++;

    double dt = ct_now_seconds() - t0;
    ct_step_metrics *m = &t->last;
    memset(m, 0, sizeof *m);
    m->step = t->step;
    m->loss = valid ? loss_sum / (double)valid : 0.0;
    m->grad_norm = norm;
    m->lr = lr;
    m->step_seconds = dt;
    m->tokens_per_s = (double)accum * mb_tokens / dt;
    m->tokens_per_s_rank = m->tokens_per_s;
    m->tflops = m->tokens_per_s_rank * t->flops_per_token * 1e-12;
    m->mfu = t->peak_flops > 0 ? m->tflops * 1e12 / t->peak_flops : 0.0;
    m->val_loss = -1;
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++) m->mem_peak_mib[k] = (double)ct_mem_peak((ct_mem_category)k) / 1048576.0;
    return m->loss;
}

double ct_trainer_validate(ct_trainer *t) {
    if (!t->val_data) return -1;
    const ct_config *c = &t->cfg;
    ct_loader_reset(t->val_data);
    double loss_sum = 0;
    long valid = 0, mb_tokens = (long)c->micro_batch_size * c->seq_len;
    for (int i = 0; i < c->val_steps; i++) {
        ct_loader_next_batch(t->val_data, t->inputs, t->targets);
        for (long j = 0; j < mb_tokens; j++) valid += t->targets[j] >= 0;
        loss_sum += ct_llama_step(&t->acts, &t->weights, NULL, t->inputs, t->targets, 0.0f, NULL);
    }
    return valid ? loss_sum / (double)valid : 0.0;
}

int ct_trainer_run(ct_trainer *t) {
    const ct_config *c = &t->cfg;
    if (ct_metrics_open(&t->log, c->dump_folder, c->steps, false)) {
        fprintf(stderr, "train: %s\n", ct_last_error());
        return 1;
    }
    printf("model %s: %.2fM parameters (dim %d, layers %d, heads %d/%d kv, ffn %d, vocab %d); "
           "batch %d x %d x accum %d; %.1f MFLOP/token; peak %.1f TFLOP/s\n",
           t->model.flavor, ct_llama_num_params(&t->model) / 1e6, t->model.dim, t->model.n_layers,
           t->model.n_heads, t->model.n_kv_heads, t->model.ffn_hidden, t->model.vocab_size, c->micro_batch_size,
           c->seq_len, c->gradient_accumulation_steps, t->flops_per_token / 1e6, t->peak_flops / 1e12);
    if (t->val_data) printf("validation loss before training: %.4f\n", ct_trainer_validate(t));
    while (t->step < c->steps) {
        ct_trainer_step(t);
        bool val_now = t->val_data && (t->step % c->val_freq == 0 || t->step == c->steps);
        if (val_now) t->last.val_loss = ct_trainer_validate(t);
        if (t->step % c->log_freq == 0 || t->step == c->steps || t->step == 1 || val_now)
            ct_metrics_log(&t->log, &t->last);
    }
    return 0;
}
