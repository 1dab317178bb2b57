// Mixture-of-experts kernels (kernels.h) against naive float64 code written here: the router's
// scores, choice and weights (softmax and sigmoid, with and without renormalisation and a
// choosing bias), its backward against float64 central differences of sum(weights * dweights)
// (independent of the analytic formulas in the kernel), the dispatch plan's order, permute and
// combine with their backwards, and the grouped linear layer with empty experts, in fp32 and
// under bf16 (bf16 inputs, fp32 accumulation: held to the fp32 summation bound of each sum).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"
#include "test_bf16.h"
#include "test_rand.h"

static float *falloc(long n) { return malloc(sizeof(float) * (n > 0 ? n : 1)); }

// ---------------------------------------------------------------- router reference

// scores (E) of one row in float64
static void ref_scores(double *s, const double *z, long E, int sigmoid) {
    if (sigmoid) {
        for (long e = 0; e < E; e++) s[e] = 1.0 / (1.0 + exp(-z[e]));
        return;
    }
    double mx = z[0], sum = 0;
    for (long e = 1; e < E; e++) mx = fmax(mx, z[e]);
    for (long e = 0; e < E; e++) sum += s[e] = exp(z[e] - mx);
    for (long e = 0; e < E; e++) s[e] /= sum;
}

static const double *sort_key;
static int by_key_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_key[i] != sort_key[j]) return sort_key[i] > sort_key[j] ? -1 : 1;
    return i - j;
}

// The k chosen experts of one row (by score + bias, a full sort) and their weights.
static void ref_route(int *ids, double *w, const double *z, const float *bias, long E, long k, int sigmoid, int renorm) {
    double s[64], key[64];
    int order[64];
    ref_scores(s, z, E, sigmoid);
    for (long e = 0; e < E; e++) key[e] = s[e] + (bias ? bias[e] : 0.0), order[e] = (int)e;
    sort_key = key;
    qsort(order, (size_t)E, sizeof(int), by_key_desc);
    double total = 0;
    for (long j = 0; j < k; j++) ids[j] = order[j], total += w[j] = s[order[j]];
    if (renorm)
        for (long j = 0; j < k; j++) w[j] /= total;
}

static void test_router(void) {
    const long N = 37, E = 16;
    for (int sigmoid = 0; sigmoid < 2; sigmoid++)
        for (int renorm = 0; renorm < 2; renorm++)
            for (int with_bias = 0; with_bias < 2; with_bias++)
                for (long k = 1; k <= 4; k += 3) {
                    float *logits = falloc(N * E), *scores = falloc(N * E), *w = falloc(N * k), bias[16];
                    int32_t *ids = malloc(sizeof(int32_t) * N * k);
                    for (long i = 0; i < N * E; i++) logits[i] = frand(3);
                    for (long e = 0; e < E; e++) bias[e] = frand(0.2f);
                    const float *b = with_bias ? bias : NULL;
                    ct_moe_router_forward(ids, w, scores, logits, b, N, E, k, sigmoid, renorm);
                    int bad_ids = 0;
                    double werr = 0, serr = 0;
                    for (long n = 0; n < N; n++) {
                        double z[16], s[16], rw[4];
                        int rid[4];
                        for (long e = 0; e < E; e++) z[e] = logits[n * E + e];
                        ref_scores(s, z, E, sigmoid);
                        for (long e = 0; e < E; e++) serr = fmax(serr, fabs(scores[n * E + e] - s[e]));
                        ref_route(rid, rw, z, b, E, k, sigmoid, renorm);
                        for (long j = 0; j < k; j++) {
                            bad_ids += ids[n * k + j] != rid[j];
                            werr = fmax(werr, fabs(w[n * k + j] - rw[j]) / rw[j]);
                        }
                    }
                    CHECK(bad_ids == 0, "sigmoid %d renorm %d bias %d k %ld: %d choices differ", sigmoid, renorm,
                          with_bias, k, bad_ids);
                    CHECK(serr < 1e-6 && werr < 1e-5, "sigmoid %d renorm %d k %ld: score error %.3g, weight rel %.3g",
                          sigmoid, renorm, k, serr, werr);
                    free(logits), free(scores), free(w), free(ids);
                }
}

