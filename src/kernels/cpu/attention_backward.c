// Causal grouped-query attention, FlashAttention-2 style (Dao 2023) on the CPU: the backward.
//
// Backward: D = rowsum(dO * O), then per tile pair P = exp(S - lse) is recomputed and
//   dV += P^T dO,  dP = dO V^T,  dS = scale P * (dP - D),  dQ += dS K,  dK += dS^T Q.
// Work items are (batch, query head, query tile), as in the forward, so there are many more of
// them than threads (B x NKV alone would leave threads idle when B x NKV is small).
// An item owns dQ of its tile. Its shares of a key tile's dK and dV are multiplied into
// per-thread partial tiles, then added to dK and dV in a fixed order -- kv head by kv head; in
// each, query head by query head, the last query tile first: a turn counter per key tile (a ring
// of them per (batch, kv head), in the scratch) says whose add is next. Items are handed out in
// that same order, so a wait is only ever for an item already running, and the adds are cheap
// beside the five products of a tile pair. When the (batch, kv head) pairs spread evenly over the
// threads, each thread takes all the items of a pair at once, in that order (whole_kv_heads):
// the same adds, with no waits -- and, where a key tile takes many of them, into a contiguous copy
// of the pair's dK and dV rows written back once (ct_att_local_floats). The sums are the same for
// any thread count and any schedule: bitwise reproducible. (Chosen over the two-pass FA2 scheme --
// dK, dV over key tiles, then dQ over query tiles -- which recomputes QK^T and dO V^T: 7
// products per tile pair, not 5.)
//
// The tiles, and how operands are packed: attention_internal.h.
#include <math.h>
#include <omp.h>

#include "core/mathutil.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/kernels.h"

// What every backward item reads: the call's arguments and its shared header (the position
// ranges of the tiles, the number of query tiles that see each key tile, the turn counters).
typedef struct {
    float *dq, *dk, *dv;
    const float *dout, *out, *lse, *q, *k, *v;
    long ldq, ldk, ldv, ldo, Tq, Tk, NH, NKV, HS, HP, group, ntq, ntk, per_kv;
    const int32_t *q_pos, *k_pos;
    const int32_t *q_doc, *k_doc;  // (B, Tq), (B, Tk) or NULL
    att_bwd_header h;
    float scale;
} bwd_call;

