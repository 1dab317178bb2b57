// The router and balancing settings (model.moe.*): their values in the model's dimensions and in
// the blocks' tensors (the choosing bias exists only with model.moe.load_balance_coeff > 0), and
// each invalid combination refused with one line naming the setting: a negative coefficient, the
// load-balancing loss under context parallelism, a router the Hugging Face export cannot hold with
// checkpoint.last_save_in_hf, any of them on a dense family. The structure's counts (shared
// experts, dense first blocks and their width): the flavor's or the settings', and each bad value
// refused.
#include <string.h>

#include "core/config.h"
#include "expect_error.h"
#include "model/model.h"
#include "model/params.h"
#include "test.h"

static ct_config moe_config(void) {
    ct_config c;
    ct_config_defaults(&c);
    const char *kv[][2] = {{"model.name", "llama3_moe"}, {"model.dim", "32"},          {"model.n_layers", "2"},
                           {"model.n_heads", "4"},       {"model.vocab_size", "64"},   {"model.ffn_hidden_dim", "16"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK(ct_config_set(&c, kv[i][0], kv[i][1]) == CT_OK, "%s: %s", kv[i][0], ct_last_error());
    return c;
}

static void set(ct_config *c, const char *key, const char *value) {
    CHECK(ct_config_set(c, key, value) == CT_OK, "%s = %s: %s", key, value, ct_last_error());
}

// Defaults: softmax, renormalised, no loss, no bias -- and no bias tensor.
static void defaults(void) {
    ct_config c = moe_config();
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "%s", ct_last_error());
    CHECK(!m.moe_sigmoid && m.moe_route_norm && m.moe_aux_coeff == 0 && m.moe_aux_per_sequence && m.moe_bias_rate == 0,
          "sigmoid %d norm %d aux %g per sequence %d bias %g", m.moe_sigmoid, m.moe_route_norm, m.moe_aux_coeff,
          m.moe_aux_per_sequence, m.moe_bias_rate);
    ct_param_table t;
    ct_param_table_build(&t, &m);
    CHECK(!ct_param_find(&t, "layers.0.moe.expert_bias"), "a bias tensor without model.moe.load_balance_coeff");
    ct_param_table_free(&t);
}

static void values(void) {
    ct_config c = moe_config();
    set(&c, "model.moe.score_func", "sigmoid");
    set(&c, "model.moe.route_norm", "false");
    set(&c, "model.moe.aux_loss_coeff", "0.01");
    set(&c, "model.moe.aux_loss_level", "batch");
    set(&c, "model.moe.load_balance_coeff", "0.001");
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "%s", ct_last_error());
    CHECK(m.moe_sigmoid && !m.moe_route_norm && m.moe_aux_coeff == 0.01 && !m.moe_aux_per_sequence &&
              m.moe_bias_rate == 0.001,
          "sigmoid %d norm %d aux %g per sequence %d bias %g", m.moe_sigmoid, m.moe_route_norm, m.moe_aux_coeff,
          m.moe_aux_per_sequence, m.moe_bias_rate);
    ct_param_table t;
    ct_param_table_build(&t, &m);
    for (int l = 0; l < 2; l++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.moe.expert_bias", l);
        const ct_param *p = ct_param_find(&t, name);
        CHECK(p && p->numel == m.n_experts && p->init_std == 0, "%s: %s", name, p ? "wrong shape or start" : "missing");
    }
    ct_param_table_free(&t);
}

static void negative_coefficients(void) {
    ct_config c = moe_config();
    ct_model_config m;
    set(&c, "model.moe.aux_loss_coeff", "-0.01");
    EXPECT_ERROR(ct_model_config_from(&m, &c), CT_E_CONFIG, "model.moe.aux_loss_coeff", "-0.01", ">= 0");
    c = moe_config();
    set(&c, "model.moe.load_balance_coeff", "-1e-3");
    EXPECT_ERROR(ct_model_config_from(&m, &c), CT_E_CONFIG, "model.moe.load_balance_coeff", "-0.001", ">= 0");
}

