// The planner on mixture-of-experts models (plan/moe.h, the llama3_moe flavors): parameters,
// FLOPs, expert-parallel memory and all-to-all bytes, each worked out here by hand from the
// published shapes (Qwen3-30B-A3B's and DeepSeek-V3's config.json), not from the planner's helpers.
#include <stdlib.h>
#include <string.h>

#include "expect_error.h"
#include "plan/memory_model.h"
#include "plan/moe.h"
#include "plan/plan.h"
#include "plan/time_model.h"
#include "test.h"

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) {
        printf("  config %s=%s: %s\n", k, v, ct_last_error());
        exit(1);
    }
}

static ct_config moe_config(const char *flavor) {
    ct_config c;
    ct_config_defaults(&c);
    set(&c, "model.name", "llama3_moe");
    set(&c, "model.flavor", flavor);
    set(&c, "training.seq_len", "4096");
    set(&c, "micro_batch_size", "1");
    set(&c, "training.dataset", "synthetic");
    set(&c, "parallelism.context_parallel_load_balancer", "none");
    return c;
}

static ct_model_config planned(const ct_config *c) {
    ct_model_config m;
    if (ct_model_config_plan(&m, c)) {
        printf("  %s\n", ct_last_error());
        exit(1);
    }
    return m;
}

// Qwen3-30B-A3B: C 2048, L 48, 32 heads of 128 (4096 wide), 4 kv heads, 128 experts of F 768, 8
// per token, V 151936. A block: wq 2048·4096 = 8,388,608, wk and wv 2048·512 = 1,048,576 each,
// wo 8,388,608 (attention 18,874,368), the q and k norms 2·128 = 256, two norms 4,096, router
// 128·2048 = 262,144, experts 128·3·2048·768 = 603,979,776: 623,120,640. Total 48 blocks =
// 29,909,790,720, embedding and output 151936·2048 = 311,164,928 each, final norm 2,048:
// 30,532,122,624 (published: 30.5B). Active: less 48 · 120 idle experts · 4,718,592 =
// 27,179,089,920: 3,353,032,704 (published 3.3B). FLOPs per token at T 4096: forward block
// 2·(18,874,368 + 256 + 4,096 + 262,144 + 8·4,718,592) = 113,779,200, x 48 = 5,461,401,600,
// head 2·(311,164,928 + 2,048) = 622,333,952; x 3 = 18,251,206,656; attention 12·48·4096·4096
// = 9,663,676,416: 27,914,883,072.
static void test_qwen3_counts(void) {
    ct_config c = moe_config("qwen3_30b_a3b");
    ct_model_config m = planned(&c);
    CHECK(m.head_dim == 128 && m.n_heads == 32 && m.dim == 2048, "head %d x %d over dim %d", m.n_heads, m.head_dim, m.dim);
    CHECK(ct_model_num_params(&m) == 30532122624L, "total %ld", ct_model_num_params(&m));
    CHECK(ct_model_active_params(&m) == 3353032704L, "active %ld", ct_model_active_params(&m));
    CHECK_CLOSE(ct_model_flops_per_token(&m, 4096), 27914883072.0, 1e-12, 0);
}

// DeepSeek-V3 without MLA: C 7168, L 61 (3 dense of F 18432, then 58 routed), 128 query heads of
// 128 (16384 wide), 8 kv heads of 128, 256 experts of F 2048, 8 per token, 1 shared, V 129280.
// Attention: wq and wo 7168·16384 = 117,440,512 each, wk and wv 7168·1024 = 7,340,032 each:
// 249,561,088; norms 14,336. An expert 3·7168·2048 = 44,040,192. Dense block: + 3·7168·18432
// = 396,361,728: 645,937,152. Routed block: + router 256·7168 = 1,835,008 + 256 experts
// 11,274,289,152 + the shared one 44,040,192: 11,569,739,776. Total: 3 · 645,937,152 + 58 ·
// 11,569,739,776 + embedding 926,679,040 + output and norm 926,686,208 = 674,836,083,712.
// Active: less 58 · 248 · 44,040,192 = 633,474,121,728: 41,361,961,984.
// FLOPs per token at T 4096: forward blocks 2·(61 · 249,575,424 + 58 · (1,835,008 + 9 ·
// 44,040,192) + 3 · 396,361,728) = 79,017,193,472, head 2·(926,679,040 + 7,168) =
// 1,853,372,416; x 3 = 242,611,697,664; attention 12·61·16384·4096 = 49,123,688,448:
// 291,735,386,112.
static void test_deepseek_counts(void) {
    ct_config c = moe_config("deepseek_v3_like");
    ct_model_config m = planned(&c);
    CHECK(m.n_shared_experts == 1 && m.n_dense_layers == 3 && m.dense_ffn_hidden == 18432, "shared %d dense %d of %d",
          m.n_shared_experts, m.n_dense_layers, m.dense_ffn_hidden);
    CHECK(ct_model_num_params(&m) == 674836083712L, "total %ld", ct_model_num_params(&m));
    CHECK(ct_model_active_params(&m) == 41361961984L, "active %ld", ct_model_active_params(&m));
    CHECK_CLOSE(ct_model_flops_per_token(&m, 4096), 291735386112.0, 1e-12, 0);
}

