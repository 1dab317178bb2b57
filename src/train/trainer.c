#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/hf.h"
#include "train/hf_vocab.h"
#include "plan/memory_model.h"
#include "core/trace.h"
#include "data/documents.h"
#include "checkpoint/model_file.h"
#include "train/memory_fit.h"
#include "train/pipeline_trace.h"
#include "train/run_export.h"
#include "train/vocab_resolve.h"

static ct_loader *open_loader(const ct_trainer *t, const char *source, const char *split, bool sequential) {
    ct_loader_config lc = {
        .source = source,
        .split = split,
        .seq_len = t->cfg.seq_len,
        // One call reads one micro-batch of every data-parallel rank; this rank keeps its part.
        .global_batch = t->cfg.micro_batch_size * t->mesh.dp.size,
        .dp_rank = t->mesh.dp.rank,
        .dp_size = t->mesh.dp.size,
        .seed = (uint64_t)t->cfg.seed,
        .vocab_size = (uint32_t)t->model.vocab_size,
        .sequential = sequential,
    };
    return ct_loader_open(&lc);
}

// Reading a model file or Hugging Face folder into the parameter store, run by run.
typedef struct {
    const ct_trainer *t;
    ct_model_file *file;
    ct_hf_dir *hf;
} model_read;

static void read_model_run(void *ctx, const ct_param_shard *sh, const ct_shard_run *run, float *dst) {
    const model_read *rd = ctx;
    const ct_param *gp = ct_param_find(&rd->t->global_table, sh->param->name);
    if (rd->hf) ct_hf_read_range(rd->hf, gp, run->global, run->len, dst);
    else ct_model_read_range(rd->file, gp, run->global, run->len, dst);
}

// checkpoint.initial_load_path as a model file: every rank reads the elements its shard
// descriptors name (the same ones ct_fsdp_init_params fills; padding stays zero).
static ct_status load_model_file(ct_trainer *t, const char *path) {
    ct_model_config file_cfg;
    if (ct_model_load_config(path, &file_cfg) || ct_model_config_match(&file_cfg, &t->model)) {
        char why[512];
        snprintf(why, sizeof why, "%s", ct_last_error());
        // The reasons from the model file name it already; a config mismatch does not.
        if (!strcmp(ct_last_error_subject(), path)) return ct_set_error("checkpoint.initial_load_path: %s", why);
        return ct_set_error("checkpoint.initial_load_path: %s (%s)", why, path);
    }
    model_read rd = {t, ct_model_open(path, &t->global_table), NULL};
    if (!rd.file) return CT_ERR;
    ct_param_store_fill(&t->fsdp.store, t->k, read_model_run, &rd);  // a column slice: run by run
    ct_model_close(rd.file);
    return CT_OK;
}

// checkpoint.initial_load_in_hf: a Hugging Face folder, each rank reading its own ranges (q/k
// rows back in ctitan's RoPE layout, checkpoint/hf.h).
static ct_status load_hf(ct_trainer *t, const char *dir) {
    ct_model_config hf_cfg;
    if (ct_hf_load_config(dir, &hf_cfg) || ct_model_config_match(&hf_cfg, &t->model))
        return ct_set_error("checkpoint.initial_load_path (Hugging Face): %s", ct_last_error());
    model_read rd = {t, NULL, ct_hf_open(dir, &t->global_table)};
    if (!rd.hf) return ct_set_error("checkpoint.initial_load_path (Hugging Face): %s", ct_last_error());
    ct_param_store_fill(&t->fsdp.store, t->k, read_model_run, &rd);
    ct_hf_close(rd.hf);
    if (t->is_logger) printf("checkpoint: weights loaded from the Hugging Face folder %s\n", dir);
    return CT_OK;
}

// checkpoint.initial_load_path: a Hugging Face folder (initial_load_in_hf), a checkpoint's step
// folder (its manifest says so) or a model file. Every rank agrees on the outcome.
static ct_status load_initial(ct_trainer *t, const char *path) {
    if (t->cfg.ckpt_initial_load_in_hf) return ct_comm_agree(&t->world, load_hf(t, path));
    char manifest[CT_STR + 32];
    snprintf(manifest, sizeof manifest, "%s/manifest.toml", path);
    struct stat sb;
    if (stat(manifest, &sb) == 0) return ct_checkpoint_load_weights(&t->ckpt, path);
    return ct_comm_agree(&t->world, load_model_file(t, path));
}


