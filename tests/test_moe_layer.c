// The mixture-of-experts layer (model/moe_layer.h) against a float64 reference written here:
// each token's router scores, its top-k experts by a full sort, and each chosen expert's SwiGLU
// computed densely, forward and backward (the router's backward as the analytic float64 formula;
// the kernel's own is held to central differences in tests/test_kernels_moe.c).
//
// One process (every expert here): softmax + renormalisation, and sigmoid + a choosing bias
// without it. Under MPI (2 and 4 ranks): expert parallelism over every rank, each rank holding
// E / ranks experts and its own tokens, the pairs travelling by all-to-all-v: each rank's output
// and input gradient against the reference on its tokens, the router gradient summed over ranks
// and each rank's experts' gradients against the reference over every rank's tokens. Also: a
// layer whose experts do not split over the group, or that chooses more experts than it has, is
// refused with one line.
// Under bf16 mixed precision (one process and expert parallelism): x and the experts' weights
// bf16 values, the reference computed in float64 on those same values; the layer rounds h13, h
// and the experts' output gradients to bf16 (moe_layer.h), each a relative 2^-8 at most, so it
// is held to 8 such roundings of each value's scale -- and must differ from the fp32 layer.
// Under 8-bit experts (float8 tensorwise and rowwise, MXFP8; one process): each expert's results
// against the kernel table's dense 8-bit linears called directly on that expert's rows.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/memory.h"
#include "kernels/backend.h"
#include "model/moe_layer.h"
#include "mpi_test.h"
#include "parallel/expert_parallel.h"
#include "test_bf16.h"
#include "test_rand.h"

enum { C = 16, F = 12, E = 4, K = 2, N = 6 };
static ct_group world;

// Weights every rank draws alike; tokens and output gradients per rank.
typedef struct {
    float router[E * C], bias[E], w13[E * 2 * F * C], w2[E * C * F];
} weights;
static void draw_weights(weights *w) {
    rng_state = 0x1234567ull;
    for (int i = 0; i < E * C; i++) w->router[i] = frand(1);
    for (int i = 0; i < E; i++) w->bias[i] = frand(0.3f);
    for (int i = 0; i < E * 2 * F * C; i++) w->w13[i] = frand(0.4f);
    for (int i = 0; i < E * C * F; i++) w->w2[i] = frand(0.4f);
}
static void draw_tokens(int rank, float *x, float *dy) {
    rng_state = 0x9e3779b97f4a7c15ull + 7919ull * (uint64_t)rank;
    for (int i = 0; i < N * C; i++) x[i] = frand(1);
    for (int i = 0; i < N * C; i++) dy[i] = frand(1);
}
// bf16 runs: what the layer reads in bf16 rounded to bf16 values (x, the experts' weights).
static void round_all(float *v, long n) {
    for (long i = 0; i < n; i++) v[i] = round_bf16(v[i]);
}
static void round_weights(weights *w) { round_all(w->w13, E * 2 * F * C), round_all(w->w2, E * C * F); }
static uint16_t *bf16_bits(const float *v, long n) {  // v: bf16 values
    uint16_t *b = malloc((size_t)n * sizeof(uint16_t));
    for (long i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        b[i] = (uint16_t)(u >> 16);
    }
    return b;
}
static const double bf16_bound = 8 * 0x1p-8;  // 8 roundings of relative 2^-8

// ---------------------------------------------------------------- float64 reference

typedef struct {
    double y[N * C], dx[N * C];
    double drouter[E * C], dw13[E * 2 * F * C], dw2[E * C * F];  // accumulated
    double aux;  // the load-balancing loss
    int chosen[N][K];  // each token's experts
} ref_out;

