// Parity of the llama3_moe family (Llama 3 attention + routed SwiGLU experts, added through the
// model interface alone) with its single-process run (tests/parity.h): FSDP 2 and 4 (experts
// sharded like any parameter), pp 2 (1F1B) and pp 2 x FSDP 2, cp 2, gradient accumulation, and
// expert parallelism: ep 2, ep 4, ep 2 x FSDP 2, ep 2 x pp 2, ep 2 x HSDP 2, ep 2 x cp 2,
// ep 4 over FSDP 2 x cp 2, ep 2 with accumulation and async communication.
// Then with both load-balancing methods on (sigmoid scores, the per-sequence load-balancing loss
// and the choosing bias's update): FSDP 2 and 4, accumulation, pp 2 and pp 2 x FSDP 2, ep 2, ep 4,
// ep 2 x FSDP 2 and ep 2 x pp 2 against
// that model's own single-process run -- losses, load-balancing losses, expert loads and every
// parameter, the biases among them. Then DeepSeek's structure (a dense first block, a shared
// expert) with that balancing: FSDP 2 and 4, accumulation, pp 2, and activation checkpointing
// (full, selective per op, elementwise and every 2nd block) under FSDP 2 / 4 and pp 2, expert
// parallelism (ep 2, ep 4, ep 2 x FSDP 2) with and without checkpointing, against its plain
// single-process run. Then tensor parallel on that structure without its shared expert: tp 2
// with and without sequence parallel, with checkpointing, tp 2 x ep 2, tp 2 x pp 2, and with the
// load-balancing loss as well (tp 2, tp 2 x ep 2, without sequence parallel). Then that
// model under bf16 mixed precision against its own bf16 single-process run (the harness's narrow
// bounds, from the reference's distance to the fp32 run): FSDP 2, ep 2, pp 2, tp 2 + sp, full
// checkpointing under FSDP 2, ep 2 x FSDP 2. Then that bf16 model with 8-bit matmuls (float8
// tensorwise, float8 rowwise, MXFP8; the routed experts one 8-bit linear per expert) against
// each recipe's own single-process run: FSDP 2, ep 2, ep 2 x FSDP 2, and each recipe apart from
// bf16 with the routed experts alone in 8 bits. Then the settings the family does not run yet,
// refused with one line naming them.
#include "parallel/precision_policy.h"
#include "parity.h"

static void fsdp(void) { parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 1}, "moe fsdp"); }
static void fsdp_accumulation(void) {
    parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 2}, "moe fsdp+accum");
}
static void pp2(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule = "1f1b"},
               "moe pp2 1f1b");
}
static void pp2_fsdp2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "1f1b"},
               "moe pp2 x fsdp2");
}
// Expert parallelism: the experts split over ep ranks of the data-sharding group, tokens
// exchanged by all-to-all; the rest of the model sharded over the whole group, the experts over
// the ranks holding the same ones.
static void ep2(void) { parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1, .ep = 2}, "moe ep2"); }
static void ep2_accumulation(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2, .ep = 2, .async = true},
               "moe ep2+accum+async");
}
static void ep4(void) { parity_run((parity_layout){.shard = 4, .replicate = 1, .tp = 1, .accum = 1, .ep = 4}, "moe ep4"); }
static void ep2_fsdp2(void) {
    parity_run((parity_layout){.shard = 4, .replicate = 1, .tp = 1, .accum = 1, .ep = 2}, "moe ep2 x fsdp2");
}
static void ep2_pp2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule = "1f1b", .ep = 2},
               "moe ep2 x pp2");
}
static void ep2_cp2(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 1, .cp = 2, .ep = 2}, "moe ep2 x cp2");
}
static void ep4_fsdp2_cp2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1, .cp = 2, .ep = 4},
               "moe ep4 over fsdp2 x cp2");
}
static void ep2_hsdp(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 2, .tp = 1, .accum = 1, .ep = 2}, "moe ep2 x hsdp2");
}
static void cp2(void) { parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 1, .cp = 2}, "moe cp2"); }

