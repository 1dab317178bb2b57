// Vectorisable float math for the CPU kernels (internal to src/kernels/cpu).
// glibc's expf is only vectorised under -ffast-math, which the build does not use; this
// exp is plain arithmetic plus a bit cast, so GCC vectorises the loops that call it.
#ifndef CT_CPU_FASTMATH_H
#define CT_CPU_FASTMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__FMA__)
#include <immintrin.h>
#endif

// a * b + c rounded once where the ISA has FMA (the vector widths below use the same
// instruction, so every lane keeps the scalar's bits); a * b, then + c, rounded twice elsewhere
// (fmaf would be a slow library call there).
#if defined(__FMA__)
#define CT_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define CT_FMA(a, b, c) ((a) * (b) + (c))
#endif

// exp(x) for float x, relative error < 1.5 ulp (tests/test_fastmath.c: 1.01 at worst) on
// [-87.3, 88.3]; 0 below (no denormals), +inf above, NaN stays NaN. Cody-Waite range reduction
// x = n ln2 + r, |r| <= ln2/2, then a degree-6 polynomial for exp(r) (the Cephes coefficients),
// scaled by 2^n built in the exponent. The reduction and polynomial are fused multiply-adds where
// the ISA has them (the build's -std=c11 turns off GCC's own contraction, so they are written
// out): on a 2-core Xeon with AMX, two threads, with and without the fused multiply-adds called in turn in one
// process (30 rounds, medians), bench S's SwiGLU forward took 0.72 of the time, its backward
// 0.92, the attention forward 0.93 and backward 0.97, the fused loss 0.99.
static inline float ct_fast_expf(float x) {
    // (ternaries, not fminf: they vectorise.) Written so that NaN fails the test and is clamped
    // too: a NaN reaching (int32_t)n below would be undefined behaviour (and so would shifting
    // the negative result left); the last line puts the NaN back.
    float xc = x >= -87.3f ? x : -87.3f;
    xc = xc > 88.3f ? 88.3f : xc;
    // round to nearest by adding 1.5 * 2^23 (floorf would block vectorisation in GCC 12)
    float n = CT_FMA(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
    float r = CT_FMA(-n, 0.693359375f, xc);
    r = CT_FMA(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = CT_FMA(p, r, 1.3981999507e-3f);
    p = CT_FMA(p, r, 8.3334519073e-3f);
    p = CT_FMA(p, r, 4.1665795894e-2f);
    p = CT_FMA(p, r, 1.6666665459e-1f);
    p = CT_FMA(p, r, 5.0000001201e-1f);
    p = CT_FMA(p * r, r, r) + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    y = x < -87.3f ? 0.0f : y;
    y = x > 88.3f ? INFINITY : y;
    return x != x ? x : y;
}

// 1 / (1 + exp(-x))
static inline float ct_fast_sigmoidf(float x) { return 1.0f / (1.0f + ct_fast_expf(-x)); }

// ---- 8 lanes at once. GCC vectorises the selects above only where the ISA has masked moves
// (AVX-512); on AVX2 it keeps them as branches and the loops that call ct_fast_expf run scalar.
// These are the same operations in the same order on GCC vectors (one AVX register with
// -march=native, two SSE halves elsewhere), so every lane has the scalar function's bits and a
// loop may mix them (vector body, scalar tail).
// (-Wpsabi, off for the rest of every file that includes this: without AVX, GCC notes that
// 32-byte vectors are passed differently; these functions are static inline and never cross an
// ABI boundary.)
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float ct_v8f __attribute__((vector_size(32)));
typedef int32_t ct_v8i __attribute__((vector_size(32)));

static inline ct_v8f ct_v8f_load(const float *p) {  // any alignment
    ct_v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void ct_v8f_store(float *p, ct_v8f v) { memcpy(p, &v, sizeof v); }
static inline ct_v8f ct_v8f_splat(float x) { return (ct_v8f){x, x, x, x, x, x, x, x}; }
// m ? a : b, lane by lane (m from a vector comparison: all ones or all zeros)
static inline ct_v8f ct_v8f_select(ct_v8i m, ct_v8f a, ct_v8f b) {
    return (ct_v8f)(((ct_v8i)a & m) | ((ct_v8i)b & ~m));
}
// a * b + c lane by lane, as CT_FMA
static inline ct_v8f ct_v8f_fma(ct_v8f a, ct_v8f b, ct_v8f c) {
#if defined(__FMA__)
    return (ct_v8f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}
// Lanes added in a fixed order: ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)).
static inline float ct_v8f_sum(ct_v8f v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// ct_fast_expf's operations on a vector of lanes, for each width (8 lanes below, 16 where the ISA
// has them): one body, so the widths cannot drift apart and every lane keeps the scalar's bits.
#define CT_DEFINE_FAST_EXPF(name, vf, vi, splat, select, fma)                       \
    /* the polynomial and the exponent: every lane of xc inside [-87.3, 88.3] */  \
    static inline vf name##_in_range(vf xc) {                                     \
        vf n = fma(xc, splat(1.44269504088896341f), splat(12582912.0f)) - 12582912.0f; \
        vf r = fma(-n, splat(0.693359375f), xc);                                  \
        r = fma(n, splat(2.12194440e-4f), r);                                     \
        vf p = splat(1.9875691500e-4f);                                           \
        p = fma(p, r, splat(1.3981999507e-3f));                                   \
        p = fma(p, r, splat(8.3334519073e-3f));                                   \
        p = fma(p, r, splat(4.1665795894e-2f));                                   \
        p = fma(p, r, splat(1.6666665459e-1f));                                   \
        p = fma(p, r, splat(5.0000001201e-1f));                                   \
        p = fma(p * r, r, r) + 1.0f;                                              \
        vi bits = (__builtin_convertvector(n, vi) + 127) << 23;                   \
        return p * (vf)bits;                                                      \
    }                                                                             \
    static inline vf name(vf x) {                                                 \
        const vf lo = splat(-87.3f), hi = splat(88.3f);                           \
        vf xc = select(x >= lo, x, lo); /* NaN lanes clamped too (ct_fast_expf) */ \
        xc = select(xc > hi, hi, xc);                                             \
        vf y = name##_in_range(xc);                                               \
        y = select(x < lo, splat(0.0f), y);                                       \
        y = select(x > hi, splat(INFINITY), y);                                   \
        return select(x != x, x, y);                                              \
    }

CT_DEFINE_FAST_EXPF(ct_fast_expf_v8, ct_v8f, ct_v8i, ct_v8f_splat, ct_v8f_select, ct_v8f_fma)

static inline ct_v8f ct_fast_sigmoidf_v8(ct_v8f x) { return 1.0f / (1.0f + ct_fast_expf_v8(-x)); }

// ---- 16 lanes at once: the same operations again, for loops that take 16 floats a step where
// the ISA has 16-lane registers (CT_V16: AVX-512; one register instead of two of 8, about half
// the instructions per float). Every lane still has the scalar function's bits.
#if defined(__AVX512F__)
#include <immintrin.h>
#define CT_V16 1
typedef float ct_v16f __attribute__((vector_size(64)));
typedef int32_t ct_v16i __attribute__((vector_size(64)));

static inline ct_v16f ct_v16f_load(const float *p) {
    ct_v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void ct_v16f_store(float *p, ct_v16f v) { memcpy(p, &v, sizeof v); }
static inline ct_v16f ct_v16f_splat(float x) { return (ct_v16f){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
static inline ct_v16f ct_v16f_select(ct_v16i m, ct_v16f a, ct_v16f b) {
    return (ct_v16f)(((ct_v16i)a & m) | ((ct_v16i)b & ~m));
}
static inline ct_v16f ct_v16f_fma(ct_v16f a, ct_v16f b, ct_v16f c) {  // (AVX-512 has FMA)
    return (ct_v16f)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}
// lanes 0-7 and 8-15 as two 8-lane vectors
static inline ct_v8f ct_v16f_lo(ct_v16f v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
static inline ct_v8f ct_v16f_hi(ct_v16f v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }

CT_DEFINE_FAST_EXPF(ct_fast_expf_v16, ct_v16f, ct_v16i, ct_v16f_splat, ct_v16f_select, ct_v16f_fma)

// ct_fast_expf_v16 for arguments that almost always lie wholly inside [-87.3, 88.3] (a softmax
// row whose scores span less than 87, a sigmoid's activations): for such a vector the clamps and
// selects are identities (GCC spends about three instructions on each), so one compare decides
// and the polynomial runs alone; any other vector (a masked -inf, a NaN, a huge span) takes
// ct_fast_expf_v16 whole. The same bits in every lane either way.
static inline ct_v16f ct_fast_expf_v16_quick(ct_v16f x) {
    __mmask16 out = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-87.3f), _CMP_NGE_UQ) |  // below, or NaN
                    _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(88.3f), _CMP_GT_OQ);
    if (__builtin_expect(out != 0, 0)) return ct_fast_expf_v16(x);
    return ct_fast_expf_v16_in_range(x);
}

static inline ct_v16f ct_fast_sigmoidf_v16(ct_v16f x) { return 1.0f / (1.0f + ct_fast_expf_v16_quick(-x)); }
#endif
#endif
