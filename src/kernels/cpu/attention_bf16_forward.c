// Causal grouped-query attention in bf16 on the CPU, FlashAttention-2 style: the forward
// (kernels.h: ct_attention_forward_bf16). The fp32 forward's algorithm (attention_forward.c) --
// the same work items, handed out the same way, the same masks, band and online softmax -- with
// Q, K, V read in bf16 and held in bf16 tiles, P rounded to bf16 before O += P V, and every
// product summed in fp32 (attention_bf16_tile.c). The running max and sum, the rescale, the
// O accumulator and lse stay fp32; O is rounded to bf16 once, at the end.
#include <math.h>
#include <omp.h>

#include "core/mathutil.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/kernels.h"

// What every forward item reads: the call's arguments.
typedef struct {
    uint16_t *out;
    float *lse;
    const uint16_t *q, *k, *v;
    long ldq, ldk, ldv, ldo, Tq, Tk, NH, HS, HP, group, ntq, ntk;
    const int32_t *q_pos, *k_pos;
    const int32_t *q_doc, *k_doc;  // (B, Tq), (B, Tk) or NULL
    float scale;
} fwd16_call;

static inline uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// One forward item (batch, query head, query tile) on this thread's tiles. krl, v2l: the kv
// head's K rows and V key pairs copied (ct_att16_copy_kv_head), or NULL: packed per key tile.
static void forward_item(const fwd16_call *x, fwd16_tiles *t, long it, const uint16_t *krl, const uint32_t *v2l) {
    const long ldq = x->ldq, ldo = x->ldo, Tq = x->Tq, Tk = x->Tk, NH = x->NH, HS = x->HS, HP = x->HP;
    const long ntq = x->ntq, ntk = x->ntk;
    const int32_t *q_pos = x->q_pos, *k_pos = x->k_pos;
    // the last query tiles see the most keys: hand them out first
    long qt = ntq - 1 - it % ntq, bh = it / ntq, b = bh / NH, h = bh % NH, g = h / x->group;
    long i0 = qt * CT_ATT_BQ, nq = ct_min_l(CT_ATT_BQ, Tq - i0);
    const uint16_t *Q = x->q + (b * Tq + i0) * ldq + h * HS;  // (nq, HS), row stride ldq
    const uint16_t *Kh = x->k + b * Tk * x->ldk + g * HS;      // (Tk, HS), row stride ldk
    const uint16_t *Vh = x->v + b * Tk * x->ldv + g * HS;      // (Tk, HS), row stride ldv
    long qlo, qhi;
    ct_att_pos_range(q_pos, i0, nq, &qlo, &qhi);
    ct_att16_pack_t_pairs(t->qt2, Q, ldq, nq, HS);
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
        // S^T (nk, BQ) = scale K Q^T
        const uint16_t *kr = krl ? krl + j0 * HP : t->kr;  // (nk, HP)
        if (!krl) ct_att16_pack_rows(t->kr, HP, Kh + j0 * x->ldk, x->ldk, nk, HS);
        diag_band d = {0, 0};
        if (khi > qlo) d = ct_att_band_of(q_pos, i0, nq, k_pos, j0, nk);  // some query must not see some key
        ct_att16_scores_t(t->st, kr, t->qt2, nk, HP, x->scale, d);
        if (khi > qlo || dm == 2) ct_att_mask_tile(t->st, t->qp, t->qd, k_pos, kdoc, j0, nk, dm);
        ct_att_softmax_columns(t->st, t->m, t->l, t->al, nk);
        // O (nq, HP) = diag(al) O + bf16(P) V, P in key pairs (in query rows for the AMX tiles);
        // l keeps the sum of P unrounded
        const uint32_t *v2 = v2l ? v2l + j0 / 2 * HP : t->v2;  // (ceil(nk / 2), HP)
        if (!v2l) ct_att16_pack_row_pairs(t->v2, HP, Vh + j0 * x->ldv, x->ldv, nk, HS);
        if (ct_att16_tiles_held()) {
            ct_att16_round_pairs_t(t->pt2, t->st, nk);
            ct_att16_queries_by_keys_rows(CT_ATT_RESCALE, t->o, t->pt2, v2, nq, nk, HP, t->al);
        } else {
            ct_att16_round_pairs(t->pt2, t->st, nk);
            ct_att16_queries_by_keys(CT_ATT_RESCALE, t->o, t->pt2, v2, nq, nk, HP, t->al, d);
        }
    }
    uint16_t *O = x->out + (b * Tq + i0) * ldo + h * HS;  // (nq, HS), row stride ldo
    float *L = x->lse + (b * NH + h) * Tq + i0;           // (nq)
    for (long i = 0; i < nq; i++) {
        if (t->l[i] == 0.0f) {  // saw no key: lse -inf, output row 0
            L[i] = -INFINITY;
            for (long d = 0; d < HS; d++) O[i * ldo + d] = 0;
            continue;
        }
        L[i] = t->m[i] + logf(t->l[i]);
        float inv = 1.0f / t->l[i];
        for (long d = 0; d < HS; d++) O[i * ldo + d] = to_bf16(t->o[i * HP + d] * inv);
    }
}

