// TorchTitan's own config files, as they are (tests/fixtures/torchtitan/): every key is honoured or
// listed, once, with its reason; TorchTitan's settings ctitan acts on (model.converters,
// training.global_batch_size, compile.components, selective_ac_option as an integer, the older
// [float8] section, [comm]); and every problem of a configuration reported together. The runs
// themselves (the debug file trains, the others are refused for memory): test_torchtitan_configs.sh.
#include <string.h>
#include <unistd.h>

#include "config_test.h"
#include "expect_error.h"
#include "core/config.h"
#include "test.h"

#define TT "tests/fixtures/torchtitan/"

static ct_config_report rep;

// Parses a NULL-terminated argument list into c, filling rep.
static ct_status parse_rep(ct_config *c, ...) {
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, c);
    for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
    va_end(ap);
    return ct_config_parse_report(c, argc, argv, &rep);
}

static const ct_config_note *note_for(const char *key) {
    for (int i = 0; i < rep.n_notes; i++)
        if (!strcmp(rep.notes[i].key, key)) return &rep.notes[i];
    return NULL;
}

// The notes are exactly `keys` (NULL-terminated), in any order.
static int notes_are(const char *const *keys) {
    int n = 0;
    for (; keys[n]; n++)
        if (!note_for(keys[n])) return 0;
    return n == rep.n_notes;
}

static int has_problem(const char *fragment) {
    for (int i = 0; i < rep.n_problems && i < CT_CONFIG_MAX_PROBLEMS; i++)
        if (strstr(rep.problems[i], fragment)) return 1;
    return 0;
}

static char *temp_file(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/ct_test_tt_XXXXXX");
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    write_file(path, text);
    return path;
}

