// The settings table: every field of ct_config declared once — canonical name, type, default,
// allowed values, TorchTitan aliases, description. Defaults, parsing, --help and the TOML writer
// all read this table, so adding a setting is one line here plus its field in config.h.
#include <stddef.h>
#include <string.h>

#include "core/config.h"

// offsetof and size of a field, with a compile-time check that the field has the C type the
// setting's kind needs (an INT entry pointing at a double would not compile).
#define FIELD_OF(field, ctype) \
    offsetof(ct_config, field) + 0 * sizeof(char[_Generic(((ct_config *)0)->field, ctype: 1, default: -1)]), \
        sizeof(((ct_config *)0)->field)

#define INT(name, field, def, alias, desc) {name, CT_SET_INT, FIELD_OF(field, int), def, NULL, NULL, alias, desc}
#define FLT(name, field, def, alias, desc) {name, CT_SET_FLOAT, FIELD_OF(field, double), def, NULL, NULL, alias, desc}
#define BOOL(name, field, def, alias, desc) {name, CT_SET_BOOL, FIELD_OF(field, _Bool), def, NULL, NULL, alias, desc}
#define STR(name, field, def, alias, desc) {name, CT_SET_STRING, FIELD_OF(field, char *), def, NULL, NULL, alias, desc}
// An enum field: int-sized, holding the place of its value among `choices`.
#define ENUM(name, field, def, choices, synonyms, alias, desc)                                                      \
    {name, CT_SET_ENUM,                                                                                             \
     offsetof(ct_config, field) + 0 * sizeof(char[sizeof(((ct_config *)0)->field) == sizeof(int) ? 1 : -1]),     \
     sizeof(((ct_config *)0)->field), def, choices, synonyms, alias, desc}
#define NAME(name, field, def, choices, synonyms, alias, desc) \
    {name, CT_SET_NAME, FIELD_OF(field, char *), def, choices, synonyms, alias, desc}
#define LIST(name, field, def, alias, desc) {name, CT_SET_LIST, FIELD_OF(field, char *), def, NULL, NULL, alias, desc}

