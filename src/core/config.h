// Run configuration: every setting of ctitan, read from a TOML file and `--section.key value`
// command-line overrides (which win). Each setting is declared once, in config_settings.c, with
// its type, default, one-line description and TorchTitan alias; `ctitan train --help` prints that
// table. Settings of features not built yet are declared and validated, and a run that turns one
// on stops with "not implemented yet: <setting>" (ct_config_check_implemented).
#ifndef CT_CONFIG_H
#define CT_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

enum { CT_STR = 256 };

// Settings with a fixed set of values are enums after parsing: each value is its spelling's place
// in the setting's choices (config_settings.c lists them in the order of these constants, and
// tests/test_config_enums.c holds the two together), so nothing after validation compares text;
// ct_setting_choice gives the spelling back for printing.
typedef enum { CT_CFG_FP32, CT_CFG_BF16 } ct_cfg_precision;                         // fp32|bf16
typedef enum { CT_CFG_DECAY_LINEAR, CT_CFG_DECAY_SQRT, CT_CFG_DECAY_COSINE } ct_cfg_decay;  // linear|sqrt|cosine
typedef enum { CT_CFG_CP_HEADTAIL, CT_CFG_CP_NONE } ct_cfg_cp_balancer;              // headtail|none
typedef enum { CT_CFG_CP_ALLGATHER, CT_CFG_CP_RING } ct_cfg_cp_rotate;               // allgather|ring
typedef enum { CT_CFG_RESHARD_DEFAULT, CT_CFG_RESHARD_ALWAYS, CT_CFG_RESHARD_NEVER } ct_cfg_reshard;  // default|always|never
typedef enum { CT_CFG_AC_NONE, CT_CFG_AC_SELECTIVE, CT_CFG_AC_FULL } ct_cfg_ac_mode;  // none|selective|full
typedef enum { CT_CFG_F8_TENSORWISE, CT_CFG_F8_ROWWISE } ct_cfg_float8_recipe;       // tensorwise|rowwise
typedef enum { CT_CFG_CKPT_SYNC, CT_CFG_CKPT_ASYNC } ct_cfg_ckpt_mode;               // disabled|async
typedef enum { CT_CFG_MASK_CAUSAL, CT_CFG_MASK_BLOCK_CAUSAL } ct_cfg_attn_mask;      // causal|block_causal
typedef enum { CT_CFG_ROPE_SEQUENCE, CT_CFG_ROPE_DOCUMENT } ct_cfg_rope_positions;   // sequence|document
typedef enum { CT_CFG_SCORE_SOFTMAX, CT_CFG_SCORE_SIGMOID } ct_cfg_score_func;        // softmax|sigmoid
typedef enum { CT_CFG_AUX_SEQUENCE, CT_CFG_AUX_BATCH } ct_cfg_aux_level;              // sequence|batch
typedef enum { CT_CFG_PEAK_CPU, CT_CFG_PEAK_H100, CT_CFG_PEAK_H200, CT_CFG_PEAK_A100 } ct_cfg_peak_device;  // cpu|h100|h200|a100
typedef enum { CT_CFG_DEVICE_CPU, CT_CFG_DEVICE_CUDA, CT_CFG_DEVICE_CPU_SIM } ct_cfg_device;  // cpu|cuda|cpu_sim
typedef enum { CT_CFG_PROGRESS_AUTO, CT_CFG_PROGRESS_BAR, CT_CFG_PROGRESS_LINES } ct_cfg_progress;  // auto|bar|lines

// activation_checkpoint.mode, .selective and .selective_ac_option read together: what a block keeps.
typedef enum { CT_CFG_KEEP_ALL, CT_CFG_KEEP_OPS, CT_CFG_KEEP_ELEMENTWISE, CT_CFG_KEEP_EVERY_N, CT_CFG_KEEP_INPUT } ct_cfg_ac_kind;
typedef struct {
    ct_cfg_ac_kind kind;
    int every;  // CT_CFG_KEEP_EVERY_N: every this many blocks are checkpointed whole
} ct_cfg_ac;

