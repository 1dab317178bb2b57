// Per-row softmax pieces of the CPU cross-entropy kernels (internal to src/kernels/cpu): the
// whole-vocabulary kernel (xent.c) and the vocabulary-slice row kernels (xent_rows.c) do the same
// arithmetic on a row of logits, so it is written once here. Each function is one row of n
// floats; the callers parallelise over rows with OpenMP.
#ifndef CT_CPU_XENT_ROW_H
#define CT_CPU_XENT_ROW_H
#include "kernels/cpu/fastmath.h"

// max_j z[j] (exact, so the reduction order does not matter)
static inline float ct_xent_row_max(const float *z, long n) {
    float mx = z[0];
#pragma omp simd reduction(max : mx)
    for (long j = 0; j < n; j++) mx = z[j] > mx ? z[j] : mx;
    return mx;
}

// Σ_j exp(z[j] - mx), z left as it is
static inline float ct_xent_row_sum_exp(const float *z, long n, float mx) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (long j = 0; j < n; j++) sum += ct_fast_expf(z[j] - mx);
    return sum;
}

// z[j] = exp(z[j] - mx) in place; returns their sum
static inline float ct_xent_row_exp_sum(float *z, long n, float mx) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (long j = 0; j < n; j++) {
        float e = ct_fast_expf(z[j] - mx);
        z[j] = e;
        s += e;
    }
    return s;
}

// Σ_j exp(z[j] - mx) in an order fixed by j alone (8 interleaved partial sums), not by the
// address of z: ranks that sum the same numbers from differently aligned buffers (gather mode)
// must get the same bits, and a vectoriser's alignment peel would otherwise change the order.
static inline float ct_xent_row_sum_exp_fixed_order(const float *z, long n, float mx) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    long j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += ct_fast_expf(z[j + k] - mx);
    for (int k = 0; j < n; j++, k++) acc[k] += ct_fast_expf(z[j] - mx);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
#endif
