// Causal grouped-query attention in bf16 on the CPU: the backward (kernels.h:
// ct_attention_backward_bf16). The fp32 backward's algorithm (attention_backward.c) -- the same
// work items, the same order of the dK / dV adds (so the same bits on any thread count), the
// same masks and band -- with Q, K, V, O read in bf16, dO rounded to bf16 once per item, and
// the five products of a tile pair taken on bf16 tiles with fp32 sums:
//   S = scale Q K^T;  P = exp(S - lse) (fp32);  dV += bf16(P)^T dO;  dP = dO V^T;
//   dS = scale P * (dP - D) (fp32, from the unrounded P);  dQ += bf16(dS) K;  dK += bf16(dS)^T Q.
// D = rowsum(dO * O) is summed in fp32 from the bf16 dO the products take (so that it is the
// rowsum of P * dP those products make, up to O's rounding), and the dQ, dK, dV sums stay fp32.
#include <math.h>
#include <omp.h>

#include "core/mathutil.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/kernels.h"

static inline float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// What every backward item reads: the call's arguments and its shared header.
typedef struct {
    float *dq, *dk, *dv;
    const float *dout, *lse;
    const uint16_t *out, *q, *k, *v;
    long ldq, ldk, ldv, ldo, Tq, Tk, NH, NKV, HS, HP, group, ntq, ntk, per_kv;
    const int32_t *q_pos, *k_pos;
    const int32_t *q_doc, *k_doc;  // (B, Tq), (B, Tk) or NULL
    att_bwd_header h;
    float scale;
} bwd16_call;

// The item's Q, dO and D: Q^T and dO^T in head-dim pairs, Q and dO in query pairs, D =
// rowsum(bf16(dO) * O) and the lse of each column (+inf past nq or where no key was seen).
static void item_operands(const bwd16_call *x, bwd16_tiles *t, long b, long h, long i0, long nq) {
    const long ldq = x->ldq, ldo = x->ldo, Tq = x->Tq, HS = x->HS, HP = x->HP;
    const uint16_t *Q = x->q + (b * Tq + i0) * ldq + h * HS;    // (nq, HS), row stride ldq
    const uint16_t *O = x->out + (b * Tq + i0) * ldo + h * HS;  // (nq, HS), row stride ldo
    const float *dO = x->dout + (b * Tq + i0) * ldo + h * HS;   // (nq, HS), row stride ldo
    const float *L = x->lse + (b * x->NH + h) * Tq + i0;        // (nq)
    ct_att16_pack_t_pairs(t->qt2, Q, ldq, nq, HS);
    ct_att16_pack_row_pairs(t->q2, HP, Q, ldq, nq, HS);
    ct_att16_round_in(t->dor, HP, dO, ldo, nq, HS);
    ct_att16_pack_t_pairs(t->dot2, t->dor, HP, nq, HS);
    ct_att16_pack_row_pairs(t->do2, HP, t->dor, HP, nq, HS);
    for (long i = 0; i < CT_ATT_BQ; i++) {
        float s = 0.0f;
        if (i < nq)
            for (long d = 0; d < HS; d++) s += from_bf16(t->dor[i * HP + d]) * from_bf16(O[i * ldo + d]);
        t->d[i] = s;
        t->lv[i] = i >= nq || L[i] == -INFINITY ? INFINITY : L[i];
    }
}