// The cpu kernel set, one for every rank: the set training.kernel_set names (every rank's CPU must
// run it), or under auto the lowest of the ranks' start-up choices. Ranks running different sets
// would round differently where a layout relies on their computing the same bits (parameters
// every rank of a group updates alike, the loss's fixed-order sums), so they never do.
static ct_status choose_kernel_set(ct_trainer *t, const ct_config *cfg) {
    char what[64];
    snprintf(what, sizeof what, "training.kernel_set %s", cfg->kernel_set);
    int mine = ct_kernel_set_resolve(cfg->kernel_set, what);
    if (ct_comm_agree(&t->world, mine < 0 ? CT_ERR : CT_OK)) return CT_ERR;
    int32_t v[3] = {-mine, ct_kernel_set_best(), -ct_kernel_set_best()};  // MAX of -x: the min of x
    ct_comm_all_reduce(&t->world, v, v, 3, CT_I32, CT_COMM_MAX);
    t->kernel_set = -v[0], t->kernel_set_best_hi = v[1], t->kernel_set_best_lo = -v[2];
    ct_kernel_set_install(t->kernel_set);
    return CT_OK;
}

// The layout: model dimensions, the mesh, and the checks that the degrees divide what they
// split. Every rank runs the same configuration (checked first), so every rank meets the same
// error at the same point, before any collective that could leave another waiting.
static ct_status plan_layout(ct_trainer *t, const ct_config *cfg) {
    if (ct_model_config_from(&t->model, cfg)) return CT_ERR;
    ct_mesh_layout want = ct_mesh_layout_from_config(cfg);
    if (ct_mesh_create(&t->world, &want, &t->mesh)) return CT_ERR;
    if (ct_mesh_create_experts(&t->mesh, cfg->expert_parallel_degree)) return CT_ERR;
    t->is_logger = t->world.rank == 0;

    t->kernel_set = t->kernel_set_best_lo = t->kernel_set_best_hi = -1;
    bool cpu_kernels = cfg->train_device == CT_CFG_DEVICE_CPU || cfg->train_device == CT_CFG_DEVICE_CPU_SIM;
    if (cpu_kernels && choose_kernel_set(t, cfg)) return CT_ERR;
    const char *device = ct_cfg_device_name(cfg->train_device);
    t->k = ct_kernels_get(device);  // training.device picks the kernel table
    if (!t->k && cfg->train_device == CT_CFG_DEVICE_CUDA)
        return ct_set_error("this ctitan was built without CUDA (make CUDA=1)");
    if (!t->k) return ct_set_error("no %s kernel backend in this build", device);
    ct_profiler_use_device(&t->prof, t->k);
    if (t->k->device == CT_DEVICE_CUDA && strcmp(ct_comm_backend_name(), "nccl"))
        return ct_set_error("training.device cuda: the job's communication is %s, not nccl (ctitan train selects "
                            "nccl for cuda before it starts the transport)",
                            ct_comm_backend_name());
    ct_group *tp = &t->mesh.dim[CT_MESH_TP];
    t->tp = ct_parallelize_tp(cfg, t->k, tp, &t->fsdp.store);
    if (ct_model_config_local(&t->model, tp->size, &t->local_model)) return CT_ERR;
    // Context parallel: each rank of the cp group holds T / cp tokens of every sequence.
    ct_parallel_dims dims;
    if (ct_parallelize_dims(cfg, tp->size, t->mesh.dim[CT_MESH_CP].size, &dims)) return CT_ERR;
    t->cp_balance = dims.cp_balance;
    t->seq_local = dims.seq_local;
    t->mb_seqs = dims.mb_seqs;
    // Before the first big allocation: a run that cannot fit says so, with the numbers -- the
    // planner's memory model, which sizes this run by running its own set-up without allocating.
    if (ct_memory_fit_check(&t->model, cfg, t->world.size)) return CT_ERR;
    ct_param_table_build_local(&t->table, &t->model, tp->rank, tp->size, t->mesh.ep.rank, t->mesh.ep.size);
    ct_param_table_build(&t->global_table, &t->model);
    return CT_OK;
}

