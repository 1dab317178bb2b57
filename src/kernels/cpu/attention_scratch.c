// The attention's scratch (ct_attention_scratch_floats): first the backward's shared header (the
// position ranges of its tiles and its turn counters), then every thread's tiles, carved here
// for the forward and the backward alike, then every thread's copies of one kv head's rows.
#include <omp.h>

#include "core/mathutil.h"

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/spin.h"
#include "kernels/kernels.h"

static float *take(float *base, long *used, long n) {
    float *p = base ? base + *used : NULL;
    *used += (n + 15) & ~15L;
    return p;
}

long ct_att_fwd_carve(float *base, long HS, fwd_tiles *t) {
    long u = 0, HP = pad_hs(HS);
    t->qt = take(base, &u, HS * CT_ATT_BQ);
    t->st = take(base, &u, CT_ATT_BK * CT_ATT_BQ);
    t->o = take(base, &u, CT_ATT_BQ * HP);
    t->vc = take(base, &u, CT_ATT_BK * HP);
    t->m = take(base, &u, CT_ATT_BQ);
    t->l = take(base, &u, CT_ATT_BQ);
    t->al = take(base, &u, CT_ATT_BQ);
    t->qp = (int32_t *)take(base, &u, CT_ATT_BQ);
    t->qd = (int32_t *)take(base, &u, CT_ATT_BQ);
    return u;
}

long ct_att_bwd_carve(float *base, long HS, bwd_tiles *t) {
    long u = 0, HP = pad_hs(HS);
    t->qt = take(base, &u, HS * CT_ATT_BQ);
    t->dot = take(base, &u, HS * CT_ATT_BQ);
    t->qrows = take(base, &u, CT_ATT_BQ * HP);
    t->dorows = take(base, &u, CT_ATT_BQ * HP);
    t->pt = take(base, &u, CT_ATT_BK * CT_ATT_BQ);
    t->dqa = take(base, &u, CT_ATT_BQ * HP);
    t->kc = take(base, &u, CT_ATT_BK * HP);
    t->dkp = take(base, &u, CT_ATT_BK * HP);
    t->dvp = take(base, &u, CT_ATT_BK * HP);
    t->d = take(base, &u, CT_ATT_BQ);
    t->lv = take(base, &u, CT_ATT_BQ);
    t->qp = (int32_t *)take(base, &u, CT_ATT_BQ);
    t->qd = (int32_t *)take(base, &u, CT_ATT_BQ);
    return u;
}

// n bf16 values, or n / 2 pairs of them: n / 2 floats (n even: BQ, BK and HP are).
#define HALF(n) ((n) / 2)

long ct_att_fwd16_carve(float *base, long HS, fwd16_tiles *t) {
    long u = 0, HP = pad_hs(HS);
    t->qt2 = (uint32_t *)take(base, &u, HALF(HP * CT_ATT_BQ));
    t->st = take(base, &u, CT_ATT_BK * CT_ATT_BQ);
    t->pt2 = (uint32_t *)take(base, &u, HALF(CT_ATT_BK * CT_ATT_BQ));
    t->o = take(base, &u, CT_ATT_BQ * HP);
    t->kr = (uint16_t *)take(base, &u, HALF(CT_ATT_BK * HP));
    t->v2 = (uint32_t *)take(base, &u, HALF(CT_ATT_BK * HP));
    t->m = take(base, &u, CT_ATT_BQ);
    t->l = take(base, &u, CT_ATT_BQ);
    t->al = take(base, &u, CT_ATT_BQ);
    t->qp = (int32_t *)take(base, &u, CT_ATT_BQ);
    t->qd = (int32_t *)take(base, &u, CT_ATT_BQ);
    return u;
}

long ct_att_bwd16_carve(float *base, long HS, bwd16_tiles *t) {
    long u = 0, HP = pad_hs(HS);
    t->qt2 = (uint32_t *)take(base, &u, HALF(HP * CT_ATT_BQ));
    t->dot2 = (uint32_t *)take(base, &u, HALF(HP * CT_ATT_BQ));
    t->q2 = (uint32_t *)take(base, &u, HALF(CT_ATT_BQ * HP));
    t->do2 = (uint32_t *)take(base, &u, HALF(CT_ATT_BQ * HP));
    t->dor = (uint16_t *)take(base, &u, HALF(CT_ATT_BQ * HP));
    t->pt = take(base, &u, CT_ATT_BK * CT_ATT_BQ);
    t->pr = (uint16_t *)take(base, &u, HALF(CT_ATT_BK * CT_ATT_BQ));
    t->ds2 = (uint32_t *)take(base, &u, HALF(CT_ATT_BK * CT_ATT_BQ));
    t->dqa = take(base, &u, CT_ATT_BQ * HP);
    t->kr = (uint16_t *)take(base, &u, HALF(CT_ATT_BK * HP));
    t->vr = (uint16_t *)take(base, &u, HALF(CT_ATT_BK * HP));
    t->k2 = (uint32_t *)take(base, &u, HALF(CT_ATT_BK * HP));
    t->dkp = take(base, &u, CT_ATT_BK * HP);
    t->dvp = take(base, &u, CT_ATT_BK * HP);
    t->d = take(base, &u, CT_ATT_BQ);
    t->lv = take(base, &u, CT_ATT_BQ);
    t->qp = (int32_t *)take(base, &u, CT_ATT_BQ);
    t->qd = (int32_t *)take(base, &u, CT_ATT_BQ);
    return u;
}