// The reference's expert loads against the arithmetic: every token of the step (GLOBAL_BATCH
// sequences of training.seq_len) reaches top_k = 2 experts in each of the 2 blocks; the least and
// most loaded experts bracket the mean.
static void expert_load_counts(void) {
    long T = parity_base.seq_len;
    for (int s = 0; s < STEPS; s++) {
        CHECK(parity_ref.moe_pairs[s] == (double)GLOBAL_BATCH * T * 2 * 2, "step %d: %.0f pairs, expected %ld", s + 1,
              parity_ref.moe_pairs[s], (long)GLOBAL_BATCH * T * 2 * 2);
        CHECK(parity_ref.moe_load_min[s] <= 1 && parity_ref.moe_load_max[s] >= 1 && parity_ref.moe_load_min[s] >= 0,
              "step %d: load min %.3f max %.3f", s + 1, parity_ref.moe_load_min[s], parity_ref.moe_load_max[s]);
    }
}

// Each unsupported setting: ct_model_config_from refuses it naming the setting and the family.
static void refusals(void) {
    static const char *bad[][3] = {
        {"pipeline_schedule", "zbv", "zero-bubble"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_config c = parity_base;
        parity_set(&c, bad[i][0], bad[i][1]);
        ct_model_config m;
        ct_status st = ct_model_config_from(&m, &c);
        CHECK(st == CT_ERR, "%s = %s accepted", bad[i][0], bad[i][1]);
        if (st == CT_ERR) {
            CHECK(strstr(ct_last_error(), "llama3_moe") && strstr(ct_last_error(), bad[i][2]), "%s: %s", bad[i][0],
                  ct_last_error());
        }
    }
}

// What tensor parallel does not run yet, each refused with one line naming the setting: per-head
// q/k norms (this base's flavor has them), the shared experts, and the load-balancing loss under
// sequence parallel; and under MXFP8 a dense first block whose FFN tp would split mid-block.
static void tp_refusals(void) {
    ct_config c = parity_base;
    parity_set(&c, "parallelism.compute_parallel_degree", "2");
    ct_model_config m, local;
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "%s", ct_last_error());
    CHECK(ct_model_config_local(&m, 2, &local) == CT_ERR && strstr(ct_last_error(), "compute_parallel_degree") &&
              strstr(ct_last_error(), "q/k norms"),
          "qk_norm under tp: %s", ct_last_error());
    ct_config d = c;
    parity_set(&d, "model.flavor", "deepseek_v3_like");
    parity_set(&d, "model.moe.num_shared_experts", "1");
    CHECK(ct_model_config_from(&m, &d) == CT_ERR && strstr(ct_last_error(), "model.moe.num_shared_experts 1") &&
              strstr(ct_last_error(), "compute_parallel_degree 2"),
          "shared experts under tp: %s", ct_last_error());
    parity_set(&d, "model.moe.num_shared_experts", "0");
    parity_set(&d, "model.moe.aux_loss_coeff", "0.01");
    parity_set(&d, "sequence_parallel.enable", "true");
    CHECK(ct_model_config_from(&m, &d) == CT_ERR && strstr(ct_last_error(), "model.moe.aux_loss_coeff") &&
              strstr(ct_last_error(), "sequence_parallel"),
          "load-balancing loss under sequence parallel: %s", ct_last_error());
    parity_set(&d, "sequence_parallel.enable", "false");
    CHECK(ct_model_config_from(&m, &d) == CT_OK, "tp without sequence parallel: %s", ct_last_error());
    // MXFP8: a dense first block's FFN of 48 over tp 2 leaves 24 per rank, not whole 32-blocks;
    // 64 leaves 32, and the experts' own width (20, not split over tp) does not matter. (The
    // attention is left out of the 8-bit set: its 6 heads of 6 split into 18 per rank.)
    parity_set(&d, "quantization.mxfp8.enable", "true");
    parity_set(&d, "quantization.filter_fqns", "output,attention");
    parity_set(&d, "model.moe.num_dense_layers", "1");
    parity_set(&d, "model.moe.dense_ffn_hidden_dim", "48");
    ct_precision prec;
    uint8_t *f8 = NULL;
    CHECK(ct_model_config_from(&m, &d) == CT_OK, "%s", ct_last_error());
    CHECK(ct_precision_policy(&d, &m, 2, &prec, &f8) == CT_ERR &&
              strstr(ct_last_error(), "model.moe.dense_ffn_hidden_dim 48 / 2 = 24 per rank") &&
              strstr(ct_last_error(), "compute_parallel_degree 2"),
          "MXFP8 dense FFN split mid-block: %s", ct_last_error());
    free(f8), f8 = NULL;
    parity_set(&d, "model.moe.dense_ffn_hidden_dim", "64");
    CHECK(ct_model_config_from(&m, &d) == CT_OK && ct_precision_policy(&d, &m, 2, &prec, &f8) == CT_OK,
          "MXFP8 dense FFN of 64 over tp 2: %s", ct_last_error());
    free(f8);
    // No dense block: nothing of the FFN splits over tp, whatever the experts' width.
    parity_set(&d, "model.moe.num_dense_layers", "0");
    f8 = NULL;
    CHECK(ct_model_config_from(&m, &d) == CT_OK && ct_precision_policy(&d, &m, 2, &prec, &f8) == CT_OK,
          "MXFP8 experts of width 20 over tp 2: %s", ct_last_error());
    free(f8);
}

