// Checks on a whole configuration: value ranges and cross-field rules (ct_config_validate), the
// list of features this build does not have yet (ct_config_check_implemented), and the derived
// numbers other layers ask for (peak FLOP/s, the resolved shard degree).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"

// The enum and name fields of a struct filled by code (not by parsing) still need checking.
static void check_enums(const ct_config *c, ct_config_report *rep) {
    for (int i = 0; i < ct_n_settings; i++) {
        const ct_setting *s = &ct_settings[i];
        if (s->type != CT_SET_ENUM && s->type != CT_SET_NAME) continue;
        const char *v = (const char *)c + s->offset;
        int value = s->type == CT_SET_ENUM ? *(const int *)v : -1, at = 0, found = 0;
        for (const char *p = s->choices; *p && !found; p += strcspn(p, "|"), p += *p == '|', at++)
            found = s->type == CT_SET_ENUM ? at == value : strcspn(p, "|") == strlen(v) && !strncmp(p, v, strlen(v));
        if (found) continue;
        if (s->type == CT_SET_ENUM)
            ct_config_problem(rep, "%s: expected one of %s, got the value %d", s->name, s->choices, value);
        else
            ct_config_problem(rep, "%s: expected one of %s, got '%s'", s->name, s->choices, v);
    }
}

// TorchTitan's dataset names (downloaded from the Hugging Face hub there): ctitan reads token
// shards only, so a run given such a name is refused with what to give instead, unless a folder
// or file of that name exists (then it is the data). A TorchTitan config still loads with them.
static int is_torchtitan_dataset_name(const char *v) {
    static const char *const names[] = {"c4", "c4_test", "c4_validation"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(v, names[i])) return access(v, F_OK) != 0;
    return 0;
}

// Every rule that fails adds its line to the report; the checks go on.
#define REQUIRE(cond, ...) \
    do {                   \
        if (!(cond)) ct_config_problem(rep, __VA_ARGS__); \
    } while (0)

ct_status ct_config_validate(const ct_config *c) {
    ct_config_report *rep = ct_xcalloc(1, sizeof *rep);
    ct_status st = ct_config_validate_report(c, rep);
    if (st) ct_set_error_at(rep->codes[0], rep->subjects[0], "%s", rep->problems[0]);
    free(rep);
    return st;
}

