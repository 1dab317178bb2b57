// Every setting's names: each product name lands in its field (command line, both forms, and
// TOML), every TorchTitan alias, '-' and '_' alike, unknown names with suggestions, and --help
// (grouped by section, wrapped, with the build's notes). Expected values are written out here
// from the specification, not read from the table. The rest of the configuration's tests are in
// test_config.c.
#include <string.h>
#include <unistd.h>

#include "config_test.h"
#include "expect_error.h"
#include "core/config.h"
#include "core/toml.h"
#include "test.h"

// Each product setting by its exact name, on the command line and in a TOML file.
typedef struct {
    const char *name, *value;  // value as typed on the command line
    const char *toml;          // the same value in TOML
} flag_case;

static const flag_case product_flags[] = {
    {"parallelism.data_shard_degree", "4", "4"},
    {"parallelism.compute_parallel_degree", "2", "2"},
    {"parallelism.pipeline_degree", "3", "3"},
    {"parallelism.context_extension_degree", "5", "5"},
    {"parallelism.data_replicate_degree", "6", "6"},
    {"parallelism.enable_async_comm", "true", "true"},
    {"parallelism.disable_loss_parallel", "true", "true"},
    {"parallelism.fsdp_reshard_after_forward", "never", "\"never\""},
    {"parallelism.pipeline_stages_per_rank", "2", "2"},
    {"compile.enable", "true", "true"},
    {"mixed_precision", "bf16", "\"bf16\""},
    {"micro_batch_size", "16", "16"},
    {"gradient_accumulation_steps", "4", "4"},
    {"activation_checkpoint.selective", "true", "true"},
    {"activation_checkpoint.mode", "full", "\"full\""},
    {"quantization.float8.enable", "true", "true"},
    {"quantization.mxfp8.enable", "true", "true"},
    {"sequence_parallel.enable", "true", "true"},
    {"pipeline_schedule", "interleaved_1f1b", "\"interleaved_1f1b\""},
    {"job.dump_folder", "out/x", "\"out/x\""},
    {"job.description", "hello", "\"hello\""},
    {"model.flavor", "70B", "\"70B\""},
    {"model.dim", "512", "512"},
    {"model.n_layers", "3", "3"},
    {"model.n_heads", "8", "8"},
    {"model.n_kv_heads", "4", "4"},
    {"model.vocab_size", "1000", "1000"},
    {"model.multiple_of", "32", "32"},
    {"model.ffn_dim_multiplier", "1.5", "1.5"},
    {"model.ffn_hidden_dim", "96", "96"},
    {"model.norm_eps", "1e-6", "1e-6"},
    {"model.rope_theta", "10000", "10000.0"},
    {"model.rope_scaling", "false", "false"},
    {"model.tokenizer_path", "tok.tiktoken", "\"tok.tiktoken\""},
    {"training.seq_len", "128", "128"},
    {"training.steps", "11", "11"},
    {"training.seed", "5", "5"},
    {"training.max_norm", "2.5", "2.5"},
    {"training.dataset", "data/x", "\"data/x\""},
    {"optimizer.name", "adamw", "\"AdamW\""},
    {"optimizer.lr", "1e-3", "1e-3"},
    {"optimizer.beta1", "0.8", "0.8"},
    {"optimizer.beta2", "0.99", "0.99"},
    {"optimizer.eps", "1e-7", "1e-7"},
    {"optimizer.weight_decay", "0.01", "0.01"},
    {"lr_scheduler.warmup_steps", "3", "3"},
    {"lr_scheduler.decay_ratio", "0.2", "0.2"},
    {"lr_scheduler.decay_type", "sqrt", "\"sqrt\""},
    {"lr_scheduler.min_lr_factor", "0.1", "0.1"},
    {"metrics.log_freq", "7", "7"},
    {"metrics.peak_tflops", "123.5", "123.5"},
    {"metrics.device", "h100", "\"h100\""},
    {"metrics.enable_tensorboard", "true", "true"},
    {"validation.enable", "true", "true"},
    {"validation.freq", "9", "9"},
    {"validation.steps", "2", "2"},
    {"validation.dataset", "data/val", "\"data/val\""},
    {"checkpoint.enable", "true", "true"},
    {"checkpoint.folder", "ck", "\"ck\""},
    {"checkpoint.interval", "20", "20"},
    {"checkpoint.initial_load_path", "ck/step-10", "\"ck/step-10\""},
    {"checkpoint.export_dtype", "bf16", "\"bf16\""},
    {"pipeline_schedule_file", "sched.csv", "\"sched.csv\""},
    {"parallelism.pipeline_microbatch_size", "2", "2"},
    {"parallelism.pipeline_layers_per_stage", "3", "3"},
    {"parallelism.pipeline_split_points", "layers.2,layers.4", "\"layers.2,layers.4\""},
    {"metrics.pipeline_trace", "out/trace.json", "\"out/trace.json\""},
    {"parallelism.context_parallel_load_balancer", "none", "\"none\""},
    {"parallelism.context_parallel_rotate_method", "ring", "\"ring\""},
    {"mixed_precision_reduce", "bf16", "\"bf16\""},
    {"quantization.float8.recipe", "rowwise", "\"rowwise\""},
    {"quantization.mxfp8.recipe", "mxfp8", "\"mxfp8\""},
    {"quantization.filter_fqns", "output,layers.0", "\"output,layers.0\""},
    {"activation_checkpoint.selective_ac_option", "2", "\"2\""},
    {"checkpoint.keep_latest_k", "3", "3"},
    {"checkpoint.async_mode", "async", "\"async\""},
    {"checkpoint.load_step", "20", "20"},
    {"checkpoint.last_save_model_only", "false", "false"},
    {"checkpoint.initial_load_in_hf", "true", "true"},
    {"checkpoint.last_save_in_hf", "true", "true"},
    {"training.skip_nonfinite_steps", "true", "true"},
    {"comm.init_timeout_seconds", "30", "30"},
    {"comm.train_timeout_seconds", "7.5", "7.5"},
    {"metrics.progress", "lines", "\"lines\""},
    {"job.overwrite", "true", "true"},
    {"profiling.enable_profiling", "true", "true"},
    {"profiling.profile_freq", "3", "3"},
    {"profiling.save_traces_folder", "tr", "\"tr\""},
    {"profiling.enable_memory_snapshot", "true", "true"},
    {"profiling.save_memory_snapshot_folder", "snap", "\"snap\""},
    {"metrics.save_tb_folder", "tbx", "\"tbx\""},
    {"training.device", "cuda", "\"cuda\""},
    {"training.kernel_set", "avx2", "\"avx2\""},
    {"checkpoint.signal_grace_seconds", "90", "90"},
    {"job.print_config", "true", "true"},
    {"model.name", "llama3", "\"llama3\""},
    {"model.converters", "float8", "[\"float8\"]"},
    {"training.global_batch_size", "32", "32"},
    {"compile.components", "model", "[\"model\"]"},
    {"model.attn_mask_type", "block_causal", "\"block_causal\""},
    {"profiling.trace_actions", "true", "true"},
    {"training.pack_weights", "false", "false"},
};
enum { N_PRODUCT = sizeof product_flags / sizeof product_flags[0] };