// Buffers, precision, stages and the executor: deterministic too (the same on every rank).
static ct_status build(ct_trainer *t, const ct_config *cfg) {
    int cp = t->mesh.dim[CT_MESH_CP].size;

    // Tokens: the loader writes whole sequences on the host (seq_*), this rank's part of them is
    // picked there (host_*: the same buffers without cp) and copied to the device once per step
    // (inputs / targets: the same buffers again where the host can read the device's memory).
    long tokens = ct_plan_step_tokens(cfg);  // plan/memory_model.c counts the same
    size_t seq_bytes = (size_t)tokens * sizeof(int32_t), own_bytes = seq_bytes / (size_t)cp;
    t->seq_inputs = ct_mem_alloc(CT_MEM_OTHER, seq_bytes);
    t->seq_targets = ct_mem_alloc(CT_MEM_OTHER, seq_bytes);
    t->host_inputs = cp > 1 ? ct_mem_alloc(CT_MEM_OTHER, own_bytes) : t->seq_inputs;
    t->host_targets = cp > 1 ? ct_mem_alloc(CT_MEM_OTHER, own_bytes) : t->seq_targets;
    bool on_host = ct_device_host_visible(t->k->device);
    t->inputs = on_host ? t->host_inputs : ct_mem_alloc_on(ct_kernels_device(t->k), CT_MEM_OTHER, own_bytes);
    t->targets = on_host ? t->host_targets : ct_mem_alloc_on(ct_kernels_device(t->k), CT_MEM_OTHER, own_bytes);
    if (cfg->attn_mask_type == CT_CFG_MASK_BLOCK_CAUSAL) {  // document ids beside the tokens
        t->seq_docs = ct_mem_alloc(CT_MEM_OTHER, seq_bytes);
        t->host_docs = cp > 1 ? ct_mem_alloc(CT_MEM_OTHER, own_bytes) : t->seq_docs;
        t->docs = on_host ? t->host_docs : ct_mem_alloc_on(ct_kernels_device(t->k), CT_MEM_OTHER, own_bytes);
        if (cfg->rope_positions == CT_CFG_ROPE_DOCUMENT) {  // RoPE positions from 0 at each document
            t->seq_rope_pos = ct_mem_alloc(CT_MEM_OTHER, seq_bytes);
            t->host_rope_pos = cp > 1 ? ct_mem_alloc(CT_MEM_OTHER, own_bytes) : t->seq_rope_pos;
            t->rope_pos = on_host ? t->host_rope_pos
                                  : ct_mem_alloc_on(ct_kernels_device(t->k), CT_MEM_OTHER, own_bytes);
        }
    }
    t->scalars = ct_mem_alloc_on(ct_kernels_device(t->k), CT_MEM_OTHER, CT_PLAN_STEP_SCALARS * sizeof(double));
    if (cp > 1) {
        int32_t *pos = ct_xcalloc((size_t)t->seq_local, sizeof(int32_t));
        ct_cp_positions(t->cp_balance, t->mesh.dim[CT_MESH_CP].rank, cp, cfg->seq_len, pos);
        t->host_cp_pos = pos;
        t->cp_pos = ct_mem_alloc_on(ct_kernels_device(t->k), CT_MEM_OTHER, (size_t)t->seq_local * sizeof(int32_t));
        t->k->copy_from_host(t->cp_pos, pos, (size_t)t->seq_local * sizeof(int32_t));
    }
    // Views start empty: FSDP points them at its shards or gather buffers.
    ct_model_weights_init(&t->weights, &t->table, &t->model, NULL);
    ct_model_weights_init(&t->grad_views, &t->table, &t->model, NULL);
    if (ct_trainer_precision(t)) return CT_ERR;
    return ct_trainer_build_stages(t);
}

static ct_status init(ct_trainer *t, const ct_config *cfg, ct_group *parent);

// A failed start-up frees what it built (the error message kept); the trainer is then zero, and
// ct_trainer_free on it does nothing more.
ct_status ct_trainer_init(ct_trainer *t, const ct_config *cfg, ct_group *parent) {
    if (init(t, cfg, parent) == CT_OK) return CT_OK;
    char why[1024];
    snprintf(why, sizeof why, "%s", ct_last_error());
    bool agreed = ct_comm_error_is_agreed();
    int rank = t->world.rank;
    ct_trainer_free(t);
    t->world.rank = rank;  // who failed, for the caller's message (the group itself is gone)
    ct_set_error("%s", why);
    if (agreed) ct_comm_mark_agreed();
    return CT_ERR;
}

