// The planner's time model (src/plan/time_model.h): pure and fast, no MPI. Expected values are
// worked out here from the model's dimensions and the benches' formulas, not taken from the
// model's own helpers.
#include <string.h>

#include "plan/time_model.h"
#include "test.h"

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) {
        printf("  config %s=%s: %s\n", k, v, ct_last_error());
        exit(1);
    }
}

// The debug model (dim 256, 6 layers, 16 heads, FFN 768, vocab 2048), 8 x 256 tokens per rank.
static ct_config debug_config(void) {
    ct_config c;
    ct_config_defaults(&c);
    set(&c, "training.seq_len", "256");
    set(&c, "micro_batch_size", "8");
    set(&c, "training.dataset", "synthetic");
    return c;
}

static ct_hw_profile profile(const char *name) {
    ct_hw_profile hw;
    if (ct_hw_profile_load(name, &hw)) {
        printf("  %s\n", ct_last_error());
        exit(1);
    }
    return hw;
}

static ct_plan_time run(const ct_config *c, int world, const ct_hw_profile *hw) {
    ct_model_config m;
    ct_plan_time t;
    if (ct_model_config_from(&m, c) || ct_plan_time_step(&m, c, world, hw, &t)) {
        printf("  %s\n", ct_last_error());
        memset(&t, 0, sizeof t);
        t.step = -1;
    }
    return t;
}

// 8B at 8192 tokens, one sequence per rank: the shape the published runs have.
static ct_config big_config(const char *flavor) {
    ct_config c;
    ct_config_defaults(&c);
    set(&c, "model.flavor", flavor);
    set(&c, "training.seq_len", "8192");
    set(&c, "micro_batch_size", "1");
    set(&c, "mixed_precision", "bf16");
    set(&c, "training.dataset", "synthetic");
    return c;
}

// Model FLOPs per token, 6·N + 12·L·NH·HS·T (N without the embedding), worked out by hand from the
// published shapes: debugmodel (C 256, L 6, NH = NKV 16, HS 16, F 768, V 2048) at T 256; 8B (4096,
// 32, 32 / 8, 128, 14336, 128256) and 70B (8192, 80, 64 / 8, 128, 28672, 128256) at T 8192.
static void test_model_flops_of_published_shapes(void) {
    const char *flavors[] = {"debugmodel", "8B", "70B"};
    const double per_token[] = {38555136.0, 57914449920.0, 481442709504.0};
    for (int i = 0; i < 3; i++) {
        ct_config c = i == 0 ? debug_config() : big_config(flavors[i]);
        ct_hw_profile hw = profile("h100");
        ct_plan_time t = run(&c, 1, &hw);
        double tokens = (double)c.micro_batch_size * c.seq_len;
        CHECK_CLOSE(t.model_flops, per_token[i] * tokens, 1e-12, 0);
        // Executed FLOPs: causal attention is about half of the counted score / value products,
        // plus flash attention's recomputed scores; never more than the count plus that.
        CHECK(t.rank_flops > 0.8 * t.model_flops && t.rank_flops < 1.2 * t.model_flops, "%s: executed %g vs model %g",
              flavors[i], t.rank_flops, t.model_flops);
    }
}

// Parameters of one block, from the model's total: Ψ = V·C (embedding) + L·block + C + V·C.
static double block_params(const ct_model_config *m) {
    double V = m->vocab_size, C = m->dim;
    return ((double)ct_model_num_params(m) - 2 * V * C - C) / m->n_layers;
}

static void test_fsdp_bytes(void) {
    ct_hw_profile hw = profile("h100");
    for (int bf16 = 0; bf16 < 2; bf16++) {
        ct_config c = debug_config();
        set(&c, "parallelism.data_shard_degree", "4");
        set(&c, "mixed_precision", bf16 ? "bf16" : "fp32");
        ct_model_config m;
        ct_model_config_from(&m, &c);
        ct_plan_time t = run(&c, 4, &hw);
        // bench_fsdp_comm: forward gathers every group, backward re-gathers every block but the
        // last (default policy), every group's gradient is reduce-scattered; (N-1)/N each.
        double V = m.vocab_size, C = m.dim, blk = block_params(&m), L = m.n_layers;
        double gathered = V * C + (C + V * C) + L * blk + (L - 1) * blk;
        double scattered = (double)ct_model_num_params(&m);
        double expect = (gathered * (bf16 ? 2 : 4) + scattered * 4) * 3.0 / 4.0;
        CHECK_CLOSE(t.bytes[CT_PLAN_DP_SHARD], expect, 1e-9, 0);
        CHECK(t.comm[CT_PLAN_DP_SHARD] > 0, "no fsdp seconds");
    }
}

