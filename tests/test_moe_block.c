// The llama3_moe block with DeepSeek's structure (deepseek_v3_like at a tiny width: 256 experts,
// 8 per token, no q/k norms): a dense first block (Llama 3's block at
// model.moe.dense_ffn_hidden_dim) and a routed block with two shared experts. In one process:
//   - the routed block's output against a float64 reference written here from its own input
//     rows (x_mid and norm2 as the record holds them): x_mid + Σ_j w_j · expert_j(norm2) +
//     shared(norm2), the experts chosen by a full sort of the softmax scores, renormalised;
//   - the dense block's tensors at the dense width, and the routed block's shared experts at S·F;
//   - every parameter's gradient against central finite differences of the whole model's loss
//     (directional derivatives along random directions), the shared expert's and the dense
//     block's FFN among them, each reaching the loss;
//   - the same loss and gradients under every activation-checkpointing kind as without, with the
//     load-balancing loss on, for this model and for one of routed blocks alone;
//   - the recompute's FLOPs at deepseek_v3_like's full shape against a hand count;
//   - generation (one record for every block) against the training forward;
//   - the bytes a block keeps per token under each kind (kept_bytes_per_token) against its carve.
#include <math.h>
#include <string.h>

#include "core/config.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/checkpointing.h"
#include "model/generate.h"
#include "model/llama3_moe/llama3_moe.h"
#include "model/params.h"
#include "model/runner.h"
#include "model/weights.h"
#include "test.h"

enum { B = 2, T = 7 };
#define EPS 1e-4  // small: a larger step moves some tokens' 8th and 9th of 256 scores past each other

static ct_model_config moe_model(void) {
    ct_config c;
    ct_config_defaults(&c);
    const char *kv[][2] = {{"model.name", "llama3_moe"},      {"model.flavor", "deepseek_v3_like"},
                           {"model.dim", "24"},
                           {"model.n_layers", "2"},           {"model.n_heads", "4"},
                           {"model.n_kv_heads", "2"},         {"model.vocab_size", "37"},
                           {"model.ffn_hidden_dim", "10"},    {"model.moe.num_shared_experts", "2"},
                           {"model.moe.num_dense_layers", "1"}, {"model.moe.dense_ffn_hidden_dim", "28"},
                           {"training.seq_len", "16"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK(ct_config_set(&c, kv[i][0], kv[i][1]) == CT_OK, "%s: %s", kv[i][0], ct_last_error());
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "%s", ct_last_error());
    return m;
}

typedef struct {
    ct_model_config m;
    ct_param_table t;
    float *params, *grads;
    ct_model_weights w, g;
    ct_model_acts a;
    int32_t in[B * T], tg[B * T];
} rig;

static void rig_init(rig *r, ct_model_config m, ct_ac_kind kind) {
    r->m = m;
    ct_param_table_build(&r->t, &m);
    r->params = ct_mem_alloc(CT_MEM_PARAMS, r->t.total * sizeof(float));
    r->grads = ct_mem_alloc(CT_MEM_GRADS, r->t.total * sizeof(float));
    ct_param_init_all(&r->t, 5, r->params);
    // Weights larger than at init (std 0.3) so every gradient is well above fp32 rounding of the loss.
    ct_rng rng;
    ct_rng_seed(&rng, 3);
    for (long i = 0; i < r->t.total; i++) r->params[i] += 0.3f * ct_rng_next_normal(&rng);
    ct_model_weights_init(&r->w, &r->t, &m, r->params);
    ct_model_weights_init(&r->g, &r->t, &m, r->grads);
    // ct_model_acts_init's stage, with the checkpointing kind on every block.
    const ct_kernels *k = ct_kernels_get("cpu");
    ct_stage_spec spec = {.k = k, .cfg = &m, .layer_begin = 0, .layer_end = m.n_layers, .has_embedding = true,
                          .has_head = true, .B = B, .T = T, .ops = ct_stage_ops_local(k), .ac = {kind, 1}};
    ct_stage_init(&r->a.stage, &spec);
    ct_stage_plan_slots(&r->a.stage, 1, false);
    r->a.loss_sum = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OTHER, sizeof(double));
    ct_rng_seed(&rng, 17);
    for (long i = 0; i < B * T; i++) {
        r->in[i] = (int32_t)(ct_rng_next(&rng) % m.vocab_size);
        r->tg[i] = (int32_t)(ct_rng_next(&rng) % m.vocab_size);
    }
}