// A sequence split over context-parallel ranks has no rank that sees its load; the bias, counted
// over every rank, is fine there.
static void aux_loss_with_context_parallel(void) {
    ct_config c = moe_config();
    ct_model_config m;
    set(&c, "model.moe.aux_loss_coeff", "0.01");
    set(&c, "parallelism.context_parallel_degree", "2");
    EXPECT_ERROR(ct_model_config_from(&m, &c), CT_E_CONFIG, "model.moe.aux_loss_coeff",
                 "parallelism.context_parallel_degree 2");
    set(&c, "model.moe.aux_loss_coeff", "0");
    set(&c, "model.moe.load_balance_coeff", "0.001");
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "the bias under cp: %s", ct_last_error());
}

// The Hugging Face layout (Qwen3-MoE) holds only a softmax router with renormalised weights.
static void hf_export_of_another_router(void) {
    static const char *kv[][2] = {{"model.moe.score_func", "sigmoid"}, {"model.moe.route_norm", "false"},
                                  {"model.moe.load_balance_coeff", "0.001"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        ct_config c = moe_config();
        set(&c, "checkpoint.last_save_in_hf", "true");
        ct_model_config m;
        CHECK(ct_model_config_from(&m, &c) == CT_OK, "the default router: %s", ct_last_error());
        set(&c, kv[i][0], kv[i][1]);
        EXPECT_ERROR(ct_model_config_from(&m, &c), CT_E_CONFIG, "checkpoint.last_save_in_hf", "Qwen3-MoE");
    }
}

// DeepSeek's structure from the settings: the flavor's (debugmodel: none; deepseek_v3_like: 1
// shared expert, 3 dense first blocks of 18432, capped by a smaller model.n_layers), or the
// settings' counts and width (a flavor without dense blocks taking Llama 3's rule for the width).
static void structure(void) {
    ct_config c = moe_config();
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "%s", ct_last_error());
    CHECK(m.n_shared_experts == 0 && m.n_dense_layers == 0, "debugmodel: shared %d dense %d", m.n_shared_experts,
          m.n_dense_layers);
    set(&c, "model.moe.num_shared_experts", "2");
    set(&c, "model.moe.num_dense_layers", "1");
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "%s", ct_last_error());
    // Llama 3's rule at dim 32: 2/3 x 4 x 32 = 85, up to a multiple of 256.
    CHECK(m.n_shared_experts == 2 && m.n_dense_layers == 1 && m.dense_ffn_hidden == 256, "shared %d dense %d of %d",
          m.n_shared_experts, m.n_dense_layers, m.dense_ffn_hidden);
    set(&c, "model.moe.dense_ffn_hidden_dim", "40");
    CHECK(ct_model_config_from(&m, &c) == CT_OK && m.dense_ffn_hidden == 40, "width %d", m.dense_ffn_hidden);
    ct_param_table t;
    ct_param_table_build(&t, &m);
    const ct_param *d = ct_param_find(&t, "layers.0.feed_forward.w1.weight");
    const ct_param *s13 = ct_param_find(&t, "layers.1.moe.shared_experts.w13.weight");
    CHECK(d && d->numel == 40L * 32, "the dense block's w1");
    CHECK(s13 && s13->numel == 2L * 2 * 16 * 32, "the shared experts' w13 (2 x S·F, C)");
    CHECK(!ct_param_find(&t, "layers.0.moe.router.weight"), "a router in the dense block");
    ct_param_table_free(&t);
    ct_config ds;
    ct_config_defaults(&ds);
    set(&ds, "model.name", "llama3_moe");
    set(&ds, "model.flavor", "deepseek_v3_like");
    set(&ds, "model.n_layers", "2");
    CHECK(ct_model_config_from(&m, &ds) == CT_OK, "%s", ct_last_error());
    CHECK(m.n_shared_experts == 1 && m.n_dense_layers == 2 && m.dense_ffn_hidden == 18432, "shared %d dense %d of %d",
          m.n_shared_experts, m.n_dense_layers, m.dense_ffn_hidden);
}

