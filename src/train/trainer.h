// The training loop, flat in the TorchTitan manner: build the model and its state once, then
// per step read the micro-batches, run forward/backward on each, clip, update, log.
#ifndef CT_TRAINER_H
#define CT_TRAINER_H
#include <stdint.h>

#include "comm/mesh.h"
#include "core/config.h"
#include "data/loader.h"
#include "metrics/metrics.h"
#include "model/weights.h"
#include "model/stage.h"
#include "parallel/context_parallel.h"
#include "parallel/executor.h"
#include "parallel/fsdp.h"
#include "parallel/parallelize.h"
#include "parallel/tensor_parallel.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/moe_bias.h"
#include "train/peak.h"
#include "train/profiling.h"

typedef struct ct_trainer {
    ct_config cfg;
    ct_model_config model;        // the whole model's dimensions
    ct_model_config local_model;  // what this tp rank computes with (= model without tp)
    ct_param_table table;         // this rank's tp slice of every tensor (FSDP shards it further)
    ct_param_table global_table;  // the whole model: model files, exports

    ct_group world;
    ct_mesh mesh;
    bool is_logger;          // rank 0 prints and writes metrics

    const ct_kernels *k;     // the kernel backend (training.device)
    // cpu: the kernel set every rank runs (kernels/backend.h: ct_kernel_set_*), and the lowest and
    // highest of the sets the ranks' CPUs could run (-1: not a cpu run)
    int kernel_set, kernel_set_best_lo, kernel_set_best_hi;
    // Parameter state: this rank's FSDP shards (the whole model when the shard group is 1).
    ct_fsdp fsdp;
    ct_tp tp;
    ct_adamw adam;           // over fsdp.local_numel elements
    ct_moe_bias moe_bias;    // choosing biases moved after each step (model.moe.load_balance_coeff)
    int64_t *moe_load;       // (L, n_experts) host, mixture of experts: the last step's pairs over the job
    ct_lr_schedule schedule;
    ct_checkpointer ckpt;        // distributed checkpoints: save, resume (train/checkpoint.h)
    ct_model_weights weights, grad_views;
    ct_precision prec;           // how the stages compute (train/precision.c)
    uint8_t *f8_layers;          // (n_layers) 8-bit linears per block, or NULL

    // The model as pipeline stages (one without a pipeline), run by the executor from a schedule:
    // par holds the stages and their placement, and points at fsdp, cp, exec and the schedules.
    ct_parallelized par;         // parallel/parallelize.h
    ct_executor exec;
    ct_schedule train_schedule;  // this rank's list: F0 B0 F1 B1 ... REDUCE_GRADS RESHARD, or a pipeline's
    ct_schedule eval_schedule;   // forward only
    int n_mb;                    // micro-batches per step (accumulation x pipeline micro-batches; par.n_mb)
    ct_microbatch *mbs;          // (n_mb) views into inputs / targets

    ct_loader *train_data;
    ct_loader *val_data;     // NULL when validation is off
    ct_shard_tok data_tok;   // the tokenizer the data was made with (its shards' record, else
                             // model.tokenizer_path's): recorded in the exported model file
    int32_t *seq_inputs;     // (accum, B, T) this step's micro-batches, whole sequences as read
    int32_t *seq_targets;    // (accum, B, T)
    int32_t *host_inputs;    // (accum, B, T / cp) this rank's tokens of them (= seq_* without cp)
    int32_t *host_targets;   // (accum, B, T / cp)
    int32_t *inputs;         // (accum, B, T / cp) the same on the run's device (= host_* on the cpu)
    int32_t *targets;        // (accum, B, T / cp)
    // model.attn_mask_type block_causal: each token's document (a new one after every EOS of the
    // sequence), computed on the host from seq_inputs and copied with the tokens; NULL: causal
    int32_t *seq_docs;       // (accum, B, T)
    int32_t *host_docs;      // (accum, B, T / cp) (= seq_docs without cp)
    int32_t *docs;           // (accum, B, T / cp) on the run's device (= host_docs on the cpu)
    // model.rope_positions document (with block_causal): each token's position in its document,
    // from the whole sequence's documents before cp picks this rank's part; NULL: sequence positions
    int32_t *seq_rope_pos;   // (accum, B, T)
    int32_t *host_rope_pos;  // (accum, B, T / cp) (= seq_rope_pos without cp)
    int32_t *rope_pos;       // (accum, B, T / cp) on the run's device (= host_rope_pos on the cpu)
    long seq_local;          // T / cp
    int mb_seqs;             // sequences per micro-batch the stages run (pipeline micro-batch size)
    ct_cp_balance cp_balance;
    double *scalars;         // (CT_PLAN_STEP_SCALARS) on the device: loss sum, gradients' sum of squares, clip
                             // factor (float), the blocks' load-balancing loss (float, weighted: train/moe_bias.h)
    int32_t *cp_pos;         // (T / cp) global positions of this rank's tokens, on the device; NULL without cp
    int32_t *host_cp_pos;    // (T / cp) the same on the host
    ct_cp cp;                // context-parallel attention (inactive without cp)

    int step;                // optimizer steps done
    bool nonfinite;          // the last step's loss or gradient norm was NaN / Inf (no update made)
    int skipped_steps;       // such steps so far
    double comm_prev[7][2];  // per mesh group (and the expert groups): bytes and wait seconds counted up to the last step
    double flops_per_token;
    ct_peak peak;            // FLOP/s per rank for MFU and where it comes from (train/peak.h)
    ct_metrics_logger log;
    ct_step_metrics last;    // the last step's figures
    ct_profiler prof;        // profiling.*: traces and memory snapshots (train/profiling.h)
} ct_trainer;