const ct_setting ct_settings[] = {
    // Top-level product settings (written before any [section] in a TOML file).
    ENUM("mixed_precision", mixed_precision, "fp32", "fp32|bf16", "float32=fp32|bfloat16=bf16",
         "training.mixed_precision_param", "precision of parameters in forward/backward (master weights stay fp32)"),
    ENUM("mixed_precision_reduce", mixed_precision_reduce, "fp32", "fp32|bf16", "float32=fp32|bfloat16=bf16",
         "training.mixed_precision_reduce", "precision of gradient reductions (reduce-scatter, all-reduce) under bf16"),
    INT("micro_batch_size", micro_batch_size, "8", "training.local_batch_size",
        "sequences per micro-batch on each data-parallel rank"),
    INT("gradient_accumulation_steps", gradient_accumulation_steps, "1", NULL,
        "micro-batches whose gradients are summed before each optimizer step (training.global_batch_size sets it)"),
    NAME("pipeline_schedule", pipeline_schedule, "1f1b",
         "gpipe|1f1b|interleaved_1f1b|looped_bfs|zb_h1|interleaved_zb|zbv",
         "interleaved1f1b=interleaved_1f1b|loopedbfs=looped_bfs|zbh1=zb_h1|zb1p=zb_h1|"
         "interleavedzerobubble=interleaved_zb|zbvzerobubble=zbv",
         "parallelism.pipeline_parallel_schedule",
         "order of micro-batch forward/backward work across pipeline stages"),
    STR("pipeline_schedule_file", pipeline_schedule_file, "", "parallelism.pipeline_parallel_schedule_csv",
        "a hand-written schedule: CSV, one row per pipeline rank, one action per cell (0F0, 1I3, 0W1, ...)"),

    // [job]
    STR("job.dump_folder", dump_folder, "outputs/run", NULL, "folder for metrics, the effective config and checkpoints"),
    STR("job.description", description, "", NULL, "free text describing the run"),
    BOOL("job.overwrite", overwrite, "false", NULL,
         "start a new run in a job.dump_folder that holds another run's outputs (its metrics are kept aside)"),
    BOOL("job.print_config", print_config, "false", NULL, "print the effective configuration (as TOML) at start-up"),

    // [model]
    NAME("model.name", model_name, "llama3", "llama3|llama3_moe", NULL, NULL,
         "model family: llama3, or llama3_moe (Llama 3 attention with routed SwiGLU experts)"),
    NAME("model.flavor", flavor, "debugmodel", "debugmodel|8B|70B|405B|qwen3_30b_a3b|deepseek_v3_like", NULL, NULL,
         "size preset of the family (llama3: debugmodel, 8B, 70B, 405B; llama3_moe: debugmodel, qwen3_30b_a3b, "
         "deepseek_v3_like); the model.* numbers below override it"),
    INT("model.dim", dim, "0", NULL, "hidden size (0 = the flavor's)"),
    INT("model.n_layers", n_layers, "0", NULL, "transformer blocks (0 = the flavor's)"),
    INT("model.n_heads", n_heads, "0", NULL, "attention query heads (0 = the flavor's)"),
    INT("model.n_kv_heads", n_kv_heads, "0", NULL, "key/value heads for grouped-query attention (0 = the flavor's)"),
    INT("model.vocab_size", vocab_size, "0", NULL, "vocabulary size (0 = the flavor's, or the tokenizer's)"),
    INT("model.multiple_of", multiple_of, "0", NULL, "FFN hidden size is rounded up to a multiple of this (0 = the flavor's)"),
    FLT("model.ffn_dim_multiplier", ffn_dim_multiplier, "0", NULL, "scales the FFN hidden size (0 = the flavor's)"),
    INT("model.ffn_hidden_dim", ffn_hidden_dim, "0", NULL, "FFN hidden size outright (0 = derived from multiplier/multiple_of)"),
    FLT("model.norm_eps", norm_eps, "1e-5", NULL, "epsilon of RMSNorm"),
    FLT("model.rope_theta", rope_theta, "0", NULL, "RoPE base frequency (0 = the flavor's, 500000)"),
    BOOL("model.rope_scaling", rope_scaling, "true", NULL, "Llama 3.1 long-context RoPE frequency scaling"),
    ENUM("model.attn_mask_type", attn_mask_type, "causal", "causal|block_causal", NULL, NULL,
         "attention mask: causal, or block_causal (a token attends only within its document of a packed "
         "sequence; documents end at the tokenizer's EOS)"),
    ENUM("model.rope_positions", rope_positions, "sequence", "sequence|document", NULL, NULL,
         "RoPE positions: sequence (0..seq_len-1 along the packed sequence), or document (from 0 again at "
         "each document's first token; needs model.attn_mask_type block_causal)"),
    ENUM("model.moe.score_func", moe_score_func, "softmax", "softmax|sigmoid", NULL, NULL,
         "mixture of experts: the router's scores, softmax over the experts (Qwen3) or a sigmoid each (DeepSeek-V3)"),
    BOOL("model.moe.route_norm", moe_route_norm, "true", NULL,
         "mixture of experts: divide each token's chosen experts' scores by their sum"),
    FLT("model.moe.aux_loss_coeff", moe_aux_loss_coeff, "0", NULL,
        "mixture of experts: coefficient of the load-balancing loss added to the training loss (0 = none)"),
    ENUM("model.moe.aux_loss_level", moe_aux_loss_level, "sequence", "sequence|batch", NULL, NULL,
         "mixture of experts: the load-balancing loss per sequence (DeepSeek-V3's), or per micro-batch of a block "
         "call (which depends on micro_batch_size and the data-parallel layout)"),
    FLT("model.moe.load_balance_coeff", moe_load_balance_coeff, "0", NULL,
        "mixture of experts: auxiliary-loss-free balancing (DeepSeek-V3): after each step every block's choosing bias "
        "moves by this much toward the experts loaded below the mean (0 = no bias)"),
    INT("model.moe.num_experts", moe_num_experts, "0", NULL,
        "mixture of experts: routed experts per block (0 = the flavor's)"),
    INT("model.moe.top_k", moe_top_k, "0", NULL, "mixture of experts: routed experts each token goes to (0 = the flavor's)"),
    INT("model.moe.num_shared_experts", moe_num_shared_experts, "-1", NULL,
        "mixture of experts: shared experts every token passes besides its routed ones (DeepSeek), run as one SwiGLU "
        "of this many times the expert hidden size (-1 = the flavor's)"),
    INT("model.moe.num_dense_layers", moe_num_dense_layers, "-1", NULL,
        "mixture of experts: the first this many blocks are dense SwiGLU blocks instead of experts (DeepSeek; -1 = "
        "the flavor's)"),
    INT("model.moe.dense_ffn_hidden_dim", moe_dense_ffn_hidden_dim, "0", NULL,
        "mixture of experts: the dense first blocks' FFN hidden size (0 = the flavor's, or Llama 3's rule for "
        "model.dim where the flavor has none)"),
    STR("model.tokenizer_path", tokenizer_path, "", NULL, "tokenizer file (\"\" = byte-level ids for synthetic data)"),
    LIST("model.converters", converters, "", NULL,
         "model converters: float8 turns on quantization.float8.enable, mx quantization.mxfp8.enable "
         "(also as quantize.linear.float8 / quantize.linear.mx)"),

    // [training]
    ENUM("training.device", train_device, "cpu", "cpu|cuda|cpu_sim", NULL, "job.device",
         "where the math runs: cpu, cuda (a GPU per process, NCCL), or cpu_sim (tests: device memory the host "
         "cannot touch)"),  // + what this build has: config.c
    NAME("training.kernel_set", kernel_set, "auto", "auto|avx2|avx512|avx512_bf16|amx|native", NULL, NULL,
         "the cpu kernels' instruction set: auto (CTITAN_KERNEL_SET, else the best this CPU runs; every rank "
         "takes the lowest any rank chose), or one the CPU has; a NATIVE=1 build has only native"),
    INT("training.seq_len", seq_len, "256", NULL, "tokens per sequence"),
    INT("training.steps", steps, "100", NULL, "optimizer steps to train"),
    INT("training.seed", seed, "42", "debug.seed", "seed of parameter initialisation and synthetic data"),
    BOOL("training.pack_weights", pack_weights, "true", NULL,
         "bf16 with several micro-batches a step: keep each linear weight packed for the matmul kernel once per "
         "step, for every micro-batch (4 bytes per weight element; false: pack at each matmul)"),
    FLT("training.max_norm", max_norm, "1.0", NULL, "clip the global gradient norm to this (<= 0 disables)"),
    BOOL("training.skip_nonfinite_steps", skip_nonfinite, "false", NULL,
         "a step whose loss or gradient norm is NaN / Inf is skipped (no update) instead of stopping the run"),
    STR("training.dataset", dataset, "synthetic", NULL,
        "\"synthetic\", a folder of token shards, or a blend \"W1 PATH1 W2 PATH2 ...\" (Megatron's form)"),
    INT("training.global_batch_size", global_batch_size, "-1", NULL,
        "sequences per optimizer step over the job: gradient_accumulation_steps becomes this / (micro_batch_size x "
        "data-parallel degree), which must divide it (-1: gradient_accumulation_steps as given)"),

    // [optimizer]
    NAME("optimizer.name", optimizer_name, "AdamW", "AdamW", NULL, NULL, "optimizer"),
    FLT("optimizer.lr", lr, "8e-4", NULL, "peak learning rate"),
    FLT("optimizer.beta1", beta1, "0.9", NULL, "AdamW first-moment decay"),
    FLT("optimizer.beta2", beta2, "0.95", NULL, "AdamW second-moment decay"),
    FLT("optimizer.eps", eps, "1e-8", NULL, "AdamW denominator epsilon"),
    FLT("optimizer.weight_decay", weight_decay, "0.1", NULL, "decoupled weight decay"),

    // [lr_scheduler]
    INT("lr_scheduler.warmup_steps", warmup_steps, "10", NULL, "steps of linear warm-up from 0 to optimizer.lr"),
    FLT("lr_scheduler.decay_ratio", decay_ratio, "-1", NULL,
        "fraction of steps spent decaying at the end (< 0: all steps after warm-up)"),
    ENUM("lr_scheduler.decay_type", decay_type, "linear", "linear|sqrt|cosine", NULL, NULL, "shape of the decay"),
    FLT("lr_scheduler.min_lr_factor", min_lr_factor, "0.0", NULL, "final learning rate as a fraction of optimizer.lr"),

    // [parallelism]
    INT("parallelism.data_shard_degree", data_shard_degree, "-1", "parallelism.data_parallel_shard_degree",
        "data sharding (FSDP) degree; -1 = the ranks the other degrees leave"),
    INT("parallelism.data_replicate_degree", data_replicate_degree, "1", "parallelism.data_parallel_replicate_degree",
        "replicated data-parallel (DDP/HSDP) degree"),
    INT("parallelism.compute_parallel_degree", compute_parallel_degree, "1", "parallelism.tensor_parallel_degree",
        "compute (tensor) parallel degree: splits each layer's matmuls"),
    INT("parallelism.pipeline_degree", pipeline_degree, "1", "parallelism.pipeline_parallel_degree",
        "pipeline degree: splits the layers into stages"),
    INT("parallelism.context_extension_degree", context_extension_degree, "1", "parallelism.context_parallel_degree",
        "context extension (context parallel) degree: splits the sequence"),
    INT("parallelism.expert_parallel_degree", expert_parallel_degree, "1", NULL,
        "expert parallel degree: a mixture-of-experts model's experts split over this many ranks borrowed from "
        "data sharding x context parallel, which it must divide; it must divide the experts too"),
    ENUM("parallelism.context_parallel_load_balancer", cp_load_balancer, "headtail", "headtail|none", NULL, NULL,
         "context parallel split: headtail gives rank r chunks r and 2cp-1-r (equal causal work); none: contiguous"),
    ENUM("parallelism.context_parallel_rotate_method", cp_rotate_method, "allgather", "allgather|ring", NULL, NULL,
         "context parallel keys/values: one all-gather, or passed around the ring overlapped with attention"),
    BOOL("parallelism.enable_async_comm", enable_async_comm, "false", "parallelism.enable_async_tensor_parallel",
         "overlap communication with computation"),
    BOOL("parallelism.disable_loss_parallel", disable_loss_parallel, "false", NULL,
         "gather full logits for the loss instead of a vocabulary-parallel loss"),
    ENUM("parallelism.fsdp_reshard_after_forward", fsdp_reshard_after_forward, "default", "default|always|never", NULL,
         NULL, "free gathered parameters after forward (default: always, except the last stage)"),
    INT("parallelism.pipeline_stages_per_rank", pipeline_stages_per_rank, "1", NULL,
        "virtual pipeline stages per rank (1 with interleaved_1f1b, looped_bfs or zbv means 2)"),
    INT("parallelism.pipeline_microbatch_size", pipeline_microbatch_size, "0",
        "parallelism.pipeline_parallel_microbatch_size",
        "sequences per pipeline micro-batch (0 = micro_batch_size); must divide micro_batch_size"),
    INT("parallelism.pipeline_layers_per_stage", pipeline_layers_per_stage, "0",
        "parallelism.pipeline_parallel_layers_per_stage", "transformer blocks per pipeline stage (0 = an even split)"),
    LIST("parallelism.pipeline_split_points", pipeline_split_points, "", "parallelism.pipeline_parallel_split_points",
        "first block of each stage after the first, e.g. \"layers.4,layers.8\" (\"\" = an even split)"),
    BOOL("sequence_parallel.enable", sequence_parallel, "false", NULL,
         "split norms and residuals over the sequence across compute-parallel ranks"),

    // [activation_checkpoint]
    ENUM("activation_checkpoint.mode", ac_mode, "none", "none|selective|full", NULL, NULL,
         "which activations to recompute in backward instead of keeping"),
    BOOL("activation_checkpoint.selective", ac_selective, "false", NULL, "same as activation_checkpoint.mode = selective"),
    STR("activation_checkpoint.selective_ac_option", ac_option, "op", NULL,
        "selective: \"op\" (TorchTitan's: recompute every second matmul -- wk, wo, w3 -- and the elementwise work), "
        "\"elementwise\" (keep every matmul and attention output, recompute norms and SwiGLU) or N (every N-th block full)"),

    // [compile], [quantization]
    BOOL("compile.enable", compile, "false", NULL, "fused kernels for norm, RoPE and activations"),
    LIST("compile.components", compile_components, "model,loss", NULL,
         "what compile.enable fuses: model (the blocks' kernels); loss is always the fused chunked cross-entropy"),
    BOOL("quantization.float8.enable", float8, "false", NULL, "float8 (e4m3/e5m2) matmuls with dynamic scaling"),
    ENUM("quantization.float8.recipe", float8_recipe, "tensorwise", "tensorwise|rowwise", NULL,
         "float8.recipe_name quantize.linear.float8.recipe_name",
         "float8 scaling: one scale per tensor, or per row / column"),
    BOOL("quantization.mxfp8.enable", mxfp8, "false", NULL, "MXFP8 matmuls (blocks of 32 with e8m0 scales)"),
    NAME("quantization.mxfp8.recipe", mx_recipe, "mxfp8", "mxfp8", "mxfp8_cublas=mxfp8|mxfp8_emulated=mxfp8",
         "mx.recipe_name quantize.linear.mx.recipe_name", "MX recipe: e4m3 elements, 32-element blocks, e8m0 scales"),
    LIST("quantization.filter_fqns", quant_filter, "output",
         "float8.filter_fqns mx.filter_fqns quantize.linear.float8.filter_fqns quantize.linear.mx.filter_fqns",
        "linear layers left in high precision: comma list of names (\"output\", \"attention.wo\", \"layers.0\", ...)"),

    // [metrics]
    INT("metrics.log_freq", log_freq, "1", NULL, "print and record metrics every this many steps"),
    FLT("metrics.peak_tflops", peak_tflops, "0", NULL, "peak TFLOP/s for MFU (0 = metrics.device's table value)"),
    ENUM("metrics.device", device, "cpu", "cpu|h100|h200|a100", NULL, NULL,
         "peak table for MFU: cpu measures a matmul at start-up"),
    BOOL("metrics.enable_tensorboard", enable_tensorboard, "false", NULL,
         "write TensorBoard event files (rank 0, every logged step) into metrics.save_tb_folder"),
    STR("metrics.save_tb_folder", tb_folder, "tb", NULL, "TensorBoard folder inside job.dump_folder"),
    ENUM("metrics.progress", progress, "auto", "auto|bar|lines", NULL, NULL,
         "a progress bar redrawn in place, or one line per log step; auto: the bar only on the user's terminal"),
    STR("metrics.pipeline_trace", pipeline_trace, "", NULL,
        "write the last step's per-rank action timeline: Chrome trace JSON (Perfetto), or SVG if it ends in .svg"),

    // [profiling]
    BOOL("profiling.enable_profiling", enable_profiling, "false", NULL,
         "record spans (phases, actions, blocks, gathers, collectives and their waits) every profiling.profile_freq "
         "steps and write a Chrome trace per rank (Perfetto opens it)"),
    INT("profiling.profile_freq", profile_freq, "10", NULL, "profile every this many steps"),
    STR("profiling.save_traces_folder", save_traces_folder, "profile_traces", NULL,
        "trace folder inside job.dump_folder: iteration_<step>/rank<R>_trace.json and timeline.svg"),
    BOOL("profiling.enable_memory_snapshot", enable_memory_snapshot, "false", NULL,
         "write every buffer by category after the first step, and when an allocation fails"),
    STR("profiling.save_memory_snapshot_folder", save_memory_snapshot_folder, "memory_snapshot", NULL,
        "memory snapshot folder inside job.dump_folder: rank<R>.txt, rank<R>_failed.txt"),
    BOOL("profiling.trace_actions", trace_actions, "false", NULL,
         "print every schedule action (0F3, 1SEND_B2, REDUCE_GRADS, ...) to stderr as this rank starts it"),

    // [validation]
    BOOL("validation.enable", val_enable, "false", NULL, "evaluate the loss on held-out data during training"),
    INT("validation.freq", val_freq, "50", NULL, "validate every this many steps"),
    INT("validation.steps", val_steps, "10", NULL, "batches per validation"),
    STR("validation.dataset", val_dataset, "", NULL, "held-out token shards (\"\" = the held-out part of training.dataset)"),

    // [comm]
    FLT("comm.init_timeout_seconds", comm_init_timeout, "300", NULL,
        "a collective during start-up that does not complete in this many seconds ends the job"),
    FLT("comm.train_timeout_seconds", comm_train_timeout, "100", NULL,
        "the same from the first training step on"),

    // [checkpoint]
    BOOL("checkpoint.enable", ckpt_enable, "false", "checkpoint.enable_checkpoint", "save distributed checkpoints"),
    STR("checkpoint.folder", ckpt_folder, "checkpoint", NULL, "checkpoint folder inside job.dump_folder"),
    INT("checkpoint.interval", ckpt_interval, "500", NULL, "save every this many steps"),
    STR("checkpoint.initial_load_path", ckpt_initial_load_path, "", NULL, "checkpoint to start from (\"\" = none)"),
    ENUM("checkpoint.export_dtype", ckpt_export_dtype, "fp32", "fp32|bf16", "float32=fp32|bfloat16=bf16", NULL,
         "dtype of the final exported model weights"),
    INT("checkpoint.keep_latest_k", ckpt_keep_latest_k, "10", NULL,
        "keep this many newest checkpoints, removing older ones once a newer is complete (0 = keep all)"),
    ENUM("checkpoint.async_mode", ckpt_async_mode, "disabled", "disabled|async", "async_with_pinned_mem=async", NULL,
         "async: copy the state and write it from a background thread while training goes on"),
    INT("checkpoint.load_step", ckpt_load_step, "-1", NULL,
        "resume from this step's checkpoint instead of the newest (-1 = the newest)"),
    BOOL("checkpoint.last_save_model_only", ckpt_last_save_model_only, "true", NULL,
         "the save at the last step holds the weights only (no optimizer state: cannot be resumed)"),
    BOOL("checkpoint.initial_load_in_hf", ckpt_initial_load_in_hf, "false", NULL,
         "checkpoint.initial_load_path is a Hugging Face model folder (config.json + safetensors)"),
    BOOL("checkpoint.last_save_in_hf", ckpt_last_save_in_hf, "false", NULL,
         "also write the final model as a Hugging Face folder <job.dump_folder>/hf"),
    FLT("checkpoint.signal_grace_seconds", ckpt_signal_grace, "0", NULL,
        "after SIGINT / SIGTERM / SIGUSR1, the seconds the step in flight and its save may take before the process ends "
        "anyway (0 = max(30, 3 x the last save's time))"),
};