// The load-balancing loss over groups of G tokens, and its gradient in the normalised scores
// (s under softmax, s / Σ s under sigmoid) -- the score function's backward is the caller's.
static double aux_ref(const double (*s)[E], const int (*ids)[E], double coef, long G, int sigmoid,
                      double (*dnorm)[E]) {
    long groups = N / G;
    double loss = 0;
    for (long g = 0; g < groups; g++) {
        double f[E] = {0}, P[E] = {0};
        for (long t = g * G; t < (g + 1) * G; t++) {
            double sum = 0;
            for (int e = 0; e < E; e++) sum += s[t][e];
            for (int e = 0; e < E; e++) P[e] += (sigmoid ? s[t][e] / sum : s[t][e]) / G;
            for (int j = 0; j < K; j++) f[ids[t][j]] += (double)E / (K * G);
        }
        for (int e = 0; e < E; e++) loss += coef * f[e] * P[e] / groups;
        for (long t = g * G; t < (g + 1) * G; t++)
            for (int e = 0; e < E; e++) dnorm[t][e] = coef * f[e] / (G * groups);
    }
    return loss;
}

static double sigm(double a) { return 1.0 / (1.0 + exp(-a)); }

static void reference(const weights *w, const float *x, const float *dy, int sigmoid, int renorm, int use_bias,
                      double aux_coef, long aux_group, ref_out *r) {
    memset(r->y, 0, sizeof r->y);
    memset(r->dx, 0, sizeof r->dx);
    double S[N][E], dnorm[N][E];
    int IDS[N][E];
    for (int pass = 0; pass < 2; pass++)  // scores and choices of every token first, for the loss
    for (int n = 0; n < N; n++) {
        const float *xn = x + n * C, *gn = dy + n * C;
        double z[E], s[E], key[E];
        for (int e = 0; e < E; e++) {
            z[e] = 0;
            for (int c = 0; c < C; c++) z[e] += (double)w->router[e * C + c] * xn[c];
        }
        double mx = z[0], sum = 0;
        for (int e = 1; e < E; e++) mx = fmax(mx, z[e]);
        for (int e = 0; e < E; e++) s[e] = sigmoid ? sigm(z[e]) : exp(z[e] - mx), sum += s[e];
        if (!sigmoid)
            for (int e = 0; e < E; e++) s[e] /= sum;
        int ids[E];
        for (int e = 0; e < E; e++) key[e] = s[e] + (use_bias ? w->bias[e] : 0), ids[e] = e;
        for (int i = 0; i < E; i++)  // selection sort, descending, ties to the lower id
            for (int j = i + 1; j < E; j++)
                if (key[ids[j]] > key[ids[i]]) {
                    int t = ids[i];
                    ids[i] = ids[j], ids[j] = t;
                }
        if (pass == 0) {
            for (int e = 0; e < E; e++) S[n][e] = s[e], IDS[n][e] = ids[e];
            for (int j = 0; j < K; j++) r->chosen[n][j] = ids[j];
            if (n == N - 1) {
                memset(dnorm, 0, sizeof dnorm);
                r->aux = aux_coef > 0 ? aux_ref((const double (*)[E])S, (const int (*)[E])IDS, aux_coef,
                                                aux_group ? aux_group : N, sigmoid, dnorm) : 0;
            }
            continue;
        }
        double total = 0, wt[K], dwt[K];
        for (int j = 0; j < K; j++) total += s[ids[j]];
        for (int j = 0; j < K; j++) wt[j] = s[ids[j]] / (renorm ? total : 1.0);
        for (int j = 0; j < K; j++) {
            int e = ids[j];
            const float *W1 = w->w13 + (size_t)e * 2 * F * C, *W3 = W1 + F * C, *W2 = w->w2 + (size_t)e * C * F;
            double a[F], b[F], h[F], o[C], dh[F];
            for (int f = 0; f < F; f++) {
                a[f] = b[f] = 0;
                for (int c = 0; c < C; c++) a[f] += (double)W1[f * C + c] * xn[c], b[f] += (double)W3[f * C + c] * xn[c];
                h[f] = a[f] * sigm(a[f]) * b[f];
            }
            dwt[j] = 0;
            for (int c = 0; c < C; c++) {
                o[c] = 0;
                for (int f = 0; f < F; f++) o[c] += (double)W2[c * F + f] * h[f];
                r->y[n * C + c] += wt[j] * o[c];
                dwt[j] += gn[c] * o[c];
            }
            for (int f = 0; f < F; f++) {
                dh[f] = 0;
                for (int c = 0; c < C; c++) {
                    dh[f] += (double)W2[c * F + f] * wt[j] * gn[c];
                    r->dw2[(size_t)e * C * F + c * F + f] += wt[j] * gn[c] * h[f];
                }
                double sa = sigm(a[f]), db = dh[f] * a[f] * sa, da = dh[f] * b[f] * sa * (1 + a[f] * (1 - sa));
                for (int c = 0; c < C; c++) {
                    r->dw13[(size_t)e * 2 * F * C + f * C + c] += da * xn[c];
                    r->dw13[(size_t)e * 2 * F * C + (F + f) * C + c] += db * xn[c];
                    r->dx[n * C + c] += da * W1[f * C + c] + db * W3[f * C + c];
                }
            }
        }
        // router: d score, through the renormalisation; then the score function
        double ds[E], dz[E], ssum = 0, ndot = 0;
        for (int e = 0; e < E; e++) ssum += s[e];
        for (int e = 0; e < E; e++) ndot += dnorm[n][e] * s[e] / ssum;
        for (int e = 0; e < E; e++) ds[e] = sigmoid ? (dnorm[n][e] - ndot) / ssum : dnorm[n][e];
        double dot = 0;
        for (int j = 0; j < K; j++) dot += dwt[j] * wt[j];
        for (int j = 0; j < K; j++) ds[ids[j]] += renorm ? (dwt[j] - dot) / total : dwt[j];
        double sd = 0;
        for (int e = 0; e < E; e++) sd += ds[e] * s[e];
        for (int e = 0; e < E; e++) dz[e] = sigmoid ? ds[e] * s[e] * (1 - s[e]) : s[e] * (ds[e] - sd);
        for (int e = 0; e < E; e++)
            for (int c = 0; c < C; c++) {
                r->dx[n * C + c] += dz[e] * w->router[e * C + c];
                r->drouter[e * C + c] += dz[e] * xn[c];
            }
    }
}

