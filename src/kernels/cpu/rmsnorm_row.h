// One RMSNorm row (internal to src/kernels/cpu): shared by ct_rmsnorm_forward and the fused
// kernels (fused.c), so a fused chain normalises with the same float operations, in the same
// order, as the unfused one -- the same bits by construction.
#ifndef CT_CPU_RMSNORM_ROW_H
#define CT_CPU_RMSNORM_ROW_H
#include <math.h>

// y (C) = x * r * weight; returns r = 1 / sqrt(mean(x^2) + eps). y must not overlap x.
// (`omp simd reduction` lets the compiler vectorise the float sum, which strict IEEE order
// would forbid; the order is still fixed by the code, so results stay reproducible.)
static inline float ct_rmsnorm_row(float *y, const float *x, const float *weight, long C, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (long c = 0; c < C; c++) ss += x[c] * x[c];
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    for (long c = 0; c < C; c++) y[c] = x[c] * r * weight[c];
    return r;
}
#endif