static void balanced_ep2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1, .ep = 2}, "balanced moe ep2");
}
static void balanced_ep2_fsdp2(void) {
    parity_run((parity_layout){.shard = 4, .replicate = 1, .tp = 1, .accum = 1, .ep = 2}, "balanced moe ep2 x fsdp2");
}
static void balanced_ep4(void) {
    parity_run((parity_layout){.shard = 4, .replicate = 1, .tp = 1, .accum = 1, .ep = 4}, "balanced moe ep4");
}
static void balanced_ep2_pp2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule = "1f1b", .ep = 2},
               "balanced moe ep2 x pp2");
}

// Llama 3's checkpointing kinds recompute q and k without the per-head norms: a flavor with them
// (debugmodel, Qwen3's) is refused under checkpointing, naming the setting.
static void qk_norm_checkpointing_refused(void) {
    ct_config c = parity_base;
    parity_set(&c, "activation_checkpoint.mode", "full");
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_ERR, "activation checkpointing of q/k-normed heads accepted");
    CHECK(strstr(ct_last_error(), "activation_checkpoint.mode") && strstr(ct_last_error(), "qk_norm"), "%s",
          ct_last_error());
}

static void balanced_fsdp(void) {
    parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 1}, "balanced moe fsdp");
}
static void balanced_fsdp_accumulation(void) {
    parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 2}, "balanced moe fsdp+accum");
}
static void balanced_pp2(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule = "1f1b"},
               "balanced moe pp2 1f1b");
}
static void balanced_pp2_fsdp2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "1f1b"},
               "balanced moe pp2 x fsdp2");
}

// The balanced model: its single-process run becomes the reference for the layouts after it.
static void balanced_reference(void) {
    parity_set(&parity_base, "model.moe.score_func", "sigmoid");
    parity_set(&parity_base, "model.moe.aux_loss_coeff", "0.1");
    parity_set(&parity_base, "model.moe.aux_loss_level", "sequence");
    parity_set(&parity_base, "model.moe.load_balance_coeff", "0.01");
    ct_group world;
    ct_comm_group_world(&world, 30);
    parity_reference(&world);
    ct_comm_group_free(&world);
}

// The reference itself: a load-balancing loss every step near its coefficient x blocks (a
// balanced router scores 1 per block), and biases that moved, each a whole number of steps of
// 0.01 -- the optimizer's decay never touched them.
static void balanced_moves(void) {
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &parity_base) == CT_OK, "%s", ct_last_error());
    for (int s = 0; s < STEPS; s++)
        CHECK(parity_ref.moe_aux_loss[s] > 0.1 * 2 * 0.9 && parity_ref.moe_aux_loss[s] < 0.1 * 2 * 2,
              "step %d: load-balancing loss %.6g", s + 1, parity_ref.moe_aux_loss[s]);
    ct_param_table table;
    ct_param_table_build(&table, &m);
    int moved = 0;
    for (int l = 0; l < m.n_layers; l++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.moe.expert_bias", l);
        const ct_param *p = ct_param_find(&table, name);
        CHECK(p != NULL, "%s missing", name);
        if (!p) continue;
        for (long e = 0; e < p->numel; e++) {
            double b = parity_ref.params[p->offset + e] * 100;
            moved += b != 0;
            CHECK(fabs(b - round(b)) < 1e-4 && fabs(b) <= STEPS, "%s[%ld] = %.9g: not a whole number of 0.01 steps",
                  name, e, b / 100);
        }
    }
    ct_param_table_free(&table);
    CHECK(moved > 0, "no choosing bias moved in %d steps", STEPS);
}