// ---------------------------------------------------------------- the layer under test

typedef struct {
    float y[N * C], dx[N * C];
    float *drouter, *dw13, *dw2;  // this rank's
    float aux;
} run_out;

// The run's device: CTITAN_DEVICE (make test-sim runs this on the test device), else the cpu.
static const ct_kernels *device(void) {
    const char *name = getenv("CTITAN_DEVICE");
    const ct_kernels *k = ct_kernels_get(name && *name ? name : "cpu");
    return k ? k : ct_kernels_get("cpu");
}
static float *up(const ct_kernels *k, const float *h, long n) {
    float *d = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OTHER, (size_t)n * sizeof(float));
    if (h) k->copy_from_host(d, h, (size_t)n * sizeof(float));
    else k->zero(d, (size_t)n * sizeof(float));
    return d;
}
static void down(const ct_kernels *k, float *h, float *d, long n) {
    k->copy_to_host(h, d, (size_t)n * sizeof(float));
    ct_mem_free(d);
}

// Runs forward and backward on this rank's tokens with experts [first, first + El) of w, on the
// run's device; results back on the host.
// bf16: x and the experts' weights (bf16 values) go in as bf16.
static void *up16(const ct_kernels *k, const float *h, long n) {
    uint16_t *b = bf16_bits(h, n);
    void *d = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OTHER, (size_t)n * sizeof(uint16_t));
    k->copy_from_host(d, b, (size_t)n * sizeof(uint16_t));
    free(b);
    return d;
}
static void run_layer(const weights *w, const float *x, const float *dy, int sigmoid, int renorm, int use_bias,
                      float aux_coef, long aux_group, ct_moe_ep_ops ep, bool bf16, run_out *o) {
    const ct_kernels *k = device();
    ct_moe_layer_spec spec = {.k = k, .C = C, .F = F, .E = E, .topk = K, .sigmoid = sigmoid, .renorm = renorm,
                              .ep = ep, .N = N, .aux_coef = aux_coef, .aux_group = aux_group, .bf16 = bf16};
    ct_moe_layer l;
    CHECK(ct_moe_layer_init(&l, &spec) == CT_OK, "%s", ct_last_error());
    long El = l.E_local, first = l.ep_rank * El;
    float *router = up(k, w->router, E * C), *bias = up(k, w->bias, E);
    float *w13 = up(k, w->w13 + first * 2 * F * C, El * 2 * F * C), *w2 = up(k, w->w2 + first * C * F, El * C * F);
    float *dx_ = up(k, x, N * C), *ddy = up(k, dy, N * C), *y = up(k, NULL, N * C), *dx = up(k, NULL, N * C);
    float *gr = up(k, NULL, E * C), *g13 = up(k, NULL, El * 2 * F * C), *g2 = up(k, NULL, El * C * F);
    ct_moe_params p = {.router = router, .bias = use_bias ? bias : NULL, .w13 = w13, .w2 = w2};
    void *x16 = NULL, *w13_16 = NULL, *w2_16 = NULL;
    if (bf16) {  // the bf16 copies alone, as FSDP gathers them
        x16 = up16(k, x, N * C);
        w13_16 = up16(k, w->w13 + first * 2 * F * C, El * 2 * F * C), w2_16 = up16(k, w->w2 + first * C * F, El * C * F);
        p.w13 = p.w2 = NULL, p.w13_16 = w13_16, p.w2_16 = w2_16;
    }
    const void *xin = bf16 ? x16 : (const void *)dx_;
    ct_moe_grads g = {.router = gr, .w13 = g13, .w2 = g2};
    ct_moe_acts a;
    ct_moe_acts_init(&l, &a, NULL);
    ct_moe_forward(&l, &p, &a, xin, y);
    ct_moe_backward(&l, &p, &a, xin, ddy, dx, &g);
    ct_mem_free(x16), ct_mem_free(w13_16), ct_mem_free(w2_16);
    o->aux = 0;
    if (aux_coef > 0) k->copy_to_host(&o->aux, a.aux_loss, sizeof(float));
    ct_moe_acts_free(&a);
    o->drouter = calloc(E * C, sizeof(float));
    o->dw13 = calloc((size_t)El * 2 * F * C, sizeof(float));
    o->dw2 = calloc((size_t)El * C * F, sizeof(float));
    down(k, o->y, y, N * C), down(k, o->dx, dx, N * C), down(k, o->drouter, gr, E * C);
    down(k, o->dw13, g13, El * 2 * F * C), down(k, o->dw2, g2, El * C * F);
    ct_mem_free(router), ct_mem_free(bias), ct_mem_free(w13), ct_mem_free(w2), ct_mem_free(dx_), ct_mem_free(ddy);
}