// Seconds over the inter-node link: bytes / NCCL's bus bandwidth plus (N-1) latencies per collective, and
// a collective per gather or reduce-scatter a dense model runs -- each block gathered in forward,
// re-gathered in backward but the last, reduce-scattered; embedding and output together once
// each way (one stage): 3L + 1. None for the experts a dense model does not have.
static void test_fsdp_latency_per_collective(void) {
    ct_hw_profile hw = profile("h100");
    ct_config c = big_config("8B");
    set(&c, "parallelism.data_shard_degree", "128");
    set(&c, "parallelism.enable_async_comm", "false");
    ct_model_config m;
    ct_model_config_from(&m, &c);
    ct_plan_time t = run(&c, 128, &hw);
    double L = m.n_layers;
    CHECK(hw.inter_busbw > 0 && hw.inter_busbw < hw.inter_bw, "h100's inter-node busbw %g", hw.inter_busbw);
    CHECK_CLOSE(t.comm[CT_PLAN_DP_SHARD] - t.bytes[CT_PLAN_DP_SHARD] / hw.inter_busbw,
                (3 * L + 1) * 127 * hw.inter_latency, 1e-9, 0);
}

static void test_tp_bytes(void) {
    ct_hw_profile hw = profile("h100");
    for (int sp = 0; sp < 2; sp++) {
        ct_config c = debug_config();
        set(&c, "parallelism.data_shard_degree", "1");
        set(&c, "parallelism.compute_parallel_degree", "4");
        set(&c, "sequence_parallel.enable", sp ? "true" : "false");
        ct_model_config m;
        ct_model_config_from(&m, &c);
        ct_plan_time t = run(&c, 4, &hw);
        // bench_tp: per layer 4 all-reduces of N·C floats, + embedding + output, + 3 floats per
        // row of loss statistics; each all-reduce moves 2(T-1)/T of its size. Sequence parallel:
        // the same bytes, plus the norm weights' gradients ((2L+1)·C) once per step.
        double N = 8.0 * 256, C = m.dim, ar = 2.0 * 3 / 4;
        double expect = ar * 4 * ((4.0 * m.n_layers + 2) * N * C + 3 * N);
        if (sp) expect += ar * 4 * (2.0 * m.n_layers + 1) * C;
        CHECK_CLOSE(t.bytes[CT_PLAN_TP], expect, 1e-9, 0);
    }
}

// TorchTitan's stack sends the tensor-parallel activations in the compute dtype: under bf16 the
// block, embedding and output collectives move 2 bytes an element where ctitan's fp32 residual
// stream moves 4; the loss statistics and the norm weights' gradients stay fp32.
static void test_tp_bytes_by_stack(void) {
    ct_hw_profile hw = profile("h100");
    ct_config c = debug_config();
    set(&c, "parallelism.data_shard_degree", "1");
    set(&c, "parallelism.compute_parallel_degree", "4");
    set(&c, "sequence_parallel.enable", "true");
    set(&c, "mixed_precision", "bf16");
    ct_model_config m;
    ct_model_config_from(&m, &c);
    double N = 8.0 * 256, C = m.dim, ar = 2.0 * 3 / 4;
    double fixed = ar * 4 * (3 * N + (2.0 * m.n_layers + 1) * C);
    for (int width = 4; width >= 2; width -= 2) {
        ct_plan_time t;
        ct_status st = ct_plan_time_step_on(&m, &c, 4, &hw, width == 4 ? CT_STACK_CTITAN : CT_STACK_TORCHTITAN, &t);
        CHECK(st == CT_OK, "%s", ct_last_error());
        CHECK_CLOSE(t.bytes[CT_PLAN_TP], ar * width * (4.0 * m.n_layers + 2) * N * C + fixed, 1e-9, 0);
    }
    ct_plan_stack k;
    CHECK(ct_plan_stack_parse("pytorch", &k) == CT_ERR && strstr(ct_last_error(), "--stack"), "bad stack accepted");
}