ct_status ct_config_validate_report(const ct_config *c, ct_config_report *rep) {
    int before = rep->n_problems;
    check_enums(c, rep);

    REQUIRE(c->dump_folder[0], "job.dump_folder: expected a folder name, got \"\"");
    REQUIRE(c->dataset[0], "training.dataset: expected \"synthetic\" or a folder, got \"\"");

    // Model overrides: 0 means the flavor's value, so only negatives are wrong on their own.
    REQUIRE(c->dim >= 0, "model.dim: expected >= 0 (0 = the flavor's), got %d", c->dim);
    REQUIRE(c->n_layers >= 0, "model.n_layers: expected >= 0 (0 = the flavor's), got %d", c->n_layers);
    REQUIRE(c->n_heads >= 0, "model.n_heads: expected >= 0 (0 = the flavor's), got %d", c->n_heads);
    REQUIRE(c->n_kv_heads >= 0, "model.n_kv_heads: expected >= 0 (0 = the flavor's), got %d", c->n_kv_heads);
    REQUIRE(c->vocab_size >= 0, "model.vocab_size: expected >= 0 (0 = the flavor's), got %d", c->vocab_size);
    REQUIRE(c->multiple_of >= 0, "model.multiple_of: expected >= 0 (0 = the flavor's), got %d", c->multiple_of);
    REQUIRE(c->ffn_dim_multiplier >= 0, "model.ffn_dim_multiplier: expected >= 0, got %g", c->ffn_dim_multiplier);
    REQUIRE(c->ffn_hidden_dim >= 0, "model.ffn_hidden_dim: expected >= 0, got %d", c->ffn_hidden_dim);
    REQUIRE(c->norm_eps > 0 && isfinite(c->norm_eps), "model.norm_eps: expected > 0, got %g", c->norm_eps);
    REQUIRE(c->rope_theta >= 0 && isfinite(c->rope_theta), "model.rope_theta: expected >= 0, got %g", c->rope_theta);
    // Positions that restart at a document only make sense where attention stops there too: a
    // token seeing an earlier document's keys would find them at positions after its own.
    char mask[32];
    REQUIRE(c->rope_positions != CT_CFG_ROPE_DOCUMENT || c->attn_mask_type == CT_CFG_MASK_BLOCK_CAUSAL,
            "model.rope_positions document needs model.attn_mask_type block_causal (got %s): set both, or "
            "model.rope_positions sequence",
            ct_setting_choice("model.attn_mask_type", c->attn_mask_type, mask, sizeof mask));
    REQUIRE(!(c->dim > 0 && c->n_heads > 0) || c->dim % c->n_heads == 0,
            "model.dim (%d) must be a multiple of model.n_heads (%d)", c->dim, c->n_heads);
    REQUIRE(!(c->n_heads > 0 && c->n_kv_heads > 0) || c->n_heads % c->n_kv_heads == 0,
            "model.n_heads (%d) must be a multiple of model.n_kv_heads (%d)", c->n_heads, c->n_kv_heads);

    REQUIRE(c->seq_len >= 1, "training.seq_len: expected >= 1, got %d", c->seq_len);
    REQUIRE(c->steps >= 1, "training.steps: expected >= 1, got %d", c->steps);
    REQUIRE(!isnan(c->max_norm), "training.max_norm: expected a number, got nan");
    REQUIRE(c->micro_batch_size >= 1, "micro_batch_size: expected >= 1, got %d", c->micro_batch_size);
    REQUIRE(c->gradient_accumulation_steps >= 1, "gradient_accumulation_steps: expected >= 1, got %d",
            c->gradient_accumulation_steps);
    REQUIRE(c->global_batch_size >= 1 || c->global_batch_size == -1,
            "training.global_batch_size: expected >= 1, or -1 (gradient_accumulation_steps as given), got %d",
            c->global_batch_size);

    REQUIRE(c->lr >= 0 && isfinite(c->lr), "optimizer.lr: expected >= 0, got %g", c->lr);
    REQUIRE(c->beta1 >= 0 && c->beta1 < 1, "optimizer.beta1: expected a value in [0, 1), got %g", c->beta1);
    REQUIRE(c->beta2 >= 0 && c->beta2 < 1, "optimizer.beta2: expected a value in [0, 1), got %g", c->beta2);
    REQUIRE(c->eps > 0 && isfinite(c->eps), "optimizer.eps: expected > 0, got %g", c->eps);
    REQUIRE(c->weight_decay >= 0 && isfinite(c->weight_decay), "optimizer.weight_decay: expected >= 0, got %g",
            c->weight_decay);

    REQUIRE(c->warmup_steps >= 0, "lr_scheduler.warmup_steps: expected >= 0, got %d", c->warmup_steps);
    REQUIRE(c->decay_ratio < 0 || c->decay_ratio <= 1,
            "lr_scheduler.decay_ratio: expected a value in [0, 1] (or < 0 for all steps after warm-up), got %g", c->decay_ratio);
    REQUIRE(c->min_lr_factor >= 0 && c->min_lr_factor <= 1, "lr_scheduler.min_lr_factor: expected a value in [0, 1], got %g",
            c->min_lr_factor);

    REQUIRE(c->data_shard_degree >= 1 || c->data_shard_degree == -1,
            "parallelism.data_shard_degree: expected >= 1 or -1 (the ranks left over), got %d", c->data_shard_degree);
    REQUIRE(c->data_replicate_degree >= 1, "parallelism.data_replicate_degree: expected >= 1, got %d", c->data_replicate_degree);
    REQUIRE(c->compute_parallel_degree >= 1, "parallelism.compute_parallel_degree: expected >= 1, got %d",
            c->compute_parallel_degree);
    REQUIRE(c->pipeline_degree >= 1, "parallelism.pipeline_degree: expected >= 1, got %d", c->pipeline_degree);
    REQUIRE(c->context_extension_degree >= 1, "parallelism.context_extension_degree: expected >= 1, got %d",
            c->context_extension_degree);
    REQUIRE(c->expert_parallel_degree >= 1, "parallelism.expert_parallel_degree: expected >= 1, got %d",
            c->expert_parallel_degree);
    REQUIRE(c->pipeline_stages_per_rank >= 1, "parallelism.pipeline_stages_per_rank: expected >= 1, got %d",
            c->pipeline_stages_per_rank);
    REQUIRE(c->pipeline_microbatch_size >= 0, "parallelism.pipeline_microbatch_size: expected >= 0, got %d",
            c->pipeline_microbatch_size);
    REQUIRE(c->pipeline_microbatch_size == 0 || c->micro_batch_size % c->pipeline_microbatch_size == 0,
            "parallelism.pipeline_microbatch_size %d does not divide micro_batch_size %d", c->pipeline_microbatch_size,
            c->micro_batch_size);
    REQUIRE(c->pipeline_layers_per_stage >= 0, "parallelism.pipeline_layers_per_stage: expected >= 0, got %d",
            c->pipeline_layers_per_stage);
    // Which schedules take several stages per rank, and how many micro-batches each needs, is
    // the schedule generator's to say (parallel/pipeline_schedules.h), with the degrees known.

    // selective = true is another way to say mode = selective; with mode = full it contradicts.
    REQUIRE(!(c->ac_selective && c->ac_mode == CT_CFG_AC_FULL),
            "activation_checkpoint.selective = true conflicts with activation_checkpoint.mode = full");
    {
        char *end;
        long every = strtol(c->ac_option, &end, 10);
        REQUIRE(!strcmp(c->ac_option, "op") || !strcmp(c->ac_option, "elementwise") ||
                    (*c->ac_option && !*end && every >= 1),
                "activation_checkpoint.selective_ac_option: expected \"op\", \"elementwise\" or a block count >= 1, "
                "got '%s'",
                c->ac_option);
    }
    REQUIRE(!(c->float8 && c->mxfp8), "quantization.float8.enable and quantization.mxfp8.enable exclude each other");

    REQUIRE(c->log_freq >= 1, "metrics.log_freq: expected >= 1, got %d", c->log_freq);
    REQUIRE(c->peak_tflops >= 0 && isfinite(c->peak_tflops), "metrics.peak_tflops: expected >= 0, got %g", c->peak_tflops);
    REQUIRE(c->val_freq >= 1, "validation.freq: expected >= 1, got %d", c->val_freq);
    REQUIRE(c->val_steps >= 1, "validation.steps: expected >= 1, got %d", c->val_steps);
    REQUIRE(c->profile_freq >= 1, "profiling.profile_freq: expected >= 1, got %d", c->profile_freq);
    REQUIRE(!c->enable_profiling || c->save_traces_folder[0],
            "profiling.save_traces_folder: expected a folder name, got \"\"");
    REQUIRE(!c->enable_memory_snapshot || c->save_memory_snapshot_folder[0],
            "profiling.save_memory_snapshot_folder: expected a folder name, got \"\"");
    REQUIRE(c->comm_init_timeout > 0 && isfinite(c->comm_init_timeout),
            "comm.init_timeout_seconds: expected > 0, got %g", c->comm_init_timeout);
    REQUIRE(c->comm_train_timeout > 0 && isfinite(c->comm_train_timeout),
            "comm.train_timeout_seconds: expected > 0, got %g", c->comm_train_timeout);
    REQUIRE(c->ckpt_interval >= 1, "checkpoint.interval: expected >= 1, got %d", c->ckpt_interval);
    REQUIRE(!c->ckpt_enable || c->ckpt_folder[0], "checkpoint.folder: expected a folder name, got \"\"");
    REQUIRE(c->ckpt_keep_latest_k >= 0, "checkpoint.keep_latest_k: expected >= 0 (0 = keep all), got %d",
            c->ckpt_keep_latest_k);
    REQUIRE(c->ckpt_load_step >= -1, "checkpoint.load_step: expected a step >= 0, or -1 for the newest, got %d",
            c->ckpt_load_step);
    REQUIRE(c->ckpt_signal_grace >= 0 && c->ckpt_signal_grace <= 86400,
            "checkpoint.signal_grace_seconds: expected 0 (automatic) to 86400, got %g", c->ckpt_signal_grace);
    REQUIRE(!c->ckpt_initial_load_in_hf || c->ckpt_initial_load_path[0],
            "checkpoint.initial_load_in_hf needs checkpoint.initial_load_path (the Hugging Face folder)");
    return rep->n_problems > before ? CT_ERR : CT_OK;
}