// DeepSeek's structure: deepseek_v3_like (256 experts of which 8 per token, no q/k norms) at the
// tiny width, block 0 dense (FFN 28 wide), block 1 routed with a shared expert, the balancing of
// the model before it on. Its single-process run is the reference for the layouts after it, with
// activation checkpointing among them (the same losses and parameters as the plain reference).
static void deepseek_reference(void) {
    parity_set(&parity_base, "model.flavor", "deepseek_v3_like");
    parity_set(&parity_base, "model.moe.num_dense_layers", "1");
    parity_set(&parity_base, "model.moe.num_shared_experts", "1");
    parity_set(&parity_base, "model.moe.dense_ffn_hidden_dim", "28");
    ct_group world;
    ct_comm_group_world(&world, 30);
    parity_reference(&world);
    ct_comm_group_free(&world);
}

static void deepseek_fsdp(void) {
    parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 1}, "deepseek-like fsdp");
}
static void deepseek_fsdp_accumulation(void) {
    parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 2}, "deepseek-like fsdp+accum");
}
static void deepseek_pp2(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule = "1f1b"},
               "deepseek-like pp2 1f1b");
}

// parity_run with activation checkpointing `mode` / `option` (the reference stays the plain run).
static void run_ac(const char *mode, const char *option, parity_layout l, const char *what) {
    ct_config saved = parity_base;
    parity_set(&parity_base, "activation_checkpoint.mode", mode);
    parity_set(&parity_base, "activation_checkpoint.selective_ac_option", option);
    parity_run(l, what);
    parity_base = saved;
}
static void deepseek_ac_fsdp(void) {
    parity_layout l = {.shard = -1, .replicate = 1, .tp = 1, .accum = 1};
    run_ac("full", "op", l, "deepseek-like ac full, fsdp");
    run_ac("selective", "op", l, "deepseek-like ac selective op, fsdp");
    run_ac("selective", "elementwise", l, "deepseek-like ac selective elementwise, fsdp");
    run_ac("selective", "2", l, "deepseek-like ac every 2nd block full, fsdp");
}
// Expert parallelism with the shared expert and the dense block, and with checkpointing: the
// recompute exchanges tokens again, in the same order on every rank.
static void deepseek_ep2(void) {
    parity_layout l = {.shard = 2, .replicate = 1, .tp = 1, .accum = 1, .ep = 2};
    parity_run(l, "deepseek-like ep2");
    run_ac("full", "op", l, "deepseek-like ac full, ep2");
    run_ac("selective", "op", l, "deepseek-like ac selective op, ep2");
}
static void deepseek_ep_fsdp(void) {
    parity_run((parity_layout){.shard = 4, .replicate = 1, .tp = 1, .accum = 1, .ep = 4}, "deepseek-like ep4");
    run_ac("full", "op", (parity_layout){.shard = 4, .replicate = 1, .tp = 1, .accum = 2, .ep = 2},
           "deepseek-like ac full, ep2 x fsdp2 + accum");
}
// Tensor parallel: the attention and the dense block split as Llama 3's, the router and the
// experts whole on every tp rank, run on its own rows (all of them, or its 1/tp under sequence
// parallel). DeepSeek's structure without the shared expert (which does not split over tp yet),
// heads and vocabulary that tp 2 divides, balanced by the choosing bias (the load-balancing loss
// needs whole sequences, which sequence parallel splits).
static void tp_reference(void) {
    parity_set(&parity_base, "model.moe.num_shared_experts", "0");
    parity_set(&parity_base, "model.n_kv_heads", "2");
    parity_set(&parity_base, "model.vocab_size", "132");
    parity_set(&parity_base, "model.moe.aux_loss_coeff", "0");
    ct_group world;
    ct_comm_group_world(&world, 30);
    parity_reference(&world);
    ct_comm_group_free(&world);
}
static void tp2(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 1}, "moe tp2");
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 2, .sequence_parallel = true},
               "moe tp2 + sp + accum");
}
static void tp2_ep2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1, .ep = 2}, "moe tp2 x ep2");
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1, .ep = 2, .sequence_parallel = true},
               "moe tp2 + sp x ep2");
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 4, .pp = 2, .schedule = "1f1b",
                               .sequence_parallel = true},
               "moe tp2 + sp x pp2");
}
static void tp2_checkpointing(void) {
    parity_layout l = {.shard = 1, .replicate = 1, .tp = 2, .accum = 1, .sequence_parallel = true};
    run_ac("full", "op", l, "moe ac full, tp2 + sp");
    run_ac("selective", "op", l, "moe ac selective op, tp2 + sp");
}