static ct_status init(ct_trainer *t, const ct_config *cfg, ct_group *parent) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    if (parent ? ct_comm_group_split(parent, 0, parent->rank, "world", &t->world)
               : ct_comm_group_world(&t->world, cfg->comm_init_timeout))
        return CT_ERR;
    // Start-up (loading, first gathers) waits comm.init_timeout_seconds, the mesh inheriting it;
    // a parent group's shorter timeout (a test's) stays.
    if (!parent || parent->timeout_s <= 0 || cfg->comm_init_timeout < parent->timeout_s)
        t->world.timeout_s = cfg->comm_init_timeout;
    // Each phase's outcome is agreed over the world: a failure ends every rank with one message.
    if (ct_trainer_check_same_config(&t->world, cfg)) return CT_ERR;
    // profiling: span buffer, failure snapshot path (before the big buffers; the mesh is read later)
    ct_profiler_init(&t->prof, cfg, &t->world, &t->mesh);
    if (ct_comm_agree(&t->world, ct_vocab_resolve(&t->cfg, t->world.rank, &t->data_tok))) return CT_ERR;
    cfg = &t->cfg;  // from here on, with the vocabulary resolved
    if (ct_comm_agree(&t->world, plan_layout(t, cfg))) return CT_ERR;
    if (ct_comm_agree(&t->world, build(t, cfg))) return CT_ERR;
    ct_fsdp_init_params(&t->fsdp, (uint64_t)cfg->seed);
    ct_adamw_init(&t->adam, t->k, t->fsdp.local_numel, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
    ct_lr_schedule_init(&t->schedule, cfg->lr, cfg->steps, cfg->warmup_steps, cfg->decay_ratio, cfg->decay_type,
                        cfg->min_lr_factor);

    ct_status st = CT_OK;
    t->train_data = open_loader(t, cfg->dataset, "train", false);
    if (!t->train_data) st = CT_ERR;
    else if (ct_loader_tokenizer(t->train_data).present) t->data_tok = ct_loader_tokenizer(t->train_data);
    if (st == CT_OK && cfg->val_enable) {
        const char *val = cfg->val_dataset[0] ? cfg->val_dataset : cfg->dataset;
        t->val_data = open_loader(t, val, "val", true);
        if (!t->val_data) st = CT_ERR;
        ct_shard_tok a = t->val_data ? ct_loader_tokenizer(t->train_data) : (ct_shard_tok){0};
        ct_shard_tok b = t->val_data ? ct_loader_tokenizer(t->val_data) : (ct_shard_tok){0};
        if (st == CT_OK && a.present && b.present && !ct_shard_tok_same(&a, &b)) {
            char da[160], db[160];
            ct_shard_tok_describe(&a, da, sizeof da);
            ct_shard_tok_describe(&b, db, sizeof db);
            st = ct_set_error("the validation split of %s was made with %s, the training split of %s with %s: give "
                              "validation data of the same tokenizer",
                              val, db, cfg->dataset, da);
        }
    }
    if (st == CT_OK && t->docs && !(t->data_tok.present && t->data_tok.eos >= 0))
        st = ct_set_error("model.attn_mask_type block_causal needs the tokenizer's EOS id to find documents: "
                          "training.dataset %s records none and model.tokenizer_path gives none (use causal, or "
                          "data prepared with a tokenizer that has an EOS)",
                          cfg->dataset);
    if (ct_comm_agree(&t->world, st)) return CT_ERR;  // each rank opens its own files
    // A checkpoint of this run wins over checkpoint.initial_load_path, which only starts a run.
    ct_train_state state = {
        .k = t->k,
        .world = &t->world,
        .mesh = &t->mesh,
        .store = &t->fsdp.store,
        .tensors = {t->fsdp.store.params, t->adam.m, t->adam.v},
        .step = &t->step,
        .optimizer_step = &t->adam.step,
        .data = t->train_data,
        .seed = cfg->seed,
        .model = &t->model,
    };
    ct_checkpoint_init(&t->ckpt, &t->cfg, &state);
    bool resumed;
    if (ct_checkpoint_resume(&t->ckpt, &resumed)) return CT_ERR;
    if (!resumed && cfg->ckpt_initial_load_path[0] && load_initial(t, cfg->ckpt_initial_load_path)) return CT_ERR;

    t->flops_per_token = ct_model_flops_per_token(&t->model, cfg->seq_len);
    // MFU divides by the peak of the unit the matmuls run on: bf16 under mixed precision (and for
    // the 8-bit emulation, which decodes into bf16 tiles where the CPU multiplies bf16), else fp32.
    if (ct_peak_init(&t->peak, cfg, t->k, t->prec.compute == CT_BF16, &t->world, ct_memory_fit_ranks_on_node()))
        return CT_ERR;
    return CT_OK;
}