// d/dlogits of sum_j dweights_j * weight_j(logits), the choice held fixed (a step small enough
// not to change it), by float64 central differences.
static void test_router_backward(void) {
    const long N = 9, E = 8, k = 2;
    for (int sigmoid = 0; sigmoid < 2; sigmoid++)
        for (int renorm = 0; renorm < 2; renorm++) {
            float *logits = falloc(N * E), *scores = falloc(N * E), *w = falloc(N * k), *dw = falloc(N * k);
            float *dz = falloc(N * E);
            int32_t *ids = malloc(sizeof(int32_t) * N * k);
            for (long i = 0; i < N * E; i++) logits[i] = frand(2);
            for (long i = 0; i < N * k; i++) dw[i] = frand(1);
            ct_moe_router_forward(ids, w, scores, logits, NULL, N, E, k, sigmoid, renorm);
            ct_moe_router_backward(dz, dw, NULL, scores, ids, N, E, k, sigmoid, renorm);
            double worst = 0;
            for (long n = 0; n < N; n++)
                for (long e = 0; e < E; e++) {
                    double z[8], f[2];
                    for (int side = 0; side < 2; side++) {
                        for (long i = 0; i < E; i++) z[i] = logits[n * E + i];
                        z[e] += side ? -1e-5 : 1e-5;
                        double s[8], total = 0, acc = 0;
                        ref_scores(s, z, E, sigmoid);
                        for (long j = 0; j < k; j++) total += s[ids[n * k + j]];
                        for (long j = 0; j < k; j++)
                            acc += dw[n * k + j] * s[ids[n * k + j]] / (renorm ? total : 1.0);
                        f[side] = acc;
                    }
                    double want = (f[0] - f[1]) / 2e-5;
                    worst = fmax(worst, fabs(dz[n * E + e] - want));
                }
            CHECK(worst < 2e-5, "sigmoid %d renorm %d: dlogits off by %.3g", sigmoid, renorm, worst);
            free(logits), free(scores), free(w), free(dw), free(dz), free(ids);
        }
}

// ---------------------------------------------------------------- load balancing

// The loss of a float64 copy of the scores, the choice held (ids from the kernel's router).
static double ref_aux(const double *s, const int32_t *ids, long N, long E, long k, long G, double coef, int sigmoid) {
    long groups = N / G;
    double total = 0;
    for (long g = 0; g < groups; g++) {
        double f[16] = {0}, P[16] = {0}, Lg = 0;
        for (long t = g * G; t < (g + 1) * G; t++) {
            double sum = 0;
            for (long e = 0; e < E; e++) sum += s[t * E + e];
            for (long e = 0; e < E; e++) P[e] += (sigmoid ? s[t * E + e] / sum : s[t * E + e]) / G;
            for (long j = 0; j < k; j++) f[ids[t * k + j]] += (double)E / (k * G);
        }
        for (long e = 0; e < E; e++) Lg += f[e] * P[e];
        total += coef * Lg;
    }
    return total / groups;
}

static void test_aux_loss(void) {
    const long T = 5, N = 3 * T, E = 8, k = 2;
    for (int sigmoid = 0; sigmoid < 2; sigmoid++)
        for (int per_seq = 0; per_seq < 2; per_seq++) {
            long G = per_seq ? T : N;
            float *logits = falloc(N * E), *scores = falloc(N * E), *w = falloc(N * k), *ds = falloc(N * E), loss;
            int32_t *ids = malloc(sizeof(int32_t) * N * k);
            for (long i = 0; i < N * E; i++) logits[i] = frand(2);
            ct_moe_router_forward(ids, w, scores, logits, NULL, N, E, k, sigmoid, 1);
            ct_moe_aux_loss(&loss, ds, scores, ids, N, E, k, per_seq ? T : 0, 0.01f, sigmoid);
            double *s = malloc(sizeof(double) * N * E), worst = 0;
            for (long i = 0; i < N * E; i++) s[i] = scores[i];
            double want = ref_aux(s, ids, N, E, k, G, 0.01, sigmoid);
            for (long i = 0; i < N * E; i++) {
                double keep = s[i], h = 1e-6;
                s[i] = keep + h;
                double up = ref_aux(s, ids, N, E, k, G, 0.01, sigmoid);
                s[i] = keep - h;
                double dn = ref_aux(s, ids, N, E, k, G, 0.01, sigmoid);
                s[i] = keep;
                worst = fmax(worst, fabs(ds[i] - (up - dn) / (2 * h)));
            }
            CHECK(fabs(loss - want) <= 1e-6 * want && worst < 1e-7, "sigmoid %d per sequence %d: loss %.9g vs %.9g, "
                  "dscores off by %.3g", sigmoid, per_seq, loss, want, worst);
            CHECK(want > 0.009, "a balanced-ish router's loss is about coef: %.3g", want);
            free(logits), free(scores), free(w), free(ds), free(ids), free(s);
        }
}