static void rig_free(rig *r) {
    ct_model_acts_free(&r->a);
    ct_model_weights_free(&r->w);
    ct_model_weights_free(&r->g);
    ct_mem_free(r->params);
    ct_mem_free(r->grads);
    ct_param_table_free(&r->t);
}

static const ct_param *param(const rig *r, const char *name) {
    const ct_param *p = ct_param_find(&r->t, name);
    CHECK(p != NULL, "%s missing", name);
    return p;
}

static double silu(double a) { return a / (1 + exp(-a)); }

// y (C) += scale · w2 (silu(w1 x) · w3 x) for one SwiGLU of hidden F: w13 (2F, C), w2 (C, F).
static void swiglu_ref(const float *w13, const float *w2, long C, long F, const float *x, double scale, double *y) {
    double h[64];
    for (long f = 0; f < F; f++) {
        double a = 0, b = 0;
        for (long i = 0; i < C; i++) a += (double)w13[f * C + i] * x[i], b += (double)w13[(F + f) * C + i] * x[i];
        h[f] = silu(a) * b;
    }
    for (long o = 0; o < C; o++) {
        double s = 0;
        for (long f = 0; f < F; f++) s += (double)w2[o * F + f] * h[f];
        y[o] += scale * s;
    }
}

static void structure_and_forward(void) {
    ct_model_config m = moe_model();
    CHECK(m.n_dense_layers == 1 && m.n_shared_experts == 2 && m.dense_ffn_hidden == 28, "dense %d shared %d width %d",
          m.n_dense_layers, m.n_shared_experts, m.dense_ffn_hidden);
    rig r;
    rig_init(&r, m, CT_AC_NONE);
    long C = m.dim, F = m.ffn_hidden, E = m.n_experts, K = m.moe_top_k, SF = 2 * F, N = B * T;
    const ct_param *d1 = param(&r, "layers.0.feed_forward.w1.weight");
    CHECK(d1 && d1->numel == 28 * C, "the dense block's w1 is not (28, C)");
    CHECK(!ct_param_find(&r.t, "layers.0.moe.router.weight"), "the dense block has a router");
    const ct_param *s13 = param(&r, "layers.1.moe.shared_experts.w13.weight");
    const ct_param *s2 = param(&r, "layers.1.moe.shared_experts.w2.weight");
    const ct_param *router = param(&r, "layers.1.moe.router.weight");
    const ct_param *e13 = param(&r, "layers.1.moe.experts.w13.weight");
    const ct_param *e2 = param(&r, "layers.1.moe.experts.w2.weight");
    if (!s13 || !s2 || !router || !e13 || !e2) {
        rig_free(&r);
        return;
    }
    CHECK(s13->numel == 2 * SF * C && s2->numel == C * SF, "shared expert shapes");
    ct_model_step(&r.a, &r.w, NULL, r.in, r.tg, 0);
    ct_act_slot *slot = &r.a.stage.slots[0];
    const ct_llama3_moe_acts *s = (const ct_llama3_moe_acts *)((char *)slot->blocks + sizeof(ct_llama3_moe_acts));
    const float *x_mid = s->attn.x_mid, *norm2 = s->attn.norm2, *out = slot->out;
    const float *P = r.params;
    double worst = 0, scale = 0;
    for (long n = 0; n < N; n++) {
        const float *x = norm2 + n * C;
        double logit[256], score[256], y[64] = {0};
        double mx = -INFINITY, sum = 0;
        for (long e = 0; e < E; e++) {
            logit[e] = 0;
            for (long i = 0; i < C; i++) logit[e] += (double)P[router->offset + e * C + i] * x[i];
            mx = fmax(mx, logit[e]);
        }
        for (long e = 0; e < E; e++) sum += score[e] = exp(logit[e] - mx);
        for (long e = 0; e < E; e++) score[e] /= sum;
        int order[256];
        for (long e = 0; e < E; e++) order[e] = (int)e;
        for (long i = 0; i < E; i++)  // full sort by score, highest first (ties: lower id first)
            for (long j = i + 1; j < E; j++)
                if (score[order[j]] > score[order[i]]) {
                    int t = order[i];
                    order[i] = order[j], order[j] = t;
                }
        double chosen = 0;
        for (long j = 0; j < K; j++) chosen += score[order[j]];
        for (long j = 0; j < K; j++) {
            int e = order[j];
            swiglu_ref(P + e13->offset + e * 2 * F * C, P + e2->offset + e * C * F, C, F, x, score[e] / chosen, y);
        }
        swiglu_ref(P + s13->offset, P + s2->offset, C, SF, x, 1.0, y);
        for (long o = 0; o < C; o++) {
            double want = x_mid[n * C + o] + y[o];
            worst = fmax(worst, fabs(out[n * C + o] - want));
            scale = fmax(scale, fabs(want));
        }
    }
    CHECK(worst <= 1e-5 * (1 + scale), "routed block output: worst |diff| %.3g (scale %.3g)", worst, scale);
    rig_free(&r);
}

