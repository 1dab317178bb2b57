// Routing of the mixture-of-experts layer (model/moe_layer.h) against a naive per-token loop in
// float64 written here: for every token its router logits, scores (softmax over the experts, or a
// sigmoid each), the k experts of highest score + choosing bias by a full sort (ties to the lower
// id), and their combine weights (the scores, divided by their sum under renormalisation); then
// the load-balancing loss over groups of tokens (each sequence, or the whole call), its value
// and its gradient in the scores (the choices held) by central differences of the float64 loss.
// Every score function x renormalisation x bias, the loss per sequence and per call, and the
// loss's per-call weight (ct_moe_layer.aux_weight). The layer runs on CTITAN_DEVICE (else the cpu).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/memory.h"
#include "kernels/backend.h"
#include "model/moe_layer.h"
#include "test.h"
#include "test_rand.h"

enum { C = 8, F = 4, E = 8, K = 3, T = 12, B = 4, N = B * T };

typedef struct {
    float x[N * C], router[E * C], bias[E], w13[E * 2 * F * C], w2[E * C * F];
} inputs;

// Bias of the size of the scores' spread, so that it changes some choices.
static void draw(inputs *in, int sigmoid) {
    rng_state = 0x5eed0123456789ull + (uint64_t)sigmoid;
    for (int i = 0; i < N * C; i++) in->x[i] = frand(1);
    for (int i = 0; i < E * C; i++) in->router[i] = frand(0.6f);
    for (int i = 0; i < E; i++) in->bias[i] = frand(sigmoid ? 0.2f : 0.08f);
    for (int i = 0; i < E * 2 * F * C; i++) in->w13[i] = frand(0.5f);
    for (int i = 0; i < E * C * F; i++) in->w2[i] = frand(0.5f);
}

// ---------------------------------------------------------------- the float64 reference

typedef struct {
    double s[N][E];   // scores
    int ids[N][K];    // chosen, by descending score + bias
    double w[N][K];   // combine weights
    double gap[N];    // the k-th chosen key less the best key left out (> 0)
} routed;

static void route(const inputs *in, int sigmoid, int renorm, int use_bias, routed *r) {
    for (int n = 0; n < N; n++) {
        double z[E], key[E], sum = 0, mx = -INFINITY;
        for (int e = 0; e < E; e++) {
            z[e] = 0;
            for (int c = 0; c < C; c++) z[e] += (double)in->x[n * C + c] * in->router[e * C + c];
            mx = fmax(mx, z[e]);
        }
        for (int e = 0; e < E; e++) sum += sigmoid ? 0 : exp(z[e] - mx);
        for (int e = 0; e < E; e++) r->s[n][e] = sigmoid ? 1 / (1 + exp(-z[e])) : exp(z[e] - mx) / sum;
        int order[E];
        for (int e = 0; e < E; e++) order[e] = e, key[e] = r->s[n][e] + (use_bias ? in->bias[e] : 0.0);
        for (int i = 0; i < E; i++)  // descending key, ties to the lower id
            for (int j = i + 1; j < E; j++)
                if (key[order[j]] > key[order[i]] || (key[order[j]] == key[order[i]] && order[j] < order[i])) {
                    int t = order[i];
                    order[i] = order[j], order[j] = t;
                }
        double total = 0;
        for (int j = 0; j < K; j++) r->ids[n][j] = order[j], total += r->s[n][order[j]];
        for (int j = 0; j < K; j++) r->w[n][j] = r->s[n][order[j]] / (renorm ? total : 1.0);
        r->gap[n] = key[order[K - 1]] - key[order[K]];
    }
}

// coef · the mean over groups of G tokens of Σ_e f_e P_e: f_e = E / (K G) · the group's choices
// of e, P_e = the group's mean normalised score (s, or s / Σ s under sigmoid).
static double aux_loss(const double (*s)[E], const int (*ids)[K], long G, int sigmoid, double coef) {
    long groups = N / G;
    double loss = 0;
    for (long g = 0; g < groups; g++) {
        double f[E] = {0}, P[E] = {0};
        for (long t = g * G; t < (g + 1) * G; t++) {
            double sum = 0;
            for (int e = 0; e < E; e++) sum += s[t][e];
            for (int e = 0; e < E; e++) P[e] += (sigmoid ? s[t][e] / sum : s[t][e]) / (double)G;
            for (int j = 0; j < K; j++) f[ids[t][j]] += (double)E / ((double)K * (double)G);
        }
        for (int e = 0; e < E; e++) loss += coef * f[e] * P[e] / (double)groups;
    }
    return loss;
}