// bf16 mixed precision: the experts' matmuls on bf16 inputs and the gathered bf16 copies of their
// weights (over the expert shard group under expert parallelism), the router in fp32. The tp
// reference's model, computed in bf16: its single-process run is the reference for the layouts
// after it, held to the narrow bounds (tests/error_model.h).
// The load-balancing loss under tensor parallel without sequence parallel: every tp rank routes
// the step's tokens alike, so each computes the whole loss (summed over data ranks, not tp).
static void tp_aux_reference(bool on) {
    parity_set(&parity_base, "model.moe.aux_loss_coeff", on ? "0.01" : "0");
    if (!on) return;
    ct_group world;
    ct_comm_group_world(&world, 30);
    parity_reference(&world);
    ct_comm_group_free(&world);
}
static void tp2_aux(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 2}, "balanced moe tp2 + accum");
}
static void tp2_ep2_aux(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1, .ep = 2}, "balanced moe tp2 x ep2");
}

static void bf16_reference(void) {
    parity_set(&parity_base, "mixed_precision", "bf16");
    ct_group world;
    ct_comm_group_world(&world, 30);
    parity_reference(&world);
    ct_comm_group_free(&world);
}
// The bf16 reference against the same model in fp32 (the harness's wide run): close, yet not fp32
// in disguise -- the losses differ, and so do the routed experts' parameters.
static void bf16_differs_from_fp32_but_close(void) {
    double most = 0;
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs(parity_ref.loss[s] - parity_wide.loss[s]) / parity_wide.loss[s];
        CHECK(rel <= 1e-2, "step %d: bf16 loss %.9g, fp32 %.9g", s + 1, parity_ref.loss[s], parity_wide.loss[s]);
        most = fmax(most, rel);
    }
    CHECK(most > 1e-6, "bf16 losses within %.3g of fp32's: no narrowing happened", most);
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &parity_base) == CT_OK, "%s", ct_last_error());
    ct_param_table table;
    ct_param_table_build(&table, &m);
    const char *experts[] = {"layers.1.moe.experts.w13.weight", "layers.1.moe.experts.w2.weight"};
    for (int i = 0; i < 2; i++) {
        const ct_param *p = ct_param_find(&table, experts[i]);
        CHECK(p != NULL, "%s missing", experts[i]);
        if (!p) continue;
        double d = parity_rel_rms(parity_ref.params + p->offset, parity_wide.params + p->offset, p->numel);
        CHECK(d > 1e-6 && d < 0.1, "%s: relative RMS %.3g from fp32", experts[i], d);
    }
    ct_param_table_free(&table);
}
static void bf16_fsdp2(void) {
    parity_layout l = {.shard = 2, .replicate = 1, .tp = 1, .accum = 1};
    parity_run(l, "moe bf16 fsdp2");
    run_ac("full", "op", l, "moe bf16 ac full, fsdp2");
}
static void bf16_ep2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1, .ep = 2}, "moe bf16 ep2");
}
static void bf16_pp2(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule = "1f1b"},
               "moe bf16 pp2 1f1b");
}
static void bf16_tp2_sp(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 1, .sequence_parallel = true},
               "moe bf16 tp2 + sp");
}
static void bf16_ep2_fsdp2(void) {
    parity_run((parity_layout){.shard = 4, .replicate = 1, .tp = 1, .accum = 1, .ep = 2}, "moe bf16 ep2 x fsdp2");
}