// TorchTitan's stack runs attention at FlashAttention-2's published H100 rates (FlashAttention-3
// paper, head dimension 128, sequence 8192: 333 TFLOP/s forward with the causal mask, 318
// backward), where ctitan's takes the profile's 0.38 of the bf16 peak for both passes. The step
// differs by exactly those seconds: 32 blocks of 4 N (T/2) NH HS forward FLOPs, 2.5x backward.
static void test_attention_by_stack(void) {
    ct_hw_profile hw = profile("h100");
    ct_config c = big_config("8B");
    set(&c, "parallelism.data_shard_degree", "8");
    ct_model_config m;
    ct_model_config_from(&m, &c);
    ct_plan_time ct, tt;
    CHECK(ct_plan_time_step_on(&m, &c, 8, &hw, CT_STACK_CTITAN, &ct) == CT_OK, "%s", ct_last_error());
    CHECK(ct_plan_time_step_on(&m, &c, 8, &hw, CT_STACK_TORCHTITAN, &tt) == CT_OK, "%s", ct_last_error());
    double attn = 32.0 * 4 * 8192 * 4096 * 32 * 128;
    CHECK_CLOSE(ct.attention, 3.5 * attn / (0.38 * 989e12), 1e-9, 0);
    CHECK_CLOSE(tt.attention, attn / 333e12 + 2.5 * attn / 318e12, 1e-9, 0);
}

// TorchTitan's eager elementwise kernels, bytes per token and block counted from its model code
// (bf16 e = 2, fp32 upcasts u = 4; 8B: C 4096, q 32 x 128, k and v 8 x 128, F 14336): two
// RMSNorms of 4e + 6u per element, two residual adds of 3e, RoPE on q and k of 2e + 4u,
// repeat_kv writing K and V out to 32 heads (2e over 8 + 32 heads each way), the attention
// output's contiguous copy (2e), SwiGLU's silu and product (5e); compiled, a norm with its add
// 4e, RoPE 2e, SwiGLU 3e, the copies unchanged. Backward twice the forward; no checkpointing.
static void test_elementwise_by_stack(void) {
    ct_hw_profile hw = profile("h100");
    ct_config c = big_config("8B");
    set(&c, "parallelism.data_shard_degree", "8");
    ct_model_config m;
    ct_model_config_from(&m, &c);
    ct_plan_time eager, compiled;
    CHECK(ct_plan_time_step_on(&m, &c, 8, &hw, CT_STACK_TORCHTITAN, &eager) == CT_OK, "%s", ct_last_error());
    set(&c, "compile.enable", "true");
    CHECK(ct_plan_time_step_on(&m, &c, 8, &hw, CT_STACK_TORCHTITAN, &compiled) == CT_OK, "%s", ct_last_error());
    const double C = 4096, Q = 4096, KV = 1024, F = 14336, e = 2, u = 4;
    double copies = 2 * e * (KV + Q) + 2 * e * Q;
    double eager_b = 2 * C * (4 * e + 6 * u) + 2 * C * 3 * e + (Q + KV) * (2 * e + 4 * u) + F * 5 * e + copies;
    double compiled_b = 2 * C * 4 * e + (Q + KV) * 2 * e + F * 3 * e + copies;
    double scale = 3.0 * 32 * 8192 / 3350e9;  // forward + 2 x backward, 32 blocks, 8192 tokens
    CHECK_CLOSE(eager.elementwise, eager_b * scale, 1e-9, 0);
    CHECK_CLOSE(compiled.elementwise, compiled_b * scale, 1e-9, 0);
}