// One backward item (batch, query head, query tile), on this thread's tiles: its dQ rows, and its
// shares of dK and dV added in their turn.
static void backward_item(const bwd_call *x, bwd_tiles *t, long it) {
    float *dq = x->dq, *dk = x->dk, *dv = x->dv;
    const float *dout = x->dout, *out = x->out, *lse = x->lse, *q = x->q, *k = x->k, *v = x->v;
    const long ldq = x->ldq, ldk = x->ldk, ldv = x->ldv, ldo = x->ldo, Tq = x->Tq, Tk = x->Tk, NH = x->NH;
    const long NKV = x->NKV, HS = x->HS, HP = x->HP, group = x->group, ntq = x->ntq, ntk = x->ntk;
    const long per_kv = x->per_kv;
    const int32_t *q_pos = x->q_pos, *k_pos = x->k_pos;
    const int64_t *qlo = x->h.qlo, *qhi = x->h.qhi, *klo = x->h.klo, *khi = x->h.khi;
    const float scale = x->scale;
    // kv head by kv head; in each, query head by query head, the last query tile first
    long bg = it / per_kv, hl = it % per_kv / ntq, qt = ntq - 1 - it % ntq;
    long b = bg / NKV, g = bg % NKV, h = g * group + hl;
    int64_t *turn = x->h.turns + bg % CT_ATT_RING * ntk;
    long i0 = qt * CT_ATT_BQ, nq = ct_min_l(CT_ATT_BQ, Tq - i0);
    const float *Q = q + (b * Tq + i0) * ldq + h * HS;      // (nq, HS), row stride ldq
    const float *O = out + (b * Tq + i0) * ldo + h * HS;    // (nq, HS), row stride ldo
    const float *dO = dout + (b * Tq + i0) * ldo + h * HS;  // (nq, HS), row stride ldo
    const float *L = lse + (b * NH + h) * Tq + i0;          // (nq)
    ct_att_prefetch_rows(O, ldo, nq, HS, 0);  // read by D below, after the packs
    ct_att_prefetch_rows(dq + (b * Tq + i0) * ldq + h * HS, ldq, nq, HS, 1);  // added to at the end
    ct_att_pack_t(t->qt, Q, ldq, nq, HS);
    ct_att_pack_t(t->dot, dO, ldo, nq, HS);
    ct_att_pack_rows(t->qrows, HP, Q, ldq, nq, HS);
    ct_att_pack_rows(t->dorows, HP, dO, ldo, nq, HS);
    ct_att_query_positions(t->qp, q_pos, i0, nq);
    const int32_t *qdoc = x->q_doc ? x->q_doc + b * Tq : NULL, *kdoc = qdoc ? x->k_doc + b * Tk : NULL;
    int32_t qdlo = 0, qdhi = 0;
    if (qdoc) ct_att_doc_range(qdoc, i0, nq, &qdlo, &qdhi), ct_att_query_docs(t->qd, qdoc, i0, nq);
    for (long i = 0; i < CT_ATT_BQ; i++) {
        float s = 0.0f;
        if (i < nq) {
#pragma omp simd reduction(+ : s)
            for (long d = 0; d < HS; d++) s += dO[i * ldo + d] * O[i * ldo + d];
        }
        t->d[i] = s;
        t->lv[i] = i >= nq || L[i] == -INFINITY ? INFINITY : L[i];
    }
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
        // (nk, HS) each, rows ldk_t, ldv_t apart: copied once for the kv head, or in place
        const long ldk_t = t->kl ? HP : ldk, ldv_t = t->vl ? HP : ldv;
        const float *K = t->kl ? t->kl + j0 * HP : k + (b * Tk + j0) * ldk + g * HS;
        const float *V = t->vl ? t->vl + j0 * HP : v + (b * Tk + j0) * ldv + g * HS;
        // P^T = exp(scale K Q^T - lse), 0 where masked or where the query saw no key
        diag_band d = {0, 0};
        if (khi[kt] > qlo[qt]) d = ct_att_band_of(q_pos, i0, nq, k_pos, j0, nk);
        ct_att_scores_t(t->pt, K, ldk_t, t->qt, nk, HS, scale, d);
        if (khi[kt] > qlo[qt] || dm == 2) ct_att_mask_tile(t->pt, t->qp, t->qd, k_pos, kdoc, j0, nk, dm);
        ct_att_exp_columns(t->pt, t->lv, nk);
        if (!t->dkl) {  // added to below
            ct_att_prefetch_rows(dk + (b * Tk + j0) * ldk + g * HS, ldk, nk, HS, 1);
            ct_att_prefetch_rows(dv + (b * Tk + j0) * ldv + g * HS, ldv, nk, HS, 1);
        }
        // dV share (nk, HP) = P^T dO
        ct_att_keys_by_queries(t->dvp, t->pt, t->dorows, nq, nk, HP, d);
        // dS^T = scale P^T * (V dO^T - D), in place of P^T
        for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
            long c0 = band_first_query(d, m0);  // columns before it hold P = 0: dS = 0
            if (c0 < CT_ATT_BQ)
                ct_att_mm(CT_ATT_DS, ct_min_l(CT_ATT_SUB, nk - m0), CT_ATT_BQ - c0, HS, V + m0 * ldv_t, ldv_t, 1,
                          t->dot + c0, CT_ATT_BQ, t->pt + m0 * CT_ATT_BQ + c0, CT_ATT_BQ, scale, t->d + c0);
        }
        // dQ (nq, HP) += dS K, dS read down the columns of dS^T
        if (!t->kl) ct_att_pack_rows(t->kc, HP, K, ldk, nk, HS);
        ct_att_queries_by_keys(CT_ATT_ADD, t->dqa, t->pt, t->kl ? K : t->kc, nq, nk, HP, NULL, d);
        // dK share (nk, HP) = dS^T Q
        ct_att_keys_by_queries(t->dkp, t->pt, t->qrows, nq, nk, HP, d);
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