void ct_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *q, long ldq, const uint16_t *k, long ldk,
                               const uint16_t *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                               const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV,
                               long HS, float *scratch) {
    const long group = NH / NKV, HP = pad_hs(HS);
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    const long nitems = B * NH * ntq, per_thread = ct_att_thread_floats(HS);
    float *base = scratch + ct_att_header_floats(Tq, Tk);
    const fwd16_call x = {.out = out, .lse = lse, .q = q, .k = k, .v = v, .ldq = ldq, .ldk = ldk, .ldv = ldv,
                          .ldo = NH * HS, .Tq = Tq, .Tk = Tk, .NH = NH, .HS = HS, .HP = HP, .group = group,
                          .ntq = ntq, .ntk = ntk, .q_pos = q_pos, .k_pos = k_pos, .q_doc = k_doc ? q_doc : NULL,
                          .k_doc = q_doc ? k_doc : NULL, .scale = 1.0f / sqrtf((float)HS)};
    // whole kv heads with their K and V copied once, but the last heads' items one by one: as in
    // ct_attention_forward (and the same bits either way: the copies hold the per-tile packing)
    const bool whole_heads = whole_kv_heads(B * NKV, omp_get_max_threads());
    const long copy = CT_ATT_KV_COPY && whole_heads ? ct_att_local_floats(Tk, HS) : 0;
    const long chunk = group * ntq, tail = 2L * omp_get_max_threads();
    const long whole = copy && B * NKV > tail ? B * NKV - tail : 0;  // heads handed out whole
    long next = 0;  // handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    {
        fwd16_tiles t;
        ct_att_fwd16_carve(base + omp_get_thread_num() * per_thread, HS, &t);
        ct_att16_tiles_begin();
        float *mine = whole ? ct_att_thread_copies(base, per_thread, Tk, HS) : NULL;
        uint16_t *krl = whole ? (uint16_t *)mine : NULL;                    // (Tk, HP)
        uint32_t *v2l = whole ? (uint32_t *)(mine + (Tk * HP + 1) / 2) : NULL;  // (ceil(Tk / 2), HP)
        for (;;) {
            long c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (c < whole) {  // batch c / NKV, kv head c % NKV
                ct_att16_copy_kv_head(krl, NULL, NULL, v2l, k, ldk, v, ldv, c, NKV, Tk, HS);
                for (long it = c * chunk; it < (c + 1) * chunk; it++) forward_item(&x, &t, it, krl, v2l);
                continue;
            }
            long it = whole * chunk + (c - whole);
            if (it >= nitems) break;
            forward_item(&x, &t, it, NULL, NULL);
        }
        ct_att16_tiles_end();
    }
}