// 8-bit training on the bf16 model: the routed experts' w13 and w2 one 8-bit linear per expert
// on its rows (model/moe_layer.h), the attention and the dense block's FFN Llama 3's 8-bit
// linears, the router fp32. Each recipe's single-process run is the reference for the layouts
// after it, held to the narrow bounds from its distance to the wide run (the same bf16 model
// without the 8-bit casts, which parity_reference trains beside it).
static const char *f8_recipe = "";
static void f8_reference(const char *name, const char *key, const char *recipe) {
    parity_set(&parity_base, "quantization.float8.enable", "false");
    parity_set(&parity_base, "quantization.mxfp8.enable", "false");
    parity_set(&parity_base, key, "true");
    if (recipe) parity_set(&parity_base, "quantization.float8.recipe", recipe);
    f8_recipe = name;
    ct_group world;
    ct_comm_group_world(&world, 30);
    parity_reference(&world);
    ct_comm_group_free(&world);
}
// The reference against the wide run: close, yet not bf16 in disguise; and with every linear but
// the routed experts' filtered out of the 8-bit set (the output, the attention, the dense block),
// still not the wide run -- the experts' matmuls themselves ran in 8 bits: their parameters
// differ from the wide run's. (Both runs compute the same operations in the same order on one
// process, so without the casts they would agree exactly; at this tiny width near-uniform
// logits keep the losses' difference small.)
static void f8_differs_from_bf16_but_close(void) {
    double most = 0;
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs(parity_ref.loss[s] - parity_wide.loss[s]) / parity_wide.loss[s];
        CHECK(rel <= 3e-2, "%s step %d: loss %.9g, bf16 %.9g", f8_recipe, s + 1, parity_ref.loss[s],
              parity_wide.loss[s]);
        most = fmax(most, rel);
    }
    CHECK(most > 1e-6, "%s: losses within %.3g of bf16's: no quantisation happened", f8_recipe, most);
    ct_config c = parity_base;
    parity_set(&c, "quantization.filter_fqns", "output,attention,layers.0.");
    parity_result r;
    parity_train_alone(c, &r);
    double experts = 0;
    for (int s = 0; s < STEPS; s++) experts = fmax(experts, fabs(r.loss[s] - parity_wide.loss[s]) / parity_wide.loss[s]);
    CHECK(experts > 1e-6 && experts <= 3e-2, "%s, the routed experts alone in 8 bits: losses within %.3g of bf16's",
          f8_recipe, experts);
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &parity_base) == CT_OK, "%s", ct_last_error());
    ct_param_table table;
    ct_param_table_build(&table, &m);
    const char *names[] = {"layers.1.moe.experts.w13.weight", "layers.1.moe.experts.w2.weight",
                           "layers.0.attention.wq.weight"};
    double d[3] = {0};
    for (int i = 0; i < 3; i++) {
        const ct_param *p = ct_param_find(&table, names[i]);
        CHECK(p != NULL, "%s missing", names[i]);
        if (p) d[i] = parity_rel_rms(r.params + p->offset, parity_wide.params + p->offset, p->numel);
    }
    CHECK(d[0] > 1e-6 && d[0] < 0.1 && d[1] > 1e-6 && d[1] < 0.1,
          "%s, the routed experts alone in 8 bits: their w13 %.3g, w2 %.3g relative RMS from bf16's", f8_recipe, d[0],
          d[1]);
    printf("    %s: losses from bf16's at most %.3g; the routed experts alone in 8 bits: losses %.3g, experts' w13 "
           "%.3g w2 %.3g, block 0's wq %.3g relative RMS from bf16's\n",
           f8_recipe, most, experts, d[0], d[1], d[2]);
    ct_param_table_free(&table);
    free(r.params);
}
static void f8_fsdp2(void) {
    char what[96];
    snprintf(what, sizeof what, "moe %s fsdp2", f8_recipe);
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1}, what);
}
static void f8_ep2(void) {
    char what[96];
    snprintf(what, sizeof what, "moe %s ep2", f8_recipe);
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1, .ep = 2}, what);
}
static void f8_ep2_fsdp2(void) {
    char what[96];
    snprintf(what, sizeof what, "moe %s ep2 x fsdp2", f8_recipe);
    parity_run((parity_layout){.shard = 4, .replicate = 1, .tp = 1, .accum = 1, .ep = 2}, what);
}
static void f8_cases(int n) {
    if (n == 2) {
        CT_MPI_RUN(f8_differs_from_bf16_but_close);
        CT_MPI_RUN(f8_fsdp2);
        CT_MPI_RUN(f8_ep2);
    }
    if (n == 4) CT_MPI_RUN(f8_ep2_fsdp2);
}