void ct_trainer_free(ct_trainer *t) {
    ct_checkpoint_free(&t->ckpt);
    ct_profiler_free(&t->prof);
    ct_metrics_close(&t->log);
    if (t->train_data) ct_loader_free(t->train_data);
    if (t->val_data) ct_loader_free(t->val_data);
    if (t->inputs != t->host_inputs) {
        ct_mem_free(t->inputs);
        ct_mem_free(t->targets);
    }
    if (t->host_inputs != t->seq_inputs) {
        ct_mem_free(t->host_inputs);
        ct_mem_free(t->host_targets);
    }
    if (t->rope_pos != t->host_rope_pos) ct_mem_free(t->rope_pos);
    if (t->host_rope_pos != t->seq_rope_pos) ct_mem_free(t->host_rope_pos);
    ct_mem_free(t->seq_rope_pos);
    if (t->docs != t->host_docs) ct_mem_free(t->docs);
    if (t->host_docs != t->seq_docs) ct_mem_free(t->host_docs);
    ct_mem_free(t->seq_docs);
    ct_mem_free(t->seq_inputs);
    ct_mem_free(t->seq_targets);
    ct_mem_free(t->cp_pos);
    ct_mem_free(t->scalars);
    free(t->host_cp_pos);
    ct_parallelized_free(&t->par);  // stages, executor, schedules, cp, fsdp
    free(t->mbs);
    ct_adamw_free(&t->adam);
    ct_moe_bias_free(&t->moe_bias);
    free(t->moe_load);
    ct_model_weights_free(&t->weights);
    ct_model_weights_free(&t->grad_views);
    free(t->f8_layers);
    ct_mesh_free(&t->mesh);
    ct_comm_group_free(&t->world);
    ct_param_table_free(&t->table);
    ct_param_table_free(&t->global_table);
    memset(t, 0, sizeof *t);  // freeing twice is harmless
}

// The last pipeline stage computed the loss: sum it over the pipeline (the other stages hold 0),
// then over the ranks holding different tokens (data parallel x cp). tp ranks hold identical
// copies and are not summed.
// loss_sum: on the device.
static void share_loss(ct_trainer *t, double *loss_sum) {
    ct_comm_all_reduce(&t->mesh.dim[CT_MESH_PP], loss_sum, loss_sum, 1, CT_F64, CT_COMM_SUM);
    ct_comm_all_reduce(&t->mesh.dp_cp, loss_sum, loss_sum, 1, CT_F64, CT_COMM_SUM);
    if (t->model.moe_aux_coeff > 0) {  // the blocks' load-balancing losses: each stage's, each data rank's
        float *aux = (float *)(t->scalars + 3);
        ct_comm_all_reduce(&t->mesh.dim[CT_MESH_PP], aux, aux, 1, CT_F32, CT_COMM_SUM);
        ct_comm_all_reduce(&t->mesh.dp_cp, aux, aux, 1, CT_F32, CT_COMM_SUM);
    }
}

// Keeps this rank's tokens of each sequence read into seq_inputs / seq_targets (all of them
// without context parallel) and returns the valid targets of the whole step over every rank
// that holds different tokens (data parallel x cp). A target is valid unless negative: token
// id 0 is a token like any other.
static long select_and_count(ct_trainer *t) {
    const ct_config *c = &t->cfg;
    long T = c->seq_len, Tl = t->seq_local, seqs = (long)c->gradient_accumulation_steps * c->micro_batch_size;
    if (t->docs) {
        ct_documents_find(t->seq_inputs, seqs, T, t->data_tok.eos, t->seq_docs);
        if (t->host_docs != t->seq_docs)
            for (long b = 0; b < seqs; b++)
                for (long j = 0; j < Tl; j++) t->host_docs[b * Tl + j] = t->seq_docs[b * T + t->host_cp_pos[j]];
        if (t->docs != t->host_docs)
            t->k->copy_from_host(t->docs, t->host_docs, (size_t)(seqs * Tl) * sizeof(int32_t));
    }
    if (t->rope_pos) {
        ct_documents_positions(t->seq_docs, seqs, T, t->seq_rope_pos);
        if (t->host_rope_pos != t->seq_rope_pos)
            for (long b = 0; b < seqs; b++)
                for (long j = 0; j < Tl; j++)
                    t->host_rope_pos[b * Tl + j] = t->seq_rope_pos[b * T + t->host_cp_pos[j]];
        if (t->rope_pos != t->host_rope_pos)
            t->k->copy_from_host(t->rope_pos, t->host_rope_pos, (size_t)(seqs * Tl) * sizeof(int32_t));
    }
    if (t->host_inputs != t->seq_inputs)
        for (long b = 0; b < seqs; b++)  // (seqs, T) -> (seqs, T / cp) by this rank's positions
            for (long j = 0; j < Tl; j++) {
                t->host_inputs[b * Tl + j] = t->seq_inputs[b * T + t->host_cp_pos[j]];
                t->host_targets[b * Tl + j] = t->seq_targets[b * T + t->host_cp_pos[j]];
            }
    if (t->inputs != t->host_inputs) {  // the step's one copy of its tokens to the device
        t->k->copy_from_host(t->inputs, t->host_inputs, (size_t)(seqs * Tl) * sizeof(int32_t));
        t->k->copy_from_host(t->targets, t->host_targets, (size_t)(seqs * Tl) * sizeof(int32_t));
    }
    long valid = 0;
    for (long j = 0; j < seqs * Tl; j++) valid += t->host_targets[j] >= 0;
    ct_comm_all_reduce(&t->mesh.dp_cp, &valid, &valid, 1, CT_I64, CT_COMM_SUM);
    return valid;
}

