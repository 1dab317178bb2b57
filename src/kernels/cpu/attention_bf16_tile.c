// The attention's bf16 tile products (attention_tile.h: ct_att_mm_bf16): the register strips of
// attention_tile.c with k taken in pairs. Each step adds, per lane, the two products of one pair
// -- one VDPBF16PS where the set has AVX-512 BF16 (dp_pair), elsewhere the same two roundings
// written out -- so the rest of the bf16 attention is one code path on every set. A thread that
// holds AMX tiles hands the products whose A is in rows of pairs, 16 rows and 16 pairs or more,
// to attention_bf16_amx.c, which sums what is left of them here.
#include "core/error.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/gemm_bf16_amx.h"

#if CT_VL == 16
#define MR 4  // 16 accumulators + 4 B vectors + the broadcast's two halves: 22 of 32 registers
#else
#define MR 2  // 8 + 4 + 2 of 16 (the B vectors' halves are made per use)
#endif
#define NV 4
#define NW (NV * CT_VL)

// CT_VL 32-bit words: one bf16 pair per lane (low half element k, high half k + 1).
typedef int32_t vw __attribute__((vector_size(CT_VL * 4)));

// Loads through memcpy: a "rows" operand is written as uint16_t and read here as words.
static inline vw load_words(const uint32_t *p) {
    vw v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline vw splat_word(const uint32_t *p) {
    int32_t x;
    memcpy(&x, p, sizeof x);
    return (vw){0} + x;
}

// acc + a.hi b.hi + a.lo b.lo per lane, as VDPBF16PS computes it: the high pair's product added
// first, then the low one's, each addition rounded to nearest even in fp32 (Intel SDM,
// VDPBF16PS). A product of two bf16 values has at most 16 significant bits, exact in fp32, so
// each addition is one FMA of the widened halves (a bf16 is the top half of its fp32: the high
// half masked, the low half shifted up). One difference: VDPBF16PS treats denormal inputs as 0 and
// flushes denormal results; the FMAs keep them (the attention's operands and sums are far above
// 2^-126, and P rounds a value below it to a denormal bf16 only where exp(S - m) < 2^-126).
static inline __attribute__((always_inline)) vf dp_pair(vf acc, vw a, vw b) {
#if defined(__AVX512BF16__) && CT_VL == 16
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
#else
    const vw hi = (vw){0} + (int32_t)0xffff0000u;
    acc = VFMA((vf)(a & hi), (vf)(b & hi), acc);
    return VFMA((vf)(a << 16), (vf)(b << 16), acc);
#endif
}

const char *ct_attention_bf16_path(void) {
    if (ct_bf16_amx_usable()) return "amx";
#if defined(__AVX512BF16__) && CT_VL == 16
    return "vdpbf16ps";
#else
    return "fma";
#endif
}

static inline __attribute__((always_inline)) void strip(const ct_att_mode mode, const int mr, const int nv, long Kp,
                                                        const uint32_t *restrict a, long rs_a, long cs_a,
                                                        const uint32_t *restrict b, long ldb, float *restrict c,
                                                        long ldc, float alpha, const float *restrict vec) {
    vf acc[MR][NV];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[r][v] = ct_att_chain_start(mode, c + r * ldc + v * CT_VL, mode == CT_ATT_RESCALE ? vec[r] : 0.0f);
#pragma GCC unroll 2
    for (long p = 0; p < Kp; p++) {
        vw bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) bv[v] = load_words(b + p * ldb + v * CT_VL);
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            vw ar = splat_word(a + r * rs_a + p * cs_a);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[r][v] = dp_pair(acc[r][v], ar, bv[v]);
        }
    }
    vf va = VSET1(alpha);
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            ct_att_chain_end(mode, c + r * ldc + v * CT_VL, acc[r][v], va, mode == CT_ATT_DS ? vec + v * CT_VL : NULL);
}

// One strip with mr and nv made constants, so that its accumulators are registers.
static inline __attribute__((always_inline)) void strip_any(const ct_att_mode mode, int mr, int nv, long Kp,
                                                            const uint32_t *a, long rs_a, long cs_a, const uint32_t *b,
                                                            long ldb, float *c, long ldc, float alpha,
                                                            const float *vec) {
#define CASE(m, n) \
    case (m) * 8 + (n): strip(mode, m, n, Kp, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    switch (mr * 8 + nv) {
        CASE(1, 1) CASE(1, 2) CASE(1, 3) CASE(1, 4)
        CASE(2, 1) CASE(2, 2) CASE(2, 3) CASE(2, 4)
#if MR == 4
        CASE(3, 1) CASE(3, 2) CASE(3, 3) CASE(3, 4)
        CASE(4, 1) CASE(4, 2) CASE(4, 3) CASE(4, 4)
#endif
    }
#undef CASE
}

static inline __attribute__((always_inline)) void mm(const ct_att_mode mode, long M, long N, long Kp,
                                                     const uint32_t *a, long rs_a, long cs_a, const uint32_t *b,
                                                     long ldb, float *c, long ldc, float alpha, const float *vec) {
    for (long j = 0; j < N; j += NW) {
        int nv = (int)((N - j < NW ? N - j : NW) / CT_VL);
        for (long i = 0; i < M; i += MR)
            strip_any(mode, (int)(M - i < MR ? M - i : MR), nv, Kp, a + i * rs_a, rs_a, cs_a, b + j, ldb,
                      c + i * ldc + j, ldc, alpha, !vec ? NULL : mode == CT_ATT_DS ? vec + j : vec + i);
    }
}

void ct_att_mm_bf16(ct_att_mode mode, long M, long N, long Kp, const uint32_t *a, long rs_a, long cs_a,
                    const uint32_t *b, long ldb, float *c, long ldc, float alpha, const float *vec) {
    if (N % CT_ATT_PAD) ct_fatal("ct_att_mm_bf16", "N = %ld is not a multiple of %d", N, CT_ATT_PAD);
    if (cs_a == 1 && M >= 16 && Kp >= 16 && ct_att16_tiles_held()) {  // whole tiles on AMX
        ct_att16_mm_amx(mode, M, N, Kp, a, rs_a, b, ldb, c, ldc, alpha, vec);
        return;
    }
    switch (mode) {
    case CT_ATT_STORE: mm(CT_ATT_STORE, M, N, Kp, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    case CT_ATT_ADD: mm(CT_ATT_ADD, M, N, Kp, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    case CT_ATT_RESCALE: mm(CT_ATT_RESCALE, M, N, Kp, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    case CT_ATT_DS: mm(CT_ATT_DS, M, N, Kp, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    }
}