static double loss(rig *r, float gscale) {
    return ct_model_step(&r->a, &r->w, gscale ? &r->g : NULL, r->in, r->tg, gscale) / (B * T);
}

static void gradients(void) {
    rig r;
    rig_init(&r, moe_model(), CT_AC_NONE);
    memset(r.grads, 0, r.t.total * sizeof(float));
    loss(&r, 1.0f / (B * T));
    ct_rng rng;
    ct_rng_seed(&rng, 9);
    float *dir = ct_xmalloc(r.t.total * sizeof(float));
    for (int pi = 0; pi < r.t.count; pi++) {
        const ct_param *p = &r.t.params[pi];
        double analytic = 0;
        for (long i = 0; i < p->numel; i++) {
            dir[i] = ct_rng_next_normal(&rng);
            analytic += (double)dir[i] * r.grads[p->offset + i];
        }
        float *x = r.params + p->offset;
        const double eps = EPS;
        for (long i = 0; i < p->numel; i++) x[i] += (float)eps * dir[i];
        double lp = loss(&r, 0);
        for (long i = 0; i < p->numel; i++) x[i] -= 2 * (float)eps * dir[i];
        double lm = loss(&r, 0);
        for (long i = 0; i < p->numel; i++) x[i] += (float)eps * dir[i];
        double numeric = (lp - lm) / (2 * eps);
        if (getenv("VERBOSE")) printf("    %-44s analytic %10.6f numeric %10.6f\n", p->name, analytic, numeric);
        CHECK(fabs(numeric - analytic) <= 2e-2 * fabs(analytic) + 2e-4, "%s: analytic %.6g numeric %.6g", p->name,
              analytic, numeric);
        if (strstr(p->name, "shared_experts") || strstr(p->name, "layers.0.feed_forward"))
            CHECK(fabs(numeric) > 1e-3, "%s: the loss does not depend on it (numeric %.3g)", p->name, numeric);
    }
    free(dir);
    rig_free(&r);
}

// Every checkpointing kind: the same loss and the same gradients as keeping everything (the
// recompute runs the forward's operations on the same inputs, so the same bits).
// With the load-balancing loss on: its gradient, which the forward computes, must come out of a
// full recompute (a call without the step's loss weight) as it came out of the forward.
// Also for routed blocks alone (no shared experts, no dense block: no FFN buffers in the record).
static void checkpointing_kinds_of(ct_model_config m) {
    m.moe_aux_coeff = 0.1;
    rig ref;
    rig_init(&ref, m, CT_AC_NONE);
    memset(ref.grads, 0, ref.t.total * sizeof(float));
    double want = loss(&ref, 1.0f / (B * T));
    for (int kind = CT_AC_ELEMENTWISE; kind <= CT_AC_FULL; kind++) {
        rig r;
        rig_init(&r, m, (ct_ac_kind)kind);
        memset(r.grads, 0, r.t.total * sizeof(float));
        double got = loss(&r, 1.0f / (B * T));
        CHECK(got == want, "%s: loss %.9g vs %.9g", ct_ac_kind_name((ct_ac_kind)kind), got, want);
        long differ = 0;
        for (long i = 0; i < r.t.total; i++) differ += r.grads[i] != ref.grads[i];
        CHECK(differ == 0, "%s: %ld gradient elements differ", ct_ac_kind_name((ct_ac_kind)kind), differ);
        rig_free(&r);
    }
    rig_free(&ref);
}
static void checkpointing_kinds(void) {
    checkpointing_kinds_of(moe_model());
    ct_model_config routed = moe_model();
    routed.n_shared_experts = 0, routed.n_dense_layers = 0;
    checkpointing_kinds_of(routed);
}