// Training takes DeepSeek-V3's structure (shared experts, dense first blocks) and expert
// parallelism; the planner refuses an expert-parallel degree that does not fit, naming the setting.
static void test_training_refuses(void) {
    ct_config c = moe_config("deepseek_v3_like");
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "deepseek_v3_like refused: %s", ct_last_error());
    ct_config q = moe_config("qwen3_30b_a3b");
    CHECK(ct_model_config_from(&m, &q) == CT_OK, "qwen3 refused: %s", ct_last_error());
    set(&q, "parallelism.expert_parallel_degree", "2");
    CHECK(ct_model_config_from(&m, &q) == CT_OK, "qwen3 at ep 2 refused: %s", ct_last_error());
    // The planner refuses a degree that does not divide the experts or the ranks it borrows.
    set(&q, "parallelism.expert_parallel_degree", "3");
    set(&q, "parallelism.data_shard_degree", "6");
    m = planned(&q);
    int ep;
    EXPECT_ERROR(ct_plan_moe_ep(&m, &q, 6, &ep), CT_E_CONFIG, "parallelism.expert_parallel_degree", "128 experts");
}

// Expert-parallel memory, DeepSeek-like on 256 ranks (fsdp256, fp32, blocking, mb 1 x 4096):
// the shards are 1 / 256 of every tensor whatever ep is (each expert over 256 / ep ranks, E / ep
// experts per EP rank), so AdamW's moments are 8 bytes x 674,836,083,712 / 256 =
// 21,088,627,616 (padding aside); from ep 4 to ep 8 a rank gathers 64 - 32 = 32 experts fewer
// of 44,040,192 = 1,409,286,144 elements, held whole in FSDP's two gather slots (params, fp32)
// and its whole-gradient buffer (grads): 11,274,289,152 and 5,637,144,576 bytes less.
static void test_ep_memory(void) {
    ct_config c = moe_config("deepseek_v3_like");
    set(&c, "parallelism.data_shard_degree", "256");
    ct_model_config m = planned(&c);
    ct_plan_memory mem[2];
    const char *eps[] = {"4", "8"};
    for (int i = 0; i < 2; i++) {
        set(&c, "parallelism.expert_parallel_degree", eps[i]);
        if (ct_plan_memory_rank(&m, &c, 256, &mem[i])) {
            printf("  %s\n", ct_last_error());
            CHECK(0, "ep %s not sized", eps[i]);
            return;
        }
        CHECK_CLOSE(mem[i].bytes[CT_MEM_OPTIM], 21088627616.0, 1e-4, 0);
    }
    CHECK_CLOSE(mem[0].bytes[CT_MEM_PARAMS] - mem[1].bytes[CT_MEM_PARAMS], 11274289152.0, 1e-6, 0);
    CHECK_CLOSE(mem[0].bytes[CT_MEM_GRADS] - mem[1].bytes[CT_MEM_GRADS], 5637144576.0, 1e-6, 0);
    // Without expert parallelism a rank gathers a routed block whole, 11,569,739,776 fp32 values,
    // in each of the two slots: 92,557,918,208 bytes, more than an 80 GB device holds.
    ct_plan_memory whole;
    set(&c, "parallelism.expert_parallel_degree", "1");
    CHECK(ct_plan_memory_rank(&m, &c, 256, &whole) == CT_OK, "%s", ct_last_error());
    CHECK(whole.bytes[CT_MEM_PARAMS] >= 92557918208.0, "ep 1 params %.0f bytes", whole.bytes[CT_MEM_PARAMS]);
}