static double worst_diff(const float *got, const double *want, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) m = fmax(m, fabs(got[i] - want[i]) / (1 + fabs(want[i])));
    return m;
}

static void one_process_at(int sigmoid, int renorm, int use_bias, float aux_coef, long aux_group, bool bf16) {
    static weights w;
    draw_weights(&w);
    float x[N * C], dy[N * C];
    draw_tokens(0, x, dy);
    if (bf16) round_weights(&w), round_all(x, N * C);
    static ref_out r;
    memset(&r, 0, sizeof r);
    reference(&w, x, dy, sigmoid, renorm, use_bias, aux_coef, aux_group, &r);
    run_out o;
    run_layer(&w, x, dy, sigmoid, renorm, use_bias, aux_coef, aux_group, (ct_moe_ep_ops){0}, bf16, &o);
    CHECK(fabs(o.aux - r.aux) <= 1e-6 * (1 + r.aux) && (aux_coef == 0) == (r.aux == 0), "aux loss %.9g vs %.9g",
          o.aux, r.aux);
    double ey = worst_diff(o.y, r.y, N * C), edx = worst_diff(o.dx, r.dx, N * C);
    double er = worst_diff(o.drouter, r.drouter, E * C), e13 = worst_diff(o.dw13, r.dw13, E * 2 * F * C),
           e2 = worst_diff(o.dw2, r.dw2, E * C * F);
    double bound = bf16 ? bf16_bound : 1e-5;
    CHECK(ey < bound && edx < bound && er < bound && e13 < bound && e2 < bound,
          "sigmoid %d renorm %d bias %d bf16 %d: y %.3g dx %.3g drouter %.3g dw13 %.3g dw2 %.3g (bound %.3g)", sigmoid,
          renorm, use_bias, bf16, ey, edx, er, e13, e2, bound);
    if (bf16) {  // the roundings happened: the output and each expert gradient differ from fp32's
        CHECK(ey > 1e-6 && e13 > 1e-6 && e2 > 1e-6, "bf16: y %.3g dw13 %.3g dw2 %.3g: fp32 in disguise", ey, e13, e2);
        printf("    bf16: worst y %.3g dx %.3g drouter %.3g dw13 %.3g dw2 %.3g of bound %.3g\n", ey, edx, er, e13, e2,
               bound);
    }
    double ysum = 0;
    for (int i = 0; i < N * C; i++) ysum += fabs(o.y[i]);
    CHECK(ysum > 1e-3, "the layer's output is zero");
    free(o.drouter), free(o.dw13), free(o.dw2);
}
static void one_process(int sigmoid, int renorm, int use_bias, float aux_coef, long aux_group) {
    one_process_at(sigmoid, renorm, use_bias, aux_coef, aux_group, false);
}
static void softmax_renorm(void) { one_process(0, 1, 0, 0, 0); }
static void bf16_softmax_renorm(void) { one_process_at(0, 1, 0, 0.3f, 0, true); }
static void bf16_sigmoid_bias(void) { one_process_at(1, 0, 1, 0, 0, true); }
static void sigmoid_bias(void) { one_process(1, 0, 1, 0, 0); }
// The load-balancing loss: its value and its gradient through the router (x and the router's
// weight), batch-level under softmax, per sequence of 3 tokens under sigmoid.
static void aux_loss_batch(void) { one_process(0, 1, 0, 0.3f, 0); }
static void aux_loss_per_sequence(void) { one_process(1, 1, 0, 0.3f, 3); }

