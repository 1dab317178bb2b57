// Per-row softmax pieces of the CPU cross-entropy kernels (internal to src/kernels/cpu): the
// whole-vocabulary kernel (xent.c) and the vocabulary-slice row kernels (xent_rows.c) do the same
// arithmetic on a row of logits, so it is written once here. Each function is one row of n
// floats; the callers parallelise over rows with OpenMP.
#ifndef CT_CPU_XENT_ROW_H
#define CT_CPU_XENT_ROW_H
#include "kernels/cpu/fastmath.h"

// max_j z[j] (exact, so the reduction order does not matter)
static inline float ct_xent_row_max(const float *z, long n) {
#ifdef CT_V16
    // Four running maxima instead of the one GCC keeps for the loop below (#else: a chain of
    // dependent max instructions). The same result as GCC's vectorisation of that loop: the
    // largest z[j] that is not NaN, -inf if none (vmaxps(z, a) is z > a ? z : a, so a NaN never
    // enters a running maximum).
    __m512 a0 = _mm512_set1_ps(-INFINITY), a1 = a0, a2 = a0, a3 = a0;
    long j = 0;
    for (; j + 64 <= n; j += 64) {
        a0 = _mm512_max_ps(_mm512_loadu_ps(z + j), a0);
        a1 = _mm512_max_ps(_mm512_loadu_ps(z + j + 16), a1);
        a2 = _mm512_max_ps(_mm512_loadu_ps(z + j + 32), a2);
        a3 = _mm512_max_ps(_mm512_loadu_ps(z + j + 48), a3);
    }
    for (; j + 16 <= n; j += 16) a0 = _mm512_max_ps(_mm512_loadu_ps(z + j), a0);
    float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3)));
    for (; j < n; j++) mx = z[j] > mx ? z[j] : mx;
    return mx;
#else
    float mx = z[0];
#pragma omp simd reduction(max : mx)
    for (long j = 0; j < n; j++) mx = z[j] > mx ? z[j] : mx;
    return mx;
#endif
}

// The sums of exp below accumulate in double, 8 lanes (lane k: the j = k mod 8 of each whole
// group of 8), then the tail, then the lanes in a fixed order: an order fixed by j alone, and an
// error far below float's, so that a row summed whole (xent.c) and the same row summed in
// vocabulary slices (xent_rows.c, then a reduction) agree to the last float bits or nearly.
typedef double ct_v4d __attribute__((vector_size(32)));
typedef float ct_v4f __attribute__((vector_size(16)));
static inline void ct_xent_acc8(ct_v4d *lo, ct_v4d *hi, ct_v8f e) {
    *lo += __builtin_convertvector(__builtin_shufflevector(e, e, 0, 1, 2, 3), ct_v4d);
    *hi += __builtin_convertvector(__builtin_shufflevector(e, e, 4, 5, 6, 7), ct_v4d);
}
static inline double ct_xent_sum8(ct_v4d lo, ct_v4d hi) {
    return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
}
#ifdef CT_V16
// With 16-lane registers the 8 double lanes (lo | hi) are one register: the same adds per lane.
// (Intrinsics for the converts: GCC 12 builds __builtin_convertvector of 8 floats from four
// 4-lane converts and the inserts between them.)
typedef double ct_v8d __attribute__((vector_size(64)));
static inline void ct_xent_acc16(ct_v8d *acc, ct_v16f e) {
    __m512d a = (__m512d)*acc;
    a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm512_castps512_ps256((__m512)e)));
    a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd((__m512d)e, 1))));
    *acc = (ct_v8d)a;
}
static inline void ct_xent_split8(ct_v8d acc, ct_v4d *lo, ct_v4d *hi) {
    *lo = __builtin_shufflevector(acc, acc, 0, 1, 2, 3);
    *hi = __builtin_shufflevector(acc, acc, 4, 5, 6, 7);
}

#endif

