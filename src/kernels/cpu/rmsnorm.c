// RMSNorm (Zhang & Sennrich 2019): y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
#include <math.h>

#include "kernels/cpu/rmsnorm_row.h"
#include "kernels/kernels.h"

// (`omp simd reduction` lets the compiler vectorise the float sums, which strict IEEE order
// would forbid; the order is still fixed, so results stay reproducible.)

// The row itself is ct_rmsnorm_row (rmsnorm_row.h), which the fused kernels share.
void ct_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, long N, long C, float eps) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) rstd[n] = ct_rmsnorm_row(out + n * C, inp + n * C, weight, C, eps);
}

// dinp_c += r w_c dy_c - r^3/C x_c sum_j(dy_j w_j x_j)       (rows in parallel)
// dweight_c += sum_n dy_nc x_nc r_n                             (columns in parallel)
// dweight is a reduction over rows; splitting it by column blocks keeps it race-free and makes
// the sum order (rows 0..N-1) independent of the thread count, so results are reproducible.
#define CT_RMS_COL_BLOCK 64

void ct_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         const float *rstd, long N, long C) {
#pragma omp parallel
    {
        // Either half may be skipped (NULL): a split backward computes dinp in its input-gradient
        // pass and dweight later in its weight-gradient pass; each half alone gives the same bits.
        if (dinp)
#pragma omp for schedule(static) nowait
        for (long n = 0; n < N; n++) {
            const float *x = inp + n * C, *dy = dout + n * C;  // (C)
            float *dx = dinp + n * C;                          // (C)
            float r = rstd[n];
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (long c = 0; c < C; c++) dot += dy[c] * weight[c] * x[c];
            float k = r * r * r * dot / (float)C;
            for (long c = 0; c < C; c++) dx[c] += r * weight[c] * dy[c] - k * x[c];
        }
        long nblocks = dweight ? (C + CT_RMS_COL_BLOCK - 1) / CT_RMS_COL_BLOCK : 0;
#pragma omp for schedule(static)
        for (long cb = 0; cb < nblocks; cb++) {
            long c0 = cb * CT_RMS_COL_BLOCK;
            long c1 = c0 + CT_RMS_COL_BLOCK < C ? c0 + CT_RMS_COL_BLOCK : C;
            float acc[CT_RMS_COL_BLOCK] = {0};
            for (long n = 0; n < N; n++) {
                const float *x = inp + n * C, *dy = dout + n * C;
                float r = rstd[n];
                for (long c = c0; c < c1; c++) acc[c - c0] += dy[c] * x[c] * r;
            }
            for (long c = c0; c < c1; c++) dweight[c] += acc[c - c0];
        }
    }
}