// The field each product name must land in, checked by hand against the case's value.
static int flag_landed(const ct_config *c, int k) {
    switch (k) {
    case 0: return c->data_shard_degree == 4;
    case 1: return c->compute_parallel_degree == 2;
    case 2: return c->pipeline_degree == 3;
    case 3: return c->context_extension_degree == 5;
    case 4: return c->data_replicate_degree == 6;
    case 5: return c->enable_async_comm;
    case 6: return c->disable_loss_parallel;
    case 7: return c->fsdp_reshard_after_forward == CT_CFG_RESHARD_NEVER;
    case 8: return c->pipeline_stages_per_rank == 2;
    case 9: return c->compile;
    case 10: return c->mixed_precision == CT_CFG_BF16;
    case 11: return c->micro_batch_size == 16;
    case 12: return c->gradient_accumulation_steps == 4;
    case 13: return c->ac_selective;
    case 14: return c->ac_mode == CT_CFG_AC_FULL;
    case 15: return c->float8;
    case 16: return c->mxfp8;
    case 17: return c->sequence_parallel;
    case 18: return !strcmp(c->pipeline_schedule, "interleaved_1f1b");
    case 19: return !strcmp(c->dump_folder, "out/x");
    case 20: return !strcmp(c->description, "hello");
    case 21: return !strcmp(c->flavor, "70B");
    case 22: return c->dim == 512;
    case 23: return c->n_layers == 3;
    case 24: return c->n_heads == 8;
    case 25: return c->n_kv_heads == 4;
    case 26: return c->vocab_size == 1000;
    case 27: return c->multiple_of == 32;
    case 28: return c->ffn_dim_multiplier == 1.5;
    case 29: return c->ffn_hidden_dim == 96;
    case 30: return c->norm_eps == 1e-6;
    case 31: return c->rope_theta == 10000.0;
    case 32: return !c->rope_scaling;
    case 33: return !strcmp(c->tokenizer_path, "tok.tiktoken");
    case 34: return c->seq_len == 128;
    case 35: return c->steps == 11;
    case 36: return c->seed == 5;
    case 37: return c->max_norm == 2.5;
    case 38: return !strcmp(c->dataset, "data/x");
    case 39: return !strcmp(c->optimizer_name, "AdamW");
    case 40: return c->lr == 1e-3;
    case 41: return c->beta1 == 0.8;
    case 42: return c->beta2 == 0.99;
    case 43: return c->eps == 1e-7;
    case 44: return c->weight_decay == 0.01;
    case 45: return c->warmup_steps == 3;
    case 46: return c->decay_ratio == 0.2;
    case 47: return c->decay_type == CT_CFG_DECAY_SQRT;
    case 48: return c->min_lr_factor == 0.1;
    case 49: return c->log_freq == 7;
    case 50: return c->peak_tflops == 123.5;
    case 51: return c->device == CT_CFG_PEAK_H100;
    case 52: return c->enable_tensorboard;
    case 53: return c->val_enable;
    case 54: return c->val_freq == 9;
    case 55: return c->val_steps == 2;
    case 56: return !strcmp(c->val_dataset, "data/val");
    case 57: return c->ckpt_enable;
    case 58: return !strcmp(c->ckpt_folder, "ck");
    case 59: return c->ckpt_interval == 20;
    case 60: return !strcmp(c->ckpt_initial_load_path, "ck/step-10");
    case 61: return c->ckpt_export_dtype == CT_CFG_BF16;
    case 62: return !strcmp(c->pipeline_schedule_file, "sched.csv");
    case 63: return c->pipeline_microbatch_size == 2;
    case 64: return c->pipeline_layers_per_stage == 3;
    case 65: return !strcmp(c->pipeline_split_points, "layers.2,layers.4");
    case 66: return !strcmp(c->pipeline_trace, "out/trace.json");
    case 67: return c->cp_load_balancer == CT_CFG_CP_NONE;
    case 68: return c->cp_rotate_method == CT_CFG_CP_RING;
    case 69: return c->mixed_precision_reduce == CT_CFG_BF16;
    case 70: return c->float8_recipe == CT_CFG_F8_ROWWISE;
    case 71: return !strcmp(c->mx_recipe, "mxfp8");
    case 72: return !strcmp(c->quant_filter, "output,layers.0");
    case 73: return !strcmp(c->ac_option, "2");
    case 74: return c->ckpt_keep_latest_k == 3;
    case 75: return c->ckpt_async_mode == CT_CFG_CKPT_ASYNC;
    case 76: return c->ckpt_load_step == 20;
    case 77: return !c->ckpt_last_save_model_only;
    case 78: return c->ckpt_initial_load_in_hf;
    case 79: return c->ckpt_last_save_in_hf;
    case 80: return c->skip_nonfinite;
    case 81: return c->comm_init_timeout == 30;
    case 82: return c->comm_train_timeout == 7.5;
    case 83: return c->progress == CT_CFG_PROGRESS_LINES;
    case 84: return c->overwrite;
    case 85: return c->enable_profiling;
    case 86: return c->profile_freq == 3;
    case 87: return !strcmp(c->save_traces_folder, "tr");
    case 88: return c->enable_memory_snapshot;
    case 89: return !strcmp(c->save_memory_snapshot_folder, "snap");
    case 90: return !strcmp(c->tb_folder, "tbx");
    case 91: return c->train_device == CT_CFG_DEVICE_CUDA;
    case 92: return !strcmp(c->kernel_set, "avx2");
    case 93: return c->ckpt_signal_grace == 90;
    case 94: return c->print_config;
    case 95: return !strcmp(c->model_name, "llama3");
    case 96: return !strcmp(c->converters, "float8");
    case 97: return c->global_batch_size == 32;
    case 98: return !strcmp(c->compile_components, "model");
    case 99: return c->attn_mask_type == CT_CFG_MASK_BLOCK_CAUSAL;
    case 100: return c->trace_actions;
    case 101: return !c->pack_weights;
    }
    return 0;
}


