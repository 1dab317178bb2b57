// Causal grouped-query attention, FlashAttention-2 style (Dao 2023) on the CPU.
//
// Forward: for each (batch, query head, query tile) -- the parallel work items -- walk the key
// tiles with an online softmax: S = scale Q K^T for the tile, running row max m and row sum l,
// the output accumulator rescaled by exp(m_old - m_new) when the max grows, then O += P V.
// At the end O /= l and lse = m + log l is kept for backward. No (T, T) matrix ever exists.
//
// Backward: D = rowsum(dO * O), then per tile pair P = exp(S - lse) is recomputed and
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ += scale dS K,  dK += scale dS^T Q.
// Work items are (batch, query head, query tile), as in the forward, so there are many more of
// them than threads (B x NKV alone, the items before, left threads idle when B x NKV was small).
// An item owns dQ of its tile. Its shares of a key tile's dK and dV are multiplied into
// per-thread partial tiles, then added to dK and dV in a fixed order -- kv head by kv head; in
// each, query head by query head, the last query tile first: a turn counter per key tile (a ring
// of them per (batch, kv head), in the scratch) says whose add is next. Items are handed out in
// that same order, so a wait is only ever for an item already running, and the adds are cheap
// beside the five products of a tile pair. The sums are the same for any thread count and any
// schedule: bitwise reproducible. (Chosen over the two-pass FA2 scheme -- dK, dV over key tiles,
// then dQ over query tiles -- which recomputes QK^T and dO V^T: 7 products per tile pair, not 5.)
//
// Every product goes through ct_gemm straight on the strided q/k/v buffers (leading dimension =
// token stride); called inside the parallel region, ct_gemm runs on the calling thread alone
// (its small-product path: B packed once, A read in place), so each thread multiplies its own
// tiles. The exps run 8 lanes at a time (fastmath.h's ct_fast_expf_v8).
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/spin.h"
#include "kernels/kernels.h"

#define CT_ATT_BQ 64    // query rows per tile
#define CT_ATT_BK 64    // key rows per tile
#define CT_ATT_RING 16  // (batch, kv head) slots of backward turn counters, reused in a ring

// Per-thread scratch: forward S (BQ, BK), the running m and l (BQ each); backward P and dP
// (BQ, BK), D (BQ) and the partial dK, dV tiles (BK, HS); rounded to 16 floats so that threads
// never share a cache line.
static long att_thread_floats(long HS) {
    long fwd = CT_ATT_BQ * CT_ATT_BK + 2 * CT_ATT_BQ;
    long bwd = 2 * CT_ATT_BQ * CT_ATT_BK + CT_ATT_BQ + 2 * CT_ATT_BK * HS;
    long f = fwd > bwd ? fwd : bwd;
    return (f + 15) & ~15L;
}

// Shared header of the backward, int64 words: position ranges of every query tile (lo, hi) and
// key tile (lo, hi), the number of query tiles that see each key tile, and the turn counters
// (RING, ntk).
static long att_header_floats(long Tq, long Tk) {
    long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    long words = 2 * ntq + 3 * ntk + CT_ATT_RING * ntk;
    return (2 * words + 15) & ~15L;
}

long ct_attention_scratch_floats(long Tq, long Tk, long HS) {
    return att_header_floats(Tq, Tk) + (long)omp_get_max_threads() * att_thread_floats(HS);
}

static inline long min_l(long a, long b) { return a < b ? a : b; }

// Smallest and largest position among rows [r0, r0 + n) (positions need not be sorted).
static void pos_range(const int32_t *pos, long r0, long n, long *lo, long *hi) {
    if (!pos) {
        *lo = r0;
        *hi = r0 + n - 1;
        return;
    }
    long a = pos[r0], b = pos[r0];
    for (long i = 1; i < n; i++) {
        long p = pos[r0 + i];
        a = p < a ? p : a;
        b = p > b ? p : b;
    }
    *lo = a;
    *hi = b;
}

// Sets s[c] = -inf for keys j0 + c that query position qp must not see.
static inline void mask_row(float *s, long nk, const int32_t *k_pos, long j0, long qp) {
    if (k_pos) {
        const int32_t *kp = k_pos + j0;
        for (long c = 0; c < nk; c++) s[c] = (long)kp[c] > qp ? -INFINITY : s[c];
    } else {
        for (long c = 0; c < nk; c++) s[c] = j0 + c > qp ? -INFINITY : s[c];
    }
}