// Each bad value refused with one line naming the setting.
// The routed experts' count and top-k: the flavor's (debugmodel: 8, 2 a token), or the settings,
// in the model's dimensions and in the experts' tensors' shapes.
static void experts_and_top_k(void) {
    ct_config c = moe_config();
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_OK && m.n_experts == 8 && m.moe_top_k == 2, "flavor: %d experts, %d a token",
          m.n_experts, m.moe_top_k);
    set(&c, "model.moe.num_experts", "16");
    set(&c, "model.moe.top_k", "3");
    CHECK(ct_model_config_from(&m, &c) == CT_OK && m.n_experts == 16 && m.moe_top_k == 3, "set: %d experts, %d a token",
          m.n_experts, m.moe_top_k);
    ct_param_table t;
    ct_param_table_build(&t, &m);
    const ct_param *r = ct_param_find(&t, "layers.0.moe.router.weight"), *w2 = ct_param_find(&t, "layers.0.moe.experts.w2.weight");
    CHECK(r && r->shape[0] == 16 && w2 && w2->shape[0] == 16L * m.dim, "router rows %ld, w2 rows %ld", r ? r->shape[0] : -1,
          w2 ? w2->shape[0] : -1);
    ct_param_table_free(&t);
}

static void structure_refused(void) {
    static const char *bad[][3] = {
        {"model.moe.num_shared_experts", "-2", ">= 0"},
        {"model.moe.num_dense_layers", "-3", ">= 0"},
        {"model.moe.num_dense_layers", "3", "more than the model's 2 blocks"},
        {"model.moe.dense_ffn_hidden_dim", "-8", "> 0"},
        {"model.moe.num_experts", "-1", "> 0"},
        {"model.moe.top_k", "-2", "> 0"},
        {"model.moe.top_k", "9", "more than the model's 8 experts"},
        {"model.moe.num_experts", "2000", "at most 1024"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_config c = moe_config();
        set(&c, bad[i][0], bad[i][1]);
        ct_model_config m;
        EXPECT_ERROR(ct_model_config_from(&m, &c), CT_E_CONFIG, bad[i][0], bad[i][2]);
    }
    // Qwen3-MoE, the Hugging Face layout, has no shared experts.
    ct_config c = moe_config();
    set(&c, "checkpoint.last_save_in_hf", "true");
    set(&c, "model.moe.num_shared_experts", "1");
    ct_model_config m;
    EXPECT_ERROR(ct_model_config_from(&m, &c), CT_E_CONFIG, "checkpoint.last_save_in_hf", "no shared experts");
}

static void dense_family(void) {
    static const char *kv[][2] = {{"model.moe.score_func", "sigmoid"},     {"model.moe.route_norm", "false"},
                                  {"model.moe.aux_loss_coeff", "0.01"},    {"model.moe.aux_loss_level", "batch"},
                                  {"model.moe.load_balance_coeff", "0.001"}, {"model.moe.num_shared_experts", "1"},
                                  {"model.moe.num_dense_layers", "0"},     {"model.moe.dense_ffn_hidden_dim", "64"},
                                  {"model.moe.num_experts", "4"},          {"model.moe.top_k", "1"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        ct_config c;
        ct_config_defaults(&c);
        set(&c, "model.dim", "32");
        set(&c, "model.n_heads", "4");
        set(&c, kv[i][0], kv[i][1]);
        ct_model_config m;
        EXPECT_ERROR(ct_model_config_from(&m, &c), CT_E_CONFIG, kv[i][0], "llama3 has no experts");
    }
}

int main(void) {
    CT_RUN(defaults);
    CT_RUN(values);
    CT_RUN(negative_coefficients);
    CT_RUN(aux_loss_with_context_parallel);
    CT_RUN(hf_export_of_another_router);
    CT_RUN(structure);
    CT_RUN(experts_and_top_k);
    CT_RUN(structure_refused);
    CT_RUN(dense_family);
    CT_TEST_EXIT();
}
