// One RMSNorm row (internal to src/kernels/cpu): shared by ct_rmsnorm_forward, its bf16-output
// form and the fused kernels (fused.c), so every one of them normalises with the same float
// operations, in the same order -- the same bits by construction.
#ifndef CT_CPU_RMSNORM_ROW_H
#define CT_CPU_RMSNORM_ROW_H
#include <math.h>
#include <stdint.h>

#include "core/float_formats.h"

// r = 1 / sqrt(mean(x^2) + eps) of the row x (C).
// (`omp simd reduction` lets the compiler vectorise the float sum, which strict IEEE order
// would forbid; the order is still fixed by the code, so results stay reproducible.)
static inline float ct_rmsnorm_rstd(const float *x, long C, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (long c = 0; c < C; c++) ss += x[c] * x[c];
    return 1.0f / sqrtf(ss / (float)C + eps);
}

// y (C) = x * r * weight; returns r (ct_rmsnorm_rstd). y must not overlap x.
static inline float ct_rmsnorm_row(float *y, const float *x, const float *weight, long C, float eps) {
    float r = ct_rmsnorm_rstd(x, C, eps);
    for (long c = 0; c < C; c++) y[c] = x[c] * r * weight[c];
    return r;
}

// The same row's fp32 values rounded to bf16, nearest even (core/float_formats.h), into y (C):
// ct_rmsnorm_row's bits narrowed, with no fp32 row written.
static inline float ct_rmsnorm_row_bf16(uint16_t *y, const float *x, const float *weight, long C, float eps) {
    float r = ct_rmsnorm_rstd(x, C, eps);
    for (long c = 0; c < C; c++) y[c] = ct_f32_to_bf16(x[c] * r * weight[c]);
    return r;
}

// xo (C) = x + d, ct_add_inplace's sum (xo may be x or d): the residual add before a norm.
static inline void ct_residual_add_row(float *xo, const float *x, const float *d, long C) {
    for (long c = 0; c < C; c++) xo[c] = x[c] + d[c];
}
#endif