// Features declared in the settings table but not built yet. When one is built, its change
// deletes its line here (and the matching case in tests/test_config.c).
#define NOT_YET(cond, setting) \
    do {                       \
        if (cond) return ct_set_error_at(CT_E_CONFIG, setting, "not implemented yet: %s", setting); \
    } while (0)

ct_status ct_config_check_implemented(const ct_config *c) {
    // Data sharding and replication (FSDP, DDP, HSDP), compute parallelism (tensor, sequence
    // and loss parallel), pipeline execution and context parallel are built. Datasets are read
    // from token shards only.
    if (is_torchtitan_dataset_name(c->dataset))
        return ct_set_error_at(CT_E_CONFIG, "training.dataset",
                               "training.dataset: \"%s\" is a TorchTitan dataset name, which ctitan does not download; "
                               "set it to a folder of token shards made by `ctitan data prepare --input CORPUS "
                               "--tokenizer TOK --out DIR` (or \"synthetic\")", c->dataset);
    if (c->val_enable && is_torchtitan_dataset_name(c->val_dataset))
        return ct_set_error_at(CT_E_CONFIG, "validation.dataset",
                               "validation.dataset: \"%s\" is a TorchTitan dataset name, which ctitan does not "
                               "download; set it to a folder of token shards made by `ctitan data prepare` (or \"\" "
                               "for the held-out part of training.dataset)", c->val_dataset);
    return CT_OK;
}

ct_cfg_ac ct_config_ac(const ct_config *c) {
    if (c->ac_mode == CT_CFG_AC_FULL) return (ct_cfg_ac){CT_CFG_KEEP_INPUT, 1};
    if (c->ac_mode != CT_CFG_AC_SELECTIVE && !c->ac_selective) return (ct_cfg_ac){CT_CFG_KEEP_ALL, 0};
    if (!strcmp(c->ac_option, "op")) return (ct_cfg_ac){CT_CFG_KEEP_OPS, 1};
    if (!strcmp(c->ac_option, "elementwise")) return (ct_cfg_ac){CT_CFG_KEEP_ELEMENTWISE, 1};
    int every = atoi(c->ac_option);
    return (ct_cfg_ac){CT_CFG_KEEP_EVERY_N, every >= 1 ? every : 1};
}

int ct_config_shard_degree(const ct_config *c, int world_size) {
    if (c->data_shard_degree != -1) return c->data_shard_degree;
    int others = c->data_replicate_degree * c->compute_parallel_degree * c->pipeline_degree * c->context_extension_degree;
    if (others < 1 || world_size < others) return 1;
    return world_size / others;
}
