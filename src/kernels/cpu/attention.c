// Causal grouped-query attention, FlashAttention-2 style (Dao 2023) on the CPU.
//
// Forward: for each (batch, query head, query tile) -- the parallel work items -- walk the key
// tiles with an online softmax: S = scale Q K^T for the tile, running row max m and row sum l,
// the output accumulator rescaled by exp(m_old - m_new) when the max grows, then O += P V.
// At the end O /= l and lse = m + log l is kept for backward. No (T, T) matrix ever exists.
//
// Backward: D = rowsum(dO * O), then per tile pair P = exp(S - lse) is recomputed and
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ += scale dS K,  dK += scale dS^T Q.
// Work items are (batch, kv head): an item owns dK and dV of its kv head and dQ of the query
// heads that share it, so nothing races and each item's sums run in a fixed order (results are
// reproducible for any thread count).
//
// Every product goes through ct_gemm straight on the strided q/k/v buffers (leading dimension =
// token stride), so no tile is ever copied or transposed. oneDNN runs a gemm called inside an
// OpenMP parallel region on the calling thread alone (measured: a 1024^3 sgemm from one thread
// of a 2-thread region runs at the single-thread rate), so each thread multiplies its own tiles.
#include <math.h>
#include <omp.h>

#include "kernels/cpu/fastmath.h"
#include "kernels/kernels.h"

#define CT_ATT_BQ 64  // query rows per tile
#define CT_ATT_BK 64  // key rows per tile

// Per-thread scratch: two (BQ, BK) tiles, the running m and l (BQ each), D for one head (Tq);
// rounded to 16 floats so that threads never share a cache line.
static long att_thread_floats(long Tq) {
    long f = 2 * CT_ATT_BQ * CT_ATT_BK + 2 * CT_ATT_BQ + Tq;
    return (f + 15) & ~15L;
}

long ct_attention_scratch_floats(long Tq, long Tk, long HS) { return (long)omp_get_max_threads() * att_thread_floats(Tq); }

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

void ct_attention_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk, const float *v,
                          long ldv, const int32_t *q_pos, const int32_t *k_pos, long B, long Tq, long Tk, long NH,
                          long NKV, long HS, float *scratch) {
    const long group = NH / NKV, ldo = NH * HS;
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    const long nitems = B * NH * ntq, per_thread = att_thread_floats(Tq);
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel
    {
        float *S = scratch + omp_get_thread_num() * per_thread;  // (BQ, BK) scores, then probabilities
        float *m = S + CT_ATT_BQ * CT_ATT_BK;                     // (BQ) running max
        float *l = m + CT_ATT_BQ;                                 // (BQ) running sum
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < nitems; it++) {
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
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (long c = 0; c < nk; c++) {
                        float p = ct_fast_expf(s[c] - mx);
                        s[c] = p;
                        sum += p;
                    }
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

void ct_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, long ldq, const float *k, long ldk, const float *v, long ldv,
                           const int32_t *q_pos, const int32_t *k_pos, long B, long Tq, long Tk, long NH, long NKV,
                           long HS, float *scratch) {
    const long group = NH / NKV, ldo = NH * HS;
    const long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    const long nitems = B * NKV, per_thread = att_thread_floats(Tq);
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel
    {
        float *P = scratch + omp_get_thread_num() * per_thread;  // (BQ, BK) probabilities
        float *dP = P + CT_ATT_BQ * CT_ATT_BK;                    // (BQ, BK) dP, then dS
        float *D = dP + CT_ATT_BQ * CT_ATT_BK;                    // (Tq) rowsum(dO * O) of one head
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < nitems; it++) {
            long b = it / NKV, g = it % NKV;
            for (long h = g * group; h < (g + 1) * group; h++) {
                const float *Qh = q + b * Tq * ldq + h * HS;      // (Tq, HS), row stride ldq
                float *dQh = dq + b * Tq * ldq + h * HS;          // (Tq, HS), row stride ldq
                const float *Oh = out + b * Tq * ldo + h * HS;    // (Tq, HS), row stride ldo
                const float *dOh = dout + b * Tq * ldo + h * HS;  // (Tq, HS), row stride ldo
                const float *Lh = lse + (b * NH + h) * Tq;        // (Tq)
                for (long i = 0; i < Tq; i++) {
                    float s = 0.0f;
#pragma omp simd reduction(+ : s)
                    for (long d = 0; d < HS; d++) s += dOh[i * ldo + d] * Oh[i * ldo + d];
                    D[i] = s;
                }
                for (long kt = 0; kt < ntk; kt++) {
                    long j0 = kt * CT_ATT_BK, nk = min_l(CT_ATT_BK, Tk - j0);
                    long klo, khi;
                    pos_range(k_pos, j0, nk, &klo, &khi);
                    const float *K = k + (b * Tk + j0) * ldk + g * HS;  // (nk, HS)
                    const float *V = v + (b * Tk + j0) * ldv + g * HS;  // (nk, HS)
                    float *dK = dk + (b * Tk + j0) * ldk + g * HS;      // (nk, HS)
                    float *dV = dv + (b * Tk + j0) * ldv + g * HS;      // (nk, HS)
                    for (long qt = 0; qt < ntq; qt++) {
                        long i0 = qt * CT_ATT_BQ, nq = min_l(CT_ATT_BQ, Tq - i0);
                        long qlo, qhi;
                        pos_range(q_pos, i0, nq, &qlo, &qhi);
                        if (klo > qhi) continue;
                        int full = khi <= qlo;
                        const float *Q = Qh + i0 * ldq, *dO = dOh + i0 * ldo;
                        float *dQ = dQh + i0 * ldq;
                        // P = exp(scale Q K^T - lse), 0 where masked or where the row saw no key
                        ct_gemm(0, 1, nq, nk, HS, scale, Q, ldq, K, ldk, 0.0f, P, CT_ATT_BK);
                        for (long r = 0; r < nq; r++) {
                            float *p = P + r * CT_ATT_BK;
                            float L = Lh[i0 + r];
                            if (L == -INFINITY) {
                                for (long c = 0; c < nk; c++) p[c] = 0.0f;
                                continue;
                            }
                            if (!full) mask_row(p, nk, k_pos, j0, q_pos ? (long)q_pos[i0 + r] : i0 + r);
                            for (long c = 0; c < nk; c++) p[c] = ct_fast_expf(p[c] - L);
                        }
                        ct_gemm(1, 0, nk, HS, nq, 1.0f, P, CT_ATT_BK, dO, ldo, 1.0f, dV, ldv);  // dV += P^T dO
                        ct_gemm(0, 1, nq, nk, HS, 1.0f, dO, ldo, V, ldv, 0.0f, dP, CT_ATT_BK);  // dP = dO V^T
                        for (long r = 0; r < nq; r++) {                                         // dS = P (dP - D)
                            float *p = P + r * CT_ATT_BK, *ds = dP + r * CT_ATT_BK;
                            float Dr = D[i0 + r];
                            for (long c = 0; c < nk; c++) ds[c] = p[c] * (ds[c] - Dr);
                        }
                        ct_gemm(0, 0, nq, HS, nk, scale, dP, CT_ATT_BK, K, ldk, 1.0f, dQ, ldq);  // dQ += s dS K
                        ct_gemm(1, 0, nk, HS, nq, scale, dP, CT_ATT_BK, Q, ldq, 1.0f, dK, ldk);  // dK += s dS^T Q
                    }
                }
            }
        }
    }
}
