// 16 x 16 transposes of 32-bit words (a word: one bf16 pair) in AVX-512 registers (internal to
// src/kernels/cpu): the bf16 gemm's packing of transposed operands (gemm_bf16_avx512.c) and the
// bf16 attention's pair layouts (attention_bf16_pack.c). Exact: words are moved, not computed.
#ifndef CT_CPU_TRANSPOSE_WORDS_H
#define CT_CPU_TRANSPOSE_WORDS_H
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#include <stdint.h>

// r[j] lane k becomes r[k] lane j: unpacks of 32 and 64 bits within 128-bit lanes, then a 4 x 4
// transpose of the 128-bit lanes.
static inline __attribute__((always_inline)) void ct_transpose16_words(__m512i r[16]) {
    __m512i t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {  // r[4i + j]: rows 4i..4i+3 of word 4L + j in 128-bit lane L
        r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {  // 4 x 4 transpose of 128-bit lanes
        __m512i a = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x44), b = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xEE);
        __m512i c = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x44), d = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xEE);
        t[j] = _mm512_shuffle_i32x4(a, c, 0x88);
        t[4 + j] = _mm512_shuffle_i32x4(a, c, 0xDD);
        t[8 + j] = _mm512_shuffle_i32x4(b, d, 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(b, d, 0xDD);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

// out[q] lane r = the q-th word (bf16 pair) of row r, for rows src + r ld, r < nrows (rows past
// it zero), words 0..15 of each row; only the first n bf16 of a row are read (the rest zero).
static inline __attribute__((always_inline)) void ct_load_tr16_words(__m512i out[16], const uint16_t *src, long ld,
                                                                     long nrows, long n) {
    const __mmask32 m = n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        out[i] = i < nrows ? _mm512_maskz_loadu_epi16(m, src + i * ld) : _mm512_setzero_si512();
    ct_transpose16_words(out);
}
#endif
#endif