typedef struct {
    // [job]
    char dump_folder[CT_STR];         // job.dump_folder: where metrics, model files, checkpoints go
    bool overwrite;                   // job.overwrite: replace another run's outputs in dump_folder
    char description[CT_STR];         // job.description
    bool print_config;                // job.print_config: rank 0 prints the effective configuration at start-up

    // [model]
    char model_name[16];              // model.name: llama3 (the one family ctitan trains)
    char flavor[64];                  // model.flavor: debugmodel | 8B | 70B | 405B
    int dim, n_layers, n_heads, n_kv_heads, vocab_size;  // 0 = the flavor's value
    int multiple_of;                  // 0 = the flavor's
    double ffn_dim_multiplier;        // 0 = the flavor's (none for debugmodel)
    int ffn_hidden_dim;               // 0 = derived by the multiple_of / multiplier rule
    double norm_eps;                  // 1e-5
    double rope_theta;                // 0 = the flavor's (500000)
    bool rope_scaling;                // Llama 3.1 frequency scaling (true)
    ct_cfg_attn_mask attn_mask_type;    // model.attn_mask_type: causal | block_causal (documents by EOS)
    ct_cfg_rope_positions rope_positions;  // model.rope_positions: sequence | document (restart per document)
    char tokenizer_path[CT_STR];      // model.tokenizer_path
    // model.moe.*: a mixture-of-experts family's router and load balancing (model/moe_settings.c)
    ct_cfg_score_func moe_score_func;   // softmax | sigmoid
    bool moe_route_norm;                // the chosen weights divided by their sum
    double moe_aux_loss_coeff;          // load-balancing loss coefficient (0: none)
    ct_cfg_aux_level moe_aux_loss_level;  // its groups: each sequence, or each micro-batch
    double moe_load_balance_coeff;      // rate of the choosing bias's update (0: no bias)
    int moe_num_experts;                // routed experts per block (0: the flavor's)
    int moe_top_k;                      // routed experts per token (0: the flavor's)
    int moe_num_shared_experts;         // experts every token passes besides its routed ones (-1: the flavor's)
    int moe_num_dense_layers;           // first blocks that are dense SwiGLU blocks (-1: the flavor's)
    int moe_dense_ffn_hidden_dim;       // their FFN hidden size (0: the flavor's)
    char converters[CT_STR];          // model.converters: list; float8 / mx turn on quantization.*.enable

    // [training] and top-level product settings
    int seq_len;                      // training.seq_len
    int steps;                        // training.steps
    int seed;                         // training.seed
    double max_norm;                  // training.max_norm (gradient clipping; <= 0 disables)
    bool skip_nonfinite;              // training.skip_nonfinite_steps
    double comm_init_timeout;         // comm.init_timeout_seconds
    double comm_train_timeout;        // comm.train_timeout_seconds
    int micro_batch_size;             // micro_batch_size (alias training.local_batch_size)
    int gradient_accumulation_steps;  // gradient_accumulation_steps
    int global_batch_size;            // training.global_batch_size: sequences per step over the job (-1: no accumulation)
    ct_cfg_precision mixed_precision;  // mixed_precision: fp32 | bf16
    ct_cfg_precision mixed_precision_reduce;  // mixed_precision_reduce: fp32 | bf16 (gradient reductions)
    char dataset[CT_STR];             // training.dataset: "synthetic", a folder of token shards, or a blend

    // [optimizer]
    char optimizer_name[32];          // optimizer.name: AdamW
    double lr, beta1, beta2, eps, weight_decay;

    // [lr_scheduler]
    int warmup_steps;                 // lr_scheduler.warmup_steps
    double decay_ratio;               // lr_scheduler.decay_ratio (< 0: decay over all steps after warm-up)
    ct_cfg_decay decay_type;          // lr_scheduler.decay_type: linear | sqrt | cosine
    double min_lr_factor;             // lr_scheduler.min_lr_factor

    // [parallelism]
    int data_shard_degree;            // -1 = whatever ranks are left
    int data_replicate_degree;
    int compute_parallel_degree;      // tensor parallel
    int pipeline_degree;
    int context_extension_degree;     // context parallel
    int expert_parallel_degree;       // routed experts split over this many ranks of dp_shard x cp
    ct_cfg_cp_balancer cp_load_balancer;  // headtail | none
    ct_cfg_cp_rotate cp_rotate_method;  // allgather | ring
    bool enable_async_comm;
    bool disable_loss_parallel;
    ct_cfg_reshard fsdp_reshard_after_forward;  // default | always | never
    char pipeline_schedule[32];       // gpipe | 1f1b | interleaved_1f1b | looped_bfs | zb_h1 | interleaved_zb | zbv
    char pipeline_schedule_file[CT_STR];  // a hand-written schedule (CSV), overrides pipeline_schedule
    int pipeline_stages_per_rank;     // virtual stages per rank (looped schedules)
    int pipeline_microbatch_size;     // sequences per pipeline micro-batch (0 = micro_batch_size)
    int pipeline_layers_per_stage;    // 0 = even split
    char pipeline_split_points[CT_STR];  // "layers.4,layers.8"
    bool sequence_parallel;           // sequence_parallel.enable

    // [activation_checkpoint]
    ct_cfg_ac_mode ac_mode;           // activation_checkpoint.mode: none | selective | full
    bool ac_selective;                // activation_checkpoint.selective (same as mode = selective)
    char ac_option[16];               // activation_checkpoint.selective_ac_option: op | N (every N-th block)

    // [compile], [quantization]
    bool compile;                     // compile.enable
    bool pack_weights;                // training.pack_weights: bf16 weights packed once per step
    char compile_components[64];      // compile.components: list of model | loss
    bool float8;                      // quantization.float8.enable
    ct_cfg_float8_recipe float8_recipe;  // quantization.float8.recipe: tensorwise | rowwise
    bool mxfp8;                       // quantization.mxfp8.enable
    char mx_recipe[16];               // quantization.mxfp8.recipe: mxfp8
    char quant_filter[CT_STR];        // quantization.filter_fqns: comma list of names kept high precision

    // [metrics]
    int log_freq;                     // metrics.log_freq
    double peak_tflops;               // metrics.peak_tflops: 0 = measure the CPU matmul peak at start
    ct_cfg_peak_device device;        // metrics.device: cpu | h100 | h200 | a100 (peak table)
    ct_cfg_device train_device;       // training.device: cpu | cuda | cpu_sim (the kernel table and comm backend)
    char kernel_set[16];              // training.kernel_set: auto | avx2 | avx512 | avx512_bf16 | amx | native
    bool enable_tensorboard;          // metrics.enable_tensorboard
    char tb_folder[CT_STR];           // metrics.save_tb_folder, inside dump_folder
    ct_cfg_progress progress;         // metrics.progress: auto | bar | lines
    char pipeline_trace[CT_STR];      // metrics.pipeline_trace: the last step's timeline ("" = off)

    // [profiling]
    bool enable_profiling;            // profiling.enable_profiling: Chrome traces every profile_freq steps
    int profile_freq;                 // profiling.profile_freq
    char save_traces_folder[CT_STR];  // profiling.save_traces_folder, inside dump_folder
    bool enable_memory_snapshot;      // profiling.enable_memory_snapshot
    char save_memory_snapshot_folder[CT_STR];  // profiling.save_memory_snapshot_folder, inside dump_folder
    bool trace_actions;               // profiling.trace_actions: every executor action to stderr

    // [validation]
    bool val_enable;
    int val_freq, val_steps;
    char val_dataset[CT_STR];

    // [checkpoint]
    bool ckpt_enable;
    char ckpt_folder[CT_STR];
    int ckpt_interval;
    char ckpt_initial_load_path[CT_STR];
    ct_cfg_precision ckpt_export_dtype;  // fp32 | bf16
    int ckpt_keep_latest_k;           // 0 = keep all
    ct_cfg_ckpt_mode ckpt_async_mode;  // disabled | async
    int ckpt_load_step;               // -1 = the newest complete checkpoint
    bool ckpt_last_save_model_only;
    bool ckpt_initial_load_in_hf;
    bool ckpt_last_save_in_hf;
    double ckpt_signal_grace;         // seconds; 0 = max(30, 3 x the last save's time)
} ct_config;