// The recompute's matmul FLOPs per token at deepseek_v3_like's full shape, from the kinds'
// definitions: C 7168, 128 query heads and 8 kv heads of 128 (Q 16384, KV 1024), 256 experts of
// 2048 with 8 per token, 1 shared expert (S·F 2048), 3 dense blocks of 18432 among 61.
//   per-op, a dense block: wk, wo, w3 = 2C·KV + 2Q·C + 2C·18432; a routed block the same with the
//     shared experts' w3 (2C·2048)
//   full, a dense block: every matmul 2C·(Q + 2KV) + 2Q·C + 3 x 2C·18432, and attention's
//     4Q·T; a routed block: the same with the shared 2048, plus the router 2C·256 and 8 experts'
//     3 x 2C·2048
static void recompute_flops_deepseek(void) {
    ct_config c;
    ct_config_defaults(&c);
    CHECK(ct_config_set(&c, "model.name", "llama3_moe") == CT_OK && ct_config_set(&c, "model.flavor", "deepseek_v3_like") == CT_OK,
          "%s", ct_last_error());
    ct_model_config m;
    CHECK(ct_model_config_plan(&m, &c) == CT_OK, "%s", ct_last_error());
    ct_ac_shape s = {.cfg = &m, .compute_bytes = 4, .seq_parallel_tp = 1};
    double C = 7168, Q = 16384, KV = 1024, T = 4096;
    double op_dense = 2 * C * KV + 2 * Q * C + 2 * C * 18432, op_routed = 2 * C * KV + 2 * Q * C + 2 * C * 2048;
    double full_dense = 2 * C * (Q + 2 * KV) + 2 * Q * C + 3 * 2 * C * 18432 + 4 * Q * T;
    double full_routed = 2 * C * (Q + 2 * KV) + 2 * Q * C + 3 * 2 * C * 2048 + 4 * Q * T + 2 * C * 256 + 8 * 3 * 2 * C * 2048;
    double op = (3 * op_dense + 58 * op_routed) / 61, full = (3 * full_dense + 58 * full_routed) / 61;
    double got_op = ct_ac_recompute_flops_per_token(&s, CT_AC_OPS, (long)T);
    double got_full = ct_ac_recompute_flops_per_token(&s, CT_AC_FULL, (long)T);
    CHECK(fabs(got_op - op) <= 1e-12 * op, "op %.0f, by hand %.0f", got_op, op);
    CHECK(fabs(got_full - full) <= 1e-12 * full, "full %.0f, by hand %.0f", got_full, full);
    CHECK(ct_ac_recompute_flops_per_token(&s, CT_AC_ELEMENTWISE, (long)T) == 0, "elementwise recomputes a matmul");
}

