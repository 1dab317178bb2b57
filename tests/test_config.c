// The run configuration: defaults, files, command-line precedence, error messages (wrong types,
// bad enum values, ranges, not-implemented features), the TOML writer round trip, and
// configs/*.toml. Every setting's names, aliases, unknown names and --help: test_config_names.c.
// Expected values are written out here from the specification, not read from the table.
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "config_test.h"
#include "expect_error.h"
#include "core/config.h"
#include "core/toml.h"
#include "test.h"

static void test_defaults(void) {
    ct_config c;
    memset(&c, 0x5A, sizeof c);  // every field must be written
    ct_config_defaults(&c);
    CHECK(!strcmp(c.dump_folder, "outputs/run"), "dump_folder %s", c.dump_folder);
    CHECK(!strcmp(c.description, ""), "description");
    CHECK(!strcmp(c.flavor, "debugmodel"), "flavor");
    CHECK(c.dim == 0 && c.n_layers == 0 && c.n_heads == 0 && c.n_kv_heads == 0 && c.vocab_size == 0, "model overrides");
    CHECK(c.multiple_of == 0 && c.ffn_dim_multiplier == 0 && c.ffn_hidden_dim == 0 && c.rope_theta == 0, "ffn/rope");
    CHECK(c.norm_eps == 1e-5 && c.rope_scaling, "norm_eps/rope_scaling");
    CHECK(!strcmp(c.tokenizer_path, ""), "tokenizer_path");
    CHECK(c.seq_len == 256 && c.steps == 100 && c.seed == 42 && c.max_norm == 1.0, "training");
    CHECK(c.micro_batch_size == 8 && c.gradient_accumulation_steps == 1, "batch");
    CHECK(c.mixed_precision == CT_CFG_FP32 && !strcmp(c.dataset, "synthetic"), "precision/dataset");
    CHECK(!strcmp(c.optimizer_name, "AdamW") && c.lr == 8e-4 && c.beta1 == 0.9 && c.beta2 == 0.95 && c.eps == 1e-8 &&
              c.weight_decay == 0.1,
          "optimizer");
    CHECK(c.warmup_steps == 10 && c.decay_ratio == -1 && c.decay_type == CT_CFG_DECAY_LINEAR && c.min_lr_factor == 0.0,
          "lr_scheduler");
    CHECK(c.data_shard_degree == -1 && c.data_replicate_degree == 1 && c.compute_parallel_degree == 1 &&
              c.pipeline_degree == 1 && c.context_extension_degree == 1,
          "degrees");
    CHECK(!c.enable_async_comm && !c.disable_loss_parallel && c.fsdp_reshard_after_forward == CT_CFG_RESHARD_DEFAULT, "comm");
    CHECK(!strcmp(c.pipeline_schedule, "1f1b") && c.pipeline_stages_per_rank == 1 && !c.sequence_parallel, "pipeline");
    CHECK(c.ac_mode == CT_CFG_AC_NONE && !c.ac_selective && !c.compile && !c.float8 && !c.mxfp8, "features");
    CHECK(c.log_freq == 1 && c.peak_tflops == 0 && c.device == CT_CFG_PEAK_CPU && !c.enable_tensorboard, "metrics");
    CHECK(!c.val_enable && c.val_freq == 50 && c.val_steps == 10 && !strcmp(c.val_dataset, ""), "validation");
    CHECK(!c.ckpt_enable && !strcmp(c.ckpt_folder, "checkpoint") && c.ckpt_interval == 500 &&
              !strcmp(c.ckpt_initial_load_path, "") && c.ckpt_export_dtype == CT_CFG_FP32,
          "checkpoint");
    CHECK(ct_config_validate(&c) == CT_OK, "defaults invalid: %s", ct_last_error());
    CHECK(ct_config_check_implemented(&c) == CT_OK, "defaults not runnable: %s", ct_last_error());
    ct_config p;
    CHECK(parse(&p, NULL) == CT_OK && !memcmp(&p.lr, &c.lr, sizeof c.lr) && p.steps == 100, "parse of no args");
}

