// The bf16 attention's products of one tile pair over its diagonal band (attention_band.c says
// which blocks are skipped and why that changes no sum), on operands in bf16 pairs
// (attention_internal.h). A band whose key count is odd is taken one key longer: that key is
// masked for the block's queries (P = dS = 0 there) or is the zero padding past the tile.
#include "core/mathutil.h"
#include "kernels/cpu/attention_internal.h"

static inline long pairs(long n) { return (n + 1) / 2; }

// S^T (nk, BQ) = alpha K Q^T: K rows (head dims in pairs) against Q^T in pairs.
void ct_att16_scores_t(float *st, const uint16_t *kr, const uint32_t *qt2, long nk, long HP, float alpha,
                       diag_band d) {
    const uint32_t *k2 = (const uint32_t *)kr;  // (nk, HP / 2) words: adjacent head dims
    for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
        long c0 = band_first_query(d, m0);
        if (c0 < CT_ATT_BQ)
            ct_att_mm_bf16(CT_ATT_STORE, ct_min_l(CT_ATT_SUB, nk - m0), CT_ATT_BQ - c0, HP / 2, k2 + m0 * HP / 2,
                           HP / 2, 1, qt2 + c0, CT_ATT_BQ, st + m0 * CT_ATT_BQ + c0, CT_ATT_BQ, alpha, NULL);
    }
}

// C (nq, HP) (mode) P B: P read down the key pairs of p2 (a query per column), B in key pairs.
void ct_att16_queries_by_keys(ct_att_mode mode, float *c, const uint32_t *p2, const uint32_t *b2, long nq, long nk,
                              long HP, const float *rowv, diag_band d) {
    for (long r0 = 0; r0 < nq; r0 += CT_ATT_SUB)
        ct_att_mm_bf16(mode, ct_min_l(CT_ATT_SUB, nq - r0), HP, pairs(band_keys(d, r0, nk)), p2 + r0, 1, CT_ATT_BQ,
                       b2, HP, c + r0 * HP, HP, 1.0f, rowv ? rowv + r0 : NULL);
}

// Whole blocks of 16 query rows over all of the tile's key pairs, the band's zeros included: tile
// multiplies sum a block of pairs in their own order, so a sum cut at the band's last key, or a
// row summed by the register kernel for being past the last whole block, would round otherwise --
// and which queries share a tile, and so their band and block, differs between one process and a
// context-parallel chunk of the same queries, whose outputs and dQ must be the same bits. (Rows
// past nq are in the tiles, pq2 and C both BQ rows: their sums are made and never read.)
void ct_att16_queries_by_keys_rows(ct_att_mode mode, float *c, const uint32_t *pq2, const uint32_t *b2, long nq,
                                   long nk, long HP, const float *rowv) {
    for (long r0 = 0; r0 < nq; r0 += CT_ATT_SUB)
        ct_att_mm_bf16(mode, CT_ATT_SUB, HP, pairs(nk), pq2 + r0 * CT_ATT_BK / 2, CT_ATT_BK / 2, 1, b2, HP,
                       c + r0 * HP, HP, 1.0f, rowv ? rowv + r0 : NULL);
}

// C (nk, HP) = P^T B: rows of pr (adjacent queries paired) against B in query pairs.
void ct_att16_keys_by_queries(float *c, const uint16_t *pr, const uint32_t *b2, long nq, long nk, long HP,
                              diag_band d) {
    const uint32_t *p2 = (const uint32_t *)pr;  // (nk, BQ / 2) words
    for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
        long c0 = band_first_query(d, m0);  // even: a multiple of SUB
        ct_att_mm_bf16(CT_ATT_STORE, ct_min_l(CT_ATT_SUB, nk - m0), HP, nq > c0 ? pairs(nq - c0) : 0,
                       p2 + (m0 * CT_ATT_BQ + c0) / 2, CT_ATT_BQ / 2, 1, b2 + c0 / 2 * HP, HP, c + m0 * HP, HP, 1.0f,
                       NULL);
    }
}

// dS^T = alpha P^T * (V dO^T - D) over the band; columns before a block's first query hold P = 0
// and so dS = 0 already.
void ct_att16_ds_t(float *pt, const uint16_t *vr, const uint32_t *dot2, long nk, long HP, float alpha, const float *d,
                   diag_band band) {
    const uint32_t *v2 = (const uint32_t *)vr;  // (nk, HP / 2) words
    for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
        long c0 = band_first_query(band, m0);
        if (c0 < CT_ATT_BQ)
            ct_att_mm_bf16(CT_ATT_DS, ct_min_l(CT_ATT_SUB, nk - m0), CT_ATT_BQ - c0, HP / 2, v2 + m0 * HP / 2,
                           HP / 2, 1, dot2 + c0, CT_ATT_BQ, pt + m0 * CT_ATT_BQ + c0, CT_ATT_BQ, alpha, d + c0);
    }
}