// TorchTitan's async tp runs the forward's all-gathers and reduce-scatters behind their matmuls.
// 8B, tp 8 in one NVLink node, sequence parallel, 8192 tokens: a (8192 x 4096) bf16 all-gather
// moves 7/8 x 64 MiB at 450 GB/s, about 0.13 ms, while the matmul it feeds (wqkv: 8192 x 768
// from 4096, 52 GFLOP) runs at least 52e9 / 989e12 = 0.05 ms and w1/w3 (8192 x 3584 x 2 from
// 4096) 0.49 ms: so hidden, the forward exposes well under half of what it exposes unhidden.
// ctitan's stack keeps the forward collectives exposed whatever the switch.
static void test_async_tp_forward_by_stack(void) {
    ct_hw_profile hw = profile("h100");
    ct_config c = big_config("8B");
    set(&c, "parallelism.data_shard_degree", "1");
    set(&c, "parallelism.compute_parallel_degree", "8");
    set(&c, "sequence_parallel.enable", "true");
    ct_model_config m;
    ct_model_config_from(&m, &c);
    ct_plan_time sync_tt, async_tt, sync_ct, async_ct;
    set(&c, "parallelism.enable_async_comm", "false");
    ct_plan_time_step_on(&m, &c, 8, &hw, CT_STACK_TORCHTITAN, &sync_tt);
    ct_plan_time_step_on(&m, &c, 8, &hw, CT_STACK_CTITAN, &sync_ct);
    set(&c, "parallelism.enable_async_comm", "true");
    ct_plan_time_step_on(&m, &c, 8, &hw, CT_STACK_TORCHTITAN, &async_tt);
    ct_plan_time_step_on(&m, &c, 8, &hw, CT_STACK_CTITAN, &async_ct);
    CHECK(async_tt.exposed[CT_PLAN_TP] < 0.5 * sync_tt.exposed[CT_PLAN_TP], "torchtitan: async %g vs sync %g",
          async_tt.exposed[CT_PLAN_TP], sync_tt.exposed[CT_PLAN_TP]);
    CHECK(async_ct.exposed[CT_PLAN_TP] > 0.5 * sync_ct.exposed[CT_PLAN_TP], "ctitan: async %g vs sync %g",
          async_ct.exposed[CT_PLAN_TP], sync_ct.exposed[CT_PLAN_TP]);
}

static void test_cp_bytes(void) {
    ct_hw_profile hw = profile("h100");
    for (int ring = 0; ring < 2; ring++) {
        ct_config c = debug_config();
        set(&c, "parallelism.data_shard_degree", "1");
        set(&c, "parallelism.context_extension_degree", "2");
        set(&c, "parallelism.context_parallel_rotate_method", ring ? "ring" : "allgather");
        ct_model_config m;
        ct_model_config_from(&m, &c);
        ct_plan_time t = run(&c, 2, &hw);
        // ct_cp_expected_bytes per layer, S = this rank's K and V (2·B·T/P·NKV·HS floats):
        // all-gather forward (P-1)S, backward 2(P-1)S; ring 2(P-1)S, then 2(P-1)S + 2PS.
        double P = 2, S = 2.0 * 8 * (256 / P) * m.n_kv_heads * m.head_dim * 4;
        double per_layer = ring ? 2 * (P - 1) * S + 2 * (P - 1) * S + 2 * P * S : 3 * (P - 1) * S;
        CHECK_CLOSE(t.bytes[CT_PLAN_CP], m.n_layers * per_layer, 1e-9, 0);
    }
    // Under bf16 the all-gather moves K|V in bf16 where the attention runs in bf16 (the cpu
    // backend): (P-1)S / 2 twice and the fp32 reduce-scatter (P-1)S; a GPU's gathers stay fp32.
    for (int cpu = 0; cpu < 2; cpu++) {
        ct_hw_profile hw2 = profile(cpu ? "xeon_amx_2core" : "h100");
        ct_config c = debug_config();
        set(&c, "parallelism.data_shard_degree", "1");
        set(&c, "parallelism.context_extension_degree", "2");
        set(&c, "mixed_precision", "bf16");
        ct_model_config m;
        ct_model_config_from(&m, &c);
        ct_plan_time t = run(&c, 2, &hw2);
        double P = 2, S = 2.0 * 8 * (256 / P) * m.n_kv_heads * m.head_dim * 4;
        CHECK_CLOSE(t.bytes[CT_PLAN_CP], m.n_layers * (cpu ? 2 : 3) * (P - 1) * S, 1e-9, 0);
    }
}