// Start-up check that every rank of `world` runs rank 0's effective configuration (collective).
// CT_ERR on every rank naming the first differing setting: "rank R: the configuration differs
// from rank 0's: training.steps = 20 here, 10 on rank 0".
ct_status ct_trainer_check_same_config(ct_group *world, const ct_config *cfg);

// Stage placement, the param store, stages, executor and schedules (ct_parallelize, from
// train/stages.c); called by ct_trainer_init once the mesh, tables and buffers exist.
ct_status ct_trainer_build_stages(ct_trainer *t);
// t->prec from the settings (mixed_precision, quantization.*); CT_ERR on a filter that would put
// the output projection in 8 bits (train/precision.h: the log line saying what was chosen).
ct_status ct_trainer_precision(ct_trainer *t);

// Builds everything from a validated config, over the processes of `parent` (NULL: all of them;
// tests pass a one-process group to run a reference beside a distributed run).
// CT_ERR + ct_last_error on bad input.
ct_status ct_trainer_init(ct_trainer *t, const ct_config *cfg, ct_group *parent);
void ct_trainer_free(ct_trainer *t);

// One optimizer step (all micro-batches); fills t->last and returns the step's mean loss.
double ct_trainer_step(ct_trainer *t);
// The same on given tokens instead of the loader's: this rank's (accum x micro_batch_size,
// seq_len) inputs and targets (target -1 = ignored). For tests and tools.
double ct_trainer_step_on(ct_trainer *t, const int32_t *inputs, const int32_t *targets);
// Mean loss over validation.steps batches of the validation split, from its start.
double ct_trainer_validate(ct_trainer *t);
// The whole model in the global registry's layout (global_table.total floats) on every rank;
// collective over the world. For export and checks.
void ct_trainer_gather_model(ct_trainer *t, float *full);
// Gathers the model and lets rank 0 write it to path (a model file, checkpoint.export_dtype);
// collective over the world. Every rank returns rank 0's outcome.
ct_status ct_trainer_export(ct_trainer *t, const char *path);
// The whole run: steps, logging, validation, then the model exported to
// <job.dump_folder>/model.safetensors. Returns 0 on success.
int ct_trainer_run(ct_trainer *t);
#endif