static void test_file_load(void) {
    ct_config c;
    CHECK(parse(&c, "--config", FIX "basic.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(c.micro_batch_size == 2 && c.gradient_accumulation_steps == 3, "top level");
    CHECK(!strcmp(c.dump_folder, "outputs/fixture"), "job");
    CHECK(c.dim == 64 && c.n_layers == 2 && c.n_heads == 4 && c.n_kv_heads == 2 && c.norm_eps == 1e-6 && !c.rope_scaling,
          "model");
    CHECK(c.seq_len == 32 && c.steps == 300 && c.seed == 7 && c.max_norm == 0.5, "training");
    CHECK(c.lr == 3e-4 && c.weight_decay == 0.0, "optimizer lr=%g wd=%g", c.lr, c.weight_decay);
    CHECK(c.warmup_steps == 5 && c.decay_type == CT_CFG_DECAY_COSINE, "lr_scheduler");
    CHECK(c.data_shard_degree == 1 && !c.float8 && c.log_freq == 4, "rest");
    CHECK(c.beta2 == 0.95 && c.val_freq == 50, "unset settings keep defaults");
    // The other spelling of --config, and the = form.
    ct_config d;
    CHECK(parse(&d, "--job.config_file", FIX "basic.toml", NULL) == CT_OK && d.steps == 300, "--job.config_file");
    CHECK(parse(&d, "--config=" FIX "basic.toml", NULL) == CT_OK && d.steps == 300, "--config=");
    CHECK(ct_config_load_file(&d, FIX "torchtitan_names.toml") == CT_OK && d.steps == 300 && d.micro_batch_size == 3,
          "load_file over current values: %s", ct_last_error());
}

static void test_cli_overrides_file(void) {
    ct_config c;
    // CLI before and after --config: both win over the file (steps 300, lr 3e-4 there).
    CHECK(parse(&c, "--training.steps", "7", "--config", FIX "basic.toml", "--optimizer.lr=0.5", NULL) == CT_OK, "%s",
          ct_last_error());
    CHECK(c.steps == 7 && c.lr == 0.5, "steps %d lr %g", c.steps, c.lr);
    CHECK(c.seq_len == 32, "file still applies to the rest");
    CHECK(parse(&c, "--training.steps=9", "--job.config_file=" FIX "basic.toml", "--optimizer.lr", "-0", NULL) == CT_OK,
          "%s", ct_last_error());
    CHECK(c.steps == 9 && c.lr == 0.0, "= forms");
    // A later command-line value wins over an earlier one.
    CHECK(parse(&c, "--training.seed", "1", "--training.seed", "2", NULL) == CT_OK && c.seed == 2, "last wins");
    // Values that start with '-' are values.
    CHECK(parse(&c, "--parallelism.data_shard_degree", "-1", "--lr_scheduler.decay_ratio", "-1", NULL) == CT_OK &&
              c.data_shard_degree == -1 && c.decay_ratio == -1,
          "negative values");
    CHECK(parse(&c, "--job.description", "two words = fine", NULL) == CT_OK && !strcmp(c.description, "two words = fine"),
          "string value with spaces and '='");
}

static void test_cli_booleans(void) {
    ct_config c;
    CHECK(parse(&c, "--model.rope_scaling", "false", NULL) == CT_OK && !c.rope_scaling, "false");
    CHECK(parse(&c, "--model.rope_scaling=0", NULL) == CT_OK && !c.rope_scaling, "=0");
    CHECK(parse(&c, "--validation.enable", "1", NULL) == CT_OK && c.val_enable, "1");
    CHECK(parse(&c, "--validation.enable=true", NULL) == CT_OK && c.val_enable, "=true");
    CHECK(parse(&c, "--validation.enable", NULL) == CT_OK && c.val_enable, "bare flag at the end");
    CHECK(parse(&c, "--validation.enable", "--training.steps", "5", NULL) == CT_OK && c.val_enable && c.steps == 5,
          "bare flag before another flag");
    EXPECT_ERROR(parse(&c, "--validation.enable", "yes", NULL), CT_E_CONFIG, "validation.enable", "--validation.enable", "expected true, false, 1 or 0, got 'yes'");
    EXPECT_ERROR(parse(&c, "--training.steps", NULL), CT_E_CONFIG, "training.steps", "--training.steps: expected a value");
    EXPECT_ERROR(parse(&c, "--mixed_precision", "--training.steps", "3", NULL), CT_E_CONFIG, "mixed_precision", "--mixed_precision: expected a value (fp32|bf16)");
}


static void test_wrong_types(void) {
    ct_config c;
    EXPECT_ERROR(parse(&c, "--training.steps", "abc", NULL), CT_E_CONFIG, "training.steps", "--training.steps: expected an integer, got 'abc'");
    EXPECT_ERROR(parse(&c, "--training.steps", "1.5", NULL), CT_E_CONFIG, "training.steps", "--training.steps: expected an integer, got '1.5'");
    EXPECT_ERROR(parse(&c, "--training.steps", "99999999999", NULL), CT_E_CONFIG, "training.steps", "--training.steps: expected an integer in");
    EXPECT_ERROR(parse(&c, "--optimizer.lr", "fast", NULL), CT_E_CONFIG, "optimizer.lr", "--optimizer.lr: expected a number, got 'fast'");
    EXPECT_ERROR(parse(&c, "--optimizer.lr=", NULL), CT_E_CONFIG, "optimizer.lr", "--optimizer.lr: expected a number, got ''");
    EXPECT_ERROR(parse(&c, "--training.local_batch_size", "x", NULL), CT_E_CONFIG, "micro_batch_size", "--training.local_batch_size: expected an integer");
    EXPECT_ERROR(parse(&c, "--config", FIX "wrong_type.toml", NULL), CT_E_CONFIG, "training.steps",
               FIX "wrong_type.toml:3: training.steps: expected an integer, got a string");
    EXPECT_ERROR(parse(&c, "--config", FIX "float_for_int.toml", NULL), CT_E_CONFIG, "training.steps",
               FIX "float_for_int.toml:2: training.steps: expected an integer, got a float");
    char path[] = "/tmp/ct_test_config_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    write_file(path, "[training]\nseq_len = [1, 2]\n");
    EXPECT_ERROR(ct_config_load_file(&c, path), CT_E_CONFIG, "training.seq_len", "training.seq_len: expected an integer, got an array");
    write_file(path, "compile.enable = 1\n");
    EXPECT_ERROR(ct_config_load_file(&c, path), CT_E_CONFIG, "compile.enable", ":1: compile.enable: expected a boolean (true or false), got an integer");
    write_file(path, "[training]\nseq_len.x = 1\n");
    EXPECT_ERROR(ct_config_load_file(&c, path), CT_E_CONFIG, "training.seq_len", ":2: training.seq_len: expected an integer, got a table");
    write_file(path, "[job]\ndescription = 5\n");
    EXPECT_ERROR(ct_config_load_file(&c, path), CT_E_CONFIG, "job.description", "job.description: expected a string, got an integer");
    unlink(path);
}

static void test_bad_enum_values(void) {
    ct_config c;
    EXPECT_ERROR(parse(&c, "--mixed_precision", "fp16", NULL), CT_E_CONFIG, "mixed_precision", "--mixed_precision: expected one of fp32|bf16, got 'fp16'");
    EXPECT_ERROR(parse(&c, "--pipeline_schedule", "dualpipe", NULL), CT_E_CONFIG, "pipeline_schedule", "--pipeline_schedule",
               "gpipe|1f1b|interleaved_1f1b|looped_bfs|zb_h1|interleaved_zb|zbv", "'dualpipe'");
    EXPECT_ERROR(parse(&c, "--activation_checkpoint.mode=some", NULL), CT_E_CONFIG, "activation_checkpoint.mode", "activation_checkpoint.mode", "none|selective|full");
    EXPECT_ERROR(parse(&c, "--model.flavor", "13B", NULL), CT_E_CONFIG, "model.flavor", "model.flavor", "debugmodel|8B|70B|405B", "'13B'");
    EXPECT_ERROR(parse(&c, "--metrics.device", "tpu", NULL), CT_E_CONFIG, "metrics.device", "metrics.device", "'tpu'");
    EXPECT_ERROR(parse(&c, "--config", FIX "bad_enum.toml", NULL), CT_E_CONFIG, "mixed_precision",
               FIX "bad_enum.toml:1: mixed_precision: expected one of fp32|bf16, got 'fp16'");
    // A struct filled by code, not by parsing, is still checked.
    ct_config_defaults(&c);
    c.decay_type = (ct_cfg_decay)3;
    EXPECT_ERROR(ct_config_validate(&c), CT_E_CONFIG, "lr_scheduler.decay_type", "lr_scheduler.decay_type: expected one of linear|sqrt|cosine, got the value 3");
}

static void test_file_errors(void) {
    ct_config c;
    EXPECT_ERROR(parse(&c, "--config", FIX "syntax_error.toml", NULL), CT_E_CONFIG, FIX "syntax_error.toml",
                 FIX "syntax_error.toml:3:11: expected a digit in the exponent");
    EXPECT_ERROR(parse(&c, "--config", FIX "nope.toml", NULL), CT_E_IO, FIX "nope.toml", FIX "nope.toml: cannot open");
    EXPECT_ERROR(parse(&c, "--config", NULL), CT_E_CONFIG, "", "--config: expected a file name");
    EXPECT_ERROR(parse(&c, "--config", "--training.steps", "3", NULL), CT_E_CONFIG, "", "--config: expected a file name");
    EXPECT_ERROR(parse(&c, "--config", FIX "basic.toml", "--job.config_file", FIX "basic.toml", NULL), CT_E_CONFIG, "", "already given");
    EXPECT_ERROR(parse(&c, "--config", FIX "alias_twice.toml", NULL), CT_E_CONFIG, "parallelism.data_shard_degree",
               FIX "alias_twice.toml:3: 'parallelism.data_parallel_shard_degree' sets parallelism.data_shard_degree again",
               "line 2");
}

static void test_validate_ranges(void) {
    // The subject is the setting's canonical name: micro_batch_size for its alias.
    static const struct {
        const char *key, *value, *message, *subject;
    } cases[] = {
        {"training.seq_len", "0", "training.seq_len: expected >= 1, got 0", NULL},
        {"training.steps", "0", "training.steps: expected >= 1", NULL},
        {"micro_batch_size", "0", "micro_batch_size: expected >= 1", NULL},
        {"training.local_batch_size", "-3", "micro_batch_size: expected >= 1, got -3", "micro_batch_size"},
        {"gradient_accumulation_steps", "0", "gradient_accumulation_steps: expected >= 1", NULL},
        {"parallelism.data_shard_degree", "0", "parallelism.data_shard_degree: expected >= 1 or -1", NULL},
        {"parallelism.data_shard_degree", "-2", "parallelism.data_shard_degree: expected >= 1 or -1", NULL},
        {"parallelism.data_replicate_degree", "0", "parallelism.data_replicate_degree: expected >= 1", NULL},
        {"parallelism.compute_parallel_degree", "-1", "parallelism.compute_parallel_degree: expected >= 1", NULL},
        {"parallelism.pipeline_degree", "0", "parallelism.pipeline_degree: expected >= 1", NULL},
        {"parallelism.context_extension_degree", "0", "parallelism.context_extension_degree: expected >= 1", NULL},
        {"parallelism.pipeline_stages_per_rank", "0", "parallelism.pipeline_stages_per_rank: expected >= 1", NULL},
        {"parallelism.pipeline_microbatch_size", "-1", "parallelism.pipeline_microbatch_size: expected >= 0", NULL},
        {"parallelism.pipeline_microbatch_size", "3", "parallelism.pipeline_microbatch_size 3 does not divide micro_batch_size 8", NULL},
        {"parallelism.pipeline_layers_per_stage", "-2", "parallelism.pipeline_layers_per_stage: expected >= 0", NULL},
        {"optimizer.lr", "-1e-3", "optimizer.lr: expected >= 0", NULL},
        {"optimizer.lr", "nan", "optimizer.lr: expected >= 0", NULL},
        {"optimizer.beta1", "1", "optimizer.beta1: expected a value in [0, 1)", NULL},
        {"optimizer.beta1", "-0.1", "optimizer.beta1: expected a value in [0, 1)", NULL},
        {"optimizer.beta2", "1.5", "optimizer.beta2: expected a value in [0, 1)", NULL},
        {"optimizer.eps", "0", "optimizer.eps: expected > 0", NULL},
        {"optimizer.weight_decay", "-0.1", "optimizer.weight_decay: expected >= 0", NULL},
        {"lr_scheduler.warmup_steps", "-1", "lr_scheduler.warmup_steps: expected >= 0", NULL},
        {"lr_scheduler.decay_ratio", "1.5", "lr_scheduler.decay_ratio: expected a value in [0, 1]", NULL},
        {"lr_scheduler.min_lr_factor", "2", "lr_scheduler.min_lr_factor: expected a value in [0, 1]", NULL},
        {"model.dim", "-8", "model.dim: expected >= 0", NULL},
        {"model.n_layers", "-1", "model.n_layers: expected >= 0", NULL},
        {"model.norm_eps", "0", "model.norm_eps: expected > 0", NULL},
        {"model.ffn_dim_multiplier", "-1", "model.ffn_dim_multiplier: expected >= 0", NULL},
        {"metrics.log_freq", "0", "metrics.log_freq: expected >= 1", NULL},
        {"metrics.peak_tflops", "-5", "metrics.peak_tflops: expected >= 0", NULL},
        {"validation.freq", "0", "validation.freq: expected >= 1", NULL},
        {"validation.steps", "0", "validation.steps: expected >= 1", NULL},
        {"profiling.profile_freq", "0", "profiling.profile_freq: expected >= 1", NULL},
        {"checkpoint.interval", "0", "checkpoint.interval: expected >= 1", NULL},
        {"checkpoint.keep_latest_k", "-1", "checkpoint.keep_latest_k: expected >= 0", NULL},
        {"comm.init_timeout_seconds", "0", "comm.init_timeout_seconds: expected > 0", NULL},
        {"comm.train_timeout_seconds", "-1", "comm.train_timeout_seconds: expected > 0", NULL},
        {"checkpoint.load_step", "-2", "checkpoint.load_step: expected a step >= 0", NULL},
        {"checkpoint.initial_load_in_hf", "true", "checkpoint.initial_load_in_hf needs checkpoint.initial_load_path", NULL},
        {"job.dump_folder", "", "job.dump_folder: expected a folder name", NULL},
        {"training.dataset", "", "training.dataset: expected", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ct_config c;
        ct_config_defaults(&c);
        CHECK(ct_config_set(&c, cases[k].key, cases[k].value) == CT_OK, "set %s", cases[k].key);
        const char *subject = cases[k].subject ? cases[k].subject : cases[k].key;
        EXPECT_ERROR(ct_config_validate(&c), CT_E_CONFIG, subject, cases[k].message);
        // parse runs validate too.
        char arg[200];
        snprintf(arg, sizeof arg, "--%s=%s", cases[k].key, cases[k].value);
        EXPECT_ERROR(parse(&c, arg, NULL), CT_E_CONFIG, subject, cases[k].message);
    }
    ct_config c;
    EXPECT_ERROR(parse(&c, "--model.dim", "100", "--model.n_heads", "3", NULL), CT_E_CONFIG, "model.dim",
                 "model.dim (100) must be a multiple of model.n_heads (3)");
    EXPECT_ERROR(parse(&c, "--model.n_heads", "8", "--model.n_kv_heads", "3", NULL), CT_E_CONFIG, "model.n_heads",
                 "model.n_heads (8) must be a multiple of model.n_kv_heads (3)");
    EXPECT_ERROR(parse(&c, "--quantization.float8.enable", "--quantization.mxfp8.enable", NULL), CT_E_CONFIG, "quantization.float8.enable", "exclude each other");
    EXPECT_ERROR(parse(&c, "--activation_checkpoint.selective_ac_option", "ops", NULL), CT_E_CONFIG, "activation_checkpoint.selective_ac_option",
               "activation_checkpoint.selective_ac_option: expected \"op\", \"elementwise\" or a block count >= 1, got 'ops'");
    EXPECT_ERROR(parse(&c, "--activation_checkpoint.selective_ac_option", "0", NULL), CT_E_CONFIG, "activation_checkpoint.selective_ac_option",
               "activation_checkpoint.selective_ac_option: expected \"op\", \"elementwise\" or a block count >= 1, got '0'");
    // Edge values that are fine.
    CHECK(parse(&c, "--optimizer.beta1", "0", "--optimizer.lr", "0", "--lr_scheduler.warmup_steps", "0",
                "--training.max_norm", "0", "--lr_scheduler.decay_ratio", "1", NULL) == CT_OK,
          "%s", ct_last_error());
}

static void test_activation_checkpoint_selective(void) {
    ct_config c;
    CHECK(parse(&c, "--activation_checkpoint.selective", NULL) == CT_OK && c.ac_mode == CT_CFG_AC_SELECTIVE,
          "selective implies mode selective: %d", (int)c.ac_mode);
    CHECK(parse(&c, "--activation_checkpoint.selective", "--activation_checkpoint.mode", "selective", NULL) == CT_OK,
          "agreeing settings");
    EXPECT_ERROR(parse(&c, "--activation_checkpoint.selective=true", "--activation_checkpoint.mode=full", NULL), CT_E_CONFIG, "activation_checkpoint.selective",
               "activation_checkpoint.selective = true conflicts with activation_checkpoint.mode = full");
    CHECK(parse(&c, "--activation_checkpoint.mode", "full", NULL) == CT_OK && !c.ac_selective, "full alone");
}

// Every declared setting is built: turning any on is accepted (the last two, checkpoints and
// TensorBoard, landed with milestones 10 and 12).
static void test_not_implemented(void) {
    ct_config c;
    CHECK(parse(&c, "--checkpoint.enable", "--metrics.enable_tensorboard", NULL) == CT_OK &&
              ct_config_check_implemented(&c) == CT_OK,
          "%s", ct_last_error());
    // Settings that are on but harmless in this build.
    CHECK(parse(&c, "--parallelism.data_shard_degree", "4", "--parallelism.data_replicate_degree", "2",
                "--pipeline_schedule", "gpipe", "--metrics.device", "h100",
                "--parallelism.disable_loss_parallel", "--parallelism.fsdp_reshard_after_forward", "never",
                "--validation.enable", NULL) == CT_OK,
          "%s", ct_last_error());
    CHECK(ct_config_check_implemented(&c) == CT_OK, "harmless settings refused: %s", ct_last_error());
}

// TorchTitan's dataset names load (a TorchTitan config is read as it is) but a run given one is
// refused in one line naming the setting and what to set instead; a folder of that name is data.
static void test_torchtitan_dataset_names(void) {
    ct_config c;
    const char *cases[][3] = {
        {"--training.dataset", "c4", "training.dataset: \"c4\" is a TorchTitan dataset name"},
        {"--training.dataset", "c4_test", "set it to a folder of token shards made by `ctitan data prepare"},
        {"--validation.dataset", "c4_validation", "validation.dataset: \"c4_validation\" is a TorchTitan dataset"},
    };
    for (int k = 0; k < 3; k++) {
        CHECK(parse(&c, cases[k][0], cases[k][1], "--validation.enable", NULL) == CT_OK, "%s", ct_last_error());
        EXPECT_ERROR(ct_config_check_implemented(&c), CT_E_CONFIG, cases[k][0] + 2, cases[k][2]);
        CHECK(!strchr(ct_last_error(), '\n'), "one line: %s", ct_last_error());
    }
    // validation.dataset is only read when validation is on.
    CHECK(parse(&c, "--validation.dataset", "c4_validation", NULL) == CT_OK && ct_config_check_implemented(&c) == CT_OK,
          "%s", ct_last_error());
    // A folder named c4 is the data.
    char dir[] = "/tmp/ct_test_c4_XXXXXX", cwd[4096];
    CHECK(mkdtemp(dir) && getcwd(cwd, sizeof cwd), "temp folder");
    CHECK(chdir(dir) == 0 && mkdir("c4", 0755) == 0, "mkdir c4");
    CHECK(parse(&c, "--training.dataset", "c4", NULL) == CT_OK && ct_config_check_implemented(&c) == CT_OK, "%s",
          ct_last_error());
    CHECK(rmdir("c4") == 0 && chdir(cwd) == 0 && rmdir(dir) == 0, "cleanup");
}

static void test_shard_degree(void) {
    ct_config c;
    ct_config_defaults(&c);
    CHECK(ct_config_shard_degree(&c, 1) == 1, "-1 in one process");
    CHECK(ct_config_shard_degree(&c, 8) == 8, "-1 with 8 ranks");
    c.compute_parallel_degree = 2;
    c.pipeline_degree = 2;
    CHECK(ct_config_shard_degree(&c, 16) == 4, "16 / (2*2)");
    c.data_shard_degree = 3;
    CHECK(ct_config_shard_degree(&c, 16) == 3, "explicit degree");
}


// Every field, compared by hand (strings and numbers exactly).
static int configs_equal(const ct_config *a, const ct_config *b) {
    for (int k = 0; k < ct_n_settings; k++) {
        const ct_setting *s = &ct_settings[k];
        const char *pa = (const char *)a + s->offset, *pb = (const char *)b + s->offset;
        int same = s->type == CT_SET_INT     ? *(const int *)pa == *(const int *)pb
                   : s->type == CT_SET_FLOAT ? *(const double *)pa == *(const double *)pb
                   : s->type == CT_SET_BOOL  ? *(const bool *)pa == *(const bool *)pb
                                             : !strcmp(pa, pb);
        if (!same) {
            printf("  differs: %s\n", s->name);
            return 0;
        }
    }
    return 1;
}

static void test_write_toml_round_trip(void) {
    ct_config a;
    CHECK(parse(&a, "--config", FIX "basic.toml", "--job.description", "quote \" back\\slash tab\t newline\n \xC3\xA9",
                "--optimizer.lr", "0.1", "--optimizer.eps", "1e-300", "--lr_scheduler.min_lr_factor", "0.3333333333333333",
                "--model.rope_theta", "500000", "--training.max_norm", "-1", "--pipeline_schedule", "GPipe",
                "--quantization.mxfp8.enable", "--activation_checkpoint.selective", "--metrics.peak_tflops", "1e20", NULL) ==
              CT_OK,
          "%s", ct_last_error());
    FILE *f = tmpfile();
    ct_config_write_toml(&a, f);
    char *text = read_all(f);
    fclose(f);
    ct_toml_value *root = ct_toml_parse(text, "written.toml");
    CHECK(root, "written TOML does not parse: %s", ct_last_error());
    CHECK(root && ct_toml_get_path(root, "optimizer.lr") && ct_toml_get_path(root, "optimizer.lr")->type == CT_TOML_FLOAT,
          "float written as a TOML float");
    CHECK(root && ct_toml_get_path(root, "model.rope_theta")->type == CT_TOML_FLOAT, "500000 written as a float");
    ct_toml_free(root);
    char path[] = "/tmp/ct_test_config_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    write_file(path, text);
    ct_config b;
    ct_config_defaults(&b);
    CHECK(ct_config_load_file(&b, path) == CT_OK, "reload: %s", ct_last_error());
    CHECK(configs_equal(&a, &b), "round trip changed a value");
    CHECK(!strcmp(b.description, "quote \" back\\slash tab\t newline\n \xC3\xA9"), "description [%s]", b.description);
    CHECK(b.lr == 0.1 && b.eps == 1e-300 && b.min_lr_factor == 0.3333333333333333 && b.max_norm == -1, "floats");
    CHECK(!strcmp(b.pipeline_schedule, "gpipe") && b.mxfp8 && b.ac_selective && b.ac_mode == CT_CFG_AC_SELECTIVE, "enums");
    // The defaults round-trip too, through ct_config_parse.
    ct_config_defaults(&a);
    f = fopen(path, "w");
    ct_config_write_toml(&a, f);
    fclose(f);
    char arg[100];
    snprintf(arg, sizeof arg, "--config=%s", path);
    CHECK(parse(&b, arg, NULL) == CT_OK && configs_equal(&a, &b), "defaults round trip: %s", ct_last_error());
    unlink(path);
    free(text);
}

static void test_every_config_file_parses(void) {
    DIR *d = opendir("configs");
    CHECK(d, "configs/ missing (tests run from the repo root)");
    if (!d) return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".toml")) continue;
        char path[600];
        snprintf(path, sizeof path, "configs/%s", e->d_name);
        ct_config c;
        CHECK(parse(&c, "--config", path, NULL) == CT_OK, "%s: %s", path, ct_last_error());
        n++;
    }
    closedir(d);
    CHECK(n >= 7, "only %d config files", n);

    ct_config c;
    CHECK(parse(&c, "--config", "configs/llama3_debug.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(!strcmp(c.flavor, "debugmodel") && c.seq_len == 256 && c.micro_batch_size == 8 && c.warmup_steps == 20 &&
              c.lr == 8e-4 && c.log_freq == 10,
          "debug basics");
    CHECK(!strcmp(c.dataset, "data/fortunes/shards") && !strcmp(c.tokenizer_path, "data/fortunes/tokenizer.tiktoken"),
          "debug data");
    CHECK(c.val_enable && c.val_freq == 50 && c.val_steps == 4, "debug validation");
    CHECK(ct_config_check_implemented(&c) == CT_OK, "the default run must be runnable: %s", ct_last_error());

    CHECK(parse(&c, "--config", "configs/llama3_10b_quick_experiment.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(c.data_shard_degree == 8 && c.compile && c.mixed_precision == CT_CFG_BF16 && c.micro_batch_size == 4 &&
              c.gradient_accumulation_steps == 2,
          "10B layout");
    CHECK(c.dim == 5120 && c.n_layers == 32 && c.n_heads == 40 && c.n_kv_heads == 8, "10B dims");

    CHECK(parse(&c, "--config", "configs/llama3_70b_production.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(c.data_shard_degree == 4 && c.compute_parallel_degree == 2 && c.enable_async_comm && c.ac_selective &&
              c.ac_mode == CT_CFG_AC_SELECTIVE && c.float8 && c.sequence_parallel && !strcmp(c.flavor, "70B"),
          "70B production layout");

    CHECK(parse(&c, "--config", "configs/llama3_405b_at_scale.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(c.data_shard_degree == 8 && c.compute_parallel_degree == 8 && c.pipeline_degree == 8 &&
              c.context_extension_degree == 4 && !strcmp(c.pipeline_schedule, "interleaved_1f1b") && c.mxfp8 &&
              !strcmp(c.flavor, "405B"),
          "405B layout");
    CHECK(ct_config_check_implemented(&c) == CT_OK, "the 405B layout is runnable: %s", ct_last_error());

    CHECK(parse(&c, "--config", "configs/llama3_8b.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(!strcmp(c.flavor, "8B") && c.micro_batch_size == 1 && c.mixed_precision == CT_CFG_BF16 && c.seq_len == 8192,
          "8B in TorchTitan names");
}

int main(void) {
    CT_RUN(test_defaults);
    CT_RUN(test_file_load);
    CT_RUN(test_cli_overrides_file);
    CT_RUN(test_cli_booleans);
    CT_RUN(test_wrong_types);
    CT_RUN(test_bad_enum_values);
    CT_RUN(test_file_errors);
    CT_RUN(test_validate_ranges);
    CT_RUN(test_activation_checkpoint_selective);
    CT_RUN(test_not_implemented);
    CT_RUN(test_torchtitan_dataset_names);
    CT_RUN(test_shard_degree);
    CT_RUN(test_write_toml_round_trip);
    CT_RUN(test_every_config_file_parses);
    CT_TEST_EXIT();
}