// Reads a step's micro-batches (accumulation x micro_batch_size sequences) and returns the
// step's valid targets (select_and_count).
static long read_step(ct_trainer *t, ct_loader *data) {
    const ct_config *c = &t->cfg;
    long T = c->seq_len;
    for (int i = 0; i < c->gradient_accumulation_steps; i++) {
        long at = (long)i * c->micro_batch_size * T;
        ct_loader_next_batch(data, t->seq_inputs + at, t->seq_targets + at);
    }
    return select_and_count(t);
}

static double step_on_tokens(ct_trainer *t, long valid, double t0);

// A blend's dataset as the metrics name it: its path's last part ("data/web/" -> "web").
static void dataset_name(const char *path, char *out, size_t n) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(out, n, "%.*s", (int)(len - start), path + start);
}

// The mesh groups whose communication a step reports (TensorBoard comm/<group>/...), in a fixed
// order (comm_prev's): pp, dp_replicate, fsdp (dp_shard x cp), cp, tp.
enum { COMM_GROUPS = 7 };
static void comm_groups(ct_trainer *t, ct_group *g[COMM_GROUPS]) {
    g[0] = &t->mesh.dim[CT_MESH_PP], g[1] = &t->mesh.dim[CT_MESH_DP_REPLICATE], g[2] = &t->mesh.fsdp;
    g[3] = &t->mesh.dim[CT_MESH_CP], g[4] = &t->mesh.dim[CT_MESH_TP], g[5] = &t->mesh.ep;
    g[6] = &t->mesh.expert_shard;
}

static double comm_wait_total(const ct_group *g) {
    double wait = 0;
    for (int k = 0; k < CT_COMM_NKINDS; k++) wait += g->stats[k].wait_s;
    return wait;
}

// Called as a step begins: what ran since the last step (validation, checkpoints, start-up) is
// not the next step's communication.
static void comm_mark(ct_trainer *t) {
    ct_group *g[COMM_GROUPS];
    comm_groups(t, g);
    for (int i = 0; i < COMM_GROUPS; i++) {
        t->comm_prev[i][0] = ct_comm_stats_total_bytes(g[i]);
        t->comm_prev[i][1] = comm_wait_total(g[i]);
    }
}

// This step's communication per mesh group that has more than one rank: bytes moved and seconds
// waited since comm_mark (comm's counters only grow), for the metrics (TensorBoard).
static void fill_comm(ct_trainer *t, ct_step_metrics *m) {
    ct_group *g[COMM_GROUPS];
    comm_groups(t, g);
    m->n_comm = 0;
    for (int i = 0; i < COMM_GROUPS; i++) {
        // expert_shard is fsdp itself without expert parallelism: counted once, as fsdp
        if (g[i]->size <= 1 || (i == 6 && t->mesh.ep.size <= 1)) continue;
        int n = m->n_comm++;
        snprintf(m->comm[n].group, sizeof m->comm[n].group, "%.15s", g[i]->name);  // names are short: tp, fsdp
        m->comm[n].bytes = ct_comm_stats_total_bytes(g[i]) - t->comm_prev[i][0];
        m->comm[n].wait_s = comm_wait_total(g[i]) - t->comm_prev[i][1];
    }
}

double ct_trainer_step(ct_trainer *t) {
    double t0 = ct_now_seconds();  // the step's time includes reading its data
    comm_mark(t);                  // and so does its communication
    // Read every micro-batch first: the loss is normalised by the valid tokens of the whole step.
    int span = ct_trace_begin(CT_TRACE_STEP, "data");  // profiling
    long valid = read_step(t, t->train_data);
    ct_trace_end(span);
    return step_on_tokens(t, valid, t0);
}

double ct_trainer_step_on(ct_trainer *t, const int32_t *inputs, const int32_t *targets) {
    const ct_config *c = &t->cfg;
    size_t n = (size_t)c->gradient_accumulation_steps * c->micro_batch_size * c->seq_len;
    memcpy(t->seq_inputs, inputs, n * sizeof *inputs);
    memcpy(t->seq_targets, targets, n * sizeof *targets);
    comm_mark(t);
    return step_on_tokens(t, select_and_count(t), ct_now_seconds());
}