// The extra score gradient goes through the score function with the weights' own.
static void test_router_backward_extra(void) {
    const long N = 4, E = 6, k = 2;
    for (int sigmoid = 0; sigmoid < 2; sigmoid++) {
        float logits[24], scores[24], w[8], dw[8], dsx[24], dz[24];
        int32_t ids[8];
        for (int i = 0; i < 24; i++) logits[i] = frand(2), dsx[i] = frand(1);
        for (int i = 0; i < 8; i++) dw[i] = frand(1);
        ct_moe_router_forward(ids, w, scores, logits, NULL, N, E, k, sigmoid, 1);
        ct_moe_router_backward(dz, dw, dsx, scores, ids, N, E, k, sigmoid, 1);
        double worst = 0;
        for (long n = 0; n < N; n++)
            for (long e = 0; e < E; e++) {
                double f[2];
                for (int side = 0; side < 2; side++) {
                    double z[6], s[6], total = 0, acc = 0;
                    for (long i = 0; i < E; i++) z[i] = logits[n * E + i];
                    z[e] += side ? -1e-5 : 1e-5;
                    ref_scores(s, z, E, sigmoid);
                    for (long j = 0; j < k; j++) total += s[ids[n * k + j]];
                    for (long j = 0; j < k; j++) acc += dw[n * k + j] * s[ids[n * k + j]] / total;
                    for (long i = 0; i < E; i++) acc += dsx[n * E + i] * s[i];
                    f[side] = acc;
                }
                worst = fmax(worst, fabs(dz[n * E + e] - (f[0] - f[1]) / 2e-5));
            }
        CHECK(worst < 2e-5, "sigmoid %d: dlogits with extra score gradient off by %.3g", sigmoid, worst);
    }
}