// ---------------------------------------------------------------- the layer

typedef struct {
    int32_t ids[N * K];
    float w[N * K], s[N * E], daux[N * E], aux;
} layer_out;

static const ct_kernels *device(void) {
    const char *name = getenv("CTITAN_DEVICE");
    const ct_kernels *k = ct_kernels_get(name && *name ? name : "cpu");
    return k ? k : ct_kernels_get("cpu");
}
static void *up(const ct_kernels *k, const void *h, size_t bytes) {
    void *d = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OTHER, bytes);
    if (h) k->copy_from_host(d, h, bytes);
    else k->zero(d, bytes);
    return d;
}

static void run(const inputs *in, int sigmoid, int renorm, int use_bias, float coef, long group, float weight,
                layer_out *o) {
    const ct_kernels *k = device();
    ct_moe_layer_spec spec = {.k = k, .C = C, .F = F, .E = E, .topk = K, .sigmoid = sigmoid, .renorm = renorm,
                              .N = N, .aux_coef = coef, .aux_group = group};
    ct_moe_layer l;
    CHECK(ct_moe_layer_init(&l, &spec) == CT_OK, "%s", ct_last_error());
    l.aux_weight = weight;
    float *x = up(k, in->x, sizeof in->x), *router = up(k, in->router, sizeof in->router);
    float *bias = up(k, in->bias, sizeof in->bias), *w13 = up(k, in->w13, sizeof in->w13);
    float *w2 = up(k, in->w2, sizeof in->w2), *y = up(k, NULL, (size_t)N * C * sizeof(float));
    ct_moe_params p = {.router = router, .bias = use_bias ? bias : NULL, .w13 = w13, .w2 = w2};
    ct_moe_acts a;
    ct_moe_acts_init(&l, &a, NULL);
    ct_moe_forward(&l, &p, &a, x, y);
    k->copy_to_host(o->ids, a.ids, sizeof o->ids);
    k->copy_to_host(o->w, a.weights, sizeof o->w);
    k->copy_to_host(o->s, a.scores, sizeof o->s);
    o->aux = 0;
    if (coef > 0) {
        k->copy_to_host(&o->aux, a.aux_loss, sizeof o->aux);
        k->copy_to_host(o->daux, a.daux, sizeof o->daux);
    }
    ct_moe_acts_free(&a);
    void *bufs[] = {x, router, bias, w13, w2, y};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ct_mem_free(bufs[i]);
}

// ---------------------------------------------------------------- cases