const int ct_n_settings = (int)(sizeof ct_settings / sizeof ct_settings[0]);

bool ct_setting_name_eq(const char *a, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char x = a[i] == '-' ? '_' : a[i], y = b[i] == '-' ? '_' : b[i];
        if (x != y) return false;
        if (!x) return true;
    }
    return true;
}

static bool same_name(const char *a, const char *b) { return strlen(a) == strlen(b) && ct_setting_name_eq(a, b, strlen(a)); }

// True when `name` is one of the space-separated words in `list`.
static int in_word_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        size_t w = strcspn(p, " ");
        if (w == n && ct_setting_name_eq(p, name, n)) return 1;
        p += w;
        while (*p == ' ') p++;
    }
    return 0;
}

const ct_setting *ct_setting_find(const char *name) {
    for (int i = 0; i < ct_n_settings; i++)
        if (same_name(ct_settings[i].name, name) || in_word_list(ct_settings[i].aliases, name)) return &ct_settings[i];
    return NULL;
}

// TorchTitan's settings for what ctitan does without. Each reason says what ctitan does instead;
// a setting ctitan does act on belongs in the table above (as a setting or an alias), never here.
const ct_ignored_setting ct_ignored_settings[] = {
    {"model.hf_assets_path", NULL,
     "the tokenizer is model.tokenizer_path and the vocabulary comes from it, the data or the flavor; Hugging Face "
     "weights load through checkpoint.initial_load_path with checkpoint.initial_load_in_hf"},
    {"model.print_after_conversion", "false", "the start-up precision line counts the layers float8 or MXFP8 converts"},
    {"metrics.disable_color_printing", "true", "ctitan's log has no colours"},
    {"metrics.enable_wandb", "false",
     "no Weights & Biases logger: metrics.jsonl and TensorBoard (metrics.enable_tensorboard) hold the numbers"},
    {"metrics.save_for_all_ranks", "false",
     "rank 0 writes the metrics, which are global (loss, norms); profiling.enable_profiling traces every rank"},
    {"profiling.profiler_active profiling.profiler_warmup", NULL,
     "a profiled step is recorded whole, every profiling.profile_freq steps, with no warm-up steps"},
    {"optimizer.implementation", NULL, "AdamW has one implementation: over each rank's shard on the backend"},
    {"optimizer.early_step_in_backward", "false",
     "the optimizer steps after the whole backward: clipping needs the global gradient norm"},
    {"training.enable_cpu_offload", "false", "parameters, gradients and optimizer state stay on the training device"},
    {"training.gc_freq training.gc_debug", NULL,
     "there is no garbage collector: buffers are planned at start-up and the step allocates nothing"},
    {"activation_checkpoint.preserve_rng_state", NULL,
     "recomputation draws no random numbers (there is no dropout), so there is no RNG state to keep"},
    {"activation_checkpoint.determinism_check", NULL,
     "recomputation runs the same kernels on the same inputs and gives the same bits"},
    {"activation_checkpoint.early_stop activation_checkpoint.debug", "false",
     "a recomputed block runs whole, with no debug mode"},
    {"compile.backend", NULL, "the fused kernels are C compiled into ctitan: there is no compiler backend to pick"},
    {"quantize.linear.float8.enable_fsdp_float8_all_gather float8.enable_fsdp_float8_all_gather", "false",
     "FSDP gathers parameters in the compute precision (bf16 or fp32), not in float8"},
    {"quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp float8.precompute_float8_dynamic_scale_for_fsdp",
     "false", "goes with float8 all-gathers, which FSDP does not do: each matmul computes its own scales"},
    {"quantize.linear.float8.emulate float8.emulate", "true",
     "float8 is always emulated here: the 8-bit values are multiplied in bf16 or fp32 with fp32 sums"},
    {"parallelism.expert_tensor_parallel_degree", "1",
     "experts are not split by tensor parallelism: each lies whole on the ranks that hold it"},
    {"comm.trace_buf_size", "0",
     "no NCCL flight recorder: a collective that times out names the rank, the group and the operation"},
    {"comm.save_traces_folder comm.save_traces_file_prefix", NULL,
     "no NCCL flight recorder: a collective that times out names the rank, the group and the operation"},
    {"comm.mode", "default", "collectives always run for real (no fake backend)"},
    {"memory_estimation.enable", "false",
     "every start-up estimates memory (and refuses a run that cannot fit); ctitan plan shows the estimate"},
    {"validation.local_batch_size", NULL, "validation reads micro_batch_size sequences per data-parallel rank"},
    {"validation.seq_len", NULL, "validation reads sequences of training.seq_len tokens"},
    {"checkpoint.initial_load_model_only", "true",
     "checkpoint.initial_load_path loads the weights only; a run resumes from its own checkpoints "
     "(checkpoint.enable with the same job.dump_folder)"},
};

const int ct_n_ignored_settings = (int)(sizeof ct_ignored_settings / sizeof ct_ignored_settings[0]);

const ct_ignored_setting *ct_ignored_setting_find(const char *name) {
    for (int i = 0; i < ct_n_ignored_settings; i++)
        if (in_word_list(ct_ignored_settings[i].names, name)) return &ct_ignored_settings[i];
    return NULL;
}

const char *ct_cfg_precision_name(ct_cfg_precision p) {
    static const char *const names[] = {"fp32", "bf16"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

const char *ct_cfg_device_name(ct_cfg_device d) {
    static const char *const names[] = {"cpu", "cuda", "cpu_sim"};
    return (unsigned)d < sizeof names / sizeof names[0] ? names[d] : "?";
}
