// Causal grouped-query attention, FlashAttention-2 style (Dao 2023) on the CPU: the forward.
//
// Forward: for each (batch, query head, query tile) -- the parallel work items -- walk the key
// tiles with an online softmax: S = scale Q K^T for the tile, running max m and sum l per query,
// the output accumulator rescaled by exp(m_old - m_new) when the max grows, then O += P V.
// At the end O /= l and lse = m + log l is kept for backward. No (T, T) matrix ever exists.
//
// The tiles, and how operands are packed: attention_internal.h.
#include <math.h>
#include <omp.h>

#include "core/mathutil.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/kernels.h"

// What every forward item reads: the call's arguments.
typedef struct {
    float *out, *lse;
    const float *q, *k, *v;
    long ldq, ldk, ldv, ldo, Tq, Tk, NH, HS, HP, group, ntq, ntk;
    const int32_t *q_pos, *k_pos;
    const int32_t *q_doc, *k_doc;  // (B, Tq), (B, Tk) or NULL
    float scale;
} fwd_call;

// One forward item (batch, query head, query tile) on this thread's tiles. kl, vl: the kv head's
// K and V rows copied (copy_head), or NULL: read from k and v.
static void forward_item(const fwd_call *x, fwd_tiles *t, long it, const float *kl, const float *vl) {
    const long ldq = x->ldq, ldo = x->ldo, Tq = x->Tq, Tk = x->Tk, NH = x->NH, HS = x->HS, HP = x->HP;
    const long ntq = x->ntq, ntk = x->ntk;
    const int32_t *q_pos = x->q_pos, *k_pos = x->k_pos;
    // the last query tiles see the most keys: hand them out first
    long qt = ntq - 1 - it % ntq, bh = it / ntq, b = bh / NH, h = bh % NH, g = h / x->group;
    long i0 = qt * CT_ATT_BQ, nq = ct_min_l(CT_ATT_BQ, Tq - i0);
    const float *Q = x->q + (b * Tq + i0) * ldq + h * HS;  // (nq, HS), row stride ldq
    // the kv head's rows (Tk, HS): K with row stride ldk, V contiguous or to be copied per tile
    const long ldk = kl ? HP : x->ldk;
    const float *Kh = kl ? kl : x->k + b * Tk * x->ldk + g * HS;
    long qlo, qhi;
    ct_att_pos_range(q_pos, i0, nq, &qlo, &qhi);
    ct_att_pack_t(t->qt, Q, ldq, nq, HS);
    ct_att_prefetch_rows(x->out + (b * Tq + i0) * ldo + h * HS, ldo, nq, HS, 1);  // written at the end
    ct_att_query_positions(t->qp, q_pos, i0, nq);
    const int32_t *qdoc = x->q_doc ? x->q_doc + b * Tq : NULL, *kdoc = qdoc ? x->k_doc + b * Tk : NULL;
    int32_t qdlo = 0, qdhi = 0;
    if (qdoc) ct_att_doc_range(qdoc, i0, nq, &qdlo, &qdhi), ct_att_query_docs(t->qd, qdoc, i0, nq);
    for (long i = 0; i < CT_ATT_BQ; i++) t->m[i] = -INFINITY, t->l[i] = 0.0f;
    memset(t->o, 0, sizeof(float) * CT_ATT_BQ * HP);
    for (long kt = 0; kt < ntk; kt++) {
        long j0 = kt * CT_ATT_BK, nk = ct_min_l(CT_ATT_BK, Tk - j0);
        long klo, khi;
        ct_att_pos_range(k_pos, j0, nk, &klo, &khi);
        if (klo > qhi) continue;  // no query of the tile sees any key of this tile
        const int dm = ct_att_doc_relation(kdoc, j0, nk, qdlo, qdhi);
        if (!dm) continue;  // nor of its documents
        const float *K = Kh + j0 * ldk;  // (nk, HS)
        // S^T (nk, BQ) = scale K Q^T
        diag_band d = {0, 0};
        if (khi > qlo) d = ct_att_band_of(q_pos, i0, nq, k_pos, j0, nk);  // some query must not see some key
        ct_att_scores_t(t->st, K, ldk, t->qt, nk, HS, x->scale, d);
        if (khi > qlo || dm == 2) ct_att_mask_tile(t->st, t->qp, t->qd, k_pos, kdoc, j0, nk, dm);
        ct_att_softmax_columns(t->st, t->m, t->l, t->al, nk);
        // O (nq, HP) = diag(al) O + P V, P read down the columns of P^T; V (nk, HP) contiguous
        const float *vc = vl ? vl + j0 * HP : t->vc;
        if (!vl) ct_att_pack_rows(t->vc, HP, x->v + (b * Tk + j0) * x->ldv + g * HS, x->ldv, nk, HS);
        ct_att_queries_by_keys(CT_ATT_RESCALE, t->o, t->st, vc, nq, nk, HP, t->al, d);
    }
    float *O = x->out + (b * Tq + i0) * ldo + h * HS;  // (nq, HS), row stride ldo
    float *L = x->lse + (b * NH + h) * Tq + i0;        // (nq)
    for (long i = 0; i < nq; i++) {
        if (t->l[i] == 0.0f) {  // saw no key: lse -inf, output row 0
            L[i] = -INFINITY;
            for (long d = 0; d < HS; d++) O[i * ldo + d] = 0.0f;
            continue;
        }
        L[i] = t->m[i] + logf(t->l[i]);
        float inv = 1.0f / t->l[i];
        for (long d = 0; d < HS; d++) O[i * ldo + d] = t->o[i * HP + d] * inv;
    }
}