long ct_att_thread_floats(long HS) {
    fwd_tiles f;
    bwd_tiles b;
    fwd16_tiles f16;
    bwd16_tiles b16;
    long n = ct_att_fwd_carve(NULL, HS, &f);
    n = ct_max_l(n, ct_att_bwd_carve(NULL, HS, &b));
    n = ct_max_l(n, ct_att_fwd16_carve(NULL, HS, &f16));
    return ct_max_l(n, ct_att_bwd16_carve(NULL, HS, &b16));
}

// Shared header of the backward, int64 words: position ranges of every query tile (lo, hi) and
// key tile (lo, hi), the number of query tiles that see each key tile, and the turn counters
// (RING, ntk).
long ct_att_header_floats(long Tq, long Tk) {
    long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    long words = 2 * ntq + 3 * ntk + CT_ATT_RING * ntk;
    return (2 * words + 15) & ~15L;
}

att_bwd_header ct_att_bwd_header(float *scratch, const int32_t *q_pos, const int32_t *k_pos, long Tq, long Tk) {
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    att_bwd_header h;
    h.qlo = (int64_t *)scratch, h.qhi = h.qlo + ntq, h.klo = h.qhi + ntq, h.khi = h.klo + ntk;
    h.kcnt = h.khi + ntk, h.turns = h.kcnt + ntk;  // turns (RING, ntk)
    for (long qt = 0; qt < ntq; qt++) {
        long lo, hi;
        ct_att_pos_range(q_pos, qt * CT_ATT_BQ, ct_min_l(CT_ATT_BQ, Tq - qt * CT_ATT_BQ), &lo, &hi);
        h.qlo[qt] = lo, h.qhi[qt] = hi;
    }
    for (long kt = 0; kt < ntk; kt++) {
        long lo, hi;
        ct_att_pos_range(k_pos, kt * CT_ATT_BK, ct_min_l(CT_ATT_BK, Tk - kt * CT_ATT_BK), &lo, &hi);
        h.klo[kt] = lo, h.khi[kt] = hi;
        h.kcnt[kt] = 0;
        for (long qt = 0; qt < ntq; qt++) h.kcnt[kt] += lo <= h.qhi[qt];
    }
    memset(h.turns, 0, sizeof(int64_t) * CT_ATT_RING * ntk);
    return h;
}

void ct_att_wait_turn(const int64_t *turn, int64_t seq) {
    int spins = 0;
    while (__atomic_load_n(turn, __ATOMIC_ACQUIRE) != seq) ct_spin_turn(&spins);
}

static long local_max_tk(long HS) { return CT_ATT_LOCAL_MAX_FLOATS / (2 * pad_hs(HS)); }

// A thread's copy for Tk keys: 0 past local_max_tk.
long ct_att_local_floats(long Tk, long HS) {
    return Tk <= local_max_tk(HS) ? (2 * Tk * pad_hs(HS) + 15) & ~15L : 0;
}

// Reserved for a copy: never less for a larger Tk, so a scratch sized for more keys than a call
// has also holds that call's copy.
static long local_reserve(long Tk, long HS) {
    return ct_att_local_floats(Tk < local_max_tk(HS) ? Tk : local_max_tk(HS), HS);
}

long ct_attention_scratch_floats(long Tq, long Tk, long HS) {
    return ct_att_header_floats(Tq, Tk) +
           (long)omp_get_max_threads() * (ct_att_thread_floats(HS) + 2 * local_reserve(Tk, HS));
}

// This thread's copies, after every thread's tiles at base (ct_attention_scratch_floats): K, V,
// then (backward) dK, dV, Tk x HP floats each. The bf16 attention keeps its K and V copies in the
// first 2 Tk HP floats (attention_bf16_pack.c: at most Tk HP / 2 + ceil(Tk / 2) HP + Tk HP / 2).
float *ct_att_thread_copies(float *base, long per_thread, long Tk, long HS) {
    return base + omp_get_num_threads() * per_thread + omp_get_thread_num() * 2 * ct_att_local_floats(Tk, HS);
}