static void test_bias_update(void) {
    float bias[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    const int64_t counts[4] = {1, 5, 3, 3};  // mean 3
    ct_moe_bias_update(bias, counts, 4, 0.125f);
    CHECK(bias[0] == 0.625f && bias[1] == 0.375f && bias[2] == 0.5f && bias[3] == 0.5f,
          "bias %g %g %g %g: underloaded up, overloaded down, at the mean unchanged", bias[0], bias[1], bias[2], bias[3]);
}

// ---------------------------------------------------------------- dispatch, permute, combine

static void test_dispatch_permute_combine(void) {
    const long N = 23, E = 6, k = 3, C = 5;
    int32_t *ids = malloc(sizeof(int32_t) * N * k), *pos = malloc(sizeof(int32_t) * N * k);
    for (long p = 0; p < N * k; p++) ids[p] = (int32_t)(urand() * (E - 1));  // expert E-1 gets none
    int64_t counts[6];
    ct_moe_dispatch_plan(counts, pos, ids, N, E, k);
    // expected: expert by expert, pairs in order
    int32_t *want = malloc(sizeof(int32_t) * N * k);
    long row = 0;
    for (long e = 0; e < E; e++) {
        long c = 0;
        for (long p = 0; p < N * k; p++)
            if (ids[p] == e) want[p] = (int32_t)row++, c++;
        CHECK(counts[e] == c, "expert %ld: count %lld, want %ld", e, (long long)counts[e], c);
    }
    CHECK(!memcmp(pos, want, sizeof(int32_t) * N * k), "dispatch order is not expert-major, pair-stable");

    float *x = falloc(N * C), *xs = falloc(N * k * C), *ys = falloc(N * k * C), *w = falloc(N * k);
    float *y = falloc(N * C), *dy = falloc(N * C), *dys = falloc(N * k * C), *dw = falloc(N * k), *dx = falloc(N * C);
    for (long i = 0; i < N * C; i++) x[i] = frand(1), dy[i] = frand(1);
    for (long i = 0; i < N * k * C; i++) ys[i] = frand(1), xs[i] = dys[i] = NAN;
    for (long i = 0; i < N * k; i++) w[i] = (float)urand();
    ct_moe_permute(xs, x, pos, N, k, C);
    ct_moe_combine(y, ys, w, pos, N, k, C);
    ct_moe_combine_backward(dys, dw, dy, ys, w, pos, N, k, C);
    ct_moe_permute_backward(dx, dys, pos, N, k, C);
    double e_perm = 0, e_y = 0, e_dys = 0, e_dw = 0, e_dx = 0;
    for (long n = 0; n < N; n++) {
        double acc[5] = {0}, back[5] = {0};
        for (long j = 0; j < k; j++) {
            long p = n * k + j, r = want[p];
            double dot = 0;
            for (long c = 0; c < C; c++) {
                e_perm = fmax(e_perm, fabs(xs[r * C + c] - x[n * C + c]));
                acc[c] += (double)w[p] * ys[r * C + c];
                e_dys = fmax(e_dys, fabs(dys[r * C + c] - (double)w[p] * dy[n * C + c]));
                dot += (double)dy[n * C + c] * ys[r * C + c];
                back[c] += (double)w[p] * dy[n * C + c];
            }
            e_dw = fmax(e_dw, fabs(dw[p] - dot));
        }
        for (long c = 0; c < C; c++) {
            e_y = fmax(e_y, fabs(y[n * C + c] - acc[c]));
            e_dx = fmax(e_dx, fabs(dx[n * C + c] - back[c]));
        }
    }
    CHECK(e_perm == 0, "permute moved values: %.3g", e_perm);
    CHECK(e_y < 1e-6 && e_dys < 1e-6 && e_dw < 1e-5 && e_dx < 1e-5,
          "combine %.3g, its backward %.3g / %.3g, permute backward %.3g", e_y, e_dys, e_dw, e_dx);
    free(ids), free(pos), free(want), free(x), free(xs), free(ys), free(w), free(y), free(dy), free(dys), free(dw),
        free(dx);
}

// ---------------------------------------------------------------- grouped linear

static void test_grouped_linear(void) {
    const long E = 4, IC = 33, OC = 17;
    const int64_t offsets[5] = {0, 12, 12, 45, 50};  // expert 1 has no rows
    long R = offsets[E];
    float *x = falloc(R * IC), *W = falloc(E * OC * IC), *out = falloc(R * OC), *dout = falloc(R * OC);
    float *dx = falloc(R * IC), *dW = falloc(E * OC * IC), *dW0 = falloc(E * OC * IC);
    for (long i = 0; i < R * IC; i++) x[i] = frand(1);
    for (long i = 0; i < E * OC * IC; i++) W[i] = frand(1), dW[i] = dW0[i] = frand(1);
    for (long i = 0; i < R * OC; i++) dout[i] = frand(1);
    ct_grouped_linear_forward(out, x, W, offsets, E, IC, OC);
    ct_grouped_linear_backward(dx, dW, dout, x, W, offsets, E, IC, OC);
    double e_out = 0, e_dx = 0, e_dw = 0;
    for (long e = 0; e < E; e++) {
        const float *We = W + e * OC * IC;
        for (long r = offsets[e]; r < offsets[e + 1]; r++) {
            for (long o = 0; o < OC; o++) {
                double acc = 0;
                for (long i = 0; i < IC; i++) acc += (double)x[r * IC + i] * We[o * IC + i];
                e_out = fmax(e_out, fabs(out[r * OC + o] - acc));
            }
            for (long i = 0; i < IC; i++) {
                double acc = 0;
                for (long o = 0; o < OC; o++) acc += (double)dout[r * OC + o] * We[o * IC + i];
                e_dx = fmax(e_dx, fabs(dx[r * IC + i] - acc));
            }
        }
        for (long o = 0; o < OC; o++)
            for (long i = 0; i < IC; i++) {
                double acc = dW0[e * OC * IC + o * IC + i];
                for (long r = offsets[e]; r < offsets[e + 1]; r++) acc += (double)dout[r * OC + o] * x[r * IC + i];
                e_dw = fmax(e_dw, fabs(dW[e * OC * IC + o * IC + i] - acc));
            }
    }
    CHECK(e_out < 1e-4 && e_dx < 1e-4 && e_dw < 1e-4, "grouped linear: out %.3g, dinp %.3g, dweight %.3g", e_out, e_dx,
          e_dw);
    free(x), free(W), free(out), free(dout), free(dx), free(dW), free(dW0);
}

// bf16 bits of an fp32 that holds a bf16 value (round_bf16's output)
static uint16_t bits_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
// n bf16-representable values in [-1, 1): f (fp32) and b (bits)
static void rand_bf16(float *f, uint16_t *b, long n) {
    for (long i = 0; i < n; i++) f[i] = round_bf16(frand(1)), b[i] = bits_bf16(f[i]);
}

// The worst ratio |got - want| / bound over one output element: products of bf16 values are exact
// in fp32, so what remains is fp32 summation, at most gamma_K (K terms) of the terms' magnitudes.
static double sum_ratio(double got, double want, double abs_sum, long K) {
    double u = ldexp(1.0, -24), gamma = K * u / (1 - K * u);
    return fabs(got - want) / (gamma * abs_sum + 1e-30);
}

// Odd widths, experts with no rows (first, middle, last), one with a single row.
static void test_grouped_linear_bf16(void) {
    const long E = 6, IC = 37, OC = 19;
    const int64_t offsets[7] = {0, 0, 13, 13, 14, 47, 47};
    long R = offsets[E];
    float *x = falloc(R * IC), *W = falloc(E * OC * IC), *dout = falloc(R * OC);
    uint16_t *x16 = malloc(2 * R * IC), *W16 = malloc(2 * E * OC * IC), *d16 = malloc(2 * R * OC);
    float *out = falloc(R * OC), *dx = falloc(R * IC), *dW = falloc(E * OC * IC), *dW0 = falloc(E * OC * IC);
    rand_bf16(x, x16, R * IC), rand_bf16(W, W16, E * OC * IC), rand_bf16(dout, d16, R * OC);
    for (long i = 0; i < E * OC * IC; i++) dW[i] = dW0[i] = frand(1);
    for (long i = 0; i < R * OC; i++) out[i] = NAN;
    for (long i = 0; i < R * IC; i++) dx[i] = NAN;
    ct_grouped_linear_forward_bf16(out, x16, W16, offsets, E, IC, OC);
    ct_grouped_linear_backward_bf16(dx, dW, d16, x16, W16, offsets, E, IC, OC);
    double r_out = 0, r_dx = 0, r_dw = 0;
    for (long e = 0; e < E; e++) {
        const float *We = W + e * OC * IC;
        for (long r = offsets[e]; r < offsets[e + 1]; r++) {
            for (long o = 0; o < OC; o++) {
                double acc = 0, mag = 0;
                for (long i = 0; i < IC; i++) acc += (double)x[r * IC + i] * We[o * IC + i], mag += fabs((double)x[r * IC + i] * We[o * IC + i]);
                r_out = fmax(r_out, isfinite(out[r * OC + o]) ? sum_ratio(out[r * OC + o], acc, mag, IC) : INFINITY);
            }
            for (long i = 0; i < IC; i++) {
                double acc = 0, mag = 0;
                for (long o = 0; o < OC; o++) acc += (double)dout[r * OC + o] * We[o * IC + i], mag += fabs((double)dout[r * OC + o] * We[o * IC + i]);
                r_dx = fmax(r_dx, isfinite(dx[r * IC + i]) ? sum_ratio(dx[r * IC + i], acc, mag, OC) : INFINITY);
            }
        }
        long n = offsets[e + 1] - offsets[e];
        for (long o = 0; o < OC; o++)
            for (long i = 0; i < IC; i++) {
                double acc = dW0[e * OC * IC + o * IC + i], mag = fabs(acc);
                for (long r = offsets[e]; r < offsets[e + 1]; r++)
                    acc += (double)dout[r * OC + o] * x[r * IC + i], mag += fabs((double)dout[r * OC + o] * x[r * IC + i]);
                r_dw = fmax(r_dw, sum_ratio(dW[e * OC * IC + o * IC + i], acc, mag, n + 1));
            }
    }
    CHECK(r_out <= 1 && r_dx <= 1 && r_dw <= 1,
          "grouped linear bf16, error / fp32 summation bound: out %.3g, dinp %.3g, dweight %.3g", r_out, r_dx, r_dw);
    free(x), free(W), free(dout), free(x16), free(W16), free(d16), free(out), free(dx), free(dW), free(dW0);
}

int main(void) {
    rng_state = 0x9e3779b97f4a7c15ull;
    CT_RUN(test_router);
    CT_RUN(test_router_backward);
    CT_RUN(test_aux_loss);
    CT_RUN(test_router_backward_extra);
    CT_RUN(test_bias_update);
    CT_RUN(test_dispatch_permute_combine);
    CT_RUN(test_grouped_linear);
    CT_RUN(test_grouped_linear_bf16);
    CT_TEST_EXIT();
}