void ct_attention_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk, const float *v,
                          long ldv, const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc,
                          const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS,
                          float *scratch) {
    const long group = NH / NKV, HP = pad_hs(HS);
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    const long nitems = B * NH * ntq, per_thread = ct_att_thread_floats(HS);
    float *base = scratch + ct_att_header_floats(Tq, Tk);
    const fwd_call x = {.out = out, .lse = lse, .q = q, .k = k, .v = v, .ldq = ldq, .ldk = ldk, .ldv = ldv,
                        .ldo = NH * HS, .Tq = Tq, .Tk = Tk, .NH = NH, .HS = HS, .HP = HP, .group = group,
                        .ntq = ntq, .ntk = ntk, .q_pos = q_pos, .k_pos = k_pos, .q_doc = k_doc ? q_doc : NULL,
                        .k_doc = q_doc ? k_doc : NULL, .scale = 1.0f / sqrtf((float)HS)};
    // whole kv heads (every item of a (batch, kv head) on one thread) with its K and V copied once,
    // but the last heads' items one by one (the last query tiles first): a thread that takes a
    // whole head near the end would leave the others waiting for up to a head's time
    const long copy = CT_ATT_KV_COPY && whole_kv_heads(B * NKV, omp_get_max_threads()) ? ct_att_local_floats(Tk, HS) : 0;
    const long chunk = group * ntq, tail = 2L * omp_get_max_threads();
    const long whole = copy && B * NKV > tail ? B * NKV - tail : 0;  // heads handed out whole
    long next = 0;  // handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    {
        fwd_tiles t;
        ct_att_fwd_carve(base + omp_get_thread_num() * per_thread, HS, &t);
        float *kl = whole ? ct_att_thread_copies(base, per_thread, Tk, HS) : NULL;
        float *vl = whole ? kl + Tk * HP : NULL;
        for (;;) {
            long c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (c < whole) {  // batch c / NKV, kv head c % NKV
                ct_att_copy_kv_head(kl, vl, k, ldk, v, ldv, c, NKV, Tk, HS);
                for (long it = c * chunk; it < (c + 1) * chunk; it++) forward_item(&x, &t, it, kl, vl);
                continue;
            }
            long it = whole * chunk + (c - whole);
            if (it >= nitems) break;
            forward_item(&x, &t, it, NULL, NULL);
        }
    }
}
