// The per-row (and per-group) arithmetic of the mixture-of-experts kernels, written once for the
// cpu (kernels/cpu/moe.c: a row per loop iteration) and the cuda backend (kernels/cuda/moe.cu: a
// row per thread), so the two compute the same numbers in the same order. Contracts in
// kernels/kernels.h, "mixture of experts".
#ifndef CT_KERNELS_MOE_ROWS_H
#define CT_KERNELS_MOE_ROWS_H
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CT_MOE_HD __host__ __device__
#else
#define CT_MOE_HD
#endif

// One token: scores s (E) of logits z, the k chosen ids (descending by score + bias, ties to
// the lower id) and their weights w (k).
static inline CT_MOE_HD void ct_moe_route_row(int32_t *id, float *w, float *s, const float *z, const float *bias,
                                             long E, long k, int sigmoid, int renorm) {
    if (sigmoid) {
        for (long e = 0; e < E; e++) s[e] = 1.0f / (1.0f + expf(-z[e]));
    } else {
        float mx = z[0];
        for (long e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
        double sum = 0;
        for (long e = 0; e < E; e++) sum += s[e] = expf(z[e] - mx);
        float inv = (float)(1.0 / sum);
        for (long e = 0; e < E; e++) s[e] *= inv;
    }
    // insertion into the k best so far: k is small (1-8), E at most 1024
    long have = 0;
    for (long e = 0; e < E; e++) {
        float key = s[e] + (bias ? bias[e] : 0.0f);
        long at = have;
        while (at > 0 && key > s[id[at - 1]] + (bias ? bias[id[at - 1]] : 0.0f)) at--;
        if (at >= k) continue;
        for (long j = have < k ? have : k - 1; j > at; j--) id[j] = id[j - 1];
        id[at] = (int32_t)e;
        if (have < k) have++;
    }
    double total = 0;
    for (long j = 0; j < k; j++) total += w[j] = s[id[j]];
    if (renorm && total > 0) {
        float inv = (float)(1.0 / total);
        for (long j = 0; j < k; j++) w[j] *= inv;
    }
}

// One token's dlogits dz (E): through the renormalisation (w_j = s_j / Σ s), plus dsx (E, or
// NULL), then through the score function.
static inline CT_MOE_HD void ct_moe_router_backward_row(float *dz, const float *dw, const float *dsx, const float *s,
                                                       const int32_t *id, long E, long k, int sigmoid, int renorm) {
    for (long e = 0; e < E; e++) dz[e] = dsx ? dsx[e] : 0.0f;  // ds first, in dz
    if (renorm) {
        double total = 0, dot = 0;
        for (long j = 0; j < k; j++) total += s[id[j]], dot += (double)dw[j] * s[id[j]];
        for (long j = 0; j < k; j++) dz[id[j]] += (float)((dw[j] - dot / total) / total);
    } else {
        for (long j = 0; j < k; j++) dz[id[j]] += dw[j];
    }
    if (sigmoid) {
        for (long e = 0; e < E; e++) dz[e] *= s[e] * (1.0f - s[e]);
    } else {
        double dot = 0;
        for (long e = 0; e < E; e++) dot += (double)dz[e] * s[e];
        for (long e = 0; e < E; e++) dz[e] = s[e] * (float)(dz[e] - dot);
    }
}

// One group of G tokens from t0 of the load-balancing loss: returns coef Σ_e f_e P_e and writes
// the group's rows of dscores (the loss being the mean over `groups` groups). f, P: room for E
// doubles each.
static inline CT_MOE_HD double ct_moe_aux_group(float *dscores, const float *scores, const int32_t *ids, long t0,
                                               long G, long groups, long E, long k, float coef, int sigmoid,
                                               double *f, double *P) {
    for (long e = 0; e < E; e++) f[e] = P[e] = 0;
    for (long t = t0; t < t0 + G; t++) {
        const float *s = scores + t * E;
        double sum = 0;
        if (sigmoid)
            for (long e = 0; e < E; e++) sum += s[e];
        for (long e = 0; e < E; e++) P[e] += sigmoid ? s[e] / sum : s[e];
        for (long j = 0; j < k; j++) f[ids[t * k + j]] += 1;
    }
    double Lg = 0;
    for (long e = 0; e < E; e++) {
        f[e] *= (double)E / ((double)k * (double)G);
        P[e] /= (double)G;
        Lg += f[e] * P[e];
    }
    double scale = coef / ((double)G * (double)groups);  // dL / d(normalised score) = scale · f_e
    for (long t = t0; t < t0 + G; t++) {
        const float *s = scores + t * E;
        float *d = dscores + t * E;
        if (!sigmoid) {
            for (long e = 0; e < E; e++) d[e] = (float)(scale * f[e]);
            continue;
        }
        double sum = 0, dot = 0;
        for (long e = 0; e < E; e++) sum += s[e];
        for (long e = 0; e < E; e++) dot += scale * f[e] * s[e] / sum;
        for (long e = 0; e < E; e++) d[e] = (float)((scale * f[e] - dot) / sum);
    }
    return coef * Lg;
}
#endif