// Mixture of experts: the step's pairs per (block, expert) from every stage, summed over the job
// (data, context and pipeline ranks see different tokens or blocks; tensor-parallel ranks route
// the same tokens alike, so the sum counts each tp replica once per rank and is divided back --
// except under sequence parallel, where each routes its own rows) into t->moe_load, then the
// least and most loaded expert of any block against its block's mean.
static void expert_load(ct_trainer *t, ct_step_metrics *m) {
    long L = t->model.n_layers, E = t->model.n_experts;
    if (E <= 0) return;
    int64_t *load = t->moe_load;
    memset(load, 0, (size_t)(L * E) * sizeof(int64_t));
    for (int s = 0; s < t->par.n_stages; s++)
        if (t->par.stage_rank[s] == t->mesh.dim[CT_MESH_PP].rank) ct_stage_take_expert_load(&t->par.stages[s], load);
    ct_comm_all_reduce(&t->world, load, load, L * E, CT_I64, CT_COMM_SUM);
    int tp = t->tp.sequence_parallel ? 1 : t->mesh.dim[CT_MESH_TP].size;
    double lo = INFINITY, hi = 0, pairs = 0;
    for (long l = 0; l < L; l++) {
        double sum = 0, mn = INFINITY, mx = 0;
        for (long e = 0; e < E; e++) {
            load[l * E + e] /= tp;
            double n = (double)load[l * E + e];
            sum += n, mn = fmin(mn, n), mx = fmax(mx, n);
        }
        pairs += sum;
        if (sum > 0) lo = fmin(lo, mn * E / sum), hi = fmax(hi, mx * E / sum);
    }
    m->moe_pairs = pairs;
    m->moe_load_min = pairs > 0 ? lo : 0;
    m->moe_load_max = hi;
}

