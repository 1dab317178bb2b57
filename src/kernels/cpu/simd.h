// The vector type of the CPU kernels that write intrinsics (internal to src/kernels/cpu): one
// register of floats per ISA -- 16 lanes on AVX-512, 8 on AVX2 + FMA, 4 portable (GCC vector
// extension, plain multiply-add) elsewhere -- and the few operations the micro-kernels use.
// VFMA is a fused multiply-add where the ISA has one: the build's -std=c11 keeps GCC from
// contracting a * b + c on its own, so kernels that want FMAs say so here.
#ifndef CT_CPU_SIMD_H
#define CT_CPU_SIMD_H
#include <string.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

// GCC turns short copy loops (packing, partial tiles, rows of a few hundred bytes) into calls of
// memcpy / memmove, each a call for a few floats: NO_LIBCALLS keeps them as moves.
#define NO_LIBCALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))

#if defined(__AVX512F__)
#define CT_VL 16
typedef __m512 vf;
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VSET1(x) _mm512_set1_ps(x)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VZERO() _mm512_setzero_ps()
#define VSTREAM(p, v) _mm512_stream_ps(p, v)  // p 64-byte aligned; not kept in cache
#define VSTREAM_FENCE() _mm_sfence()           // orders the streamed stores before later ones
#elif defined(__AVX2__) && defined(__FMA__)
#define CT_VL 8
typedef __m256 vf;
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSET1(x) _mm256_set1_ps(x)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VZERO() _mm256_setzero_ps()
#define VSTREAM(p, v) _mm256_stream_ps(p, v)  // p 32-byte aligned; not kept in cache
#define VSTREAM_FENCE() _mm_sfence()
#else  // portable: GCC vector extension, plain multiply-add
#define CT_VL 4
typedef float vf __attribute__((vector_size(16)));
static inline vf vload_(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vstore_(float *p, vf v) { memcpy(p, &v, sizeof v); }
#define VLOAD(p) vload_(p)
#define VSTORE(p, v) vstore_(p, v)
#define VSET1(x) ((vf){0} + (x))
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VMUL(a, b) ((a) * (b))
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VZERO() ((vf){0})
#define VSTREAM(p, v) vstore_(p, v)
#define VSTREAM_FENCE() ((void)0)
#endif

#if defined(__AVX2__)
// dst[i][j] = row j lane i for eight rows r0..r7 (row stride ldd of dst). The rows of dst are
// stored in order, so a dst row stride below 8 (pack_a's 6) leaves each row's last lanes to be
// overwritten by the next.
static inline void ct_transpose8_regs(float *dst, long ldd, __m256 r0, __m256 r1, __m256 r2, __m256 r3, __m256 r4,
                                      __m256 r5, __m256 r6, __m256 r7) {
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// dst[i][j] = src[j][i] for an 8 x 8 block (row strides ldd, lds).
static inline void ct_transpose8(float *dst, long ldd, const float *src, long lds) {
    ct_transpose8_regs(dst, ldd, _mm256_loadu_ps(src), _mm256_loadu_ps(src + lds), _mm256_loadu_ps(src + 2 * lds),
                       _mm256_loadu_ps(src + 3 * lds), _mm256_loadu_ps(src + 4 * lds), _mm256_loadu_ps(src + 5 * lds),
                       _mm256_loadu_ps(src + 6 * lds), _mm256_loadu_ps(src + 7 * lds));
}
#endif

#endif