static void load_stats(void) {
    const int64_t counts[4] = {1, 5, 3, 3};
    double lo, hi, imb;
    ct_moe_load_stats(counts, 4, &lo, &hi, &imb);
    CHECK(lo == 1 && hi == 5 && fabs(imb - 5.0 / 3.0) < 1e-12, "min %g max %g imbalance %g", lo, hi, imb);
    const int64_t even[3] = {2, 2, 2};
    ct_moe_load_stats(even, 3, &lo, &hi, &imb);
    CHECK(imb == 1, "balanced: imbalance %g", imb);
}

static void refused(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    ct_moe_layer l;
    ct_moe_layer_spec s = {.k = k, .C = C, .F = F, .E = 6, .topk = 2, .N = N, .ep = {.size = 4}};
    CHECK(ct_moe_layer_init(&l, &s) == CT_ERR &&
              !strcmp(ct_last_error(), "moe: 6 experts do not split over expert_parallel_degree 4"),
          "%s", ct_last_error());
    s.E = 4, s.topk = 5, s.ep.size = 1;
    CHECK(ct_moe_layer_init(&l, &s) == CT_ERR &&
              !strcmp(ct_last_error(), "moe: 5 experts per token with 4 experts: expected 1 to 4"),
          "%s", ct_last_error());
}