static void test_every_product_name(void) {
    CHECK(N_PRODUCT == 102, "case table and flag_landed out of step");
    char path[] = "/tmp/ct_test_config_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    for (int k = 0; k < N_PRODUCT; k++) {
        const flag_case *fc = &product_flags[k];
        // Command line, both forms. ct_config_set is used (not parse) so that combinations
        // validate would refuse (a lone pipeline_stages_per_rank) still show where they land.
        ct_config c;
        ct_config_defaults(&c);
        CHECK(ct_config_set(&c, fc->name, fc->value) == CT_OK, "set %s: %s", fc->name, ct_last_error());
        CHECK(flag_landed(&c, k), "--%s %s did not land", fc->name, fc->value);
        char arg[256];
        snprintf(arg, sizeof arg, "--%s=%s", fc->name, fc->value);
        ct_config p;
        ct_status st = parse(&p, arg, "--parallelism.pipeline_stages_per_rank", "1", "--activation_checkpoint.selective",
                             k == 13 ? "true" : "false", NULL);
        // stages_per_rank is overridden by the second argument on purpose; initial_load_in_hf
        // alone is refused (it needs initial_load_path) -- both land, as the checks above show.
        if (k != 8 && k != 78) {
            CHECK(st == CT_OK, "%s: %s", arg, ct_last_error());
            CHECK(flag_landed(&p, k), "%s did not land", arg);
        }
        // '-' for '_' in the name (issue 15, item 9), the value as it is.
        char dashed[128];
        snprintf(dashed, sizeof dashed, "--%s", fc->name);
        for (char *q = dashed; *q; q++)
            if (*q == '_') *q = '-';
        st = parse(&p, dashed, fc->value, "--parallelism.pipeline-stages-per-rank", "1",
                   "--activation-checkpoint.selective", k == 13 ? "true" : "false", NULL);
        if (k != 8 && k != 78) {
            CHECK(st == CT_OK, "%s %s: %s", dashed, fc->value, ct_last_error());
            CHECK(flag_landed(&p, k), "%s %s did not land", dashed, fc->value);
        }
        // TOML: a top-level dotted key is the same setting as a [section] key.
        char text[300];
        snprintf(text, sizeof text, "%s = %s\n", fc->name, fc->toml);
        write_file(path, text);
        ct_config_defaults(&c);
        CHECK(ct_config_load_file(&c, path) == CT_OK, "file %s: %s", text, ct_last_error());
        CHECK(flag_landed(&c, k), "file: %s did not land", text);
    }
    unlink(path);
}

