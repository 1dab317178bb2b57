// Packing of ct_gemm's operands (gemm_internal.h): a block of B into NR-wide slivers, a block of
// A into MR-high slivers, each laid out in the order the micro-kernel reads them, with loads
// grouped into whole vectors (and 8 x 8 transposes in registers) where the ISA has them.
#include "kernels/cpu/gemm_internal.h"

// Rows this far ahead are prefetched while a block is packed: its rows are a leading dimension
// apart, usually each in its own page, where the hardware prefetchers do not follow.
#define CT_PREFETCH_ROWS 8

#ifndef CT_PACK_TA_GROUP  // rows of A^T packed per visit of a sliver (AVX-512; -D for bench/gemm_variants)
#define CT_PACK_TA_GROUP 8
#endif

NO_LIBCALLS void ct_gemm_pack_b(float *restrict dst, const gemm_args *g, long k0, long kc, long n0, long nc) {
    const long ldb = g->ldb, full = nc / CT_NR * CT_NR;
    if (!g->tb) {  // op(B)[k][n] = B[k ldb + n]: row k of the panel is contiguous in B, read once
        for (long k = 0; k < kc; k++) {
            const float *s = g->B + (k0 + k) * ldb + n0;
            if (k + CT_PREFETCH_ROWS < kc)
                for (long j = 0; j < nc; j += 16) __builtin_prefetch(s + CT_PREFETCH_ROWS * ldb + j);
            float *d = dst + k * CT_NR;
            for (long j = 0; j < full; j += CT_NR, d += kc * CT_NR) {
#pragma GCC unroll 4
                for (int v = 0; v < CT_NV; v++) VSTORE(d + v * CT_VL, VLOAD(s + j + v * CT_VL));
            }
            if (full < nc) {
                long j = 0;
                for (; full + j < nc; j++) d[j] = s[full + j];
                for (; j < CT_NR; j++) d[j] = 0.0f;
            }
        }
        return;
    }
    // op(B)[k][n] = B[n ldb + k]: each column of a sliver is a contiguous row of B
    for (long n = 0; n < nc; n += CT_NR) {
        const float *src = g->B + (n0 + n) * ldb + k0;
        float *d = dst + n * kc;
        long nr = ct_min_l(CT_NR, nc - n);
#if defined(__AVX2__)
        if (nr == CT_NR) {  // 8 x 8 blocks transposed in registers
            long k = 0;
            for (; k + 8 <= kc; k += 8)
                for (long j = 0; j < CT_NR; j += 8) ct_transpose8(d + k * CT_NR + j, CT_NR, src + j * ldb + k, ldb);
            for (; k < kc; k++)
                for (long j = 0; j < CT_NR; j++) d[k * CT_NR + j] = src[j * ldb + k];
            continue;
        }
#endif
        long j = 0;
        for (; j < nr; j++) {
            const float *s = src + j * ldb;
            for (long k = 0; k < kc; k++) d[k * CT_NR + j] = s[k];
        }
        for (; j < CT_NR; j++)
            for (long k = 0; k < kc; k++) d[k * CT_NR + j] = 0.0f;
    }
}

