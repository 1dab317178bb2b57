// The bf16 attention's operands in the forms its products take (attention_internal.h, "bf16
// forms"): bf16 rows copied and padded, rows interleaved in pairs, a tile transposed in pairs,
// and the fp32 tiles P and dS (and the fp32 dO) rounded to bf16. Each copies or rounds values;
// the rounding is to nearest, ties to even, of finite values (P and dS are finite: a masked
// score's exp is 0; dO is a gradient).
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/transpose_words.h"

// x rounded to the nearest bf16, ties to even (finite x): the carry of the added bias moves into
// the kept half exactly where the dropped half is above a half, or a half with an odd kept half.
static inline uint16_t round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline uint32_t pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

NO_LIBCALLS void ct_att16_pack_rows(uint16_t *restrict dst, long w, const uint16_t *restrict src, long ld, long n,
                                    long HS) {
    for (long i = 0; i < n; i++) {
        const uint16_t *s = src + i * ld;
        uint16_t *o = dst + i * w;
        long d = 0;
        for (; d < HS; d++) o[d] = s[d];
        for (; d < w; d++) o[d] = 0;
    }
}

NO_LIBCALLS void ct_att16_pack_row_pairs(uint32_t *restrict dst, long w, const uint16_t *restrict src, long ld, long n,
                                         long HS) {
    for (long p = 0; p < (n + 1) / 2; p++) {
        const uint16_t *s0 = src + 2 * p * ld, *s1 = s0 + ld;
        uint32_t *o = dst + p * w;
        long d = 0;
        if (2 * p + 1 < n)
            for (; d < HS; d++) o[d] = pair(s0[d], s1[d]);
        else
            for (; d < HS; d++) o[d] = pair(s0[d], 0);
        for (; d < w; d++) o[d] = 0;
    }
}

void ct_att16_round_rows(uint16_t *restrict dst, const float *restrict src, long n) {
    for (long x = 0; x < n * CT_ATT_BQ; x++) dst[x] = round_bf16(src[x]);
}

void ct_att16_round_pairs(uint32_t *restrict dst, const float *restrict src, long n) {
    for (long p = 0; p < n / 2; p++) {
        const float *s0 = src + 2 * p * CT_ATT_BQ, *s1 = s0 + CT_ATT_BQ;
        uint32_t *o = dst + p * CT_ATT_BQ;
        for (long i = 0; i < CT_ATT_BQ; i++) o[i] = pair(round_bf16(s0[i]), round_bf16(s1[i]));
    }
    if (n % 2) {
        const float *s0 = src + (n - 1) * CT_ATT_BQ;
        uint32_t *o = dst + n / 2 * CT_ATT_BQ;
        for (long i = 0; i < CT_ATT_BQ; i++) o[i] = round_bf16(s0[i]);
    }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// Q^T in pairs is the transpose of Q's rows read as words (a word: two adjacent head dims), 16
// rows x 16 words at a time; the load zeroes the half of a word past an odd HS, and rows past n.
void ct_att16_pack_t_pairs(uint32_t *restrict dst, const uint16_t *restrict src, long ld, long n, long HS) {
    const long np = pad_hs(HS) / 2;
    for (long p0 = 0; p0 < np; p0 += 16) {
        const long pn = np - p0 < 16 ? np - p0 : 16;  // pairs here
        for (long i0 = 0; i0 < CT_ATT_BQ; i0 += 16) {
            __m512i r[16];
            ct_load_tr16_words(r, src + i0 * ld + 2 * p0, ld, n - i0, HS - 2 * p0);
            for (long p = 0; p < pn; p++) _mm512_storeu_si512(dst + (p0 + p) * CT_ATT_BQ + i0, r[p]);
        }
    }
}

// round_bf16 of 16 lanes, left in the low (lo) or high half of each word
static inline __m512i round16(const float *x, bool high) {
    __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
    return high ? _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)) : _mm512_srli_epi32(r, 16);
}