static void test_aliases(void) {
    static const struct {
        const char *alias, *value;
        int product_case;  // index into product_flags whose field must land
    } cases[] = {
        {"parallelism.data_parallel_shard_degree", "4", 0},
        {"parallelism.tensor_parallel_degree", "2", 1},
        {"parallelism.pipeline_parallel_degree", "3", 2},
        {"parallelism.context_parallel_degree", "5", 3},
        {"parallelism.data_parallel_replicate_degree", "6", 4},
        {"parallelism.enable_async_tensor_parallel", "true", 5},
        {"training.mixed_precision_param", "bfloat16", 10},
        {"training.local_batch_size", "16", 11},
        {"parallelism.pipeline_parallel_schedule", "Interleaved1F1B", 18},
        {"checkpoint.enable_checkpoint", "true", 57},
        {"checkpoint.export_dtype", "bfloat16", 61},
        {"parallelism.pipeline_parallel_schedule_csv", "sched.csv", 62},
        {"parallelism.pipeline_parallel_microbatch_size", "2", 63},
        {"parallelism.pipeline_parallel_layers_per_stage", "3", 64},
        {"parallelism.pipeline_parallel_split_points", "layers.2,layers.4", 65},
        {"training.mixed_precision_reduce", "bfloat16", 69},
        {"float8.recipe_name", "rowwise", 70},
        {"mx.recipe_name", "mxfp8_cublas", 71},
        {"float8.filter_fqns", "output,layers.0", 72},
        {"mx.filter_fqns", "output,layers.0", 72},
        {"checkpoint.async_mode", "async_with_pinned_mem", 75},
        {"debug.seed", "5", 36},
        {"quantize.linear.float8.recipe_name", "rowwise", 70},
        {"quantize.linear.mx.recipe_name", "mxfp8", 71},
        {"quantize.linear.float8.filter_fqns", "output,layers.0", 72},
        {"quantize.linear.mx.filter_fqns", "output,layers.0", 72},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ct_config c;
        ct_config_defaults(&c);
        CHECK(ct_config_set(&c, cases[k].alias, cases[k].value) == CT_OK, "%s: %s", cases[k].alias, ct_last_error());
        CHECK(flag_landed(&c, cases[k].product_case), "%s = %s did not land", cases[k].alias, cases[k].value);
    }
    // Spellings of enum values: TorchTitan's and any case; the product's lowercase is stored.
    static const char *schedules[][2] = {{"GPipe", "gpipe"},          {"gpipe", "gpipe"},
                                         {"1F1B", "1f1b"},            {"Interleaved1F1B", "interleaved_1f1b"},
                                         {"interleaved1f1b", "interleaved_1f1b"}, {"INTERLEAVED_1F1B", "interleaved_1f1b"},
                                         {"LoopedBFS", "looped_bfs"}, {"InterleavedZeroBubble", "interleaved_zb"}, {"ZB1P", "zb_h1"},
                                         {"ZBVZeroBubble", "zbv"}, {"zbv", "zbv"}};
    for (size_t k = 0; k < sizeof schedules / sizeof schedules[0]; k++) {
        ct_config c;
        ct_config_defaults(&c);
        CHECK(ct_config_set(&c, "parallelism.pipeline_parallel_schedule", schedules[k][0]) == CT_OK &&
                  !strcmp(c.pipeline_schedule, schedules[k][1]),
              "%s -> %s", schedules[k][0], c.pipeline_schedule);
        CHECK(ct_config_set(&c, "pipeline_schedule", schedules[k][0]) == CT_OK && !strcmp(c.pipeline_schedule, schedules[k][1]),
              "product name %s", schedules[k][0]);
    }
    ct_config c;
    ct_config_defaults(&c);
    CHECK(ct_config_set(&c, "training.mixed_precision_param", "float32") == CT_OK && c.mixed_precision == CT_CFG_FP32,
          "float32");
    CHECK(ct_config_set(&c, "model.flavor", "8b") == CT_OK && !strcmp(c.flavor, "8B"), "flavor any case");
    // A whole file in TorchTitan names.
    CHECK(parse(&c, "--config", FIX "torchtitan_names.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(c.micro_batch_size == 3 && c.mixed_precision == CT_CFG_BF16 && c.seq_len == 64, "training aliases");
    CHECK(c.data_shard_degree == 2 && c.data_replicate_degree == 3 && c.compute_parallel_degree == 4 &&
              c.pipeline_degree == 5 && c.context_extension_degree == 6,
          "degree aliases");
    CHECK(!strcmp(c.pipeline_schedule, "interleaved_1f1b") && c.enable_async_comm, "schedule/async aliases");
    // And on the command line, where the alias wins over the file like any override.
    CHECK(parse(&c, "--config", FIX "basic.toml", "--training.local_batch_size", "5", NULL) == CT_OK &&
              c.micro_batch_size == 5,
          "alias on the command line");
}

static void test_unknown_keys(void) {
    ct_config c;
    EXPECT_ERROR(parse(&c, "--training.sq_len", "5", NULL), CT_E_CONFIG, "training.sq_len", "unknown setting 'training.sq_len'",
               "(did you mean 'training.seq_len'?)");
    // '-' and '_' are one character in a name, so a misspelt dashed name is scored as the
    // underscored one (and named as typed).
    EXPECT_ERROR(parse(&c, "--training.seq-lenn=5", NULL), CT_E_CONFIG, "training.seq-lenn", "unknown setting 'training.seq-lenn'",
               "did you mean 'training.seq_len'?");
    EXPECT_ERROR(parse(&c, "--training.local-batch-sise", "4", NULL), CT_E_CONFIG, "training.local-batch-sise", "unknown setting 'training.local-batch-sise'",
               "did you mean 'micro_batch_size'?");
    EXPECT_ERROR(parse(&c, "--parallelism.data-shard-degre", "2", NULL), CT_E_CONFIG, "parallelism.data-shard-degre",
               "did you mean 'parallelism.data_shard_degree'?");
    EXPECT_ERROR(parse(&c, "--seq_len", "5", NULL), CT_E_CONFIG, "seq_len", "unknown setting 'seq_len'", "did you mean 'training.seq_len'?");
    EXPECT_ERROR(parse(&c, "--parallelism.data_shard_degre", "2", NULL), CT_E_CONFIG, "parallelism.data_shard_degre", "did you mean 'parallelism.data_shard_degree'?");
    EXPECT_ERROR(parse(&c, "--parallelism.tensor_parallel_degre", "2", NULL), CT_E_CONFIG, "parallelism.tensor_parallel_degre", "'parallelism.tensor_parallel_degre'",
               "did you mean 'parallelism.compute_parallel_degree'?");
    EXPECT_ERROR(parse(&c, "--mixed_precison", "bf16", NULL), CT_E_CONFIG, "mixed_precison", "did you mean 'mixed_precision'?");
    EXPECT_ERROR(parse(&c, "--completely.different", "1", NULL), CT_E_CONFIG, "completely.different", "unknown setting 'completely.different'");
    CHECK(!strstr(ct_last_error(), "did you mean"), "far name got a suggestion: %s", ct_last_error());
    EXPECT_ERROR(ct_config_set(&c, "optimizer.lrr", "1"), CT_E_CONFIG, "optimizer.lrr", "unknown setting 'optimizer.lrr'", "did you mean 'optimizer.lr'?");
    // In a file: file:line, the full dotted name, the suggestion.
    EXPECT_ERROR(parse(&c, "--config", FIX "unknown_key.toml", NULL), CT_E_CONFIG, "optimizer.lrr",
               FIX "unknown_key.toml:5: unknown setting 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
    EXPECT_ERROR(parse(&c, "--config", FIX "unknown_section.toml", NULL), CT_E_CONFIG, "trainig", FIX "unknown_section.toml:1: unknown section [trainig]");
    // Arguments that are not settings.
    EXPECT_ERROR(parse(&c, "train.toml", NULL), CT_E_CONFIG, "train.toml", "unexpected argument 'train.toml'");
    EXPECT_ERROR(parse(&c, "--", NULL), CT_E_CONFIG, "--", "unexpected argument '--'");
}

// Issue 15, item 9: one flag style. '-' and '_' are the same in a setting's name on the command
// line (canonical names, aliases, --config's long form, bare booleans), and in a file, which goes
// through the same lookup; never in values.
static void test_dash_or_underscore(void) {
    ct_config c;
    CHECK(parse(&c, "--training.local-batch-size", "4", "--parallelism.data-shard-degree", "2",
                "--job.dump-folder=out-dir_x", "--sequence-parallel.enable", "--training.seq-len", "64",
                "--parallelism.compute-parallel-degree", "2", "--metrics.peak-tflops", "3", NULL) == CT_OK,
          "%s", ct_last_error());
    CHECK(c.micro_batch_size == 4 && c.data_shard_degree == 2 && c.sequence_parallel && c.seq_len == 64 &&
              c.compute_parallel_degree == 2 && c.peak_tflops == 3,
          "dashed names did not land: batch %d shard %d sp %d seq %d", c.micro_batch_size, c.data_shard_degree,
          c.sequence_parallel, c.seq_len);
    CHECK(!strcmp(c.dump_folder, "out-dir_x"), "value changed: %s", c.dump_folder);
    CHECK(ct_config_set(&c, "training.mixed-precision-param", "bfloat16") == CT_OK && c.mixed_precision == CT_CFG_BF16,
          "dashed alias: %s", ct_last_error());
    // Values are not names: an enum value with '-' for '_' is still refused.
    EXPECT_ERROR(parse(&c, "--pipeline-schedule", "interleaved-1f1b", NULL), CT_E_CONFIG, "pipeline_schedule", "pipeline-schedule", "interleaved-1f1b");
    // A file given with --job.config-file; keys and sections spelt with '-'.
    char path[] = "/tmp/ct_test_config_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    write_file(path, "[training]\nlocal-batch-size = 5\nseq_len = 48\n[activation-checkpoint]\nmode = \"full\"\n");
    CHECK(parse(&c, "--job.config-file", path, NULL) == CT_OK, "%s", ct_last_error());
    CHECK(c.micro_batch_size == 5 && c.seq_len == 48 && c.ac_mode == CT_CFG_AC_FULL, "file keys with '-'");
    char arg[80];
    snprintf(arg, sizeof arg, "--job.config-file=%s", path);
    CHECK(parse(&c, arg, NULL) == CT_OK && c.micro_batch_size == 5, "%s: %s", arg, ct_last_error());
    // Both spellings of one name in a file set it twice.
    write_file(path, "[training]\nseq_len = 48\nseq-len = 64\n");
    EXPECT_ERROR(parse(&c, "--config", path, NULL), CT_E_CONFIG, "training.seq_len", ":3: 'training.seq-len' sets training.seq_len again (already set at line 2)");
    unlink(path);
}

// --help: grouped by section under a header each, every line within the width asked for.
static char *help_text(int width, const char *section) {
    FILE *f = tmpfile();
    ct_status st = ct_config_print_help(f, width, section);
    char *text = read_all(f);
    fclose(f);
    if (st) text[0] = 0;
    return text;
}

static int widest_line(const char *text) {
    int widest = 0;
    for (const char *line = text; *line;) {
        int n = (int)strcspn(line, "\n");
        if (n > widest) widest = n;
        line += n + (line[n] == '\n');
    }
    return widest;
}

static void test_help(void) {
    char *text = help_text(80, NULL);
    for (int k = 0; k < N_PRODUCT; k++) {
        char want[200], alone[200];
        snprintf(want, sizeof want, "  --%s ", product_flags[k].name);
        snprintf(alone, sizeof alone, "  --%s\n", product_flags[k].name);  // its type on the next line
        CHECK(strstr(text, want) || strstr(text, alone), "help lacks %s", product_flags[k].name);
    }
    static const char *aliases[] = {"parallelism.data_parallel_shard_degree", "parallelism.data_parallel_replicate_degree",
                                    "parallelism.tensor_parallel_degree", "parallelism.pipeline_parallel_degree",
                                    "parallelism.context_parallel_degree", "parallelism.pipeline_parallel_schedule",
                                    "training.local_batch_size", "training.mixed_precision_param",
                                    "parallelism.enable_async_tensor_parallel"};
    for (size_t k = 0; k < sizeof aliases / sizeof aliases[0]; k++) CHECK(strstr(text, aliases[k]), "help lacks %s", aliases[k]);
    CHECK(strstr(text, "'-' and '_' in a name are the same"), "help does not say names take '-' for '_'");
    CHECK(strstr(text, "gpipe|1f1b|interleaved_1f1b"), "enum choices");
    CHECK(strstr(text, "\"outputs/run\""), "string default");
    CHECK(strstr(text, "8e-4"), "float default");
    // One header per section, each setting under its own section's header.
    static const char *headers[] = {"\n[top] ", "\n[job]\n", "\n[model]\n", "\n[training]\n", "\n[optimizer]\n",
                                    "\n[parallelism]\n", "\n[checkpoint]\n", "\n[comm]\n", "\n[ignored] "};
    for (size_t k = 0; k < sizeof headers / sizeof headers[0]; k++) {
        const char *h = strstr(text, headers[k]);
        CHECK(h && !strstr(h + 1, headers[k]), "header %s missing or twice", headers[k] + 1);
    }
    const char *train = strstr(text, "\n[training]\n"), *seq = strstr(text, "  --training.seq_len ");
    const char *opt = strstr(text, "\n[optimizer]\n");
    CHECK(train && seq && opt && train < seq && seq < opt, "training.seq_len is not under [training]");
    // Wrapped: no line over the width, whatever the width; the TorchTitan names still whole.
    CHECK(widest_line(text) <= 80, "a help line of %d columns at width 80", widest_line(text));
    free(text);
    text = help_text(50, NULL);
    CHECK(widest_line(text) <= 50, "a help line of %d columns at width 50", widest_line(text));
    CHECK(strstr(text, "parallelism.pipeline_parallel_schedule"), "an alias was cut at width 50");
    free(text);
    // What this build lacks is said with the setting.
    text = help_text(1000, "training");
    const char *dev = strstr(text, "  --training.device ");
    const char *end = dev ? strstr(dev + 1, "  --") : NULL;
    char entry[600] = "";
    if (dev && end && end - dev < (long)sizeof entry) memcpy(entry, dev, (size_t)(end - dev));
#ifdef CT_HAVE_CUDA
    CHECK(strstr(entry, "training.device cuda runs") && !strstr(entry, "make CUDA=1"), "training.device: %s", entry);
#else
    CHECK(strstr(entry, "cpu|cuda") && strstr(entry, "this build has no CUDA: cuda needs a build with make CUDA=1") &&
              strstr(entry, "job.device"),
          "training.device's help does not say cuda is not built: %s", entry);
#endif
    int noted = 0;
    for (int k = 0; k < ct_n_settings; k++) noted += ct_setting_build_note(&ct_settings[k]) != NULL;
    CHECK(noted == 1, "%d settings with a build note", noted);
    // One section: its settings and no other's.
    int in_training = 0;
    for (int k = 0; k < ct_n_settings; k++) {
        char want[200];
        snprintf(want, sizeof want, "  --%s ", ct_settings[k].name);
        bool mine = !strncmp(ct_settings[k].name, "training.", 9);
        in_training += mine;
        CHECK(!strstr(text, want) == !mine, "--help training %s %s", mine ? "lacks" : "shows", ct_settings[k].name);
    }
    CHECK(in_training >= 8 && !strstr(text, "[model]") && !strstr(text, "[ignored]"), "--help training");
    free(text);
    // An unknown section prints nothing and names every section in one line.
    FILE *f = tmpfile();
    CHECK(ct_config_print_help(f, 80, "trianing") == CT_ERR, "unknown section accepted");
    CHECK(ftell(f) == 0, "an unknown section printed something");
    fclose(f);
    CHECK(ct_last_error_code() == CT_E_CONFIG && !strcmp(ct_last_error_subject(), "trianing"), "code %s, subject '%s'",
          ct_error_code_name(ct_last_error_code()), ct_last_error_subject());
    CHECK(strstr(ct_last_error(), "no section 'trianing'") && strstr(ct_last_error(), "top, job, model, training") &&
              strstr(ct_last_error(), "checkpoint, ignored") && !strchr(ct_last_error(), '\n'),
          "%s", ct_last_error());
    // The ignored section lists TorchTitan's keys with their reasons.
    text = help_text(80, "ignored");
    CHECK(strstr(text, "model.hf_assets_path") && strstr(text, "enable_fsdp_float8_all_gather") &&
              !strstr(text, "  --training.seq_len"),
          "--help ignored");
    free(text);
}

int main(void) {
    CT_RUN(test_every_product_name);
    CT_RUN(test_aliases);
    CT_RUN(test_unknown_keys);
    CT_RUN(test_dash_or_underscore);
    CT_RUN(test_help);
    CT_TEST_EXIT();
}