static void choices_and_weights(int sigmoid, int renorm, int use_bias) {
    static inputs in;
    draw(&in, sigmoid);
    static routed r, plain;
    route(&in, sigmoid, renorm, use_bias, &r);
    route(&in, sigmoid, renorm, 0, &plain);
    layer_out o;
    run(&in, sigmoid, renorm, use_bias, 0, 0, 1, &o);
    int wrong = 0, biased = 0;
    double ds = 0, dw = 0, gap = INFINITY;
    for (int n = 0; n < N; n++) {
        gap = fmin(gap, r.gap[n]);
        for (int j = 0; j < K; j++) {
            wrong += o.ids[n * K + j] != r.ids[n][j];
            biased += r.ids[n][j] != plain.ids[n][j];
            dw = fmax(dw, fabs(o.w[n * K + j] - r.w[n][j]));
        }
        for (int e = 0; e < E; e++) ds = fmax(ds, fabs(o.s[n * E + e] - r.s[n][e]));
    }
    // The reference's choices are clear of float rounding (no near tie), so they must agree exactly.
    CHECK(gap > 1e-5, "sigmoid %d bias %d: a near tie (%.3g) in the drawn tokens", sigmoid, use_bias, gap);
    CHECK(wrong == 0, "sigmoid %d renorm %d bias %d: %d of %d choices differ", sigmoid, renorm, use_bias, wrong, N * K);
    CHECK(ds < 1e-6 && dw < 1e-6, "sigmoid %d renorm %d bias %d: scores %.3g, weights %.3g from float64", sigmoid,
          renorm, use_bias, ds, dw);
    CHECK(!use_bias || biased > 0, "sigmoid %d: the bias changed no choice", sigmoid);
    if (renorm)
        for (int n = 0; n < N; n++) {
            double sum = 0;
            for (int j = 0; j < K; j++) sum += o.w[n * K + j];
            CHECK(fabs(sum - 1) < 1e-6, "token %d: renormalised weights sum to %.9g", n, sum);
        }
}
static void softmax(void) { choices_and_weights(0, 0, 0); }
static void softmax_renorm(void) { choices_and_weights(0, 1, 0); }
static void softmax_bias(void) { choices_and_weights(0, 0, 1); }
static void softmax_renorm_bias(void) { choices_and_weights(0, 1, 1); }
static void sigmoid(void) { choices_and_weights(1, 0, 0); }
static void sigmoid_renorm(void) { choices_and_weights(1, 1, 0); }
static void sigmoid_bias(void) { choices_and_weights(1, 0, 1); }
static void sigmoid_renorm_bias(void) { choices_and_weights(1, 1, 1); }

// The loss's value, and its gradient in each score against central differences of the float64
// loss (the choices held, as the layer's gradient holds them).
static void load_balancing(int sigmoid, long group, float weight) {
    static inputs in;
    draw(&in, sigmoid);
    static routed r;
    route(&in, sigmoid, 1, 1, &r);
    const float coef = 0.05f;
    layer_out o;
    run(&in, sigmoid, 1, 1, coef, group, weight, &o);
    long G = group ? group : N;
    double want = aux_loss((const double (*)[E])r.s, (const int (*)[K])r.ids, G, sigmoid, (double)coef * weight);
    CHECK(fabs(o.aux - want) <= 1e-6 * want, "sigmoid %d group %ld weight %g: loss %.9g, float64 %.9g", sigmoid, group,
          weight, o.aux, want);
    double worst = 0, scale = 0;
    static double s[N][E];
    memcpy(s, r.s, sizeof s);
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) {
            const double h = 1e-6;
            double keep = s[n][e];
            s[n][e] = keep + h;
            double up_ = aux_loss((const double (*)[E])s, (const int (*)[K])r.ids, G, sigmoid, (double)coef * weight);
            s[n][e] = keep - h;
            double down_ = aux_loss((const double (*)[E])s, (const int (*)[K])r.ids, G, sigmoid, (double)coef * weight);
            s[n][e] = keep;
            double fd = (up_ - down_) / (2 * h);
            worst = fmax(worst, fabs(o.daux[n * E + e] - fd)), scale = fmax(scale, fabs(fd));
        }
    CHECK(scale > 0 && worst <= 1e-5 * scale, "sigmoid %d group %ld weight %g: gradient %.3g from central differences "
          "(largest %.3g)", sigmoid, group, weight, worst, scale);
}
static void aux_softmax_per_sequence(void) { load_balancing(0, T, 1); }
static void aux_softmax_per_call(void) { load_balancing(0, 0, 1); }
static void aux_sigmoid_per_sequence(void) { load_balancing(1, T, 1); }
static void aux_sigmoid_per_call(void) { load_balancing(1, 0, 1); }
static void aux_weighted(void) { load_balancing(1, T, 0.375f); }

int main(void) {
    CT_RUN(softmax);
    CT_RUN(softmax_renorm);
    CT_RUN(softmax_bias);
    CT_RUN(softmax_renorm_bias);
    CT_RUN(sigmoid);
    CT_RUN(sigmoid_renorm);
    CT_RUN(sigmoid_bias);
    CT_RUN(sigmoid_renorm_bias);
    CT_RUN(aux_softmax_per_sequence);
    CT_RUN(aux_softmax_per_call);
    CT_RUN(aux_sigmoid_per_sequence);
    CT_RUN(aux_sigmoid_per_call);
    CT_RUN(aux_weighted);
    CT_TEST_EXIT();
}