static void test_pp_bytes(void) {
    ct_hw_profile hw = profile("h100");
    ct_config c = debug_config();
    set(&c, "parallelism.data_shard_degree", "1");
    set(&c, "parallelism.pipeline_degree", "2");
    set(&c, "pipeline_schedule", "1f1b");
    set(&c, "parallelism.pipeline_microbatch_size", "2");
    ct_model_config m;
    ct_model_config_from(&m, &c);
    ct_plan_time t = run(&c, 2, &hw);
    // 4 micro-batches of 2 x 256 tokens: rank 0 sends each activation (2·256·C floats) and
    // receives each gradient.
    CHECK(t.n_microbatches == 4, "%d micro-batches", t.n_microbatches);
    CHECK_CLOSE(t.bytes[CT_PLAN_PP], 2.0 * 4 * (2 * 256.0 * m.dim * 4), 1e-9, 0);
    CHECK(t.bubble > 0, "pp 2 with 4 micro-batches has a bubble (%g)", t.bubble);
}

static void equal_costs(ct_plan_stage_cost *s, int n) {
    for (int i = 0; i < n; i++) s[i] = (ct_plan_stage_cost){1, 2, 1, 1, 0};
}

static void test_bubble_from_simulator(void) {
    ct_plan_stage_cost s[16];
    ct_plan_pipeline p;
    int pp = 4, m = 8, v = 2;
    equal_costs(s, 16);
    CHECK(ct_plan_pipeline_run(CT_PP_1F1B, pp, 1, m, s, &p) == CT_OK, "%s", ct_last_error());
    CHECK_CLOSE(p.bubble_frac, (pp - 1.0) / (m + pp - 1), 1e-12, 0);
    CHECK_CLOSE(p.makespan, (m + pp - 1) * 3.0, 1e-12, 0);  // (m + p - 1)(F + B)
    equal_costs(s, 16);
    for (int i = 0; i < 16; i++) s[i].f = 0.5, s[i].b = 1;  // half the layers per stage
    CHECK(ct_plan_pipeline_run(CT_PP_INTERLEAVED_1F1B, pp, v, m, s, &p) == CT_OK, "%s", ct_last_error());
    CHECK_CLOSE(p.bubble_frac, (pp - 1.0) / (v * m + pp - 1), 1e-12, 0);
    // A schedule that cannot be built is an error, not a number.
    CHECK(ct_plan_pipeline_run(CT_PP_INTERLEAVED_1F1B, 4, 2, 6, s, &p) == CT_ERR, "m 6 on pp 4 accepted");
}

static void test_async_overlap(void) {
    ct_hw_profile hw = profile("h100");
    ct_config c = big_config("8B");
    set(&c, "parallelism.data_shard_degree", "8");
    ct_plan_time blocking = run(&c, 8, &hw);
    set(&c, "parallelism.enable_async_comm", "true");
    ct_plan_time async = run(&c, 8, &hw);
    CHECK(async.step <= blocking.step, "async %g > blocking %g", async.step, blocking.step);
    CHECK_CLOSE(async.comm[CT_PLAN_DP_SHARD], blocking.comm[CT_PLAN_DP_SHARD], 1e-12, 0);
    CHECK(blocking.exposed[CT_PLAN_DP_SHARD] == blocking.comm[CT_PLAN_DP_SHARD], "blocking hides something");
    // 8B at 8192 tokens: a block's compute (~tens of ms) dwarfs its gather over NVLink (~1 ms).
    CHECK(async.exposed[CT_PLAN_DP_SHARD] < 0.1 * async.comm[CT_PLAN_DP_SHARD], "exposed %g of %g",
          async.exposed[CT_PLAN_DP_SHARD], async.comm[CT_PLAN_DP_SHARD]);
    // Under tensor parallel and a pipeline too: async never costs time.
    const char *layouts[][2] = {{"parallelism.compute_parallel_degree", "8"}, {"parallelism.pipeline_degree", "2"}};
    for (int i = 0; i < 2; i++) {
        ct_config d = big_config("8B");
        set(&d, "parallelism.data_shard_degree", "-1");
        set(&d, layouts[i][0], layouts[i][1]);
        set(&d, "micro_batch_size", "8");
        ct_plan_time b = run(&d, 16, &hw);
        set(&d, "parallelism.enable_async_comm", "true");
        ct_plan_time a = run(&d, 16, &hw);
        CHECK(a.step > 0 && a.step <= b.step, "%s: async %g > blocking %g", layouts[i][0], a.step, b.step);
    }
}