void ct_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, long ldq, const float *k, long ldk, const float *v, long ldv,
                           const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc, const int32_t *k_doc,
                           long B, long Tq, long Tk, long NH, long NKV, long HS, float *scratch) {
    const long group = NH / NKV, ldo = NH * HS, HP = pad_hs(HS);
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    const long per_kv = group * ntq, nitems = B * NKV * per_kv, per_thread = ct_att_thread_floats(HS);
    const float scale = 1.0f / sqrtf((float)HS);
    float *base = scratch + ct_att_header_floats(Tq, Tk);
    const bwd_call x = {.dq = dq, .dk = dk, .dv = dv, .dout = dout, .out = out, .lse = lse, .q = q, .k = k, .v = v,
                        .ldq = ldq, .ldk = ldk, .ldv = ldv, .ldo = ldo, .Tq = Tq, .Tk = Tk, .NH = NH, .NKV = NKV,
                        .HS = HS, .HP = HP, .group = group, .ntq = ntq, .ntk = ntk, .per_kv = per_kv,
                        .q_pos = q_pos, .k_pos = k_pos, .q_doc = k_doc ? q_doc : NULL,
                        .k_doc = q_doc ? k_doc : NULL, .h = ct_att_bwd_header(scratch, q_pos, k_pos, Tq, Tk),
                        .scale = scale};
    const bool whole = whole_kv_heads(B * NKV, omp_get_max_threads());
    const long chunk = whole ? per_kv : 1;
    const long local = whole && group * ntq >= CT_ATT_LOCAL_MIN_ADDS ? ct_att_local_floats(Tk, HS) : 0;
    const long copy = CT_ATT_KV_COPY && whole ? ct_att_local_floats(Tk, HS) : 0;  // K and V copied per kv head
    long next = 0;  // chunks of items are handed out in order (the turns rely on it)
#pragma omp parallel
    {
        bwd_tiles t;
        ct_att_bwd_carve(base + omp_get_thread_num() * per_thread, HS, &t);
        t.dkl = t.dvl = NULL;
        t.kl = t.vl = NULL;
        float *mine = ct_att_thread_copies(base, per_thread, Tk, HS);
        if (local) t.dkl = mine + ct_att_local_floats(Tk, HS), t.dvl = t.dkl + Tk * HP;
        float *kl = copy ? mine : NULL, *vl = copy ? mine + Tk * HP : NULL;
        for (;;) {
            long c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (c * chunk >= nitems) break;
            // a whole kv head (batch c / NKV, head c % NKV): its dK, dV rows copied in and back
            float *dK = NULL, *dV = NULL;
            if (t.dkl) {
                dK = dk + (c / NKV) * Tk * ldk + c % NKV * HS, dV = dv + (c / NKV) * Tk * ldv + c % NKV * HS;
                ct_att_copy_rows(t.dkl, HP, dK, ldk, Tk, HS), ct_att_copy_rows(t.dvl, HP, dV, ldv, Tk, HS);
            }
            if (kl) {
                ct_att_copy_kv_head(kl, vl, k, ldk, v, ldv, c, NKV, Tk, HS);
                t.kl = kl, t.vl = vl;
            }
            for (long it = c * chunk; it < (c + 1) * chunk; it++) backward_item(&x, &t, it);
            if (t.dkl) ct_att_copy_rows(dK, ldk, t.dkl, HP, Tk, HS), ct_att_copy_rows(dV, ldv, t.dvl, HP, Tk, HS);
        }
    }
}