// s[c] = exp(s[c] - mx) for c < n; returns their sum (8 lanes, then the tail, in a fixed order).
static inline float exp_row(float *s, long n, float mx) {
    ct_v8f acc = ct_v8f_splat(0.0f);
    long c = 0;
#ifdef CT_V16
    for (; c + 16 <= n; c += 16) {  // 16 exps a step, summed as two steps of 8 (the same order)
        ct_v16f e = ct_fast_expf_v16(ct_v16f_load(s + c) - mx);
        ct_v16f_store(s + c, e);
        acc += ct_v16f_lo(e);
        acc += ct_v16f_hi(e);
    }
#endif
    for (; c + 8 <= n; c += 8) {
        ct_v8f e = ct_fast_expf_v8(ct_v8f_load(s + c) - mx);
        ct_v8f_store(s + c, e);
        acc += e;
    }
    float tail = 0.0f;
    for (; c < n; c++) {
        s[c] = ct_fast_expf(s[c] - mx);
        tail += s[c];
    }
    return ct_v8f_sum(acc) + tail;
}

void ct_attention_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk, const float *v,
                          long ldv, const int32_t *q_pos, const int32_t *k_pos, long B, long Tq, long Tk, long NH,
                          long NKV, long HS, float *scratch) {
    const long group = NH / NKV, ldo = NH * HS;
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    const long nitems = B * NH * ntq, per_thread = att_thread_floats(HS);
    const float scale = 1.0f / sqrtf((float)HS);
    float *base = scratch + att_header_floats(Tq, Tk);
    long next = 0;  // items handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    {
        float *S = base + omp_get_thread_num() * per_thread;  // (BQ, BK) scores, then probabilities
        float *m = S + CT_ATT_BQ * CT_ATT_BK;                     // (BQ) running max
        float *l = m + CT_ATT_BQ;                                 // (BQ) running sum
        for (;;) {
            long it = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (it >= nitems) break;
            // the last query tiles see the most keys: hand them out first
            long qt = ntq - 1 - it % ntq, bh = it / ntq, b = bh / NH, h = bh % NH, g = h / group;
            long i0 = qt * CT_ATT_BQ, nq = min_l(CT_ATT_BQ, Tq - i0);
            const float *Q = q + (b * Tq + i0) * ldq + h * HS;  // (nq, HS), row stride ldq
            float *O = out + (b * Tq + i0) * ldo + h * HS;      // (nq, HS), row stride ldo
            long qlo, qhi;
            pos_range(q_pos, i0, nq, &qlo, &qhi);
            for (long r = 0; r < nq; r++) {
                m[r] = -INFINITY;
                l[r] = 0.0f;
                for (long d = 0; d < HS; d++) O[r * ldo + d] = 0.0f;
            }
            for (long kt = 0; kt < ntk; kt++) {
                long j0 = kt * CT_ATT_BK, nk = min_l(CT_ATT_BK, Tk - j0);
                long klo, khi;
                pos_range(k_pos, j0, nk, &klo, &khi);
                if (klo > qhi) continue;  // no query of the tile sees any key of this tile
                int full = khi <= qlo;    // every query sees every key: no mask needed
                const float *K = k + (b * Tk + j0) * ldk + g * HS;  // (nk, HS)
                const float *V = v + (b * Tk + j0) * ldv + g * HS;  // (nk, HS)
                ct_gemm(0, 1, nq, nk, HS, scale, Q, ldq, K, ldk, 0.0f, S, CT_ATT_BK);
                for (long r = 0; r < nq; r++) {
                    float *s = S + r * CT_ATT_BK;
                    if (!full) mask_row(s, nk, k_pos, j0, q_pos ? (long)q_pos[i0 + r] : i0 + r);
                    float mx = m[r];
#pragma omp simd reduction(max : mx)
                    for (long c = 0; c < nk; c++) mx = s[c] > mx ? s[c] : mx;
                    if (mx == -INFINITY) {  // this row has seen no key yet: contributes nothing
                        for (long c = 0; c < nk; c++) s[c] = 0.0f;
                        continue;
                    }
                    float sum = exp_row(s, nk, mx);
                    float alpha = ct_fast_expf(m[r] - mx);  // 0 when m was -inf
                    l[r] = l[r] * alpha + sum;
                    m[r] = mx;
                    if (alpha != 1.0f)
                        for (long d = 0; d < HS; d++) O[r * ldo + d] *= alpha;
                }
                ct_gemm(0, 0, nq, HS, nk, 1.0f, S, CT_ATT_BK, V, ldv, 1.0f, O, ldo);
            }
            float *L = lse + (b * NH + h) * Tq + i0;  // (nq)
            for (long r = 0; r < nq; r++) {
                if (l[r] == 0.0f) {  // saw no key: lse -inf, output row stays 0
                    L[r] = -INFINITY;
                    continue;
                }
                L[r] = m[r] + logf(l[r]);
                float inv = 1.0f / l[r];
                for (long d = 0; d < HS; d++) O[r * ldo + d] *= inv;
            }
        }
    }
}

