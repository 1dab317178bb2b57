// Whole-model checks: gradients of every parameter tensor against central finite differences
// (directional derivatives along random directions, one tensor at a time), with and without
// Qwen3's per-head q/k norms, loss at initialisation = ln(V), determinism, and micro-batch
// accumulation = one big batch. The q/k norms' forward by a property: a head's q or k scaled
// leaves the loss as it was.
#include <math.h>
#include <string.h>

#include "core/memory.h"
#include "core/rng.h"
#include "model/weights.h"
#include "expect_error.h"
#include "model/runner.h"
#include "test.h"

static ct_model_config tiny(int n_heads, int n_kv_heads) {
    ct_model_config m = {.family = ct_model_family_find("llama3")};
    strcpy(m.flavor, "test");
    m.dim = 32;
    m.n_layers = 2;
    m.n_heads = n_heads;
    m.n_kv_heads = n_kv_heads;
    m.head_dim = m.dim / n_heads;
    m.ffn_hidden = 40;  // not a multiple of any tile
    m.vocab_size = 61;
    m.norm_eps = 1e-5;
    m.rope_theta = 500000;
    m.rope_scaling = 1;
    m.max_seq_len = 16;
    return m;
}

typedef struct {
    ct_model_config m;
    ct_param_table t;
    float *params, *grads;
    ct_model_weights w, g;
    ct_model_acts a;
    int32_t *in, *tg;
} rig;

static void rig_init(rig *r, ct_model_config m, long B, long T, uint64_t seed) {
    r->m = m;
    ct_param_table_build(&r->t, &m);
    r->params = ct_mem_alloc(CT_MEM_PARAMS, r->t.total * sizeof(float));
    r->grads = ct_mem_alloc(CT_MEM_GRADS, r->t.total * sizeof(float));
    ct_param_init_all(&r->t, seed, r->params);
    ct_model_weights_init(&r->w, &r->t, &m, r->params);
    ct_model_weights_init(&r->g, &r->t, &m, r->grads);
    ct_model_acts_init(&r->a, &m, B, T);
    r->in = ct_xmalloc(B * T * sizeof(int32_t));
    r->tg = ct_xmalloc(B * T * sizeof(int32_t));
    ct_rng rng;
    ct_rng_seed(&rng, seed + 7);
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
    free(r->in);
    free(r->tg);
}

static double mean_loss(rig *r) {
    long N = r->a.stage.N;
    return ct_model_step(&r->a, &r->w, NULL, r->in, r->tg, 0) / (double)N;
}

// Gradients against finite differences. Weights are made larger than at init (std 0.3) so every
// tensor's gradient is well above float32 rounding of the loss.
static void check_gradients(int n_heads, int n_kv_heads, int qk_norm) {
    rig r;
    ct_model_config m = tiny(n_heads, n_kv_heads);
    m.qk_norm = qk_norm;
    rig_init(&r, m, 2, 7, 11);
    ct_rng rng;
    ct_rng_seed(&rng, 3);
    for (long i = 0; i < r.t.total; i++) r.params[i] += 0.3f * ct_rng_next_normal(&rng);
    r.tg[3] = -1;  // an ignored target
    long valid = r.a.stage.N - 1;
    memset(r.grads, 0, r.t.total * sizeof(float));
    ct_model_step(&r.a, &r.w, &r.g, r.in, r.tg, 1.0f / valid);

    float *dir = ct_xmalloc(r.t.total * sizeof(float));
    for (int pi = 0; pi < r.t.count; pi++) {
        const ct_param *p = &r.t.params[pi];
        double analytic = 0;
        for (long i = 0; i < p->numel; i++) {
            dir[i] = ct_rng_next_normal(&rng);
            analytic += (double)dir[i] * r.grads[p->offset + i];
        }
        float *x = r.params + p->offset;
        const double eps = 1e-3;
        for (long i = 0; i < p->numel; i++) x[i] += (float)eps * dir[i];
        double lp = ct_model_step(&r.a, &r.w, NULL, r.in, r.tg, 0) / valid;
        for (long i = 0; i < p->numel; i++) x[i] -= 2 * (float)eps * dir[i];
        double lm = ct_model_step(&r.a, &r.w, NULL, r.in, r.tg, 0) / valid;
        for (long i = 0; i < p->numel; i++) x[i] += (float)eps * dir[i];
        double numeric = (lp - lm) / (2 * eps);
        if (getenv("VERBOSE")) printf("    %-36s analytic %10.6f numeric %10.6f\n", p->name, analytic, numeric);
        CHECK(fabs(numeric - analytic) <= 2e-2 * fabs(analytic) + 2e-4, "%s: analytic %.6g numeric %.6g", p->name,
              analytic, numeric);
        // The q/k norm weights reach the loss (a forward that skipped them would pass the check
        // above with both sides 0).
        if (strstr(p->name, "_norm.weight") && strstr(p->name, "attention."))
            CHECK(fabs(numeric) > 1e-3, "%s: the loss does not depend on it (numeric %.3g)", p->name, numeric);
    }
    free(dir);
    rig_free(&r);
}

static void test_gradients_mha(void) { check_gradients(4, 4, 0); }
static void test_gradients_gqa(void) { check_gradients(4, 2, 0); }
static void test_gradients_qk_norm(void) { check_gradients(4, 2, 1); }