// Fills every field with its declared default.
void ct_config_defaults(ct_config *c);

// What reading a configuration met besides the values: the settings it reads but does not act on
// (TorchTitan's keys for features ctitan does without, each with the reason), and every problem --
// unknown names, wrong types, bad values, settings that contradict each other -- so that one run
// reports all of them at once instead of one per attempt.
enum { CT_CONFIG_MAX_NOTES = 48, CT_CONFIG_MAX_PROBLEMS = 24, CT_CONFIG_MAX_SETTINGS = 256 };

typedef struct {
    char key[96];     // the name as written (one line of printable text, as every message)
    char value[96];   // the value as written, cut to fit
    char where[300];  // "file.toml:18" or "command line"
    const char *why;  // why ctitan does not act on it (a string of ct_ignored_settings, or of config.c)
} ct_config_note;

typedef struct {
    int n_notes;  // notes kept (at most CT_CONFIG_MAX_NOTES)
    ct_config_note notes[CT_CONFIG_MAX_NOTES];
    int n_problems;  // problems met; the first CT_CONFIG_MAX_PROBLEMS are kept, one line each
    char problems[CT_CONFIG_MAX_PROBLEMS][512];
    ct_error_code codes[CT_CONFIG_MAX_PROBLEMS];   // each problem's code (CT_E_CONFIG, or CT_E_IO for a file)
    char subjects[CT_CONFIG_MAX_PROBLEMS][300];    // the setting it names (canonical name), or the file
    unsigned char set[CT_CONFIG_MAX_SETTINGS];  // per ct_settings entry: 1 when a file or the command line gave it
    bool torchtitan;  // a key only TorchTitan writes was met (model.name, an ignored key): see the defaults note
} ct_config_report;

