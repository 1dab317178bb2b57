// Mixture-of-experts kernels (kernels.h, "mixture of experts"): the router's scores and top-k,
// the dispatch plan that orders (token, choice) pairs by expert, the permutation into that order
// and the weighted combine back, each with its backward, and the grouped linear layer over the
// experts' row ranges, in fp32 and under bf16 mixed precision. Parallel over tokens (the grouped
// linear: inside each expert's matmul).
#include <math.h>
#include <string.h>

#include "kernels/cpu/gemm_bf16.h"
#include "kernels/kernels.h"
#include "kernels/moe_rows.h"

// ---------------------------------------------------------------- router (kernels/moe_rows.h)

void ct_moe_router_forward(int32_t *ids, float *weights, float *scores, const float *logits, const float *bias, long N,
                           long E, long k, int sigmoid, int renorm) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++)
        ct_moe_route_row(ids + n * k, weights + n * k, scores + n * E, logits + n * E, bias, E, k, sigmoid, renorm);
}

void ct_moe_router_backward(float *dlogits, const float *dweights, const float *dscores, const float *scores,
                            const int32_t *ids, long N, long E, long k, int sigmoid, int renorm) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++)
        ct_moe_router_backward_row(dlogits + n * E, dweights + n * k, dscores ? dscores + n * E : NULL, scores + n * E,
                                   ids + n * k, E, k, sigmoid, renorm);
}

// ---------------------------------------------------------------- load balancing

void ct_moe_aux_loss(float *loss, float *dscores, const float *scores, const int32_t *ids, long N, long E, long k,
                     long group, float coef, int sigmoid) {
    long G = group > 0 && group <= N ? group : N, groups = N / G;
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (long g = 0; g < groups; g++) {
        double f[1024], P[1024];  // E <= 1024 (kernels.h)
        total += ct_moe_aux_group(dscores, scores, ids, g * G, G, groups, E, k, coef, sigmoid, f, P);
    }
    *loss = (float)(total / (double)groups);
}

// DeepSeek-V3's balancing without a loss: an expert chosen less than the mean gets its bias
// raised by rate, one chosen more lowered (outside the gradient, after the step).
void ct_moe_bias_update(float *bias, const int64_t *counts, long E, float rate) {
    double mean = 0;
    for (long e = 0; e < E; e++) mean += (double)counts[e];
    mean /= (double)E;
    for (long e = 0; e < E; e++) bias[e] += (double)counts[e] < mean ? rate : (double)counts[e] > mean ? -rate : 0.0f;
}

// ---------------------------------------------------------------- dispatch

// A counting sort of the N·k pairs by expert, stable in pair order (token, then choice), so a
// pair's place never depends on the thread count.
void ct_moe_dispatch_plan(int64_t *counts, int32_t *pos, const int32_t *ids, long N, long E, long k) {
    for (long e = 0; e < E; e++) counts[e] = 0;
    for (long p = 0; p < N * k; p++) counts[ids[p]]++;
    int64_t at = 0;  // counts -> each expert's first row
    for (long e = 0; e < E; e++) {
        int64_t c = counts[e];
        counts[e] = at;
        at += c;
    }
    for (long p = 0; p < N * k; p++) pos[p] = (int32_t)counts[ids[p]]++;
    int64_t prev = 0;  // each expert's end -> its count again
    for (long e = 0; e < E; e++) {
        int64_t end = counts[e];
        counts[e] = end - prev;
        prev = end;
    }
}

void ct_moe_permute(float *x_sorted, const float *x, const int32_t *pos, long N, long k, long C) {
#pragma omp parallel for schedule(static)
    for (long p = 0; p < N * k; p++) memcpy(x_sorted + (long)pos[p] * C, x + (p / k) * C, (size_t)C * sizeof(float));
}

void ct_moe_permute_backward(float *dx, const float *dx_sorted, const int32_t *pos, long N, long k, long C) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        float *d = dx + n * C;
        memcpy(d, dx_sorted + (long)pos[n * k] * C, (size_t)C * sizeof(float));
        for (long j = 1; j < k; j++) {
            const float *g = dx_sorted + (long)pos[n * k + j] * C;
            for (long c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

void ct_moe_combine(float *y, const float *y_sorted, const float *weights, const int32_t *pos, long N, long k, long C) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        float *o = y + n * C;
        for (long c = 0; c < C; c++) o[c] = 0.0f;
        for (long j = 0; j < k; j++) {
            const float *r = y_sorted + (long)pos[n * k + j] * C;
            float w = weights[n * k + j];
            for (long c = 0; c < C; c++) o[c] += w * r[c];
        }
    }
}

void ct_moe_combine_backward(float *dy_sorted, float *dweights, const float *dy, const float *y_sorted,
                             const float *weights, const int32_t *pos, long N, long k, long C) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const float *g = dy + n * C;
        for (long j = 0; j < k; j++) {
            long row = pos[n * k + j];
            const float *r = y_sorted + row * C;
            float *d = dy_sorted + row * C, w = weights[n * k + j];
            double dot = 0;
            for (long c = 0; c < C; c++) {
                d[c] = w * g[c];
                dot += (double)g[c] * r[c];
            }
            dweights[n * k + j] = (float)dot;
        }
    }
}

// ---------------------------------------------------------------- grouped linear

// Expert e's rows [offsets[e], offsets[e + 1]), its weight W + e·OC·IC: one product per expert,
// each over the whole thread team (the matmul parallelises inside).
void ct_grouped_linear_forward(float *out, const float *inp, const float *weight, const int64_t *offsets, long E,
                               long IC, long OC) {
    for (long e = 0; e < E; e++) {
        long r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n > 0) ct_linear_forward(out + r0 * OC, inp + r0 * IC, weight + e * OC * IC, n, IC, OC);
    }
}

void ct_grouped_linear_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                                const int64_t *offsets, long E, long IC, long OC) {
    for (long e = 0; e < E; e++) {
        long r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n <= 0) continue;
        ct_linear_backward(dinp ? dinp + r0 * IC : NULL, dweight ? dweight + e * OC * IC : NULL, dout + r0 * OC,
                           inp + r0 * IC, weight + e * OC * IC, n, IC, OC);
    }
}

// The bf16 products as model/linear.c takes a dense layer's under bf16: gemm_bf16 per expert.
void ct_grouped_linear_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight, const int64_t *offsets,
                                    long E, long IC, long OC) {
    for (long e = 0; e < E; e++) {
        long r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n > 0)  // out (n, OC) = inp (n, IC) @ W_e (OC, IC)^T
            ct_gemm_bf16(0, 1, n, OC, IC, 1.0f, inp + r0 * IC, IC, weight + e * OC * IC, IC, 0.0f, out + r0 * OC, OC);
    }
}

void ct_grouped_linear_backward_bf16(float *dinp, float *dweight, const uint16_t *dout, const uint16_t *inp,
                                     const uint16_t *weight, const int64_t *offsets, long E, long IC, long OC) {
    for (long e = 0; e < E; e++) {
        long r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n <= 0) continue;
        const uint16_t *g = dout + r0 * OC, *W = weight + e * OC * IC;
        if (dinp)  // dinp (n, IC) = dout (n, OC) @ W_e (OC, IC)
            ct_gemm_bf16(0, 0, n, IC, OC, 1.0f, g, OC, W, IC, 0.0f, dinp + r0 * IC, IC);
        if (dweight)  // dW_e (OC, IC) += dout^T @ inp (n, IC)
            ct_gemm_bf16(1, 0, OC, IC, n, 1.0f, g, OC, inp + r0 * IC, IC, 1.0f, dweight + e * OC * IC, IC);
    }
}
