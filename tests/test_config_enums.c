// Settings with a fixed set of values are enums after parsing: every spelling (and synonym) lands
// on its constant, the constant is written back as its spelling, and a value outside the set --
// typed, or put in a struct by code -- is refused naming the setting.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_test.h"
#include "core/config.h"
#include "expect_error.h"
#include "test.h"

#define F(field) offsetof(ct_config, field)

static const struct {
    const char *setting, *spelling;
    size_t offset;
    int value;
} cases[] = {
    {"mixed_precision", "fp32", F(mixed_precision), CT_CFG_FP32},
    {"mixed_precision", "bf16", F(mixed_precision), CT_CFG_BF16},
    {"mixed_precision_reduce", "bf16", F(mixed_precision_reduce), CT_CFG_BF16},
    {"checkpoint.export_dtype", "bf16", F(ckpt_export_dtype), CT_CFG_BF16},
    {"lr_scheduler.decay_type", "linear", F(decay_type), CT_CFG_DECAY_LINEAR},
    {"lr_scheduler.decay_type", "sqrt", F(decay_type), CT_CFG_DECAY_SQRT},
    {"lr_scheduler.decay_type", "cosine", F(decay_type), CT_CFG_DECAY_COSINE},
    {"parallelism.context_parallel_load_balancer", "headtail", F(cp_load_balancer), CT_CFG_CP_HEADTAIL},
    {"parallelism.context_parallel_load_balancer", "none", F(cp_load_balancer), CT_CFG_CP_NONE},
    {"parallelism.context_parallel_rotate_method", "allgather", F(cp_rotate_method), CT_CFG_CP_ALLGATHER},
    {"parallelism.context_parallel_rotate_method", "ring", F(cp_rotate_method), CT_CFG_CP_RING},
    {"parallelism.fsdp_reshard_after_forward", "default", F(fsdp_reshard_after_forward), CT_CFG_RESHARD_DEFAULT},
    {"parallelism.fsdp_reshard_after_forward", "always", F(fsdp_reshard_after_forward), CT_CFG_RESHARD_ALWAYS},
    {"parallelism.fsdp_reshard_after_forward", "never", F(fsdp_reshard_after_forward), CT_CFG_RESHARD_NEVER},
    {"activation_checkpoint.mode", "none", F(ac_mode), CT_CFG_AC_NONE},
    {"activation_checkpoint.mode", "selective", F(ac_mode), CT_CFG_AC_SELECTIVE},
    {"activation_checkpoint.mode", "full", F(ac_mode), CT_CFG_AC_FULL},
    {"quantization.float8.recipe", "tensorwise", F(float8_recipe), CT_CFG_F8_TENSORWISE},
    {"quantization.float8.recipe", "rowwise", F(float8_recipe), CT_CFG_F8_ROWWISE},
    {"checkpoint.async_mode", "disabled", F(ckpt_async_mode), CT_CFG_CKPT_SYNC},
    {"checkpoint.async_mode", "async", F(ckpt_async_mode), CT_CFG_CKPT_ASYNC},
    {"model.attn_mask_type", "causal", F(attn_mask_type), CT_CFG_MASK_CAUSAL},
    {"model.attn_mask_type", "block_causal", F(attn_mask_type), CT_CFG_MASK_BLOCK_CAUSAL},
    {"model.rope_positions", "sequence", F(rope_positions), CT_CFG_ROPE_SEQUENCE},
    {"model.rope_positions", "document", F(rope_positions), CT_CFG_ROPE_DOCUMENT},
    {"model.moe.score_func", "softmax", F(moe_score_func), CT_CFG_SCORE_SOFTMAX},
    {"model.moe.score_func", "sigmoid", F(moe_score_func), CT_CFG_SCORE_SIGMOID},
    {"model.moe.aux_loss_level", "sequence", F(moe_aux_loss_level), CT_CFG_AUX_SEQUENCE},
    {"model.moe.aux_loss_level", "batch", F(moe_aux_loss_level), CT_CFG_AUX_BATCH},
    {"metrics.device", "cpu", F(device), CT_CFG_PEAK_CPU},
    {"metrics.device", "h100", F(device), CT_CFG_PEAK_H100},
    {"metrics.device", "h200", F(device), CT_CFG_PEAK_H200},
    {"metrics.device", "a100", F(device), CT_CFG_PEAK_A100},
    {"training.device", "cpu", F(train_device), CT_CFG_DEVICE_CPU},
    {"training.device", "cuda", F(train_device), CT_CFG_DEVICE_CUDA},
    {"training.device", "cpu_sim", F(train_device), CT_CFG_DEVICE_CPU_SIM},
    {"metrics.progress", "auto", F(progress), CT_CFG_PROGRESS_AUTO},
    {"metrics.progress", "bar", F(progress), CT_CFG_PROGRESS_BAR},
    {"metrics.progress", "lines", F(progress), CT_CFG_PROGRESS_LINES},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static int field(const ct_config *c, size_t offset) { return *(const int *)((const char *)c + offset); }

static void test_spellings_land_on_constants(void) {
    for (int i = 0; i < N_CASES; i++) {
        ct_config c;
        ct_config_defaults(&c);
        CHECK(ct_config_set(&c, cases[i].setting, cases[i].spelling) == CT_OK, "%s %s: %s", cases[i].setting,
              cases[i].spelling, ct_last_error());
        CHECK(field(&c, cases[i].offset) == cases[i].value, "%s %s: %d, expected %d", cases[i].setting,
              cases[i].spelling, field(&c, cases[i].offset), cases[i].value);
        char buf[32];
        CHECK(!strcmp(ct_setting_choice(cases[i].setting, cases[i].value, buf, sizeof buf), cases[i].spelling),
              "%s %d spelt %s", cases[i].setting, cases[i].value, buf);
    }
    // Synonyms, in any case, land on the same constant.
    ct_config c;
    ct_config_defaults(&c);
    CHECK(ct_config_set(&c, "mixed_precision", "BFloat16") == CT_OK && c.mixed_precision == CT_CFG_BF16, "bfloat16");
    CHECK(ct_config_set(&c, "checkpoint.async_mode", "async_with_pinned_mem") == CT_OK &&
              c.ckpt_async_mode == CT_CFG_CKPT_ASYNC,
          "async_with_pinned_mem");
}

static void test_names(void) {
    CHECK(!strcmp(ct_cfg_precision_name(CT_CFG_FP32), "fp32") && !strcmp(ct_cfg_precision_name(CT_CFG_BF16), "bf16"),
          "precision names");
    CHECK(!strcmp(ct_cfg_device_name(CT_CFG_DEVICE_CPU), "cpu") && !strcmp(ct_cfg_device_name(CT_CFG_DEVICE_CUDA), "cuda") &&
              !strcmp(ct_cfg_device_name(CT_CFG_DEVICE_CPU_SIM), "cpu_sim"),
          "device names");
    char buf[32];
    CHECK(!strcmp(ct_setting_choice("metrics.device", 9, buf, sizeof buf), "?"), "out of range: %s", buf);
    CHECK(!strcmp(ct_setting_choice("training.steps", 0, buf, sizeof buf), "?"), "not an enum: %s", buf);
}

// The effective configuration writes the spelling, and reads back to the same constant.
static void test_written_back_as_spelling(void) {
    ct_config c, back;
    CHECK(parse(&c, "--mixed_precision", "bf16", "--metrics.progress", "lines", "--model.attn_mask_type", "block_causal",
                "--model.rope_positions", "document", NULL) == CT_OK,
          "%s", ct_last_error());
    char path[] = "/tmp/ct_config_enums_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    ct_config_write_toml(&c, f);
    fclose(f);
    f = fopen(path, "r");
    char *text = read_all(f);
    fclose(f);
    CHECK(strstr(text, "\nmixed_precision = \"bf16\"") && strstr(text, "\nprogress = \"lines\"") &&
              strstr(text, "\nattn_mask_type = \"block_causal\"") && strstr(text, "\nrope_positions = \"document\""),
          "written: %.300s", text);
    free(text);
    CHECK(parse(&back, "--config", path, NULL) == CT_OK, "%s", ct_last_error());
    CHECK(back.mixed_precision == CT_CFG_BF16 && back.progress == CT_CFG_PROGRESS_LINES &&
              back.attn_mask_type == CT_CFG_MASK_BLOCK_CAUSAL && back.rope_positions == CT_CFG_ROPE_DOCUMENT,
          "read back");
    remove(path);
}

static void test_out_of_set_refused(void) {
    ct_config c;
    EXPECT_ERROR(parse(&c, "--lr_scheduler.decay_type", "step", NULL), CT_E_CONFIG, "lr_scheduler.decay_type",
                 "expected one of linear|sqrt|cosine, got 'step'");
    // A value put in by code, outside the set.
    ct_config_defaults(&c);
    c.progress = (ct_cfg_progress)5;
    EXPECT_ERROR(ct_config_validate(&c), CT_E_CONFIG, "metrics.progress", "expected one of auto|bar|lines, got the value 5");
}

// activation_checkpoint.mode, .selective and .selective_ac_option read as one policy.
static void test_ac_policy(void) {
    ct_config c;
    CHECK(parse(&c, NULL) == CT_OK && ct_config_ac(&c).kind == CT_CFG_KEEP_ALL, "default keeps all");
    CHECK(parse(&c, "--activation_checkpoint.mode", "full", NULL) == CT_OK && ct_config_ac(&c).kind == CT_CFG_KEEP_INPUT,
          "full");
    CHECK(parse(&c, "--activation_checkpoint.selective", NULL) == CT_OK && ct_config_ac(&c).kind == CT_CFG_KEEP_OPS,
          "selective: op");
    CHECK(parse(&c, "--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option",
                "elementwise", NULL) == CT_OK &&
              ct_config_ac(&c).kind == CT_CFG_KEEP_ELEMENTWISE,
          "elementwise");
    CHECK(parse(&c, "--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "3",
                NULL) == CT_OK,
          "%s", ct_last_error());
    ct_cfg_ac ac = ct_config_ac(&c);
    CHECK(ac.kind == CT_CFG_KEEP_EVERY_N && ac.every == 3, "every 3: %d %d", (int)ac.kind, ac.every);
    // The option alone, without selective, changes nothing.
    CHECK(parse(&c, "--activation_checkpoint.selective_ac_option", "3", NULL) == CT_OK &&
              ct_config_ac(&c).kind == CT_CFG_KEEP_ALL,
          "option without mode");
}

int main(void) {
    CT_RUN(test_spellings_land_on_constants);
    CT_RUN(test_names);
    CT_RUN(test_written_back_as_spelling);
    CT_RUN(test_out_of_set_refused);
    CT_RUN(test_ac_policy);
    CT_TEST_EXIT();
}