// Expert parallelism over every rank against the reference.
static void expert_parallel_at(bool bf16) {
    static weights w;
    draw_weights(&w);
    if (bf16) round_weights(&w);
    int n = world.size, me = world.rank;
    float x[N * C], dy[N * C];
    static ref_out mine, all;
    memset(&all, 0, sizeof all);
    // The exchange's bytes from the reference's choices: the pairs this rank sends to experts on
    // other ranks, and those other ranks send to its experts.
    long El = E / n, sent = 0, received = 0;
    for (int r = 0; r < n; r++) {  // every rank's tokens: the experts' gradients see all of them
        draw_tokens(r, x, dy);
        if (bf16) round_all(x, N * C);
        static ref_out one;
        memcpy(one.drouter, all.drouter, sizeof all.drouter);
        memcpy(one.dw13, all.dw13, sizeof all.dw13);
        memcpy(one.dw2, all.dw2, sizeof all.dw2);
        reference(&w, x, dy, 0, 1, 0, 0, 0, &one);
        for (int t = 0; t < N; t++)
            for (int j = 0; j < K; j++) {
                int owner = one.chosen[t][j] / (int)El;
                sent += r == me && owner != me;
                received += r != me && owner == me;
            }
        all = one;
        if (r == me) mine = one;
    }
    draw_tokens(me, x, dy);
    if (bf16) round_all(x, N * C);
    run_out o;
    ct_comm_stats_reset(&world);
    run_layer(&w, x, dy, 0, 1, 0, 0, 0, ct_expert_parallel_ops(&world), bf16, &o);
    // Forward: the counts (El per peer, int64), the pairs out and their results back; backward:
    // the output gradients out and the input gradients back.
    double want = (double)(n - 1) * El * 8 + 2.0 * (sent + received) * C * 4;
    double got = world.stats[CT_COMM_ALL_TO_ALL].bytes;
    CHECK(got == want, "ep %d rank %d: all-to-all bytes %.0f, expected %.0f (%ld pairs sent, %ld received): ratio %.4f",
          n, me, got, want, sent, received, got / want);
    if (me == 0) printf("    ep %d: all-to-all bytes %.0f of %.0f expected (ratio %.4f)\n", n, got, want, got / want);
    ct_comm_all_reduce(&world, o.drouter, o.drouter, E * C, CT_F32, CT_COMM_SUM);
    double ey = worst_diff(o.y, mine.y, N * C), edx = worst_diff(o.dx, mine.dx, N * C);
    double er = worst_diff(o.drouter, all.drouter, E * C);
    double e13 = worst_diff(o.dw13, all.dw13 + (size_t)me * El * 2 * F * C, El * 2 * F * C);
    double e2 = worst_diff(o.dw2, all.dw2 + (size_t)me * El * C * F, El * C * F);
    double bound = bf16 ? bf16_bound : 1e-5;
    CHECK(ey < bound && edx < bound && er < bound && e13 < bound && e2 < bound,
          "ep %d rank %d bf16 %d: y %.3g dx %.3g drouter %.3g dw13 %.3g dw2 %.3g (bound %.3g)", n, me, bf16, ey, edx, er,
          e13, e2, bound);
    CHECK(world.stats[CT_COMM_ALL_TO_ALL].calls >= 5, "ep %d: %lld all-to-alls, expected the counts and four row "
          "exchanges", n, world.stats[CT_COMM_ALL_TO_ALL].calls);
    free(o.drouter), free(o.dw13), free(o.dw2);
}
// ---------------------------------------------------------------- 8-bit experts

// Host copy of n floats of device memory.
static float *host_copy(const ct_kernels *k, const float *d, long n) {
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    k->copy_to_host(h, d, (size_t)n * sizeof(float));
    return h;
}
// How many of the n values differ from want's (compared as values: +0 and -0 count as equal, since
// a gradient accumulated into zeros turns -0 into +0).
static long mismatches(const float *got, const float *want, long n) {
    long m = 0;
    for (long i = 0; i < n; i++) m += got[i] != want[i];
    return m;
}