// ct_config_parse, filling `rep` (zeroed first): every problem of the file, the command line and
// the checks of ct_config_validate, and every note. Returns CT_ERR when there is any problem, with
// the first in ct_last_error().
ct_status ct_config_parse_report(ct_config *c, int argc, char **argv, ct_config_report *rep);

// ct_config_validate, adding every problem to `rep` instead of stopping at the first.
ct_status ct_config_validate_report(const ct_config *c, ct_config_report *rep);

// Adds one problem to `rep`, made one line of printable text as ct_set_error makes its messages
// (ct_last_error() then holds it too, code CT_E_CONFIG). The message starts with the name of the
// setting it is about, which becomes the error's subject (canonical name; none when the first
// word names no setting). Returns CT_ERR.
ct_status ct_config_problem(ct_config_report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The same with the code and subject given.
ct_status ct_config_problem_at(ct_config_report *rep, ct_error_code code, const char *subject, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// training.global_batch_size against the world: gradient_accumulation_steps becomes
// global_batch_size / (micro_batch_size x data-parallel degree); a batch that does not divide, or
// that contradicts a gradient_accumulation_steps given too, is a problem added to `rep` (NULL: only
// ct_last_error). Nothing to do when global_batch_size is -1.
ct_status ct_config_apply_world(ct_config *c, int world_size, ct_config_report *rep);

// The warning block: every note of `rep`, each with where it was given and why it is not acted
// on, wrapped to `width` columns. Prints nothing when there is no note.
void ct_config_print_notes(const ct_config_report *rep, FILE *f, int width);

// Defaults, then the TOML file named by --config / --job.config_file (if any), then every other
// `--section.key value` / `--section.key=value` argument. argv excludes the program and
// subcommand names. Unknown keys, wrong types and bad values return CT_ERR with a one-line
// message (naming the key, with a "did you mean" suggestion when one is close).
ct_status ct_config_parse(ct_config *c, int argc, char **argv);

// Loads one TOML file over the current values (used by ct_config_parse).
ct_status ct_config_load_file(ct_config *c, const char *path);

// Sets one setting by its canonical name or alias from a string, as the command line does.
ct_status ct_config_set(ct_config *c, const char *key, const char *value);

// Cross-field validation (ranges, enum values) and "not implemented yet: <setting>" for
// features this build does not have.
ct_status ct_config_validate(const ct_config *c);
ct_status ct_config_check_implemented(const ct_config *c);

// `ctitan train --help [SECTION]`: the settings grouped by section ("top" for those outside any
// section), each with its type, default, TorchTitan alias and description, wrapped to `width`
// columns. `section` NULL prints every section; an unknown one returns CT_ERR with a line that
// names the sections, printing nothing.
ct_status ct_config_print_help(FILE *f, int width, const char *section);

// Writes the effective configuration as TOML (saved beside a run's metrics).
void ct_config_write_toml(const ct_config *c, FILE *f);

// ---- The settings table (config_settings.c), for help text, the planner and tests. ----
// CT_SET_LIST: names, stored as one comma-separated string ("model,loss"); a TOML array of strings
// or a string in a file, "a,b" on the command line; written back as an array.
// CT_SET_ENUM: an enum field, the place of its value among `choices`. CT_SET_NAME: a string field
// holding one of `choices` (names another table resolves: a flavor, a schedule, a kernel set).
typedef enum { CT_SET_INT, CT_SET_FLOAT, CT_SET_BOOL, CT_SET_STRING, CT_SET_ENUM, CT_SET_LIST, CT_SET_NAME } ct_setting_type;

typedef struct {
    const char *name;      // canonical dotted name, e.g. "parallelism.data_shard_degree"
    ct_setting_type type;
    size_t offset, size;   // the field in ct_config (size: buffer size of string fields)
    const char *def;       // default, spelled as on the command line
    const char *choices;   // enum and name: the spellings, "fp32|bf16"
    const char *synonyms;  // enum and name: other accepted spellings, "bfloat16=bf16|float32=fp32" (any case)
    const char *aliases;   // TorchTitan names of the same setting, space-separated, or NULL
    const char *desc;      // one line
} ct_setting;

extern const ct_setting ct_settings[];
extern const int ct_n_settings;

// The setting named `name` (canonical or alias), or NULL. '-' and '_' are the same character in
// a name (one flag style, as the subcommands' options), wherever it is written:
// --training.local-batch-size 4 on the command line, local-batch-size = 4 under [training] in a
// file (one lookup, so a name that works in one place works in the other; a file that sets both
// spellings sets the setting twice, which the file walk refuses). Values are never folded.
// Canonical names and aliases are spelt with '_', and so is every written configuration.
const ct_setting *ct_setting_find(const char *name);

// The spelling of value `v` of the enum setting `name` ("mixed_precision", CT_CFG_BF16 -> "bf16"),
// for printing, written into buf (cap bytes) and returned; "?" for a value outside its choices.
const char *ct_setting_choice(const char *name, int v, char *buf, size_t cap);

// Spellings of the enums printed or handed on by name (a kernel table is chosen by its device's
// name); each is its setting's choice (tests/test_config_enums.c holds them to the table).
const char *ct_cfg_precision_name(ct_cfg_precision p);  // "fp32" | "bf16"
const char *ct_cfg_device_name(ct_cfg_device d);        // "cpu" | "cuda" | "cpu_sim"

// What activation checkpointing keeps per block, from mode, selective and selective_ac_option
// (validated: op, elementwise or a block count).
ct_cfg_ac ct_config_ac(const ct_config *c);

// TorchTitan settings that ctitan reads without acting on them: a feature ctitan does without (a
// W&B logger, float8 all-gathers, a Python garbage collector). A file or command line that gives
// one is not refused; the run lists it, with `why`, in one warning block at start-up -- unless its
// value is `quiet`, which asks for nothing ctitan lacks (enable_wandb = false).
typedef struct {
    const char *names;  // TorchTitan's dotted names of it, space-separated
    const char *quiet;  // the value, as text ("false", "0"), that is honoured silently; NULL: none
    const char *why;    // one sentence: why it is not acted on, and what ctitan does instead
} ct_ignored_setting;

extern const ct_ignored_setting ct_ignored_settings[];
extern const int ct_n_ignored_settings;
const ct_ignored_setting *ct_ignored_setting_find(const char *name);
// Whether the first n characters of a and b are the same name ('-' == '_'), both ending alike
// before n.
bool ct_setting_name_eq(const char *a, const char *b, size_t n);

// What this build lacks for setting s, as --help appends it to the setting's line ("cuda needs a
// build with make CUDA=1" on training.device without CUDA), or NULL when nothing. Decided at
// compile time (CT_HAVE_CUDA, Makefile's CUDA=1); the trainer refuses such a value at run time
// with the same advice.
const char *ct_setting_build_note(const ct_setting *s);

// data_shard_degree with -1 resolved against the world size: the ranks the other degrees leave
// (world / (replicate * compute * pipeline * context)); 1 in a single process.
int ct_config_shard_degree(const ct_config *c, int world_size);
#endif