// Qwen3's per-head QK-norm under checkpointing: the dense stand-ins the memory model sizes it on
// do not checkpoint with the norm, so they leave it out. Full and per-op checkpointing keep less
// than keeping everything; sizing returns (the stand-in block would otherwise end the process).
// The shards still hold the norm's weights: the optimizer state is the same whatever the policy.
static void test_qk_norm_checkpointing_sizes(void) {
    ct_config c = moe_config("qwen3_30b_a3b");
    set(&c, "parallelism.data_shard_degree", "64");
    set(&c, "parallelism.expert_parallel_degree", "4");
    ct_model_config m = planned(&c);
    CHECK(m.qk_norm, "qwen3 has no qk_norm");
    ct_plan_memory keep, full, op;
    CHECK(ct_plan_memory_rank(&m, &c, 64, &keep) == CT_OK, "%s", ct_last_error());
    set(&c, "activation_checkpoint.mode", "full");
    CHECK(ct_plan_memory_rank(&m, &c, 64, &full) == CT_OK, "full: %s", ct_last_error());
    set(&c, "activation_checkpoint.mode", "selective");
    set(&c, "activation_checkpoint.selective_ac_option", "op");
    CHECK(ct_plan_memory_rank(&m, &c, 64, &op) == CT_OK, "op: %s", ct_last_error());
    CHECK(full.bytes[CT_MEM_ACTIVATIONS] < op.bytes[CT_MEM_ACTIVATIONS] &&
              op.bytes[CT_MEM_ACTIVATIONS] < keep.bytes[CT_MEM_ACTIVATIONS],
          "activations full %.0f, op %.0f, none %.0f", full.bytes[CT_MEM_ACTIVATIONS], op.bytes[CT_MEM_ACTIVATIONS],
          keep.bytes[CT_MEM_ACTIVATIONS]);
    CHECK(full.bytes[CT_MEM_OPTIM] == keep.bytes[CT_MEM_OPTIM], "optimizer %.0f vs %.0f", full.bytes[CT_MEM_OPTIM],
          keep.bytes[CT_MEM_OPTIM]);
}

// All-to-all bytes, Qwen3 on fsdp64 with ep 8, one micro-batch of 4096 tokens on ctitan's stack
// (fp32 rows): each of the 48 routed layers sends its 4096 · 8 rows of 2048 values, 7/8 of them
// off the rank, four times (dispatch and combine, forward and backward): 4 · 4096 · 8 · 2048 · 4
// · 7/8 = 939,524,096 a layer, 45,097,156,608 a step. The EP group (8 ranks, tp 1) is one node.
static void test_a2a_bytes(void) {
    ct_config c = moe_config("qwen3_30b_a3b");
    set(&c, "parallelism.data_shard_degree", "64");
    set(&c, "parallelism.expert_parallel_degree", "8");
    ct_model_config m = planned(&c);
    ct_hw_profile hw;
    CHECK(ct_hw_profile_load("h100", &hw) == CT_OK, "%s", ct_last_error());
    ct_plan_time t;
    if (ct_plan_time_step(&m, &c, 64, &hw, &t)) {
        CHECK(0, "%s", ct_last_error());
        return;
    }
    CHECK_CLOSE(t.bytes[CT_PLAN_EP], 45097156608.0, 1e-12, 0);
    CHECK(t.exposed[CT_PLAN_EP] > 0, "the all-to-alls hide behind nothing");
    // Off the node: ep 16 of tp 1 on nodes of 8: 8 of the 15 peers; ep 8 x tp 2: 4 of 7.
    CHECK_CLOSE(ct_plan_moe_a2a_off_node(16, 1, 8), 8.0 / 15.0, 1e-15, 0);
    CHECK_CLOSE(ct_plan_moe_a2a_off_node(8, 2, 8), 4.0 / 7.0, 1e-15, 0);
    CHECK(ct_plan_moe_a2a_off_node(8, 1, 8) == 0, "ep 8 of tp 1 leaves a node of 8");
}

int main(void) {
    CT_RUN(test_qwen3_counts);
    CT_RUN(test_deepseek_counts);
    CT_RUN(test_training_refuses);
    CT_RUN(test_ep_memory);
    CT_RUN(test_qk_norm_checkpointing_sizes);
    CT_RUN(test_a2a_bytes);
    CT_TEST_EXIT();
}