// What kept_bytes_per_token says a block keeps, against what its carve takes: Llama 3's record
// with the FFN buffers and the block's input x (the stage's) per token, for each kind; the
// routed experts' buffers (allocated beside the record) the same under every kind but full,
// which keeps none. N = 32 rows, so no slice is padded. In fp32 and under bf16 (where the
// record's activations, the experts' inputs, h13 and h are kept in 2 bytes).
static void kept_bytes_at(int bytes) {
    ct_model_config m = moe_model();
    ct_linear_ctx lin = {.k = ct_kernels_get("cpu"), .prec = ct_precision_fp32()};
    if (bytes == 2) lin.prec.compute = CT_BF16, lin.prec.weights_bf16 = true;
    ct_llama3_moe_work work = {0};
    long Bk = 2, Tk = 16, N = Bk * Tk;
    ct_block_ctx c = {.k = lin.k, .lin = &lin, .cfg = &m, .B = Bk, .T = Tk, .N = N, .N_local = N, .work = &work};
    ct_ac_shape shape = {.cfg = &m, .compute_bytes = bytes, .seq_parallel_tp = 1};
    double moe = 0;
    for (int kind = CT_AC_NONE; kind <= CT_AC_FULL; kind++) {
        ct_llama3_moe_acts acts = {0};
        double record = 4.0 * (ct_llama3_moe_block.carve_acts(&c, (ct_ac_kind)kind, NULL, &acts, NULL) + N * m.dim) / N;
        double kept = ct_ac_kept_bytes_per_token(&shape, (ct_ac_kind)kind);
        if (kind == CT_AC_NONE) moe = kept - record;
        double want = record + (kind == CT_AC_FULL ? 0 : moe);
        CHECK(kept == want, "%d-byte activations, %s: kept %.1f bytes a token, the carve %.1f", bytes,
              ct_ac_kind_name((ct_ac_kind)kind), kept, want);
    }
    // The routed experts' part by hand: logits and scores 2 x 4 x 256, then for each of the 8
    // choices its weight, id and position (3 x 4) and its rows: sent and received (2C) and the
    // output (C), 4 bytes each; the expert's input (C), h13 (2F) and h (F) in the compute dtype.
    double hand = 8.0 * 256 + 8 * 12 + 4.0 * 8 * (2 * 24 + 24) + (double)bytes * 8 * (24 + 2 * 10 + 10);
    CHECK(moe == hand, "%d-byte activations: the routed experts keep %.1f bytes a token, by hand %.1f", bytes, moe,
          hand);
}
static void kept_bytes_match_the_carve(void) { kept_bytes_at(4), kept_bytes_at(2); }

// Generation runs the same blocks through one activations record for every layer (the
// record does not know its block): with a dense first block and shared experts, the KV-cache
// decoder's next-token log-probabilities -- prefill of 3 tokens, then one at a time -- against
// the training forward on each prefix.
static void generation_matches_the_forward(void) {
    rig r;
    rig_init(&r, moe_model(), CT_AC_NONE);
    enum { S = 9, PREFILL = 3 };
    ct_generator gen;
    ct_gen_init(&gen, &r.m, &r.w, S, 0);
    const float *logits = ct_gen_feed(&gen, r.in, PREFILL);
    double worst = 0;
    for (long t = PREFILL - 1; t < S - 1; t++) {
        if (t >= PREFILL) logits = ct_gen_feed(&gen, &r.in[t], 1);
        CHECK(logits != NULL, "feed: %s", ct_last_error());
        if (!logits) break;
        double mx = -INFINITY, sum = 0;
        for (long v = 0; v < r.m.vocab_size; v++) mx = fmax(mx, logits[v]);
        for (long v = 0; v < r.m.vocab_size; v++) sum += exp((double)logits[v] - mx);
        double nll = mx + log(sum) - logits[r.in[t + 1]];
        ct_model_acts a;
        ct_model_acts_init(&a, &r.m, 1, t + 1);
        int32_t tg[S];
        for (long i = 0; i <= t; i++) tg[i] = -1;
        tg[t] = r.in[t + 1];
        double want = ct_model_step(&a, &r.w, NULL, r.in, tg, 0);
        ct_model_acts_free(&a);
        worst = fmax(worst, fabs(nll - want));
    }
    CHECK(worst <= 1e-4, "kv cache vs full forward: max |log p difference| %.3g", worst);
    ct_gen_free(&gen);
    rig_free(&r);
}

int main(void) {
    CT_RUN(structure_and_forward);
    CT_RUN(gradients);
    CT_RUN(checkpointing_kinds);
    CT_RUN(kept_bytes_match_the_carve);
    CT_RUN(recompute_flops_deepseek);
    CT_RUN(generation_matches_the_forward);
    CT_TEST_EXIT();
}
