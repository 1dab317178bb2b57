// The attention's products of one tile pair, over the part of it on the diagonal that is seen.
//
// When a tile's queries and keys are both runs of consecutive positions (always without
// explicit positions, usually with them), query i sees key j iff j - i <= delta, delta the
// difference of the runs' starts: the visible part is a band, and blocks of 16 keys / 16
// queries wholly outside it are skipped. Skipped scores are set to -inf with the rest of the
// mask (so their P and dS are 0), and a skipped product term would have been 0 times a finite
// value, so skipping changes no sum. Without runs (diag.on 0) everything is computed and masked.
#include <limits.h>

#include "core/mathutil.h"
#include "kernels/cpu/attention_internal.h"

// Start of a run of n consecutive positions at rows r0.., or LONG_MIN.
static long run_start(const int32_t *pos, long r0, long n) {
    if (!pos) return r0;
    for (long i = 1; i < n; i++)
        if (pos[r0 + i] != pos[r0] + i) return LONG_MIN;
    return pos[r0];
}

diag_band ct_att_band_of(const int32_t *q_pos, long i0, long nq, const int32_t *k_pos, long j0, long nk) {
    long qs = run_start(q_pos, i0, nq), ks = run_start(k_pos, j0, nk);
    diag_band d = {qs != LONG_MIN && ks != LONG_MIN, 0};
    if (d.on) d.delta = qs - ks;
    return d;
}

// S^T (nk, BQ) = alpha K Q^T over the band (K (nk, HS) row stride ldk, qt (HS, BQ)).
void ct_att_scores_t(float *st, const float *K, long ldk, const float *qt, long nk, long HS, float alpha,
                     diag_band d) {
    for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
        long c0 = band_first_query(d, m0);
        if (c0 < CT_ATT_BQ)
            ct_att_mm(CT_ATT_STORE, ct_min_l(CT_ATT_SUB, nk - m0), CT_ATT_BQ - c0, HS, K + m0 * ldk, ldk, 1, qt + c0,
                      CT_ATT_BQ, st + m0 * CT_ATT_BQ + c0, CT_ATT_BQ, alpha, NULL);
    }
}

// C (nq, HP) (mode) P B over the band: P read down the columns of pt (nk, BQ), B (nk, HP).
void ct_att_queries_by_keys(ct_att_mode mode, float *c, const float *pt, const float *b, long nq, long nk, long HP,
                            const float *rowv, diag_band d) {
    for (long r0 = 0; r0 < nq; r0 += CT_ATT_SUB)
        ct_att_mm(mode, ct_min_l(CT_ATT_SUB, nq - r0), HP, band_keys(d, r0, nk), pt + r0, 1, CT_ATT_BQ, b, HP,
                  c + r0 * HP, HP, 1.0f, rowv ? rowv + r0 : NULL);
}

// C (nk, HP) = P^T B over the band: rows of pt (nk, BQ) against B (nq, HP), query by query.
void ct_att_keys_by_queries(float *c, const float *pt, const float *b, long nq, long nk, long HP, diag_band d) {
    for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
        long c0 = band_first_query(d, m0);
        ct_att_mm(CT_ATT_STORE, ct_min_l(CT_ATT_SUB, nk - m0), HP, nq > c0 ? nq - c0 : 0, pt + m0 * CT_ATT_BQ + c0,
                  CT_ATT_BQ, 1, b + c0 * HP, HP, c + m0 * HP, HP, 1.0f, NULL);
    }
}