// Mean loss after the rows of wqkv that make head `head` of q (or of k: kv head `head`) are
// scaled by s. The per-head norm divides the scale out (eps aside); without it the scores change.
static double loss_with_head_scaled(int qk_norm, int k_head, int head, float s) {
    rig r;
    ct_model_config m = tiny(4, 2);
    m.qk_norm = qk_norm;
    rig_init(&r, m, 2, 7, 13);
    ct_rng rng;
    ct_rng_seed(&rng, 5);
    for (long i = 0; i < r.t.total; i++) r.params[i] += 0.3f * ct_rng_next_normal(&rng);
    const ct_param *w = ct_param_find(&r.t, k_head ? "layers.0.attention.wk.weight" : "layers.0.attention.wq.weight");
    long HS = m.head_dim, C = m.dim;
    for (long i = head * HS * C; i < (head + 1) * HS * C; i++) r.params[w->offset + i] *= s;
    double loss = mean_loss(&r);
    rig_free(&r);
    return loss;
}

static void test_qk_norm_per_head(void) {
    for (int k_head = 0; k_head < 2; k_head++) {
        double base = loss_with_head_scaled(1, k_head, 1, 1.0f), scaled = loss_with_head_scaled(1, k_head, 1, 3.0f);
        CHECK_CLOSE(scaled, base, 0, 1e-5);
        // The same scale without the norms moves the loss: the property above is not vacuous.
        double plain = loss_with_head_scaled(0, k_head, 1, 1.0f), plain3 = loss_with_head_scaled(0, k_head, 1, 3.0f);
        CHECK(fabs(plain3 - plain) > 1e-3, "%s head scaled: loss %.6f -> %.6f without qk_norm", k_head ? "k" : "q",
              plain, plain3);
    }
}

// The q/k norm weights are replicated over tp but each rank meets only its heads, so their
// gradients would need a sum the tp strategy does not make: refused by name.
static void test_qk_norm_refuses_tp(void) {
    ct_model_config m = tiny(4, 2), local;
    m.vocab_size = 62;
    CHECK(ct_model_config_local(&m, 2, &local) == CT_OK, "tp 2 without qk_norm: %s", ct_last_error());
    m.qk_norm = 1;
    EXPECT_ERROR(ct_model_config_local(&m, 2, &local), CT_E_CONFIG, "parallelism.compute_parallel_degree",
                 "q/k norms", "set it to 1");
    CHECK(ct_model_config_local(&m, 1, &local) == CT_OK && local.qk_norm == 1, "tp 1: %s", ct_last_error());
}

static void test_initial_loss_is_ln_vocab(void) {
    ct_model_config m = tiny(4, 2);
    m.vocab_size = 2048;
    m.dim = 64;
    m.head_dim = 16;
    rig r;
    rig_init(&r, m, 2, 16, 42);
    double loss = mean_loss(&r);
    CHECK_CLOSE(loss, log(2048.0), 0, 0.05);
    rig_free(&r);
}

static void test_deterministic(void) {
    rig r;
    rig_init(&r, tiny(4, 2), 2, 9, 5);
    memset(r.grads, 0, r.t.total * sizeof(float));
    double l1 = ct_model_step(&r.a, &r.w, &r.g, r.in, r.tg, 0.01f);
    float *g1 = ct_xmalloc(r.t.total * sizeof(float));
    memcpy(g1, r.grads, r.t.total * sizeof(float));
    memset(r.grads, 0, r.t.total * sizeof(float));
    double l2 = ct_model_step(&r.a, &r.w, &r.g, r.in, r.tg, 0.01f);
    CHECK(l1 == l2, "loss %.17g vs %.17g", l1, l2);
    CHECK(memcmp(g1, r.grads, r.t.total * sizeof(float)) == 0, "gradients differ between identical runs");
    free(g1);
    rig_free(&r);
}

// Two micro-batches of 2 sequences, each scaled by 1 / (all 4 sequences' tokens), accumulate to
// the gradient of one batch of 4.
static void test_accumulation_equals_big_batch(void) {
    rig big, small;
    rig_init(&big, tiny(4, 2), 4, 8, 9);
    rig_init(&small, tiny(4, 2), 2, 8, 9);
    long n = big.a.stage.N;
    memset(big.grads, 0, big.t.total * sizeof(float));
    double lb = ct_model_step(&big.a, &big.w, &big.g, big.in, big.tg, 1.0f / n);
    memset(small.grads, 0, small.t.total * sizeof(float));
    double ls = 0;
    for (int mb = 0; mb < 2; mb++)
        ls += ct_model_step(&small.a, &small.w, &small.g, big.in + mb * 16, big.tg + mb * 16, 1.0f / n);
    CHECK_CLOSE(ls, lb, 1e-5, 0);
    double maxg = 0, maxd = 0;
    for (long i = 0; i < big.t.total; i++) {
        maxg = fmax(maxg, fabs(big.grads[i]));
        maxd = fmax(maxd, fabs(big.grads[i] - small.grads[i]));
    }
    CHECK(maxd <= 1e-5 * maxg, "max grad diff %.3g (max grad %.3g)", maxd, maxg);
    rig_free(&big);
    rig_free(&small);
}

int main(void) {
    CT_RUN(test_gradients_mha);
    CT_RUN(test_gradients_gqa);
    CT_RUN(test_gradients_qk_norm);
    CT_RUN(test_qk_norm_per_head);
    CT_RUN(test_qk_norm_refuses_tp);
    CT_RUN(test_initial_loss_is_ln_vocab);
    CT_RUN(test_deterministic);
    CT_RUN(test_accumulation_equals_big_batch);
    CT_TEST_EXIT();
}