// One optimizer step on the tokens in seq_inputs / seq_targets (valid: the step's valid targets;
// t0: when the step began).
static double step_on_tokens(ct_trainer *t, long valid, double t0) {
    const ct_config *c = &t->cfg;
    long mb_tokens = (long)c->micro_batch_size * c->seq_len;
    int accum = c->gradient_accumulation_steps;
    float grad_scale = valid ? 1.0f / (float)valid : 0.0f;

    if (t->step == 1 && c->comm_train_timeout < t->world.timeout_s) {
        // Start-up is over: from now on a collective waits comm.train_timeout_seconds.
        t->world.timeout_s = c->comm_train_timeout;
        ct_mesh_set_timeout(&t->mesh, c->comm_train_timeout);
    }
    t->k->zero(t->fsdp.grads, (size_t)t->fsdp.local_numel * sizeof(float));
    // The step's scalars stay on the device, summed and reduced there, until the one read below.
    double *loss_sum = t->scalars, *sum_sq = t->scalars + 1;
    t->k->zero(t->scalars, CT_PLAN_STEP_SCALARS * sizeof(double));
    // The schedule runs every micro-batch and ends with the step's gradient reduction.
    ct_executor_run_into(&t->exec, &t->train_schedule, t->mbs, t->n_mb, true, grad_scale, loss_sum);
    share_loss(t, loss_sum);

    // Each element counted once, whatever holds it (shard descriptors say which copies count).
    int span = ct_trace_begin(CT_TRACE_OPTIM, "grad_norm");  // profiling
    ct_param_store_grad_sum_squares(&t->fsdp.store, t->k, t->mesh.coord, sum_sq);
    ct_comm_all_reduce(&t->world, sum_sq, sum_sq, 1, CT_F64, CT_COMM_SUM);
    ct_trace_end(span);
    // Every rank holds the same loss and norm (both reduced over the world), so all decide alike.
    // A non-finite step never updates the parameters: clipping cannot catch a NaN norm
    // (norm > max_norm is false), and one NaN update spreads to every weight. The clip factor is
    // worked out on the device, 0 for such a step, and the optimizer reads it there.
    float *clip = (float *)(t->scalars + 2);
    t->k->clip_factor(clip, t->scalars, c->max_norm);
    double lr = ct_lr_at(&t->schedule, t->step + 1);
    int opt_span = ct_trace_begin(CT_TRACE_OPTIM, "optimizer");  // profiling
    ct_moe_bias_keep(&t->moe_bias, t->k, t->fsdp.store.params);  // the optimizer does not train them
    ct_adamw_step(&t->adam, t->k, t->fsdp.params, t->fsdp.grads, lr, clip);
    ct_trace_end(opt_span);
    // The step's one read from the device, after its update: the metrics, and on the host
    // whether the step counted (a skipped one may stop the run).
    double host[CT_PLAN_STEP_SCALARS];
    t->k->copy_to_host(host, t->scalars, sizeof host);
    double norm = sqrt(host[1]), loss_total = host[0];
    float aux_total;  // the fourth scalar, a float
    memcpy(&aux_total, host + 3, sizeof aux_total);
    double loss = valid ? loss_total / (double)valid : 0.0;
    t->nonfinite = !isfinite(loss_total) || !isfinite(norm);  // as clip_factor decided
    if (t->nonfinite) {
        ct_adamw_unstep(&t->adam);
        t->skipped_steps++;
    }
    t->step++;

    double dt = ct_now_seconds() - t0;
    ct_step_metrics *m = &t->last;
    memset(m, 0, sizeof *m);
    m->step = t->step;
    m->loss = loss;
    m->grad_norm = norm;
    m->skipped_steps = t->skipped_steps;
    fill_comm(t, m);
    m->lr = lr;
    // Step time is the slowest rank's: the job moves at that pace.
    ct_comm_all_reduce(&t->world, &dt, &dt, 1, CT_F64, CT_COMM_MAX);
    m->step_seconds = dt;
    // Each data-parallel rank's micro-batches are new tokens; tp ranks share theirs.
    m->tokens_per_s = (double)accum * mb_tokens * t->mesh.dp.size / dt;
    m->tokens_per_s_rank = m->tokens_per_s / t->world.size;
    m->tflops = m->tokens_per_s_rank * t->flops_per_token * 1e-12;
    m->mfu = ct_peak_mfu(&t->peak, m->tflops * 1e12);
    m->val_loss = -1;
    m->n_data = ct_loader_blend_parts(t->train_data);
    for (int d = 0; d < m->n_data && d < (int)(sizeof m->data / sizeof m->data[0]); d++) {
        dataset_name(ct_loader_blend_path(t->train_data, d), m->data[d].name, sizeof m->data[d].name);
        m->data[d].tokens = (double)ct_loader_blend_tokens(t->train_data, d);
    }
    m->moe_aux_loss = t->model.moe_aux_coeff > 0 ? aux_total : 0;
    expert_load(t, m);
    // The choosing biases back as they were before the optimizer, moved by the step's loads (a
    // step that made no update moves nothing).
    ct_moe_bias_step(&t->moe_bias, t->k, t->fsdp.store.params, t->nonfinite ? NULL : t->moe_load);
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++) m->mem_peak_mib[k] = (double)ct_mem_peak_on(ct_kernels_device(t->k), (ct_mem_category)k) / 1048576.0;
    return m->loss;
}

double ct_trainer_validate(ct_trainer *t) {
    if (!t->val_data) return -1;
    const ct_config *c = &t->cfg;
    int span = ct_trace_begin(CT_TRACE_STEP, "validation");  // profiling
    ct_loader_reset(t->val_data);
    long valid = 0;
    t->k->zero(t->scalars, sizeof(double));
    // validation.steps batches the size of a training step's global batch, so every layout
    // (micro-batch size, accumulation, data-parallel degree) evaluates the same tokens.
    for (int i = 0; i < c->val_steps; i++) {
        valid += read_step(t, t->val_data);  // already summed over the ranks
        ct_executor_run_into(&t->exec, &t->eval_schedule, t->mbs, t->n_mb, false, 0.0f, t->scalars);
    }
    share_loss(t, t->scalars);
    double loss_sum;
    t->k->copy_to_host(&loss_sum, t->scalars, sizeof loss_sum);  // validation's one read
    ct_trace_end(span);
    return valid ? loss_sum / (double)valid : 0.0;
}

void ct_trainer_gather_model(ct_trainer *t, float *full) {
    ct_param_store_gather(&t->fsdp.store, t->k, t->mesh.coord, &t->global_table, &t->world, full);
}

ct_status ct_trainer_export(ct_trainer *t, const char *path) {
    ct_dtype dtype = t->cfg.ckpt_export_dtype == CT_CFG_BF16 ? CT_BF16 : CT_F32;
    float *full = ct_xmalloc((size_t)t->global_table.total * sizeof(float));  // (P) the whole model
    ct_trainer_gather_model(t, full);
    ct_status st = ct_run_export_model(&t->world, full, &t->global_table, &t->model, &t->data_tok, dtype, path);
    free(full);
    return st;
}