static void deepseek_ac_pp2(void) {
    parity_layout l = {.shard = 1, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule = "1f1b"};
    run_ac("full", "op", l, "deepseek-like ac full, pp2 1f1b");
    run_ac("selective", "op", l, "deepseek-like ac selective op, pp2 1f1b");
}

static void cases(int n) {
    if (n == 2) {
        CT_MPI_RUN(refusals);
        CT_MPI_RUN(tp_refusals);
        CT_MPI_RUN(qk_norm_checkpointing_refused);
        CT_MPI_RUN(expert_load_counts);
        CT_MPI_RUN(fsdp);
        CT_MPI_RUN(fsdp_accumulation);
        CT_MPI_RUN(pp2);
        CT_MPI_RUN(cp2);
        CT_MPI_RUN(ep2);
        CT_MPI_RUN(ep2_accumulation);
        CT_MPI_RUN(ep2_cp2);
    }
    if (n == 4) {
        CT_MPI_RUN(fsdp);
        CT_MPI_RUN(pp2_fsdp2);
        CT_MPI_RUN(ep4);
        CT_MPI_RUN(ep2_fsdp2);
        CT_MPI_RUN(ep2_pp2);
        CT_MPI_RUN(ep2_hsdp);
        CT_MPI_RUN(ep4_fsdp2_cp2);
    }
    if (n > 4) return;
    balanced_reference();
    if (n == 2) {
        CT_MPI_RUN(balanced_moves);
        CT_MPI_RUN(balanced_fsdp);
        CT_MPI_RUN(balanced_fsdp_accumulation);
        CT_MPI_RUN(balanced_pp2);
        CT_MPI_RUN(balanced_ep2);
    }
    if (n == 4) {
        CT_MPI_RUN(balanced_fsdp);
        CT_MPI_RUN(balanced_pp2_fsdp2);
        CT_MPI_RUN(balanced_ep4);
        CT_MPI_RUN(balanced_ep2_fsdp2);
        CT_MPI_RUN(balanced_ep2_pp2);
    }
    deepseek_reference();
    if (n == 2) {
        CT_MPI_RUN(deepseek_fsdp);
        CT_MPI_RUN(deepseek_fsdp_accumulation);
        CT_MPI_RUN(deepseek_pp2);
        CT_MPI_RUN(deepseek_ac_fsdp);
        CT_MPI_RUN(deepseek_ac_pp2);
        CT_MPI_RUN(deepseek_ep2);
    }
    if (n == 4) {
        CT_MPI_RUN(deepseek_fsdp);
        CT_MPI_RUN(deepseek_ac_fsdp);
        CT_MPI_RUN(deepseek_ep_fsdp);
    }
    tp_reference();
    if (n == 2) {
        CT_MPI_RUN(tp2);
        CT_MPI_RUN(tp2_checkpointing);
    }
    if (n == 4) CT_MPI_RUN(tp2_ep2);
    tp_aux_reference(true);
    if (n == 2) CT_MPI_RUN(tp2_aux);
    if (n == 4) CT_MPI_RUN(tp2_ep2_aux);
    tp_aux_reference(false);
    bf16_reference();
    if (n == 2) {
        CT_MPI_RUN(bf16_differs_from_fp32_but_close);
        CT_MPI_RUN(bf16_fsdp2);
        CT_MPI_RUN(bf16_ep2);
        CT_MPI_RUN(bf16_pp2);
        CT_MPI_RUN(bf16_tp2_sp);
    }
    if (n == 4) CT_MPI_RUN(bf16_ep2_fsdp2);
    f8_reference("float8 tensorwise", "quantization.float8.enable", NULL);
    f8_cases(n);
    f8_reference("float8 rowwise", "quantization.float8.enable", "rowwise");
    f8_cases(n);
    f8_reference("mxfp8", "quantization.mxfp8.enable", NULL);
    f8_cases(n);
}

int main(int argc, char **argv) {
    static const char *dims[][2] = {{"model.name", "llama3_moe"}, {"model.dim", "36"},        {"model.n_layers", "2"},
                                    {"model.n_heads", "6"},       {"model.n_kv_heads", "3"},  {"model.vocab_size", "131"},
                                    {"model.ffn_hidden_dim", "20"}};
    return parity_main(argc, argv, dims, sizeof dims / sizeof dims[0], cases);
}