// Waits until *turn == seq (another thread's item is adding its tile).
static void wait_turn(const int64_t *turn, int64_t seq) {
    int spins = 0;
    while (__atomic_load_n(turn, __ATOMIC_ACQUIRE) != seq) ct_spin_turn(&spins);
}

void ct_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, long ldq, const float *k, long ldk, const float *v, long ldv,
                           const int32_t *q_pos, const int32_t *k_pos, long B, long Tq, long Tk, long NH, long NKV,
                           long HS, float *scratch) {
    const long group = NH / NKV, ldo = NH * HS;
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    const long per_kv = group * ntq, nitems = B * NKV * per_kv, per_thread = att_thread_floats(HS);
    const float scale = 1.0f / sqrtf((float)HS);
    int64_t *qlo = (int64_t *)scratch, *qhi = qlo + ntq, *klo = qhi + ntq, *khi = klo + ntk;
    int64_t *kcnt = khi + ntk, *turns = kcnt + ntk;  // turns (RING, ntk)
    float *base = scratch + att_header_floats(Tq, Tk);
    for (long qt = 0; qt < ntq; qt++) {
        long lo, hi;
        pos_range(q_pos, qt * CT_ATT_BQ, min_l(CT_ATT_BQ, Tq - qt * CT_ATT_BQ), &lo, &hi);
        qlo[qt] = lo, qhi[qt] = hi;
    }
    for (long kt = 0; kt < ntk; kt++) {
        long lo, hi;
        pos_range(k_pos, kt * CT_ATT_BK, min_l(CT_ATT_BK, Tk - kt * CT_ATT_BK), &lo, &hi);
        klo[kt] = lo, khi[kt] = hi;
        kcnt[kt] = 0;
        for (long qt = 0; qt < ntq; qt++) kcnt[kt] += lo <= qhi[qt];
    }
    memset(turns, 0, sizeof(int64_t) * CT_ATT_RING * ntk);
    long next = 0;  // items are handed out in order (the turns rely on it)
#pragma omp parallel
    {
        float *P = base + omp_get_thread_num() * per_thread;  // (BQ, BK) probabilities
        float *dP = P + CT_ATT_BQ * CT_ATT_BK;                 // (BQ, BK) dP, then dS
        float *D = dP + CT_ATT_BQ * CT_ATT_BK;                 // (BQ) rowsum(dO * O)
        float *dKp = D + CT_ATT_BQ, *dVp = dKp + CT_ATT_BK * HS;  // (BK, HS) this item's share
        for (;;) {
            long it = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (it >= nitems) break;
            // kv head by kv head; in each, query head by query head, the last query tile first
            long bg = it / per_kv, hl = it % per_kv / ntq, qt = ntq - 1 - it % ntq;
            long b = bg / NKV, g = bg % NKV, h = g * group + hl;
            int64_t epoch = bg / CT_ATT_RING, *turn = turns + bg % CT_ATT_RING * ntk;
            long i0 = qt * CT_ATT_BQ, nq = min_l(CT_ATT_BQ, Tq - i0);
            const float *Q = q + (b * Tq + i0) * ldq + h * HS;      // (nq, HS), row stride ldq
            float *dQ = dq + (b * Tq + i0) * ldq + h * HS;          // (nq, HS), row stride ldq
            const float *O = out + (b * Tq + i0) * ldo + h * HS;    // (nq, HS), row stride ldo
            const float *dO = dout + (b * Tq + i0) * ldo + h * HS;  // (nq, HS), row stride ldo
            const float *L = lse + (b * NH + h) * Tq + i0;          // (nq)
            for (long r = 0; r < nq; r++) {
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (long d = 0; d < HS; d++) s += dO[r * ldo + d] * O[r * ldo + d];
                D[r] = s;
            }
            for (long kt = 0; kt < ntk; kt++) {
                if (klo[kt] > qhi[qt]) continue;  // no query of the tile sees any key of this tile
                int full = khi[kt] <= qlo[qt];    // every query sees every key: no mask needed
                long j0 = kt * CT_ATT_BK, nk = min_l(CT_ATT_BK, Tk - j0);
                const float *K = k + (b * Tk + j0) * ldk + g * HS;  // (nk, HS)
                const float *V = v + (b * Tk + j0) * ldv + g * HS;  // (nk, HS)
                // P = exp(scale Q K^T - lse), 0 where masked or where the row saw no key
                ct_gemm(0, 1, nq, nk, HS, scale, Q, ldq, K, ldk, 0.0f, P, CT_ATT_BK);
                for (long r = 0; r < nq; r++) {
                    float *p = P + r * CT_ATT_BK;
                    float Lr = L[r];
                    if (Lr == -INFINITY) {
                        for (long c = 0; c < nk; c++) p[c] = 0.0f;
                        continue;
                    }
                    if (!full) mask_row(p, nk, k_pos, j0, q_pos ? (long)q_pos[i0 + r] : i0 + r);
                    long c = 0;
#ifdef CT_V16
                    for (; c + 16 <= nk; c += 16) ct_v16f_store(p + c, ct_fast_expf_v16(ct_v16f_load(p + c) - Lr));
#endif
                    for (; c + 8 <= nk; c += 8) ct_v8f_store(p + c, ct_fast_expf_v8(ct_v8f_load(p + c) - Lr));
                    for (; c < nk; c++) p[c] = ct_fast_expf(p[c] - Lr);
                }
                ct_gemm(1, 0, nk, HS, nq, 1.0f, P, CT_ATT_BK, dO, ldo, 0.0f, dVp, HS);  // dV share = P^T dO
                ct_gemm(0, 1, nq, nk, HS, 1.0f, dO, ldo, V, ldv, 0.0f, dP, CT_ATT_BK);  // dP = dO V^T
                for (long r = 0; r < nq; r++) {                                         // dS = P (dP - D)
                    float *p = P + r * CT_ATT_BK, *ds = dP + r * CT_ATT_BK;
                    float Dr = D[r];
                    for (long c = 0; c < nk; c++) ds[c] = p[c] * (ds[c] - Dr);
                }
                ct_gemm(0, 0, nq, HS, nk, scale, dP, CT_ATT_BK, K, ldk, 1.0f, dQ, ldq);  // dQ += s dS K
                ct_gemm(1, 0, nk, HS, nq, scale, dP, CT_ATT_BK, Q, ldq, 0.0f, dKp, HS);  // dK share = s dS^T Q
                // add the shares in the fixed order: this item's rank among the items of this kv
                // head that see key tile kt
                int64_t rank = hl * kcnt[kt];
                for (long q2 = qt + 1; q2 < ntq; q2++) rank += klo[kt] <= qhi[q2];
                int64_t seq = epoch * group * kcnt[kt] + rank;
                wait_turn(turn + kt, seq);
                float *dK = dk + (b * Tk + j0) * ldk + g * HS;  // (nk, HS)
                float *dV = dv + (b * Tk + j0) * ldv + g * HS;  // (nk, HS)
                for (long r = 0; r < nk; r++) {
                    float *dkr = dK + r * ldk, *dvr = dV + r * ldv;
                    const float *kp = dKp + r * HS, *vp = dVp + r * HS;
                    for (long d = 0; d < HS; d++) dkr[d] += kp[d], dvr[d] += vp[d];
                }
                __atomic_store_n(turn + kt, seq + 1, __ATOMIC_RELEASE);
            }
        }
    }
}