static void test_debug_model(void) {
    ct_config c;
    CHECK(parse_rep(&c, "--config", TT "debug_model.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(!strcmp(c.flavor, "debugmodel") && !strcmp(c.model_name, "llama3"), "model");
    CHECK(c.micro_batch_size == 8 && c.seq_len == 2048 && c.steps == 10 && c.max_norm == 1.0, "training");
    CHECK(!strcmp(c.dataset, "c4_test"), "dataset %s", c.dataset);
    CHECK(c.lr == 8e-4 && c.eps == 1e-8 && c.warmup_steps == 2 && c.decay_ratio == 0.8 &&
              c.decay_type == CT_CFG_DECAY_LINEAR && c.min_lr_factor == 0.0,
          "optimizer / schedule");
    CHECK(c.data_shard_degree == -1 && c.compute_parallel_degree == 1 && !strcmp(c.pipeline_schedule, "interleaved_1f1b") &&
              c.fsdp_reshard_after_forward == CT_CFG_RESHARD_DEFAULT && !c.enable_async_comm,
          "parallelism");
    CHECK(c.ac_mode == CT_CFG_AC_SELECTIVE && !strcmp(c.ac_option, "2"), "ac %d %s", (int)c.ac_mode, c.ac_option);
    CHECK(!c.compile && !strcmp(c.compile_components, "model,loss"), "compile %s", c.compile_components);
    CHECK(!strcmp(c.quant_filter, "output") && !c.float8 && !c.mxfp8, "float8 filter %s", c.quant_filter);
    CHECK(!c.ckpt_enable && c.ckpt_interval == 10 && !c.ckpt_last_save_model_only &&
              c.ckpt_export_dtype == CT_CFG_FP32 && c.ckpt_async_mode == CT_CFG_CKPT_SYNC,
          "checkpoint");
    CHECK(!c.enable_profiling && !strcmp(c.save_traces_folder, "profile_trace") && c.profile_freq == 10, "profiling");
    CHECK(c.log_freq == 1 && !c.enable_tensorboard && !c.print_config, "metrics / job");
    CHECK(!c.val_enable && !strcmp(c.val_dataset, "c4_validation") && c.val_freq == 5 && c.val_steps == 10, "validation");
    // Listed: the colours (false asks for colours, which ctitan has not), the assets folder, and
    // the precision TorchTitan would use where the file says none. enable_wandb = false and the
    // float8 all-gather switches at false ask for nothing ctitan lacks.
    static const char *const keys[] = {"metrics.disable_color_printing", "model.hf_assets_path",
                                       "training.mixed_precision_param", NULL};
    CHECK(notes_are(keys), "%d notes", rep.n_notes);
    const ct_config_note *n = note_for("model.hf_assets_path");
    CHECK(n && !strcmp(n->value, "\"./tests/assets/tokenizer\"") && strstr(n->where, "debug_model.toml:24") &&
              strstr(n->why, "model.tokenizer_path"),
          "hf_assets_path note: %s %s", n ? n->value : "", n ? n->where : "");
}

static void test_big_models(void) {
    ct_config c;
    CHECK(parse_rep(&c, "--config", TT "llama3_8b.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(!strcmp(c.flavor, "8B") && c.micro_batch_size == 1 && c.seq_len == 8192 && c.steps == 1000 && c.lr == 3e-4 &&
              c.warmup_steps == 200,
          "8B values");
    CHECK(c.ac_mode == CT_CFG_AC_SELECTIVE && !strcmp(c.ac_option, "op"), "8B ac");
    CHECK(c.enable_profiling && c.profile_freq == 100 && c.enable_tensorboard && c.log_freq == 10, "8B metrics");
    CHECK(c.ckpt_last_save_model_only && c.val_steps == 1200 && c.val_freq == 500, "8B checkpoint / validation");
    static const char *const keys8[] = {"model.hf_assets_path", "training.mixed_precision_param", NULL};
    CHECK(notes_are(keys8), "8B: %d notes", rep.n_notes);

    CHECK(parse_rep(&c, "--config", TT "llama3_70b.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(!strcmp(c.flavor, "70B") && c.compute_parallel_degree == 8 && c.micro_batch_size == 8 &&
              c.ac_mode == CT_CFG_AC_FULL && c.lr == 1.5e-4,
          "70B values");
    CHECK(notes_are(keys8), "70B: %d notes", rep.n_notes);

    CHECK(parse_rep(&c, "--config", TT "llama3_405b.toml", NULL) == CT_OK, "%s", ct_last_error());
    CHECK(!strcmp(c.flavor, "405B") && c.compute_parallel_degree == 8 && c.enable_async_comm && c.micro_batch_size == 2 &&
              c.steps == 3000 && c.warmup_steps == 600,
          "405B values");
    CHECK(!strcmp(c.converters, "float8") && c.float8 && !c.mxfp8 && c.float8_recipe == CT_CFG_F8_TENSORWISE,
          "converters = [\"float8\"] turns float8 on");
    CHECK(c.compile && !strcmp(c.compile_components, "model,loss") && c.ac_mode == CT_CFG_AC_FULL, "405B compile / ac");
    static const char *const keys405[] = {"model.hf_assets_path", "training.mixed_precision_param",
                                          "quantize.linear.float8.enable_fsdp_float8_all_gather",
                                          "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", NULL};
    CHECK(notes_are(keys405), "405B: %d notes", rep.n_notes);
    // Given the precision, the default's note goes.
    CHECK(parse_rep(&c, "--config", TT "llama3_405b.toml", "--training.mixed_precision_param", "bfloat16", NULL) == CT_OK &&
              !note_for("training.mixed_precision_param") && rep.n_notes == 3,
          "precision given: %d notes", rep.n_notes);
}

// The block itself: every note's key, where and reason, no line wider than asked, one block.
static void test_warning_block(void) {
    ct_config c;
    CHECK(parse_rep(&c, "--config", TT "llama3_405b.toml", NULL) == CT_OK, "%s", ct_last_error());
    FILE *f = tmpfile();
    ct_config_print_notes(&rep, f, 80);
    char *text = read_all(f);
    fclose(f);
    CHECK(!strncmp(text, "warning: ", 9) && !strstr(text + 1, "warning: "), "one block: %s", text);
    CHECK(strstr(text, "4 settings"), "count: %s", text);
    for (int i = 0; i < rep.n_notes; i++) CHECK(strstr(text, rep.notes[i].key), "block lacks %s", rep.notes[i].key);
    CHECK(strstr(text, "llama3_405b.toml:62") && strstr(text, "FSDP gathers parameters"), "where and why: %s", text);
    int widest = 0;
    for (const char *line = text; *line;) {
        int n = (int)strcspn(line, "\n");
        if (n > widest) widest = n;
        line += n + (line[n] == '\n');
    }
    CHECK(widest <= 80, "a line of %d columns", widest);
    free(text);
    // Nothing to say: nothing printed.
    CHECK(parse_rep(&c, "--training.steps", "3", NULL) == CT_OK && rep.n_notes == 0, "notes without a TorchTitan key");
    f = tmpfile();
    ct_config_print_notes(&rep, f, 80);
    CHECK(ftell(f) == 0, "an empty report printed");
    fclose(f);
}

// The [float8] section of older TorchTitan files, [comm], and quiet values.
static void test_older_keys_and_comm(void) {
    ct_config c;
    char *path = temp_file("[model]\nname = \"llama3\"\nconverters = [\"float8\"]\n"
                           "[float8]\nenable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = false\n"
                           "recipe_name = \"rowwise\"\nfilter_fqns = [\"output\", \"layers.0\"]\n"
                           "[comm]\ninit_timeout_seconds = 600\ntrain_timeout_seconds = 60\ntrace_buf_size = 20000\n"
                           "[metrics]\nenable_wandb = false\n"
                           "[training]\nmixed_precision_param = \"bfloat16\"\n");
    CHECK(parse_rep(&c, "--config", path, NULL) == CT_OK, "%s", ct_last_error());
    CHECK(c.float8 && c.float8_recipe == CT_CFG_F8_ROWWISE && !strcmp(c.quant_filter, "output,layers.0"), "float8 keys");
    CHECK(c.comm_init_timeout == 600 && c.comm_train_timeout == 60, "comm timeouts");
    static const char *const keys[] = {"float8.enable_fsdp_float8_all_gather", "comm.trace_buf_size", NULL};
    CHECK(notes_are(keys), "%d notes", rep.n_notes);
    // The quiet values are honoured silently; others are listed, from the command line too.
    CHECK(parse_rep(&c, "--config", path, "--comm.trace_buf_size", "0", "--metrics.enable_wandb", "true", NULL) == CT_OK,
          "%s", ct_last_error());
    const ct_config_note *n = note_for("metrics.enable_wandb");
    CHECK(n && !strcmp(n->where, "command line") && !strcmp(n->value, "true") && rep.n_notes == 3, "%d notes", rep.n_notes);
    // The written configuration reads back as the same run (lists as arrays).
    FILE *f = fopen(path, "w");
    ct_config_write_toml(&c, f);
    fclose(f);
    ct_config d;
    CHECK(parse_rep(&d, "--config", path, NULL) == CT_OK, "written config: %s", ct_last_error());
    CHECK(!strcmp(d.converters, "float8") && d.float8 && !strcmp(d.quant_filter, "output,layers.0") &&
              !strcmp(d.compile_components, "model,loss") && rep.n_notes == 0,
          "round trip");
    unlink(path);
}

static void test_converters_and_compile(void) {
    ct_config c;
    CHECK(parse_rep(&c, "--model.converters", "mx", NULL) == CT_OK && c.mxfp8 && !c.float8, "mx");
    CHECK(parse_rep(&c, "--model.converters", "quantize.linear.float8", NULL) == CT_OK && c.float8, "long name");
    CHECK(parse_rep(&c, "--model.converters", "quantize.grouped_mm.float8", NULL) == CT_OK && !c.float8 &&
              note_for("model.converters"),
          "grouped matmuls: a note");
    CHECK(parse_rep(&c, "--model.converters", "float8,int4", NULL) == CT_ERR &&
              has_problem("model.converters: unknown converter 'int4'"),
          "%s", ct_last_error());
    CHECK(parse_rep(&c, "--model.converters", "float8", "--quantization.float8.enable", "false", NULL) == CT_ERR &&
              has_problem("model.converters holds float8 but quantization.float8.enable = false"),
          "%s", ct_last_error());
    CHECK(parse_rep(&c, "--model.converters", "float8, mx", NULL) == CT_ERR && rep.n_problems == 1 &&
              has_problem("float8 and mx exclude each other"),
          "%d: %s", rep.n_problems, ct_last_error());
    CHECK(parse_rep(&c, "--model.converters", "float8,,mx", NULL) == CT_ERR && has_problem("an empty name"), "%s",
          ct_last_error());
    // compile.components: model alone is what compile.enable fuses; loss is always fused.
    CHECK(parse_rep(&c, "--compile.enable", "--compile.components", "loss", NULL) == CT_OK && !c.compile, "loss only");
    CHECK(parse_rep(&c, "--compile.enable", "--compile.components", "model", NULL) == CT_OK && c.compile &&
              note_for("compile.components"),
          "model only: the loss is said");
    CHECK(parse_rep(&c, "--compile.components", "model,graph", NULL) == CT_ERR &&
              has_problem("compile.components: unknown component 'graph' (model, loss)"),
          "%s", ct_last_error());
    // selective_ac_option as TorchTitan writes it: an integer, or "op".
    char *path = temp_file("[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = 3\n");
    CHECK(parse_rep(&c, "--config", path, NULL) == CT_OK && !strcmp(c.ac_option, "3"), "%s", ct_last_error());
    write_file(path, "[activation_checkpoint]\nselective_ac_option = 0\n");
    CHECK(parse_rep(&c, "--config", path, NULL) == CT_ERR && has_problem("expected \"op\", \"elementwise\" or a block count >= 1"), "%s",
          ct_last_error());
    // Two names of one setting with one value say it twice; with two values the file contradicts itself.
    write_file(path, "[quantize.linear.float8]\nfilter_fqns = [\"output\"]\n[quantize.linear.mx]\nfilter_fqns = [\"output\"]\n");
    CHECK(parse_rep(&c, "--config", path, NULL) == CT_OK, "%s", ct_last_error());
    write_file(path, "[quantize.linear.float8]\nfilter_fqns = [\"output\"]\n[quantize.linear.mx]\nfilter_fqns = []\n");
    CHECK(parse_rep(&c, "--config", path, NULL) == CT_ERR && has_problem("sets quantization.filter_fqns again"), "%s",
          ct_last_error());
    write_file(path, "[quantize.linear.float8]\nfilter_fqns = [\"output\", 3]\n");
    CHECK(parse_rep(&c, "--config", path, NULL) == CT_ERR && has_problem("expected a list of strings, got an array holding an integer"),
          "%s", ct_last_error());
    unlink(path);
}

static void test_global_batch_size(void) {
    ct_config c;
    // 4 ranks of FSDP, 2 sequences per micro-batch: 8 per micro-batch over the job.
    CHECK(parse_rep(&c, "--training.local_batch_size", "2", "--training.global_batch_size", "32", NULL) == CT_OK, "%s",
          ct_last_error());
    CHECK(ct_config_apply_world(&c, 4, &rep) == CT_OK && c.gradient_accumulation_steps == 4, "accum %d",
          c.gradient_accumulation_steps);
    // Replicas count as data parallel, tensor parallel ranks do not.
    CHECK(parse_rep(&c, "--micro_batch_size", "2", "--training.global_batch_size", "32", "--parallelism.tensor_parallel_degree",
                    "2", "--parallelism.data_parallel_replicate_degree", "2", NULL) == CT_OK &&
              ct_config_apply_world(&c, 8, &rep) == CT_OK && c.gradient_accumulation_steps == 4,
          "hsdp x tp: accum %d", c.gradient_accumulation_steps);
    CHECK(parse_rep(&c, "--micro_batch_size", "2", "--training.global_batch_size", "30", NULL) == CT_OK &&
              ct_config_apply_world(&c, 4, &rep) == CT_ERR &&
              has_problem("training.global_batch_size 30 is not a multiple of micro_batch_size (training.local_batch_size) 2 x "
                          "data-parallel degree 4 = 8 sequences"),
          "%s", ct_last_error());
    CHECK(parse_rep(&c, "--micro_batch_size", "2", "--training.global_batch_size", "32", "--gradient_accumulation_steps", "2",
                    NULL) == CT_OK &&
              ct_config_apply_world(&c, 4, &rep) == CT_ERR &&
              has_problem("means gradient_accumulation_steps 4") && has_problem("gradient_accumulation_steps is 2"),
          "%s", ct_last_error());
    CHECK(parse_rep(&c, "--micro_batch_size", "2", "--training.global_batch_size", "32", "--gradient_accumulation_steps", "4",
                    NULL) == CT_OK &&
              ct_config_apply_world(&c, 4, &rep) == CT_OK,
          "both, agreeing: %s", ct_last_error());
    CHECK(parse_rep(&c, "--gradient_accumulation_steps", "3", NULL) == CT_OK && ct_config_apply_world(&c, 4, &rep) == CT_OK &&
              c.gradient_accumulation_steps == 3,
          "-1 leaves accumulation as given");
    CHECK(parse_rep(&c, "--training.global_batch_size", "0", NULL) == CT_ERR &&
              has_problem("training.global_batch_size: expected >= 1, or -1"),
          "%s", ct_last_error());
}

// Everything wrong with a configuration comes back at once, each on its own line.
static void test_all_problems_together(void) {
    ct_config c;
    char *path = temp_file("[activation_checkpoint]\nmode = \"full\"\nselective = true\n"
                           "[model]\nconverters = [\"float8\", \"mx\"]\n"
                           "[training]\nsteps = \"ten\"\n");
    CHECK(parse_rep(&c, "--config", path, "--optimizer.lr", "-1", "--bogus.key", "1", NULL) == CT_ERR, "accepted");
    CHECK(rep.n_problems == 5, "%d problems", rep.n_problems);
    CHECK(has_problem("selective = true conflicts with activation_checkpoint.mode = full"), "ac");
    CHECK(has_problem("float8 and mx exclude each other"), "converters");
    CHECK(has_problem(":7: training.steps: expected an integer, got a string"), "type");
    CHECK(has_problem("optimizer.lr: expected >= 0, got -1"), "range");
    CHECK(has_problem("unknown setting 'bogus.key'"), "unknown");
    for (int i = 0; i < rep.n_problems; i++) CHECK(!strchr(rep.problems[i], '\n'), "problem %d is not one line", i);
    // ct_config_parse says the first, as it always did.
    EXPECT_ERROR(parse(&c, "--config", path, NULL), CT_E_CONFIG, "training.steps", ":7: training.steps: expected an integer");
    unlink(path);
}

int main(void) {
    CT_RUN(test_debug_model);
    CT_RUN(test_big_models);
    CT_RUN(test_warning_block);
    CT_RUN(test_older_keys_and_comm);
    CT_RUN(test_converters_and_compile);
    CT_RUN(test_global_batch_size);
    CT_RUN(test_all_problems_together);
    CT_TEST_EXIT();
}