// The A block in MR-high slivers (gemm_internal.h). With AVX2 (MR 6) a whole sliver's k-row is
// stored as 8 floats, the 2 past it overwritten by the next k-row: hence CT_APACK_SLACK. (MR 6 on
// AVX-512 too: the same 256-bit paths.)
NO_LIBCALLS void ct_gemm_pack_a(float *restrict dst, const gemm_args *g, long m0, long mc, long k0, long kc) {
    if (g->ta) {  // op(A)[m][k] = A[k lda + m]: row k of the block is contiguous in A, read once
        long full = mc / CT_MR * CT_MR;
        long k = 0;
#if defined(__AVX512VL__) && CT_MR == 6 && CT_PACK_TA_GROUP > 1
        // CT_PACK_TA_GROUP rows of A at a time: each sliver gets that many k-rows (48 floats at 8)
        // in one visit, with masked 6-float loads and stores, instead of one 24-byte piece per visit
        // of every sliver. Measured on a 2-core Xeon with AMX (bench/gemm_variants, two
        // threads, two runs of 15 rounds): the weight gradients' and the loss's A^T B products
        // 0.97-1.0 of the time with 8 rows, 4 and 16 no better.
        for (; k + CT_PACK_TA_GROUP <= kc; k += CT_PACK_TA_GROUP) {
            const float *s = g->A + (k0 + k) * g->lda + m0;
            if (k + CT_PACK_TA_GROUP + CT_PREFETCH_ROWS <= kc)
                for (long q = 0; q < CT_PACK_TA_GROUP; q++)
                    for (long i = 0; i < mc; i += 16) __builtin_prefetch(s + (CT_PREFETCH_ROWS + q) * g->lda + i);
            float *d = dst + k * CT_MR;
            long i = 0;
            for (; i < full; i += CT_MR, d += kc * CT_MR)
#pragma GCC unroll 8
                for (long q = 0; q < CT_PACK_TA_GROUP; q++)
                    _mm256_mask_storeu_ps(d + q * CT_MR, 0x3f, _mm256_maskz_loadu_ps(0x3f, s + q * g->lda + i));
            if (full < mc)
                for (long q = 0; q < CT_PACK_TA_GROUP; q++) {
                    long r = 0;
                    for (; full + r < mc; r++) d[q * CT_MR + r] = s[q * g->lda + full + r];
                    for (; r < CT_MR; r++) d[q * CT_MR + r] = 0.0f;
                }
        }
#endif
        for (; k < kc; k++) {
            const float *s = g->A + (k0 + k) * g->lda + m0;
            if (k + CT_PREFETCH_ROWS < kc)
                for (long i = 0; i < mc; i += 16) __builtin_prefetch(s + CT_PREFETCH_ROWS * g->lda + i);
            float *d = dst + k * CT_MR;
            long i = 0;
#if defined(__AVX2__) && CT_MR == 6
            // 8 floats in and out: the 2 extra land in this sliver's next k-row, written after
            // this one (so not for the last k), and are read from within the block (i + 8 <= mc)
            if (k + 1 < kc)
                for (; i + 8 <= mc && i < full; i += CT_MR, d += kc * CT_MR) _mm256_storeu_ps(d, _mm256_loadu_ps(s + i));
#endif
            for (; i < full; i += CT_MR, d += kc * CT_MR)
#pragma GCC unroll 16
                for (int r = 0; r < CT_MR; r++) d[r] = s[i + r];
            if (full < mc) {
                long r = 0;
                for (; full + r < mc; r++) d[r] = s[full + r];
                for (; r < CT_MR; r++) d[r] = 0.0f;
            }
        }
    } else {  // op(A)[m][k] = A[m lda + k]: MR row streams per sliver
        for (long i = 0; i < mc; i += CT_MR) {
            const float *src = g->A + (m0 + i) * g->lda + k0;
            float *d = dst + i * kc;
            long mr = ct_min_l(CT_MR, mc - i);
            if (mr == CT_MR) {
                const float *s[CT_MR];
                for (int r = 0; r < CT_MR; r++) s[r] = src + r * g->lda;
                long k = 0;
#if defined(__AVX2__) && CT_MR == 6
                // 6 rows x 8 k transposed in registers into 8 k-rows of 6 (stored as 8, in order)
                const __m256 z = _mm256_setzero_ps();
                for (; k + 8 <= kc; k += 8)
                    ct_transpose8_regs(d + k * CT_MR, CT_MR, _mm256_loadu_ps(s[0] + k), _mm256_loadu_ps(s[1] + k),
                                       _mm256_loadu_ps(s[2] + k), _mm256_loadu_ps(s[3] + k), _mm256_loadu_ps(s[4] + k),
                                       _mm256_loadu_ps(s[5] + k), z, z);
#endif
                for (; k < kc; k++)
#pragma GCC unroll 16
                    for (int r = 0; r < CT_MR; r++) d[k * CT_MR + r] = s[r][k];
            } else {
                for (long k = 0; k < kc; k++) {
                    long r = 0;
                    for (; r < mr; r++) d[k * CT_MR + r] = src[r * g->lda + k];
                    for (; r < CT_MR; r++) d[k * CT_MR + r] = 0.0f;
                }
            }
        }
    }
}
