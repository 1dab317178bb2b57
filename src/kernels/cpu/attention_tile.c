// The attention's tile products (attention_tile.h). A strip of MR rows of C by NV vectors (64
// columns on AVX-512: 4 rows x 4 vectors = 16 accumulators, every k 4 loads of B and 4
// broadcasts of A for 16 FMAs) sums all of K in registers; the strips walk down C a column
// block at a time, so that block of B (K x 64 floats: 16 KiB at K = 64) stays in L1 while A
// streams past. Unlike ct_gemm, nothing is packed here: the attention packs what it multiplies
// once per work item (and B's rows are contiguous, so they spread over L1's sets).
#include "kernels/cpu/attention_tile.h"

#include "core/error.h"

#if CT_VL == 16
#define MR 4  // 16 accumulators + 4 B vectors + a broadcast: 21 of 32 registers
#else
#define MR 2  // 8 + 4 + 1 of 16
#endif
#define NV 4
#define NW (NV * CT_VL)

static inline __attribute__((always_inline)) void strip(const ct_att_mode mode, const int mr, const int nv, long K,
                                                        const float *restrict a, long rs_a, long cs_a,
                                                        const float *restrict b, long ldb, float *restrict c,
                                                        long ldc, float alpha, const float *restrict vec) {
    vf acc[MR][NV];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[r][v] = ct_att_chain_start(mode, c + r * ldc + v * CT_VL, mode == CT_ATT_RESCALE ? vec[r] : 0.0f);
#pragma GCC unroll 2
    for (long k = 0; k < K; k++) {
        vf bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) bv[v] = VLOAD(b + k * ldb + v * CT_VL);
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            vf ar = VSET1(a[r * rs_a + k * cs_a]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[r][v] = VFMA(ar, bv[v], acc[r][v]);
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
static inline __attribute__((always_inline)) void strip_any(const ct_att_mode mode, int mr, int nv, long K,
                                                            const float *a, long rs_a, long cs_a, const float *b,
                                                            long ldb, float *c, long ldc, float alpha,
                                                            const float *vec) {
#define CASE(m, n) \
    case (m) * 8 + (n): strip(mode, m, n, K, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
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

static inline __attribute__((always_inline)) void mm(const ct_att_mode mode, long M, long N, long K, const float *a,
                                                     long rs_a, long cs_a, const float *b, long ldb, float *c,
                                                     long ldc, float alpha, const float *vec) {
    for (long j = 0; j < N; j += NW) {
        int nv = (int)((N - j < NW ? N - j : NW) / CT_VL);
        for (long i = 0; i < M; i += MR)
            strip_any(mode, (int)(M - i < MR ? M - i : MR), nv, K, a + i * rs_a, rs_a, cs_a, b + j, ldb,
                      c + i * ldc + j, ldc, alpha, !vec ? NULL : mode == CT_ATT_DS ? vec + j : vec + i);
    }
}

void ct_att_mm(ct_att_mode mode, long M, long N, long K, const float *a, long rs_a, long cs_a, const float *b,
               long ldb, float *c, long ldc, float alpha, const float *vec) {
    if (N % CT_ATT_PAD) ct_fatal("ct_att_mm", "N = %ld is not a multiple of %d", N, CT_ATT_PAD);
    switch (mode) {
    case CT_ATT_STORE: mm(CT_ATT_STORE, M, N, K, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    case CT_ATT_ADD: mm(CT_ATT_ADD, M, N, K, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    case CT_ATT_RESCALE: mm(CT_ATT_RESCALE, M, N, K, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    case CT_ATT_DS: mm(CT_ATT_DS, M, N, K, a, rs_a, cs_a, b, ldb, c, ldc, alpha, vec); break;
    }
}
