// Cross-entropy row pieces for a vocabulary split over ranks (kernels.h, "row pieces"). The
// softmax of a row needs its max, its sum of exp and its target's logit over the WHOLE
// vocabulary; with the vocabulary split, a strategy (parallel/loss_parallel.c) reduces those
// between these steps. Rows are independent: each loop is parallel over rows, and the per-row
// arithmetic is the whole-vocabulary kernel's (xent_row.h).
#include <math.h>
#include <string.h>

#include "kernels/cpu/xent_row.h"
#include "kernels/kernels.h"

long ct_xent_bad_target(const int32_t *targets, long N, long V) {
    for (long n = 0; n < N; n++)
        if (targets[n] < -1 || targets[n] >= V) return n;
    return -1;
}

void ct_xent_rows_max(float *mx, const float *z, const int32_t *targets, long R, long V) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < R; r++)  // ignored rows take part in the caller's MAX with a harmless 0
        mx[r] = targets[r] < 0 ? 0.0f : ct_xent_row_max(z + r * V, V);
}

void ct_xent_rows_exp_sum(float *z, float *sum, float *zt, const float *mx, const int32_t *targets, long R, long V,
                          long vocab_start) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < R; r++) {
        float *zr = z + r * V;  // (V) logits -> exp(z - max)
        long t = targets[r], tl = t - vocab_start;
        float s = 0.0f, zr_t = 0.0f;
        if (t >= 0) {
            if (tl >= 0 && tl < V) zr_t = zr[tl];  // only the slice that holds the target contributes
            s = ct_xent_row_exp_sum(zr, V, mx[r], r + 1 < R ? zr + V : NULL);
        }
        sum[r] = s;
        zt[r] = zr_t;
    }
}

void ct_xent_rows_dlogits(float *z, const float *sum, const int32_t *targets, long R, long V, long vocab_start,
                          float grad_scale) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < R; r++) {
        float *zr = z + r * V;  // (V) exp(z - max) -> dlogits
        long t = targets[r], tl = t - vocab_start;
        if (t < 0) {
            memset(zr, 0, (size_t)V * sizeof(float));
            continue;
        }
        float scale = grad_scale / sum[r];
#pragma omp simd
        for (long j = 0; j < V; j++) zr[j] *= scale;
        if (tl >= 0 && tl < V) zr[tl] -= grad_scale;
    }
}

double ct_xent_rows_loss(const float *mx, const float *sum, const float *zt, const int32_t *targets, long R) {
    double loss = 0.0;
    for (long r = 0; r < R; r++)  // one thread, row order: the same bits from the same reduced numbers
        if (targets[r] >= 0) loss += (double)mx[r] + log((double)sum[r]) - (double)zt[r];
    return loss;
}

void ct_xent_rows_gathered(float *G, float *mx, float *sum, float *zt, const int32_t *targets, long P, long R,
                           long V, long mine, float grad_scale, int dlogits) {
    const long slice = R * V;  // G (P, R, V): block p holds ids [p·V, (p+1)·V) of each row
#pragma omp parallel for schedule(static)
    for (long r = 0; r < R; r++) {
        long t = targets[r];
        float *zr = G + mine * slice + r * V;  // (V) my slice of the row -> dlogits
        if (t < 0) {
            if (dlogits) memset(zr, 0, (size_t)V * sizeof(float));
            mx[r] = sum[r] = zt[r] = 0.0f;
            continue;
        }
        float m = G[r * V];
        for (long p = 0; p < P; p++) {
            float mp = ct_xent_row_max(G + p * slice + r * V, V);
            m = mp > m ? mp : m;
        }
        float s = 0.0f;  // slices in order, each in fixed order: every rank gets the same bits
        for (long p = 0; p < P; p++) s += ct_xent_row_sum_exp_fixed_order(G + p * slice + r * V, V, m);
        mx[r] = m;
        sum[r] = s;
        zt[r] = G[(t / V) * slice + r * V + t % V];
        if (dlogits) {
            float scale = grad_scale / s;
#pragma omp simd
            for (long j = 0; j < V; j++) zr[j] = ct_fast_expf(zr[j] - m) * scale;
            long tl = t - mine * V;
            if (tl >= 0 && tl < V) zr[tl] -= grad_scale;
        }
    }
}