void ct_att16_round_pairs_t(uint32_t *restrict dst, const float *restrict src, long n) {
    const long w = CT_ATT_BK / 2, np = (n + 1) / 2;
    for (long p0 = 0; p0 < np; p0 += 16) {
        const long pn = np - p0 < 16 ? np - p0 : 16;
        const __mmask16 keep = (__mmask16)((1u << pn) - 1);
        for (long i0 = 0; i0 < CT_ATT_BQ; i0 += 16) {
            __m512i r[16];
            for (long p = 0; p < 16; p++) {
                const long k = 2 * (p0 + p);
                const float *s0 = src + k * CT_ATT_BQ + i0;
                r[p] = p >= pn  ? _mm512_setzero_si512()
                       : k + 1 < n ? _mm512_or_si512(round16(s0, false), round16(s0 + CT_ATT_BQ, true))
                                   : round16(s0, false);
            }
            ct_transpose16_words(r);
            for (long i = 0; i < 16; i++) _mm512_mask_storeu_epi32(dst + (i0 + i) * w + p0, keep, r[i]);
        }
    }
}
#else
NO_LIBCALLS void ct_att16_pack_t_pairs(uint32_t *restrict dst, const uint16_t *restrict src, long ld, long n,
                                       long HS) {
    const long HP = pad_hs(HS);
    for (long p = 0; p < HP / 2; p++) {
        uint32_t *o = dst + p * CT_ATT_BQ;
        long d = 2 * p;
        for (long i = 0; i < CT_ATT_BQ; i++) {
            const uint16_t *s = src + i * ld;
            o[i] = i >= n || d >= HS ? 0 : pair(s[d], d + 1 < HS ? s[d + 1] : 0);
        }
    }
}

void ct_att16_round_pairs_t(uint32_t *restrict dst, const float *restrict src, long n) {
    const long w = CT_ATT_BK / 2;
    for (long p = 0; p < n / 2; p++) {
        const float *s0 = src + 2 * p * CT_ATT_BQ, *s1 = s0 + CT_ATT_BQ;
        for (long i = 0; i < CT_ATT_BQ; i++) dst[i * w + p] = pair(round_bf16(s0[i]), round_bf16(s1[i]));
    }
    if (n % 2) {
        const float *s0 = src + (n - 1) * CT_ATT_BQ;
        for (long i = 0; i < CT_ATT_BQ; i++) dst[i * w + n / 2] = round_bf16(s0[i]);
    }
}
#endif

void ct_att16_round_in(uint16_t *restrict dst, long w, const float *restrict src, long ld, long n, long HS) {
    for (long i = 0; i < n; i++) {
        long d = 0;
        for (; d < HS; d++) dst[i * w + d] = round_bf16(src[i * ld + d]);
        for (; d < w; d++) dst[i * w + d] = 0;
    }
}

void ct_att16_copy_kv_head(uint16_t *krl, uint32_t *k2l, uint16_t *vrl, uint32_t *v2l, const uint16_t *k, long ldk,
                           const uint16_t *v, long ldv, long c, long NKV, long Tk, long HS) {
    const long HP = pad_hs(HS);
    const uint16_t *kh = k + (c / NKV) * Tk * ldk + c % NKV * HS;  // (Tk, HS), row stride ldk
    const uint16_t *vh = v + (c / NKV) * Tk * ldv + c % NKV * HS;  // (Tk, HS), row stride ldv
    ct_att16_pack_rows(krl, HP, kh, ldk, Tk, HS);
    if (k2l) ct_att16_pack_row_pairs(k2l, HP, kh, ldk, Tk, HS);
    if (vrl) ct_att16_pack_rows(vrl, HP, vh, ldv, Tk, HS);
    if (v2l) ct_att16_pack_row_pairs(v2l, HP, vh, ldv, Tk, HS);
}