// One backward item (batch, query head, query tile), on this thread's tiles: its dQ rows, and its
// shares of dK and dV added in their turn.
static void backward_item(const bwd16_call *x, bwd16_tiles *t, long it) {
    float *dq = x->dq, *dk = x->dk, *dv = x->dv;
    const long ldq = x->ldq, ldk = x->ldk, ldv = x->ldv, Tq = x->Tq, Tk = x->Tk, NKV = x->NKV, HS = x->HS;
    const long HP = x->HP, group = x->group, ntq = x->ntq, ntk = x->ntk, per_kv = x->per_kv;
    const int32_t *q_pos = x->q_pos, *k_pos = x->k_pos;
    const int64_t *qlo = x->h.qlo, *qhi = x->h.qhi, *klo = x->h.klo, *khi = x->h.khi;
    // kv head by kv head; in each, query head by query head, the last query tile first
    long bg = it / per_kv, hl = it % per_kv / ntq, qt = ntq - 1 - it % ntq;
    long b = bg / NKV, g = bg % NKV, h = g * group + hl;
    int64_t *turn = x->h.turns + bg % CT_ATT_RING * ntk;
    long i0 = qt * CT_ATT_BQ, nq = ct_min_l(CT_ATT_BQ, Tq - i0);
    item_operands(x, t, b, h, i0, nq);
    ct_att_query_positions(t->qp, q_pos, i0, nq);
    const int32_t *qdoc = x->q_doc ? x->q_doc + b * Tq : NULL, *kdoc = qdoc ? x->k_doc + b * Tk : NULL;
    int32_t qdlo = 0, qdhi = 0;
    if (qdoc) ct_att_doc_range(qdoc, i0, nq, &qdlo, &qdhi), ct_att_query_docs(t->qd, qdoc, i0, nq);
    memset(t->dqa, 0, sizeof(float) * CT_ATT_BQ * HP);
    for (long kt = 0; kt < ntk; kt++) {
        if (klo[kt] > qhi[qt]) continue;  // no query of the tile sees any key of this tile
        long j0 = kt * CT_ATT_BK, nk = ct_min_l(CT_ATT_BK, Tk - j0);
        const int64_t seq = att_turn_seq(&x->h, bg, group, hl, qt, kt, ntq);
        const int dm = ct_att_doc_relation(kdoc, j0, nk, qdlo, qdhi);
        if (!dm) {  // no document meets: nothing to add, but the turn is taken (the order stays)
            if (!t->dkl) {
                ct_att_wait_turn(turn + kt, seq);
                __atomic_store_n(turn + kt, seq + 1, __ATOMIC_RELEASE);
            }
            continue;
        }
        // the key tile's K rows, K in key pairs and V rows: copied once for the kv head, or here
        const uint16_t *kr = t->krl ? t->krl + j0 * HP : t->kr, *vr = t->vrl ? t->vrl + j0 * HP : t->vr;
        const uint32_t *k2 = t->k2l ? t->k2l + j0 / 2 * HP : t->k2;
        if (!t->krl) {
            const uint16_t *K = x->k + (b * Tk + j0) * ldk + g * HS, *V = x->v + (b * Tk + j0) * ldv + g * HS;
            ct_att16_pack_rows(t->kr, HP, K, ldk, nk, HS);
            ct_att16_pack_row_pairs(t->k2, HP, K, ldk, nk, HS);
            ct_att16_pack_rows(t->vr, HP, V, ldv, nk, HS);
        }
        // P^T = exp(scale K Q^T - lse), 0 where masked or where the query saw no key
        diag_band d = {0, 0};
        if (khi[kt] > qlo[qt]) d = ct_att_band_of(q_pos, i0, nq, k_pos, j0, nk);
        ct_att16_scores_t(t->pt, kr, t->qt2, nk, HP, x->scale, d);
        if (khi[kt] > qlo[qt] || dm == 2) ct_att_mask_tile(t->pt, t->qp, t->qd, k_pos, kdoc, j0, nk, dm);
        ct_att_exp_columns(t->pt, t->lv, nk);
        // dV share (nk, HP) = bf16(P)^T dO
        ct_att16_round_rows(t->pr, t->pt, nk);
        ct_att16_keys_by_queries(t->dvp, t->pr, t->do2, nq, nk, HP, d);
        // dS^T = scale P^T * (V dO^T - D), in place of P^T, then rounded
        ct_att16_ds_t(t->pt, vr, t->dot2, nk, HP, x->scale, t->d, d);
        ct_att16_round_rows(t->pr, t->pt, nk);
        // dQ (nq, HP) += bf16(dS) K (dS in key pairs, or in query rows for the AMX tiles); dK
        // share (nk, HP) = bf16(dS)^T Q
        if (ct_att16_tiles_held()) {
            ct_att16_round_pairs_t(t->ds2, t->pt, nk);
            ct_att16_queries_by_keys_rows(CT_ATT_ADD, t->dqa, t->ds2, k2, nq, nk, HP, NULL);
        } else {
            ct_att16_round_pairs(t->ds2, t->pt, nk);
            ct_att16_queries_by_keys(CT_ATT_ADD, t->dqa, t->ds2, k2, nq, nk, HP, NULL, d);
        }
        ct_att16_keys_by_queries(t->dkp, t->pr, t->q2, nq, nk, HP, d);
        if (t->dkl) {  // this thread runs every item of the kv head, in the adds' order
            ct_att_add_shares(t->dkl + j0 * HP, HP, t->dvl + j0 * HP, HP, t->dkp, t->dvp, nk, HS);
            continue;
        }
        // add the shares in the fixed order (seq, above)
        ct_att_wait_turn(turn + kt, seq);
        ct_att_add_shares(dk + (b * Tk + j0) * ldk + g * HS, ldk, dv + (b * Tk + j0) * ldv + g * HS, ldv, t->dkp,
                          t->dvp, nk, HS);
        __atomic_store_n(turn + kt, seq + 1, __ATOMIC_RELEASE);
    }
    float *dQ = dq + (b * Tq + i0) * ldq + h * HS;  // (nq, HS), row stride ldq
    for (long i = 0; i < nq; i++)
        for (long d = 0; d < HS; d++) dQ[i * ldq + d] += t->dqa[i * HP + d];
}