// A profile whose intra-node (or inter-node) link, line rate and NCCL bus bandwidths alike, is
// `f` times as fast.
static ct_hw_profile scale_link(ct_hw_profile hw, bool inter, double f) {
    if (inter) {
        hw.inter_bw *= f, hw.inter_busbw *= f;
    } else {
        hw.intra_bw *= f, hw.intra_busbw *= f, hw.intra_ar_busbw *= f;
    }
    return hw;
}

// tp 8 on 8-GPU nodes: its collectives see only the intra-node link; tp 16 spans two nodes.
static void test_tp_link(void) {
    ct_hw_profile hw = profile("h100");
    ct_hw_profile slow_inter = scale_link(hw, true, 0.1), slow_intra = scale_link(hw, false, 0.1);
    for (int tp = 8; tp <= 16; tp *= 2) {
        ct_config c = big_config("70B");
        set(&c, "model.n_kv_heads", "16");  // 70B has 8: tp 16 needs 16 to split
        set(&c, "parallelism.data_shard_degree", "1");
        char buf[8];
        snprintf(buf, sizeof buf, "%d", tp);
        set(&c, "parallelism.compute_parallel_degree", buf);
        ct_plan_time base = run(&c, tp, &hw), a = run(&c, tp, &slow_inter), b = run(&c, tp, &slow_intra);
        if (tp == 8) {
            CHECK_CLOSE(a.comm[CT_PLAN_TP], base.comm[CT_PLAN_TP], 1e-12, 0);
            CHECK(b.comm[CT_PLAN_TP] > 5 * base.comm[CT_PLAN_TP], "tp 8 not on the intra-node link");
        } else {
            CHECK(a.comm[CT_PLAN_TP] > 5 * base.comm[CT_PLAN_TP], "tp 16 not on the inter-node link");
            CHECK_CLOSE(b.comm[CT_PLAN_TP], base.comm[CT_PLAN_TP], 1e-12, 0);
        }
    }
}

static void test_bandwidth_monotone(void) {
    const char *layouts[][4] = {
        {"parallelism.data_shard_degree", "16", NULL, NULL},
        {"parallelism.data_shard_degree", "2", "parallelism.compute_parallel_degree", "8"},
        {"parallelism.data_shard_degree", "4", "parallelism.pipeline_degree", "4"},
        {"parallelism.data_shard_degree", "4", "parallelism.context_extension_degree", "4"},
        {"parallelism.data_shard_degree", "8", "parallelism.data_replicate_degree", "2"},
    };
    ct_hw_profile hw = profile("h100");
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        ct_config c = big_config("8B");
        set(&c, "micro_batch_size", "4");
        set(&c, layouts[i][0], layouts[i][1]);
        if (layouts[i][2]) set(&c, layouts[i][2], layouts[i][3]);
        double prev = run(&c, 16, &hw).step;
        CHECK(prev > 0, "layout %zu", i);
        for (int k = 0; k < 4; k++) {
            ct_hw_profile h = scale_link(scale_link(hw, false, (k & 1) ? 2 : 1), true, (k & 2) ? 2 : 1);
            h.memory_bandwidth *= k == 3 ? 2 : 1;
            double s = run(&c, 16, &h).step;
            CHECK(s <= prev * (1 + 1e-12), "layout %zu: more bandwidth (%d) %g > %g", i, k, s, prev);
        }
    }
}