// Σ_j exp(z[j] - mx), z left as it is
static inline float ct_xent_row_sum_exp(const float *z, long n, float mx) {
    ct_v4d lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
    long j = 0;
#ifdef CT_V16
    ct_v8d acc = {0, 0, 0, 0, 0, 0, 0, 0};
    for (; j + 16 <= n; j += 16)  // 16 exps a step, summed as two steps of 8 (the same order)
        ct_xent_acc16(&acc, ct_fast_expf_v16_quick(ct_v16f_load(z + j) - mx));
    ct_xent_split8(acc, &lo, &hi);
#endif
    for (; j + 8 <= n; j += 8) ct_xent_acc8(&lo, &hi, ct_fast_expf_v8(ct_v8f_load(z + j) - mx));
    double s = ct_xent_sum8(lo, hi);
    for (; j < n; j++) s += ct_fast_expf(z[j] - mx);
    return (float)s;
}

// z[j] = exp(z[j] - mx) in place; returns their sum (summed as ct_xent_row_sum_exp). next: the
// n floats the caller reads next (the next row), or NULL. With 16-lane registers they are
// prefetched while these exps are computed: the exps keep the core busy and the memory idle, and
// the next row's max, a pass that computes almost nothing, would otherwise wait on memory.
static inline float ct_xent_row_exp_sum(float *z, long n, float mx, const float *next) {
    ct_v4d lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
    long j = 0;
#ifdef CT_V16
    ct_v8d acc = {0, 0, 0, 0, 0, 0, 0, 0};
    const char *pf = (const char *)(next ? next : z);  // (z: already here, the prefetches cost nothing)
    for (; j + 32 <= n; j += 32) {  // two vectors of 16 a step, for more independent work in flight
        _mm_prefetch(pf + 4 * j, _MM_HINT_T0);
        _mm_prefetch(pf + 4 * j + 64, _MM_HINT_T0);
        ct_v16f e0 = ct_fast_expf_v16_quick(ct_v16f_load(z + j) - mx);
        ct_v16f e1 = ct_fast_expf_v16_quick(ct_v16f_load(z + j + 16) - mx);
        ct_v16f_store(z + j, e0);
        ct_v16f_store(z + j + 16, e1);
        ct_xent_acc16(&acc, e0);  // 16 exps summed as two steps of 8 (the same order), twice
        ct_xent_acc16(&acc, e1);
    }
    for (; j + 16 <= n; j += 16) {
        ct_v16f e = ct_fast_expf_v16_quick(ct_v16f_load(z + j) - mx);
        ct_v16f_store(z + j, e);
        ct_xent_acc16(&acc, e);
    }
    ct_xent_split8(acc, &lo, &hi);
#else
    (void)next;
#endif
    for (; j + 8 <= n; j += 8) {
        ct_v8f e = ct_fast_expf_v8(ct_v8f_load(z + j) - mx);
        ct_v8f_store(z + j, e);
        ct_xent_acc8(&lo, &hi, e);
    }
    double s = ct_xent_sum8(lo, hi);
    for (; j < n; j++) {
        z[j] = ct_fast_expf(z[j] - mx);
        s += z[j];
    }
    return (float)s;
}

// Σ_j exp(z[j] - mx) in an order fixed by j alone (8 interleaved partial sums), not by the
// address of z: ranks that sum the same numbers from differently aligned buffers (gather mode)
// must get the same bits, and a vectoriser's alignment peel would otherwise change the order.
static inline float ct_xent_row_sum_exp_fixed_order(const float *z, long n, float mx) {
    ct_v8f a = ct_v8f_splat(0.0f);
    long j = 0;
    for (; j + 8 <= n; j += 8) a += ct_fast_expf_v8(ct_v8f_load(z + j) - mx);
    float acc[8];
    ct_v8f_store(acc, a);
    for (int k = 0; j < n; j++, k++) acc[k] += ct_fast_expf(z[j] - mx);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
#endif
