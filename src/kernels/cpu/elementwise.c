// Small vector helpers used around the step (gradient norm, accumulation, scaling).
#include "kernels/kernels.h"

// A fixed number of partial sums, each over a fixed slice, added in slice order: the result is
// the same on every run and for every thread count (a plain `reduction(+:)` is not).
#define CT_SUMSQ_PARTS 64

double ct_sum_squares(const float *x, long n) {
    double part[CT_SUMSQ_PARTS];
    long slice = (n + CT_SUMSQ_PARTS - 1) / CT_SUMSQ_PARTS;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < CT_SUMSQ_PARTS; p++) {
        long i0 = p * slice, i1 = i0 + slice < n ? i0 + slice : n;
        // 8 interleaved sums (element i0 + 8 q + l into a[l]), then the tail, then the lanes in a
        // fixed order: 8 independent add chains instead of one (that one was latency-bound)
        double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        long i = i0;
        for (; i + 8 <= i1; i += 8)
            for (int l = 0; l < 8; l++) a[l] += (double)x[i + l] * (double)x[i + l];
        double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        for (; i < i1; i++) s += (double)x[i] * (double)x[i];
        part[p] = s;
    }
    double total = 0.0;
    for (int p = 0; p < CT_SUMSQ_PARTS; p++) total += part[p];
    return total;
}

void ct_add_inplace(float *y, const float *x, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) y[i] += x[i];
}

void ct_scale_inplace(float *y, float a, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) y[i] *= a;
}