void ct_attention_backward_bf16(float *dq, float *dk, float *dv, const float *dout, const uint16_t *out,
                                const float *lse, const uint16_t *q, long ldq, const uint16_t *k, long ldk,
                                const uint16_t *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH,
                                long NKV, long HS, float *scratch) {
    const long group = NH / NKV, ldo = NH * HS, HP = pad_hs(HS);
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    const long per_kv = group * ntq, nitems = B * NKV * per_kv, per_thread = ct_att_thread_floats(HS);
    float *base = scratch + ct_att_header_floats(Tq, Tk);
    const bwd16_call x = {.dq = dq, .dk = dk, .dv = dv, .dout = dout, .lse = lse, .out = out, .q = q, .k = k,
                          .v = v, .ldq = ldq, .ldk = ldk, .ldv = ldv, .ldo = ldo, .Tq = Tq, .Tk = Tk, .NH = NH,
                          .NKV = NKV, .HS = HS, .HP = HP, .group = group, .ntq = ntq, .ntk = ntk, .per_kv = per_kv,
                          .q_pos = q_pos, .k_pos = k_pos, .q_doc = k_doc ? q_doc : NULL,
                          .k_doc = q_doc ? k_doc : NULL, .h = ct_att_bwd_header(scratch, q_pos, k_pos, Tq, Tk),
                          .scale = 1.0f / sqrtf((float)HS)};
    // as in ct_attention_backward: whole kv heads where they spread evenly, their dK and dV added
    // into a copy where a key tile takes many adds, their K and V copied once
    const bool whole = whole_kv_heads(B * NKV, omp_get_max_threads());
    const long chunk = whole ? per_kv : 1;
    const long local = whole && group * ntq >= CT_ATT_LOCAL_MIN_ADDS ? ct_att_local_floats(Tk, HS) : 0;
    const long copy = CT_ATT_KV_COPY && whole ? ct_att_local_floats(Tk, HS) : 0;
    long next = 0;  // chunks of items are handed out in order (the turns rely on it)
#pragma omp parallel
    {
        bwd16_tiles t;
        ct_att_bwd16_carve(base + omp_get_thread_num() * per_thread, HS, &t);
        ct_att16_tiles_begin();
        t.dkl = t.dvl = NULL;
        t.krl = t.vrl = NULL;
        t.k2l = NULL;
        float *mine = ct_att_thread_copies(base, per_thread, Tk, HS);
        if (local) t.dkl = mine + ct_att_local_floats(Tk, HS), t.dvl = t.dkl + Tk * HP;
        // K rows (Tk, HP), K key pairs (ceil(Tk / 2), HP), V rows (Tk, HP): within 2 Tk HP floats
        uint16_t *krl = copy ? (uint16_t *)mine : NULL;
        uint32_t *k2l = copy ? (uint32_t *)(mine + Tk * HP / 2) : NULL;
        uint16_t *vrl = copy ? (uint16_t *)(mine + Tk * HP / 2 + (Tk + 1) / 2 * HP) : NULL;
        for (;;) {
            long c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (c * chunk >= nitems) break;
            // a whole kv head (batch c / NKV, head c % NKV): its dK, dV rows copied in and back
            float *dK = NULL, *dV = NULL;
            if (t.dkl) {
                dK = dk + (c / NKV) * Tk * ldk + c % NKV * HS, dV = dv + (c / NKV) * Tk * ldv + c % NKV * HS;
                ct_att_copy_rows(t.dkl, HP, dK, ldk, Tk, HS), ct_att_copy_rows(t.dvl, HP, dV, ldv, Tk, HS);
            }
            if (krl) {
                ct_att16_copy_kv_head(krl, k2l, vrl, NULL, k, ldk, v, ldv, c, NKV, Tk, HS);
                t.krl = krl, t.k2l = k2l, t.vrl = vrl;
            }
            for (long it = c * chunk; it < (c + 1) * chunk; it++) backward_item(&x, &t, it);
            if (t.dkl) ct_att_copy_rows(dK, ldk, t.dkl, HP, Tk, HS), ct_att_copy_rows(dV, ldv, t.dvl, HP, Tk, HS);
        }
        ct_att16_tiles_end();
    }
}