static void test_precision_rates(void) {
    ct_config c = big_config("8B");
    set(&c, "parallelism.data_shard_degree", "8");
    ct_config f8 = c;
    set(&f8, "quantization.float8.enable", "true");
    ct_hw_profile a100 = profile("a100"), h100 = profile("h100");
    double a_bf16 = run(&c, 8, &a100).step, a_f8 = run(&f8, 8, &a100).step;
    double h_bf16 = run(&c, 8, &h100).step, h_f8 = run(&f8, 8, &h100).step;
    CHECK(a_f8 >= a_bf16, "float8 on A100 (no fp8) %g faster than bf16 %g", a_f8, a_bf16);
    CHECK(h_f8 < 0.9 * h_bf16, "float8 on H100 %g not faster than bf16 %g", h_f8, h_bf16);
    ct_config fp32 = c;
    set(&fp32, "mixed_precision", "fp32");
    CHECK(run(&fp32, 8, &h100).step > 3 * h_bf16, "fp32 on H100 not slower than bf16");
    // H200: the same compute, faster memory: never slower than H100.
    ct_hw_profile h200 = profile("h200");
    CHECK(run(&c, 8, &h200).step <= h_bf16, "H200 slower than H100");
}

static void test_recompute_costs(void) {
    ct_hw_profile hw = profile("h100");
    ct_config c = big_config("8B");
    set(&c, "parallelism.data_shard_degree", "8");
    ct_plan_time none = run(&c, 8, &hw);
    set(&c, "activation_checkpoint.mode", "selective");
    set(&c, "activation_checkpoint.selective_ac_option", "elementwise");
    ct_plan_time elementwise = run(&c, 8, &hw);
    set(&c, "activation_checkpoint.selective_ac_option", "op");
    ct_plan_time ops = run(&c, 8, &hw);
    // TorchTitan's per-op policy reruns wk, wo and w3 per block: 2 N C (NKV HS + NH HS + F) FLOPs
    // more than the elementwise policy (8B: C 4096, 8 kv heads and 32 heads of 128, F 14336,
    // 32 blocks, N 8192 tokens), at no better than the profile's bf16 efficiency (0.803) and no
    // worse than half of it: every shape here fills at least one wave of the 132 SMs, so a
    // part-full last wave costs at most half.
    double extra = 32.0 * 2 * 8192 * 4096 * (8 * 128 + 32 * 128 + 14336);
    CHECK_CLOSE(ops.rank_flops - elementwise.rank_flops, extra, 1e-9, 0);
    double rate = extra / (ops.compute - elementwise.compute) / hw.peak_bf16;
    CHECK(rate > hw.matmul_efficiency / 2 && rate <= hw.matmul_efficiency, "per-op recompute at %.3f of the bf16 peak",
          rate);
    CHECK(none.compute < elementwise.compute && elementwise.compute < ops.compute, "none %g, elementwise %g, op %g",
          none.compute, elementwise.compute, ops.compute);
    set(&c, "activation_checkpoint.selective_ac_option", "2");
    ct_plan_time every2 = run(&c, 8, &hw);
    set(&c, "activation_checkpoint.mode", "full");
    ct_plan_time full = run(&c, 8, &hw);
    CHECK(none.compute < ops.compute && ops.compute < every2.compute && every2.compute < full.compute,
          "compute none %g, op %g, every 2 %g, full %g", none.compute, ops.compute, every2.compute, full.compute);
    // Full recompute repeats the forward: about a third more compute (forward ~1/3 of the step).
    CHECK(full.compute / none.compute > 1.2 && full.compute / none.compute < 1.45, "full / none %g",
          full.compute / none.compute);
}

int main(void) {
    CT_RUN(test_model_flops_of_published_shapes);
    CT_RUN(test_fsdp_bytes);
    CT_RUN(test_fsdp_latency_per_collective);
    CT_RUN(test_tp_bytes);
    CT_RUN(test_tp_bytes_by_stack);
    CT_RUN(test_attention_by_stack);
    CT_RUN(test_elementwise_by_stack);
    CT_RUN(test_async_tp_forward_by_stack);
    CT_RUN(test_cp_bytes);
    CT_RUN(test_pp_bytes);
    CT_RUN(test_bubble_from_simulator);
    CT_RUN(test_async_overlap);
    CT_RUN(test_tp_link);
    CT_RUN(test_bandwidth_monotone);
    CT_RUN(test_precision_rates);
    CT_RUN(test_recompute_costs);
    CT_TEST_EXIT();
}
