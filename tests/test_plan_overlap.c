// The planner's per-dimension communication switches (time_model.h, ct_plan_comm): FSDP prefetch
// and async tensor parallel each hide their own dimension's collectives and nothing else, and
// float8 all-gather sends the blocks' matmul weights at 1 byte. Expected bytes are worked out
// here from the model's dimensions.
#include <string.h>

#include "plan/time_model.h"
#include "test.h"

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) {
        printf("  config %s=%s: %s\n", k, v, ct_last_error());
        exit(1);
    }
}

// 8B at 8192 tokens, bf16, one sequence per micro-batch, on `fsdp` x `tp` H100s.
static ct_config config(const char *fsdp, const char *tp) {
    ct_config c;
    ct_config_defaults(&c);
    set(&c, "model.flavor", "8B");
    set(&c, "training.seq_len", "8192");
    set(&c, "micro_batch_size", "1");
    set(&c, "mixed_precision", "bf16");
    set(&c, "training.dataset", "synthetic");
    set(&c, "parallelism.data_shard_degree", fsdp);
    set(&c, "parallelism.compute_parallel_degree", tp);
    set(&c, "sequence_parallel.enable", strcmp(tp, "1") ? "true" : "false");
    return c;
}

static ct_plan_time step(const ct_config *c, int world, ct_plan_comm comm) {
    ct_hw_profile hw;
    ct_model_config m;
    ct_plan_time t;
    if (ct_hw_profile_load("h100", &hw) || ct_model_config_from(&m, c) ||
        ct_plan_time_step_with(&m, c, world, &hw, CT_STACK_TORCHTITAN, &comm, &t)) {
        printf("  %s\n", ct_last_error());
        exit(1);
    }
    return t;
}

static void test_each_overlap_hides_its_own_dimension(void) {
    ct_config c = config("4", "2");
    ct_plan_time none = step(&c, 8, (ct_plan_comm){0});
    ct_plan_time both = step(&c, 8, (ct_plan_comm){.fsdp_prefetch = true, .async_tp = true});
    ct_plan_time tp = step(&c, 8, (ct_plan_comm){.async_tp = true});
    ct_plan_time fsdp = step(&c, 8, (ct_plan_comm){.fsdp_prefetch = true});
    CHECK(both.exposed[CT_PLAN_TP] < 0.5 * none.exposed[CT_PLAN_TP], "async tp hides nothing: %g vs %g",
          both.exposed[CT_PLAN_TP], none.exposed[CT_PLAN_TP]);
    CHECK(both.exposed[CT_PLAN_DP_SHARD] < 0.5 * none.exposed[CT_PLAN_DP_SHARD], "prefetch hides nothing: %g vs %g",
          both.exposed[CT_PLAN_DP_SHARD], none.exposed[CT_PLAN_DP_SHARD]);
    // Async tp alone: tp as with both, FSDP as with neither; prefetch alone the other way round.
    CHECK_CLOSE(tp.exposed[CT_PLAN_TP], both.exposed[CT_PLAN_TP], 1e-12, 0);
    CHECK_CLOSE(tp.exposed[CT_PLAN_DP_SHARD], none.exposed[CT_PLAN_DP_SHARD], 1e-12, 0);
    CHECK_CLOSE(fsdp.exposed[CT_PLAN_DP_SHARD], both.exposed[CT_PLAN_DP_SHARD], 1e-12, 0);
    CHECK_CLOSE(fsdp.exposed[CT_PLAN_TP], none.exposed[CT_PLAN_TP], 1e-12, 0);
    // The bytes do not change with overlap.
    CHECK_CLOSE(tp.bytes[CT_PLAN_TP] + tp.bytes[CT_PLAN_DP_SHARD],
                none.bytes[CT_PLAN_TP] + none.bytes[CT_PLAN_DP_SHARD], 1e-12, 0);
    // ctitan train's one switch is both.
    set(&c, "parallelism.enable_async_comm", "true");
    ct_plan_comm of = ct_plan_comm_of(&c);
    CHECK(of.fsdp_prefetch && of.async_tp && !of.float8_all_gather, "enable_async_comm is not both overlaps");
}

static void test_float8_all_gather_sends_a_byte(void) {
    ct_config c = config("8", "1");
    set(&c, "quantization.float8.enable", "true");
    ct_model_config m;
    ct_model_config_from(&m, &c);
    ct_plan_time bf16 = step(&c, 8, (ct_plan_comm){.fsdp_prefetch = true});
    ct_plan_time f8 = step(&c, 8, (ct_plan_comm){.fsdp_prefetch = true, .float8_all_gather = true});
    // A block's parameters less its two norm weights go at 1 byte instead of 2; each block is
    // gathered in forward and again in backward but the last (default reshard); the embedding,
    // the output layer and the norms stay bf16; the reduce-scatters do not change. 7/8 of each.
    double V = m.vocab_size, C = m.dim, L = m.n_layers;
    double blk = ((double)ct_model_num_params(&m) - 2 * V * C - C) / L, mm = blk - 2 * C;
    double saved = mm * (2 * L - 1) * 7.0 / 8.0;
    CHECK_CLOSE(bf16.bytes[CT_PLAN_DP_SHARD] - f8.bytes[CT_PLAN_DP_SHARD], saved, 1e-9, 0);
    CHECK(f8.comm[CT_PLAN_DP_SHARD] < 0.8 * bf16.comm[CT_PLAN_DP_SHARD], "fp8 gathers %g s vs bf16 %g s",
          f8.comm[CT_PLAN_DP_SHARD], bf16.comm[CT_PLAN_DP_SHARD]);
    // Without float8 matmuls there is nothing to gather in fp8.
    set(&c, "quantization.float8.enable", "false");
    ct_plan_time off = step(&c, 8, (ct_plan_comm){.fsdp_prefetch = true, .float8_all_gather = true});
    ct_plan_time plain = step(&c, 8, (ct_plan_comm){.fsdp_prefetch = true});
    CHECK_CLOSE(off.bytes[CT_PLAN_DP_SHARD], plain.bytes[CT_PLAN_DP_SHARD], 1e-12, 0);
}

int main(void) {
    CT_RUN(test_each_overlap_hides_its_own_dimension);
    CT_RUN(test_float8_all_gather_sends_a_byte);
    CT_TEST_EXIT();
}