// The layer under f8 (one process, fp32 compute) against the dense 8-bit linear members called
// directly, one expert at a time, on that expert's rows gathered here from the tokens the float64
// reference routes to it (token order, as the dispatch keeps it): w13's and w2's outputs, and
// both weight gradients, equal value for value -- the layer's row ranges and weight slices are
// the ones each expert owns. The combine weights are the layer's own (its fp32 router, held to
// the float64 reference by the cases above); the output gradients then follow as the combine's
// backward forms them (weight times dy). And the 8-bit layer differs from the fp32 reference by
// more than fp32 rounding, yet stays close: the quantisation ran.
static void f8_per_expert_at(ct_f8_recipe recipe, const char *name) {
    const ct_kernels *k = device();
    static weights w;
    draw_weights(&w);
    float x[N * C], dy[N * C];
    draw_tokens(0, x, dy);
    static ref_out r;
    memset(&r, 0, sizeof r);
    reference(&w, x, dy, 0, 1, 0, 0, 0, &r);
    ct_moe_layer_spec spec = {.k = k, .C = C, .F = F, .E = E, .topk = K, .renorm = 1, .N = N, .f8 = true,
                              .recipe = recipe};
    ct_moe_layer l;
    CHECK(ct_moe_layer_init(&l, &spec) == CT_OK, "%s", ct_last_error());
    float *router = up(k, w.router, E * C), *w13 = up(k, w.w13, E * 2 * F * C), *w2 = up(k, w.w2, E * C * F);
    float *dx_ = up(k, x, N * C), *ddy = up(k, dy, N * C), *y = up(k, NULL, N * C), *dx = up(k, NULL, N * C);
    float *gr = up(k, NULL, E * C), *g13 = up(k, NULL, E * 2 * F * C), *g2 = up(k, NULL, E * C * F);
    ct_moe_params p = {.router = router, .w13 = w13, .w2 = w2, .f8_w13 = true, .f8_w2 = true};
    ct_moe_grads g = {.router = gr, .w13 = g13, .w2 = g2};
    ct_moe_acts a;
    ct_moe_acts_init(&l, &a, NULL);
    ct_moe_forward(&l, &p, &a, dx_, y);
    long R = a.rows;
    CHECK(R == N * K, "%s: %ld expert rows, expected %d", name, R, N * K);
    float *h13 = host_copy(k, a.h13, R * 2 * F), *ye = host_copy(k, a.ye, R * C), *cw = host_copy(k, a.weights, N * K);
    ct_moe_backward(&l, &p, &a, dx_, ddy, dx, &g);
    float *y_h = host_copy(k, y, N * C), *g13_h = host_copy(k, g13, E * 2 * F * C), *g2_h = host_copy(k, g2, E * C * F);
    long most = 1;
    for (int e = 0; e < E; e++) most = most > a.offsets[e + 1] - a.offsets[e] ? most : a.offsets[e + 1] - a.offsets[e];
    long IC13 = C, OC13 = 2 * F, sc = 0;
    long dims[2][2] = {{IC13, OC13}, {F, C}};
    for (int i = 0; i < 2; i++) {
        long f = k->f8_scratch_floats(most, dims[i][0], dims[i][1]), b = k->f8_backward_scratch_floats(most, dims[i][0], dims[i][1]);
        sc = sc > f ? sc : f, sc = sc > b ? sc : b;
    }
    float *scratch = up(k, NULL, sc);
    int used = 0;
    for (int e = 0; e < E; e++) {
        // expert e's rows, from the reference's choices: inputs and output gradients
        static float xe[N * C], dye[N * C];
        long n = 0;
        for (int t = 0; t < N; t++)
            for (int j = 0; j < K; j++)
                if (r.chosen[t][j] == e) {
                    memcpy(xe + n * C, x + t * C, sizeof(float) * C);
                    for (int c = 0; c < C; c++) dye[n * C + c] = cw[t * K + j] * dy[t * C + c];
                    n++;
                }
        long at = a.offsets[e];
        CHECK(a.offsets[e + 1] - at == n, "%s: expert %d has %ld rows, the reference routes %ld to it", name, e,
              (long)(a.offsets[e + 1] - at), n);
        if (n == 0) {  // skipped: its gradients stay zero
            float zero[2 * F * C] = {0};
            CHECK(!mismatches(g13_h + e * 2 * F * C, zero, 2 * F * C) && !mismatches(g2_h + e * C * F, zero, C * F),
                  "%s: expert %d has no rows, yet a weight gradient", name, e);
            continue;
        }
        used++;
        float *dxe = up(k, xe, n * C), *ddye = up(k, dye, n * C);
        float *dh13 = up(k, NULL, n * 2 * F), *dh = up(k, NULL, n * F), *dye2 = up(k, NULL, n * C);
        float *gdh = up(k, NULL, n * F), *gdh13 = up(k, NULL, n * 2 * F), *gdx = up(k, NULL, n * C);
        float *gw13 = up(k, NULL, 2 * F * C), *gw2 = up(k, NULL, C * F);
        const float *w13e = w13 + (long)e * 2 * F * C, *w2e = w2 + (long)e * C * F;
        k->linear_forward_f8(dh13, dxe, CT_F32, w13e, n, C, 2 * F, recipe, NULL, scratch);
        k->swiglu_forward(dh, dh13, n, F);
        k->linear_forward_f8(dye2, dh, CT_F32, w2e, n, F, C, recipe, NULL, scratch);
        k->linear_backward_f8(gdh, gw2, ddye, dh, CT_F32, w2e, n, F, C, recipe, NULL, scratch);
        k->swiglu_backward(gdh13, gdh, dh13, n, F);
        k->linear_backward_f8(gdx, gw13, gdh13, dxe, CT_F32, w13e, n, C, 2 * F, recipe, NULL, scratch);
        float *want13 = host_copy(k, dh13, n * 2 * F), *wanty = host_copy(k, dye2, n * C);
        float *wantg13 = host_copy(k, gw13, 2 * F * C), *wantg2 = host_copy(k, gw2, C * F);
        long m1 = mismatches(h13 + at * 2 * F, want13, n * 2 * F), m2 = mismatches(ye + at * C, wanty, n * C);
        long m3 = mismatches(g13_h + e * 2 * F * C, wantg13, 2 * F * C), m4 = mismatches(g2_h + e * C * F, wantg2, C * F);
        CHECK(!m1 && !m2 && !m3 && !m4,
              "%s expert %d (%ld rows): values unlike the dense 8-bit linear's on its rows: w13 out %ld, w2 out %ld, "
              "dw13 %ld, dw2 %ld",
              name, e, n, m1, m2, m3, m4);
        free(want13), free(wanty), free(wantg13), free(wantg2);
        float *bufs[] = {dxe, ddye, dh13, dh, dye2, gdh, gdh13, gdx, gw13, gw2};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ct_mem_free(bufs[i]);
    }
    CHECK(used >= 2, "%s: only %d experts had rows", name, used);
    // the quantisation ran: farther from the float64 reference than fp32 rounding, not far
    double ey = worst_diff(y_h, r.y, N * C), e13 = worst_diff(g13_h, r.dw13, E * 2 * F * C),
           e2 = worst_diff(g2_h, r.dw2, E * C * F);
    CHECK(ey > 1e-4 && e13 > 1e-4 && e2 > 1e-4, "%s: y %.3g dw13 %.3g dw2 %.3g from float64: fp32 in disguise", name,
          ey, e13, e2);
    CHECK(ey < 0.25 && e13 < 0.25 && e2 < 0.25, "%s: y %.3g dw13 %.3g dw2 %.3g from float64: too far", name, ey, e13,
          e2);
    printf("    %s: worst y %.3g dw13 %.3g dw2 %.3g from the float64 reference\n", name, ey, e13, e2);
    ct_moe_acts_free(&a);
    free(h13), free(ye), free(cw), free(y_h), free(g13_h), free(g2_h);
    float *bufs[] = {router, w13, w2, dx_, ddy, y, dx, gr, g13, g2, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ct_mem_free(bufs[i]);
}
static void f8_tensorwise_per_expert(void) { f8_per_expert_at(CT_F8_RECIPE_TENSORWISE, "float8 tensorwise"); }
static void f8_rowwise_per_expert(void) { f8_per_expert_at(CT_F8_RECIPE_ROWWISE, "float8 rowwise"); }
static void mxfp8_per_expert(void) { f8_per_expert_at(CT_F8_RECIPE_MXFP8, "mxfp8"); }

static void expert_parallel(void) { expert_parallel_at(false); }
static void bf16_expert_parallel(void) { expert_parallel_at(true); }

int main(int argc, char **argv) {
    if (!ct_mpi_test_is_child(argc, argv)) {
        CT_RUN(softmax_renorm);
        CT_RUN(sigmoid_bias);
        CT_RUN(aux_loss_batch);
        CT_RUN(aux_loss_per_sequence);
        CT_RUN(bf16_softmax_renorm);
        CT_RUN(bf16_sigmoid_bias);
        CT_RUN(f8_tensorwise_per_expert);
        CT_RUN(f8_rowwise_per_expert);
        CT_RUN(mxfp8_per_expert);
        CT_RUN(load_stats);
        CT_RUN(refused);
        const int nps[2] = {2, 4};
        ct_mpi_test_spawn_each(argv[0], nps, NULL, 2, 240);
        CT_TEST_EXIT();
    }
    if (ct_comm_init(&argc, &argv) != CT_OK || ct_comm_group_world(&world, 30) != CT_OK) {
        printf("FAIL init: %s\n", ct_last_error());
        return 1;
    }
    CT_MPI_RUN(expert_parallel);
    CT_MPI_RUN(bf16_expert_parallel);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
