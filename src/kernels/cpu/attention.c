// Causal grouped-query attention, FlashAttention-2 style (Dao 2023) on the CPU.
//
// Forward: for each (batch, query head, query tile) -- the parallel work items -- walk the key
// tiles with an online softmax: S = scale Q K^T for the tile, running max m and sum l per query,
// the output accumulator rescaled by exp(m_old - m_new) when the max grows, then O += P V.
// At the end O /= l and lse = m + log l is kept for backward. No (T, T) matrix ever exists.
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
// of the pair's dK and dV rows written back once (local_floats). The sums are the same for any
// thread count and any schedule: bitwise reproducible. (Chosen over the two-pass FA2 scheme --
// dK, dV over key tiles, then dQ over query tiles -- which recomputes QK^T and dO V^T: 7
// products per tile pair, not 5.)
//
// The tiles are held transposed: keys (or head dimensions) down, the item's 64 queries across.
// Then every per-query quantity (running max, sum, rescale, lse, D) is a row of vectors, the
// softmax runs down columns with whole-vector operations, and the rescale of O folds into the
// product that adds P V. Each product is one call of attention_tile.c's kernel, whose B operand
// is contiguous: the item packs Q^T and dO^T (and Q, dO with padded rows) once. A thread that
// takes a whole kv head copies its K and V rows contiguous once (copy_head) and every product
// reads them there; a single item reads a key tile's K or V in place as the broadcast operand (one
// element per row per step) and copies it contiguous (4K floats) where it is read down its
// columns. Nothing is transposed per tile pair.
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/mathutil.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/spin.h"
#include "kernels/kernels.h"

#define CT_ATT_BQ 64    // query rows per tile (a multiple of CT_ATT_PAD: the tiles' row width)
#define CT_ATT_BK 64    // key rows per tile
#define CT_ATT_RING 16  // (batch, kv head) slots of backward turn counters, reused in a ring

// Vectors of the per-query passes: 16 lanes where the ISA has them, else 8.
#ifdef CT_V16
#define AW 16
typedef ct_v16f attv;
typedef ct_v16i attvi;
#define attv_load ct_v16f_load
#define attv_store ct_v16f_store
#define attv_splat ct_v16f_splat
#define attv_select ct_v16f_select
#define attv_exp ct_fast_expf_v16_quick
#else
#define AW 8
typedef ct_v8f attv;
typedef ct_v8i attvi;
#define attv_load ct_v8f_load
#define attv_store ct_v8f_store
#define attv_splat ct_v8f_splat
#define attv_select ct_v8f_select
#define attv_exp ct_fast_expf_v8
#endif
// s > m ? s : m -- vmaxps(s, m) is exactly that (a NaN s never enters m); one instruction
// where the select takes a compare and a blend.
#if defined(CT_V16)
static inline attv attv_max(attv s, attv m) { return (attv)_mm512_max_ps((__m512)s, (__m512)m); }
#elif defined(__AVX__)
static inline attv attv_max(attv s, attv m) { return (attv)_mm256_max_ps((__m256)s, (__m256)m); }
#else
static inline attv attv_max(attv s, attv m) { return attv_select(s > m, s, m); }
#endif
static inline attvi attvi_load(const int32_t *p) {
    attvi v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline long pad_hs(long HS) { return (HS + CT_ATT_PAD - 1) / CT_ATT_PAD * CT_ATT_PAD; }

// Per-thread tiles, carved from the thread's part of the scratch (NULL base: only counts), each
// rounded to 16 floats so no two share a cache line. HP = HS padded to CT_ATT_PAD.
typedef struct {
    float *qt;   // (HS, BQ) Q^T, zero columns past the item's queries
    float *st;   // (BK, BQ) S^T, then P^T
    float *o;    // (BQ, HP) O accumulator
    float *vc;   // (BK, HP) the key tile's V, contiguous
    float *m, *l, *al;  // (BQ) running max, running sum, this tile's rescale
    int32_t *qp;        // (BQ) query positions (INT_MAX past the item's queries: nothing masked)
    int32_t *qd;        // (BQ) query document ids (with documents only)
} fwd_tiles;

typedef struct {
    float *qt, *dot;        // (HS, BQ) Q^T, dO^T
    float *qrows, *dorows;  // (BQ, HP) Q, dO, zero columns past HS
    float *pt;              // (BK, BQ) P^T, then dS^T
    float *dqa;             // (BQ, HP) dQ accumulator
    float *kc;              // (BK, HP) the key tile's K, contiguous
    float *dkp, *dvp;       // (BK, HP) this item's shares of the key tile's dK, dV
    float *d, *lv;          // (BQ) D = rowsum(dO * O); lse with +inf for no key (so P = 0)
    int32_t *qp;            // (BQ) query positions
    int32_t *qd;            // (BQ) query document ids (with documents only)
    float *dkl, *dvl;       // (Tk, HP) one kv head's dK, dV while its items run (NULL: added in place)
    const float *kl, *vl;   // (Tk, HP) the kv head's K, V copied (copy_head), or NULL: read in place
} bwd_tiles;

static float *take(float *base, long *used, long n) {
    float *p = base ? base + *used : NULL;
    *used += (n + 15) & ~15L;
    return p;
}

static long fwd_carve(float *base, long HS, fwd_tiles *t) {
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

static long bwd_carve(float *base, long HS, bwd_tiles *t) {
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

static long att_thread_floats(long HS) {
    fwd_tiles f;
    bwd_tiles b;
    long nf = fwd_carve(NULL, HS, &f), nb = bwd_carve(NULL, HS, &b);
    return nf > nb ? nf : nb;
}

// Shared header of the backward, int64 words: position ranges of every query tile (lo, hi) and
// key tile (lo, hi), the number of query tiles that see each key tile, and the turn counters
// (RING, ntk).
static long att_header_floats(long Tq, long Tk) {
    long ntq = (Tq + CT_ATT_BQ - 1) / CT_ATT_BQ, ntk = (Tk + CT_ATT_BK - 1) / CT_ATT_BK;
    long words = 2 * ntq + 3 * ntk + CT_ATT_RING * ntk;
    return (2 * words + 15) & ~15L;
}

// A thread that takes a whole kv head (whole_kv_heads, below) adds its items' shares of dK and
// dV into a copy of that head's rows, contiguous, and writes them back once: the adds then hit
// lines in this core's cache, and the prefetch of every key tile's rows before its adds goes.
// Worth it where each key tile takes many adds -- query heads per kv head x query tiles at least
// CT_ATT_LOCAL_MIN_ADDS -- and where the copy of both fits CT_ATT_LOCAL_MAX_FLOATS (Tk up to
// 2,048 at head size 64: 1 MiB a thread). Measured on a 2-core Xeon with AMX, two
// threads, the backward with and without the copy called in turn (medians of 30-100 pairs): with
// grouped queries 6-11% faster (B 8, T 256, 4 heads over 2: 0.94; B 4, T 512, 12 over 4: 0.92;
// B 2, T 1024, 8 over 2: 0.89), with one query head per kv head 5% at T 1024 (0.95), even at T 512
// (0.985, 1.03) and 2% slower at T 256 (1.02: bench S, 4 adds a key tile -- left in place).
// The same adds in the same order either way: the same bits.
#define CT_ATT_LOCAL_MAX_FLOATS (256L * 1024)
#define CT_ATT_LOCAL_MIN_ADDS 8
static long local_max_tk(long HS) { return CT_ATT_LOCAL_MAX_FLOATS / (2 * pad_hs(HS)); }

// A thread's copy for Tk keys: 0 past local_max_tk.
static long local_floats(long Tk, long HS) {
    return Tk <= local_max_tk(HS) ? (2 * Tk * pad_hs(HS) + 15) & ~15L : 0;
}

// Reserved for a copy: never less for a larger Tk, so a scratch sized for more keys than a call
// has also holds that call's copy.
static long local_reserve(long Tk, long HS) {
    return local_floats(Tk < local_max_tk(HS) ? Tk : local_max_tk(HS), HS);
}

// A thread that takes whole kv heads also copies each head's K and V rows, contiguous and padded
// to HP (pack_rows), once per head (forward and backward): every product of the head's items then
// reads them from there, where single items read K in place from the (B, T, ...) tensor, rows a
// token stride apart, and copy a key tile's K or V rows again for every item that sees it (10
// copies of the 4 key tiles of a head at T 256). The forward
// takes whole kv heads too where the backward does (whole_kv_heads), all but the last few
// (forward's tail). The same values multiplied in the same order: the same bits. As much room as
// the dK / dV copy (local_floats), under the same limit. Measured on a 2-core Xeon with AMX
//, two threads, with and without called in turn (medians of 20-60 pairs): B 4, T 512,
// 12 heads (bench M's) forward 0.875-0.93, backward 0.935-0.96; B 2, T 1024, 8 heads over 2:
// backward 0.96 (its 4 kv heads are too few to hand out whole in the forward); bench S's shape
// (B 8, T 256, 4 heads) forward 0.99-1.03, backward 0.985-0.99. (-D for the variants: 0 is off.)
#ifndef CT_ATT_KV_COPY
#define CT_ATT_KV_COPY 1
#endif

long ct_attention_scratch_floats(long Tq, long Tk, long HS) {
    return att_header_floats(Tq, Tk) +
           (long)omp_get_max_threads() * (att_thread_floats(HS) + 2 * local_reserve(Tk, HS));
}

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

// ---------------------------------------------------------------- packing, once per item
// dst (HS, BQ) = src^T for src (n, HS) with row stride ld; columns n..BQ-1 zero. Whole 8 x 8
// blocks go through registers (8 loads, 24 shuffles, 8 stores) where the ISA has them.
NO_LIBCALLS static void pack_t(float *restrict dst, const float *restrict src, long ld, long n, long HS) {
    long d0 = 0;
#if defined(__AVX2__)
    for (; d0 + 8 <= HS; d0 += 8) {
        long i = 0;
        for (; i + 8 <= n; i += 8) ct_transpose8(dst + d0 * CT_ATT_BQ + i, CT_ATT_BQ, src + i * ld + d0, ld);
        for (long d = d0; d < d0 + 8; d++)
            for (long r = i; r < CT_ATT_BQ; r++) dst[d * CT_ATT_BQ + r] = r < n ? src[r * ld + d] : 0.0f;
    }
#endif
    for (long d = d0; d < HS; d++)
        for (long r = 0; r < CT_ATT_BQ; r++) dst[d * CT_ATT_BQ + r] = r < n ? src[r * ld + d] : 0.0f;
}

// dst (n, w) = src (n, HS) with row stride ld; columns HS..w-1 zero. The source rows are a token
// stride apart (kilobytes), where the hardware prefetchers do not follow: each row is asked for
// CT_ATT_PACK_AHEAD rows ahead, and copied in whole vectors (the element loop with its column test
// did not vectorise). A 2-core Xeon with AMX, two threads, paired calls: bench S's shape
// forward 0.966, backward 0.970; bench M's forward 0.96. (The same for Q^T and dO^T in pack_t:
// S 1.009, M 0.98 -- not kept.)
#define CT_ATT_PACK_AHEAD 8
NO_LIBCALLS static void pack_rows(float *restrict dst, long w, const float *restrict src, long ld, long n, long HS) {
    for (long i = 0; i < n; i++) {
        if (i + CT_ATT_PACK_AHEAD < n)
            for (long d = 0; d < HS; d += 16) __builtin_prefetch(src + (i + CT_ATT_PACK_AHEAD) * ld + d, 0, 3);
        const float *s = src + i * ld;
        float *o = dst + i * w;
        long d = 0;
#ifdef CT_V16
        for (; d + 16 <= HS; d += 16) ct_v16f_store(o + d, ct_v16f_load(s + d));
#endif
        for (; d < HS; d++) o[d] = s[d];
        for (; d < w; d++) o[d] = 0.0f;
    }
}

// Rows [0, Tk) of one kv head of x (row stride ld) into dst (Tk, HP), zero columns past HS.
static void copy_head(float *dst, const float *x, long ld, long Tk, long HS) {
    pack_rows(dst, pad_hs(HS), x, ld, Tk, HS);
}

// The K and V rows of kv head c (batch c / NKV, head c % NKV) into kl, vl (Tk, HP) each.
static void copy_kv_head(float *kl, float *vl, const float *k, long ldk, const float *v, long ldv, long c, long NKV,
                         long Tk, long HS) {
    copy_head(kl, k + (c / NKV) * Tk * ldk + c % NKV * HS, ldk, Tk, HS);
    copy_head(vl, v + (c / NKV) * Tk * ldv + c % NKV * HS, ldv, Tk, HS);
}

// This thread's copies, after every thread's tiles at base (ct_attention_scratch_floats): K, V,
// then (backward) dK, dV, Tk x HP floats each.
static float *thread_copies(float *base, long per_thread, long Tk, long HS) {
    return base + omp_get_num_threads() * per_thread + omp_get_thread_num() * 2 * local_floats(Tk, HS);
}

// Query positions of the item's columns; INT_MAX past its nq queries (those columns see every
// key: their zero Q^T columns give finite scores that nothing reads).
static void query_positions(int32_t *qp, const int32_t *q_pos, long i0, long nq) {
    for (long i = 0; i < CT_ATT_BQ; i++) qp[i] = i >= nq ? INT_MAX : q_pos ? q_pos[i0 + i] : (int32_t)(i0 + i);
}

// Row j of a (BK, BQ) score tile: -inf where key position kp is after the column's query.
static inline void mask_row(float *s, const int32_t *qp, int32_t kp) {
    const attv ninf = attv_splat(-INFINITY);
    for (long c = 0; c < CT_ATT_BQ; c += AW)
        attv_store(s + c, attv_select(attvi_load(qp + c) < kp, ninf, attv_load(s + c)));
}

static inline int32_t key_position(const int32_t *k_pos, long j) { return k_pos ? k_pos[j] : (int32_t)j; }

// ---------------------------------------------------------------- documents
// With document ids (one sequence's rows: q_doc + b Tq, k_doc + b Tk) a key is visible only to
// queries of its own document as well. A key tile whose ids cannot meet the query tile's (their
// ranges are disjoint) is skipped whole, like a tile in the future: short documents cost less.
// A tile pair whose ids are all one and the same needs no document mask.

// Smallest and largest id among rows [r0, r0 + n) (ids need not be sorted: context parallel's
// gathered keys are not).
static void doc_range(const int32_t *doc, long r0, long n, int32_t *lo, int32_t *hi) {
    int32_t a = doc[r0], b = doc[r0];
    for (long i = 1; i < n; i++) {
        int32_t d = doc[r0 + i];
        a = d < a ? d : a;
        b = d > b ? d : b;
    }
    *lo = a;
    *hi = b;
}

// The query tile's ids (past its nq queries: its first, unread).
static void query_docs(int32_t *qd, const int32_t *doc, long i0, long nq) {
    for (long i = 0; i < CT_ATT_BQ; i++) qd[i] = doc[i0 + (i < nq ? i : 0)];
}

// What a key tile [j0, j0 + nk) is to the query tile (ids qlo..qhi): 0 skip, 1 visible by
// position alone, 2 masked by document too.
static int doc_relation(const int32_t *kdoc, long j0, long nk, int32_t qlo, int32_t qhi) {
    if (!kdoc) return 1;
    int32_t lo, hi;
    doc_range(kdoc, j0, nk, &lo, &hi);
    if (hi < qlo || lo > qhi) return 0;
    return lo == hi && qlo == qhi && lo == qlo ? 1 : 2;
}

// Row j of a score tile: -inf where the key is after the column's query or in another document.
static inline void mask_row_doc(float *s, const int32_t *qp, int32_t kp, const int32_t *qd, int32_t kd) {
    const attv ninf = attv_splat(-INFINITY);
    for (long c = 0; c < CT_ATT_BQ; c += AW)
        attv_store(s + c, attv_select((attvi_load(qp + c) < kp) | (attvi_load(qd + c) != kd), ninf, attv_load(s + c)));
}

// Masks the score tile (nk, BQ) of keys [j0, j0 + nk): by position, and by document when dm == 2.
static void mask_tile(float *st, const int32_t *qp, const int32_t *qd, const int32_t *k_pos, const int32_t *kdoc,
                      long j0, long nk, int dm) {
    for (long j = 0; j < nk; j++) {
        if (dm == 2)
            mask_row_doc(st + j * CT_ATT_BQ, qp, key_position(k_pos, j0 + j), qd, kdoc[j0 + j]);
        else
            mask_row(st + j * CT_ATT_BQ, qp, key_position(k_pos, j0 + j));
    }
}

// ---------------------------------------------------------------- tiles on the diagonal
// When a tile's queries and keys are both runs of consecutive positions (always without
// explicit positions, usually with them), query i sees key j iff j - i <= delta, delta the
// difference of the runs' starts: the visible part is a band, and blocks of 16 keys / 16
// queries wholly outside it are skipped. Skipped scores are set to -inf with the rest of the
// mask (so their P and dS are 0), and a skipped product term would have been 0 times a finite
// value, so skipping changes no sum. Without runs (diag.on 0) everything is computed and masked.
#define CT_ATT_SUB 16  // a multiple of CT_ATT_PAD on every ISA
typedef struct {
    int on;
    long delta;
} diag_band;

// Start of a run of n consecutive positions at rows r0.., or LONG_MIN.
static long run_start(const int32_t *pos, long r0, long n) {
    if (!pos) return r0;
    for (long i = 1; i < n; i++)
        if (pos[r0 + i] != pos[r0] + i) return LONG_MIN;
    return pos[r0];
}

static diag_band band_of(const int32_t *q_pos, long i0, long nq, const int32_t *k_pos, long j0, long nk) {
    long qs = run_start(q_pos, i0, nq), ks = run_start(k_pos, j0, nk);
    diag_band d = {qs != LONG_MIN && ks != LONG_MIN, 0};
    if (d.on) d.delta = qs - ks;
    return d;
}

// First query column that keys [m0, m0 + SUB) can see (a multiple of SUB; BQ: none).
static long band_first_query(diag_band d, long m0) {
    if (!d.on) return 0;
    long c = m0 - d.delta;
    c = c <= 0 ? 0 : c / CT_ATT_SUB * CT_ATT_SUB;
    return c > CT_ATT_BQ ? CT_ATT_BQ : c;
}

// Keys that queries [r0, r0 + SUB) can see: the first this many of the tile's nk.
static long band_keys(diag_band d, long r0, long nk) {
    if (!d.on) return nk;
    long n = r0 + CT_ATT_SUB + d.delta;
    return n < 0 ? 0 : n > nk ? nk : n;
}

// S^T (nk, BQ) = alpha K Q^T over the band (K (nk, HS) row stride ldk, qt (HS, BQ)).
static void scores_t(float *st, const float *K, long ldk, const float *qt, long nk, long HS, float alpha,
                     diag_band d) {
    for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
        long c0 = band_first_query(d, m0);
        if (c0 < CT_ATT_BQ)
            ct_att_mm(CT_ATT_STORE, ct_min_l(CT_ATT_SUB, nk - m0), CT_ATT_BQ - c0, HS, K + m0 * ldk, ldk, 1, qt + c0,
                      CT_ATT_BQ, st + m0 * CT_ATT_BQ + c0, CT_ATT_BQ, alpha, NULL);
    }
}

// C (nq, HP) (mode) P B over the band: P read down the columns of pt (nk, BQ), B (nk, HP).
static void queries_by_keys(ct_att_mode mode, float *c, const float *pt, const float *b, long nq, long nk, long HP,
                            const float *rowv, diag_band d) {
    for (long r0 = 0; r0 < nq; r0 += CT_ATT_SUB)
        ct_att_mm(mode, ct_min_l(CT_ATT_SUB, nq - r0), HP, band_keys(d, r0, nk), pt + r0, 1, CT_ATT_BQ, b, HP,
                  c + r0 * HP, HP, 1.0f, rowv ? rowv + r0 : NULL);
}

// C (nk, HP) = P^T B over the band: rows of pt (nk, BQ) against B (nq, HP), query by query.
static void keys_by_queries(float *c, const float *pt, const float *b, long nq, long nk, long HP, diag_band d) {
    for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
        long c0 = band_first_query(d, m0);
        ct_att_mm(CT_ATT_STORE, ct_min_l(CT_ATT_SUB, nk - m0), HP, nq > c0 ? nq - c0 : 0, pt + m0 * CT_ATT_BQ + c0,
                  CT_ATT_BQ, 1, b + c0 * HP, HP, c + m0 * HP, HP, 1.0f, NULL);
    }
}

// ---------------------------------------------------------------- forward
// Whether the backward hands out whole kv heads -- every item of one (batch, kv head), in the
// adds' order, to one thread -- rather than single items (the forward does too, for its copies of
// K and V: ct_attention_scratch_floats). Then each key tile's dK and dV are
// added to by one thread only: no turn is ever waited for (perf had the spin on the turn at a
// fifth of the backward's own time at bench S), and their lines stay in that core's cache
// instead of moving between cores at every add. The sums, and so the bits, are the same either
// way. Only when the kv heads spread evenly over the threads (or are many beside them): all of
// them are the same work, and with fewer, single items keep every thread busy. Measured on Zen 4,
// two threads, alternating builds (bench_attention): backward 0-5% faster (S with one kv head
// 4.29-4.30 -> 4.10-4.13 ms; S and M with more heads within noise to 3%).
static bool whole_kv_heads(long n_kv_heads, long threads) {
    return n_kv_heads % threads == 0 || n_kv_heads >= 8 * threads;
}

// Asks for rows [0, n) of x (HS floats each, row stride ld) to be brought into cache ahead of
// use (rw 1: to be written). The rows are a leading dimension apart in the big (B, T, ...)
// tensors, so the hardware prefetchers do not fetch them; without this, perf put a third of
// the backward's own time (outside the products) on the loads of the dK / dV adds and of D,
// and a tenth of the forward's on the stores of O.
static void prefetch_rows(const float *x, long ld, long n, long HS, int rw) {
    for (long r = 0; r < n; r++)
        for (long d = 0; d < HS; d += 16) {
            if (rw)
                __builtin_prefetch(x + r * ld + d, 1, 3);
            else
                __builtin_prefetch(x + r * ld + d, 0, 3);
        }
}

// The online softmax of one key tile, down the columns of S^T (nk, BQ): P^T = exp(S^T - m_new)
// in place; l = l exp(m - m_new) + colsum P; al = exp(m - m_new) for O's rescale. A column that
// has seen no key yet (max -inf) takes m_new = 0 for the exps: P 0, and l, O stay 0.
static void softmax_columns(const fwd_tiles *t, long nk) {
    const attv ninf = attv_splat(-INFINITY), zero = attv_splat(0.0f);
    for (long c = 0; c < CT_ATT_BQ; c += AW) {
        // the running max over four chains, not one: a chain of 64 dependent compares and blends
        // took a sixth of the forward's own time (perf). The max of finite values and -inf is
        // the same whatever the order (a +0 / -0 tie may go either way; both give the same
        // exps, sums and lse below).
        attv mold = attv_load(t->m + c), mx = mold, m1 = mold, m2 = mold, m3 = mold;
        long j = 0;
        for (; j + 4 <= nk; j += 4) {
            const float *sp = t->st + j * CT_ATT_BQ + c;
            mx = attv_max(attv_load(sp), mx);
            m1 = attv_max(attv_load(sp + CT_ATT_BQ), m1);
            m2 = attv_max(attv_load(sp + 2 * CT_ATT_BQ), m2);
            m3 = attv_max(attv_load(sp + 3 * CT_ATT_BQ), m3);
        }
        for (; j < nk; j++) mx = attv_max(attv_load(t->st + j * CT_ATT_BQ + c), mx);
        mx = attv_max(attv_max(m1, mx), attv_max(m3, m2));
        attv mu = attv_select(mx == ninf, zero, mx), sum = zero;
        for (long j = 0; j < nk; j++) {
            float *sp = t->st + j * CT_ATT_BQ + c;
            attv e = attv_exp(attv_load(sp) - mu);
            attv_store(sp, e);
            sum += e;
        }
        attv al = attv_exp(mold - mu);  // 0 while m is -inf
        attv_store(t->al + c, al);
        attv_store(t->l + c, attv_load(t->l + c) * al + sum);
        attv_store(t->m + c, mx);
    }
}

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
    pos_range(q_pos, i0, nq, &qlo, &qhi);
    pack_t(t->qt, Q, ldq, nq, HS);
    prefetch_rows(x->out + (b * Tq + i0) * ldo + h * HS, ldo, nq, HS, 1);  // written at the end
    query_positions(t->qp, q_pos, i0, nq);
    const int32_t *qdoc = x->q_doc ? x->q_doc + b * Tq : NULL, *kdoc = qdoc ? x->k_doc + b * Tk : NULL;
    int32_t qdlo = 0, qdhi = 0;
    if (qdoc) doc_range(qdoc, i0, nq, &qdlo, &qdhi), query_docs(t->qd, qdoc, i0, nq);
    for (long i = 0; i < CT_ATT_BQ; i++) t->m[i] = -INFINITY, t->l[i] = 0.0f;
    memset(t->o, 0, sizeof(float) * CT_ATT_BQ * HP);
    for (long kt = 0; kt < ntk; kt++) {
        long j0 = kt * CT_ATT_BK, nk = ct_min_l(CT_ATT_BK, Tk - j0);
        long klo, khi;
        pos_range(k_pos, j0, nk, &klo, &khi);
        if (klo > qhi) continue;  // no query of the tile sees any key of this tile
        const int dm = doc_relation(kdoc, j0, nk, qdlo, qdhi);
        if (!dm) continue;  // nor of its documents
        const float *K = Kh + j0 * ldk;  // (nk, HS)
        // S^T (nk, BQ) = scale K Q^T
        diag_band d = {0, 0};
        if (khi > qlo) d = band_of(q_pos, i0, nq, k_pos, j0, nk);  // some query must not see some key
        scores_t(t->st, K, ldk, t->qt, nk, HS, x->scale, d);
        if (khi > qlo || dm == 2) mask_tile(t->st, t->qp, t->qd, k_pos, kdoc, j0, nk, dm);
        softmax_columns(t, nk);
        // O (nq, HP) = diag(al) O + P V, P read down the columns of P^T; V (nk, HP) contiguous
        const float *vc = vl ? vl + j0 * HP : t->vc;
        if (!vl) pack_rows(t->vc, HP, x->v + (b * Tk + j0) * x->ldv + g * HS, x->ldv, nk, HS);
        queries_by_keys(CT_ATT_RESCALE, t->o, t->st, vc, nq, nk, HP, t->al, d);
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
    const long nitems = B * NH * ntq, per_thread = att_thread_floats(HS);
    float *base = scratch + att_header_floats(Tq, Tk);
    const fwd_call x = {.out = out, .lse = lse, .q = q, .k = k, .v = v, .ldq = ldq, .ldk = ldk, .ldv = ldv,
                        .ldo = NH * HS, .Tq = Tq, .Tk = Tk, .NH = NH, .HS = HS, .HP = HP, .group = group,
                        .ntq = ntq, .ntk = ntk, .q_pos = q_pos, .k_pos = k_pos, .q_doc = k_doc ? q_doc : NULL,
                        .k_doc = q_doc ? k_doc : NULL, .scale = 1.0f / sqrtf((float)HS)};
    // whole kv heads (every item of a (batch, kv head) on one thread) with its K and V copied once,
    // but the last heads' items one by one (the last query tiles first): a thread that takes a
    // whole head near the end would leave the others waiting for up to a head's time
    const long copy = CT_ATT_KV_COPY && whole_kv_heads(B * NKV, omp_get_max_threads()) ? local_floats(Tk, HS) : 0;
    const long chunk = group * ntq, tail = 2L * omp_get_max_threads();
    const long whole = copy && B * NKV > tail ? B * NKV - tail : 0;  // heads handed out whole
    long next = 0;  // handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    {
        fwd_tiles t;
        fwd_carve(base + omp_get_thread_num() * per_thread, HS, &t);
        float *kl = whole ? thread_copies(base, per_thread, Tk, HS) : NULL;
        float *vl = whole ? kl + Tk * HP : NULL;
        for (;;) {
            long c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (c < whole) {  // batch c / NKV, kv head c % NKV
                copy_kv_head(kl, vl, k, ldk, v, ldv, c, NKV, Tk, HS);
                for (long it = c * chunk; it < (c + 1) * chunk; it++) forward_item(&x, &t, it, kl, vl);
                continue;
            }
            long it = whole * chunk + (c - whole);
            if (it >= nitems) break;
            forward_item(&x, &t, it, NULL, NULL);
        }
    }
}

// ---------------------------------------------------------------- backward
// Waits until *turn == seq (another thread's item is adding its tile).
static void wait_turn(const int64_t *turn, int64_t seq) {
    int spins = 0;
    while (__atomic_load_n(turn, __ATOMIC_ACQUIRE) != seq) ct_spin_turn(&spins);
}

// P^T (nk, BQ) = exp(S^T - lse) in place, down the columns; 0 where masked (S -inf) and in
// columns that saw no key (lv +inf).
static void exp_columns(float *pt, const float *lv, long nk) {
    for (long j = 0; j < nk; j++)
        for (long c = 0; c < CT_ATT_BQ; c += AW) {
            float *p = pt + j * CT_ATT_BQ + c;
            attv_store(p, attv_exp(attv_load(p) - attv_load(lv + c)));
        }
}

// What every backward item reads: the call's arguments and its shared header (the position
// ranges of the tiles, the number of query tiles that see each key tile, the turn counters).
typedef struct {
    float *dq, *dk, *dv;
    const float *dout, *out, *lse, *q, *k, *v;
    long ldq, ldk, ldv, ldo, Tq, Tk, NH, NKV, HS, HP, group, ntq, ntk, per_kv;
    const int32_t *q_pos, *k_pos;
    const int32_t *q_doc, *k_doc;  // (B, Tq), (B, Tk) or NULL
    const int64_t *qlo, *qhi, *klo, *khi, *kcnt;
    int64_t *turns;
    float scale;
} bwd_call;

// dK (nk, HS) += the item's dK share, dV likewise (row strides ldk, ldv).
static void add_shares(float *dK, long ldk, float *dV, long ldv, const bwd_tiles *t, long nk, long HS) {
    const long HP = pad_hs(HS);
    for (long r = 0; r < nk; r++) {
        float *dkr = dK + r * ldk, *dvr = dV + r * ldv;
        const float *kp = t->dkp + r * HP, *vp = t->dvp + r * HP;
        for (long d = 0; d < HS; d++) dkr[d] += kp[d], dvr[d] += vp[d];
    }
}

// rows (n, HS): dst (row stride ldd) = src (row stride lds).
static void copy_rows(float *dst, long ldd, const float *src, long lds, long n, long HS) {
    for (long r = 0; r < n; r++) memcpy(dst + r * ldd, src + r * lds, sizeof(float) * (size_t)HS);
}

// One backward item (batch, query head, query tile), on this thread's tiles: its dQ rows, and its
// shares of dK and dV added in their turn.
static void backward_item(const bwd_call *x, bwd_tiles *t, long it) {
    float *dq = x->dq, *dk = x->dk, *dv = x->dv;
    const float *dout = x->dout, *out = x->out, *lse = x->lse, *q = x->q, *k = x->k, *v = x->v;
    const long ldq = x->ldq, ldk = x->ldk, ldv = x->ldv, ldo = x->ldo, Tq = x->Tq, Tk = x->Tk, NH = x->NH;
    const long NKV = x->NKV, HS = x->HS, HP = x->HP, group = x->group, ntq = x->ntq, ntk = x->ntk;
    const long per_kv = x->per_kv;
    const int32_t *q_pos = x->q_pos, *k_pos = x->k_pos;
    const int64_t *qlo = x->qlo, *qhi = x->qhi, *klo = x->klo, *khi = x->khi, *kcnt = x->kcnt;
    int64_t *turns = x->turns;
    const float scale = x->scale;
    // kv head by kv head; in each, query head by query head, the last query tile first
    long bg = it / per_kv, hl = it % per_kv / ntq, qt = ntq - 1 - it % ntq;
    long b = bg / NKV, g = bg % NKV, h = g * group + hl;
    int64_t epoch = bg / CT_ATT_RING, *turn = turns + bg % CT_ATT_RING * ntk;
    long i0 = qt * CT_ATT_BQ, nq = ct_min_l(CT_ATT_BQ, Tq - i0);
    const float *Q = q + (b * Tq + i0) * ldq + h * HS;      // (nq, HS), row stride ldq
    const float *O = out + (b * Tq + i0) * ldo + h * HS;    // (nq, HS), row stride ldo
    const float *dO = dout + (b * Tq + i0) * ldo + h * HS;  // (nq, HS), row stride ldo
    const float *L = lse + (b * NH + h) * Tq + i0;          // (nq)
    prefetch_rows(O, ldo, nq, HS, 0);  // read by D below, after the packs
    prefetch_rows(dq + (b * Tq + i0) * ldq + h * HS, ldq, nq, HS, 1);  // added to at the end
    pack_t(t->qt, Q, ldq, nq, HS);
    pack_t(t->dot, dO, ldo, nq, HS);
    pack_rows(t->qrows, HP, Q, ldq, nq, HS);
    pack_rows(t->dorows, HP, dO, ldo, nq, HS);
    query_positions(t->qp, q_pos, i0, nq);
    const int32_t *qdoc = x->q_doc ? x->q_doc + b * Tq : NULL, *kdoc = qdoc ? x->k_doc + b * Tk : NULL;
    int32_t qdlo = 0, qdhi = 0;
    if (qdoc) doc_range(qdoc, i0, nq, &qdlo, &qdhi), query_docs(t->qd, qdoc, i0, nq);
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
        // this item's turn among the items of this kv head that see key tile kt by position:
        // its rank among them
        int64_t rank = hl * kcnt[kt];
        for (long q2 = qt + 1; q2 < ntq; q2++) rank += klo[kt] <= qhi[q2];
        const int64_t seq = epoch * group * kcnt[kt] + rank;
        const int dm = doc_relation(kdoc, j0, nk, qdlo, qdhi);
        if (!dm) {  // no document meets: nothing to add, but the turn is taken (the order stays)
            if (!t->dkl) {
                wait_turn(turn + kt, seq);
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
        if (khi[kt] > qlo[qt]) d = band_of(q_pos, i0, nq, k_pos, j0, nk);
        scores_t(t->pt, K, ldk_t, t->qt, nk, HS, scale, d);
        if (khi[kt] > qlo[qt] || dm == 2) mask_tile(t->pt, t->qp, t->qd, k_pos, kdoc, j0, nk, dm);
        exp_columns(t->pt, t->lv, nk);
        if (!t->dkl) {  // added to below
            prefetch_rows(dk + (b * Tk + j0) * ldk + g * HS, ldk, nk, HS, 1);
            prefetch_rows(dv + (b * Tk + j0) * ldv + g * HS, ldv, nk, HS, 1);
        }
        // dV share (nk, HP) = P^T dO
        keys_by_queries(t->dvp, t->pt, t->dorows, nq, nk, HP, d);
        // dS^T = scale P^T * (V dO^T - D), in place of P^T
        for (long m0 = 0; m0 < nk; m0 += CT_ATT_SUB) {
            long c0 = band_first_query(d, m0);  // columns before it hold P = 0: dS = 0
            if (c0 < CT_ATT_BQ)
                ct_att_mm(CT_ATT_DS, ct_min_l(CT_ATT_SUB, nk - m0), CT_ATT_BQ - c0, HS, V + m0 * ldv_t, ldv_t, 1,
                          t->dot + c0, CT_ATT_BQ, t->pt + m0 * CT_ATT_BQ + c0, CT_ATT_BQ, scale, t->d + c0);
        }
        // dQ (nq, HP) += dS K, dS read down the columns of dS^T
        if (!t->kl) pack_rows(t->kc, HP, K, ldk, nk, HS);
        queries_by_keys(CT_ATT_ADD, t->dqa, t->pt, t->kl ? K : t->kc, nq, nk, HP, NULL, d);
        // dK share (nk, HP) = dS^T Q
        keys_by_queries(t->dkp, t->pt, t->qrows, nq, nk, HP, d);
        if (t->dkl) {  // this thread runs every item of the kv head, in the adds' order
            add_shares(t->dkl + j0 * HP, HP, t->dvl + j0 * HP, HP, t, nk, HS);
            continue;
        }
        // add the shares in the fixed order (seq, above)
        wait_turn(turn + kt, seq);
        add_shares(dk + (b * Tk + j0) * ldk + g * HS, ldk, dv + (b * Tk + j0) * ldv + g * HS, ldv, t, nk, HS);
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
    const long per_kv = group * ntq, nitems = B * NKV * per_kv, per_thread = att_thread_floats(HS);
    const float scale = 1.0f / sqrtf((float)HS);
    int64_t *qlo = (int64_t *)scratch, *qhi = qlo + ntq, *klo = qhi + ntq, *khi = klo + ntk;
    int64_t *kcnt = khi + ntk, *turns = kcnt + ntk;  // turns (RING, ntk)
    float *base = scratch + att_header_floats(Tq, Tk);
    for (long qt = 0; qt < ntq; qt++) {
        long lo, hi;
        pos_range(q_pos, qt * CT_ATT_BQ, ct_min_l(CT_ATT_BQ, Tq - qt * CT_ATT_BQ), &lo, &hi);
        qlo[qt] = lo, qhi[qt] = hi;
    }
    for (long kt = 0; kt < ntk; kt++) {
        long lo, hi;
        pos_range(k_pos, kt * CT_ATT_BK, ct_min_l(CT_ATT_BK, Tk - kt * CT_ATT_BK), &lo, &hi);
        klo[kt] = lo, khi[kt] = hi;
        kcnt[kt] = 0;
        for (long qt = 0; qt < ntq; qt++) kcnt[kt] += lo <= qhi[qt];
    }
    memset(turns, 0, sizeof(int64_t) * CT_ATT_RING * ntk);
    const bwd_call x = {.dq = dq, .dk = dk, .dv = dv, .dout = dout, .out = out, .lse = lse, .q = q, .k = k, .v = v,
                        .ldq = ldq, .ldk = ldk, .ldv = ldv, .ldo = ldo, .Tq = Tq, .Tk = Tk, .NH = NH, .NKV = NKV,
                        .HS = HS, .HP = HP, .group = group, .ntq = ntq, .ntk = ntk, .per_kv = per_kv,
                        .q_pos = q_pos, .k_pos = k_pos, .q_doc = k_doc ? q_doc : NULL,
                        .k_doc = q_doc ? k_doc : NULL, .qlo = qlo, .qhi = qhi, .klo = klo, .khi = khi,
                        .kcnt = kcnt, .turns = turns, .scale = scale};
    const bool whole = whole_kv_heads(B * NKV, omp_get_max_threads());
    const long chunk = whole ? per_kv : 1;
    const long local = whole && group * ntq >= CT_ATT_LOCAL_MIN_ADDS ? local_floats(Tk, HS) : 0;
    const long copy = CT_ATT_KV_COPY && whole ? local_floats(Tk, HS) : 0;  // K and V copied per kv head
    long next = 0;  // chunks of items are handed out in order (the turns rely on it)
#pragma omp parallel
    {
        bwd_tiles t;
        bwd_carve(base + omp_get_thread_num() * per_thread, HS, &t);
        t.dkl = t.dvl = NULL;
        t.kl = t.vl = NULL;
        float *mine = thread_copies(base, per_thread, Tk, HS);
        if (local) t.dkl = mine + local_floats(Tk, HS), t.dvl = t.dkl + Tk * HP;
        float *kl = copy ? mine : NULL, *vl = copy ? mine + Tk * HP : NULL;
        for (;;) {
            long c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (c * chunk >= nitems) break;
            // a whole kv head (batch c / NKV, head c % NKV): its dK, dV rows copied in and back
            float *dK = NULL, *dV = NULL;
            if (t.dkl) {
                dK = dk + (c / NKV) * Tk * ldk + c % NKV * HS, dV = dv + (c / NKV) * Tk * ldv + c % NKV * HS;
                copy_rows(t.dkl, HP, dK, ldk, Tk, HS), copy_rows(t.dvl, HP, dV, ldv, Tk, HS);
            }
            if (kl) {
                copy_kv_head(kl, vl, k, ldk, v, ldv, c, NKV, Tk, HS);
                t.kl = kl, t.vl = vl;
            }
            for (long it = c * chunk; it < (c + 1) * chunk; it++) backward_item(&x, &t, it);
            if (t.dkl) copy_rows(dK, ldk, t.dkl, HP, Tk, HS), copy_rows(dV, ldv, t.dvl, HP, Tk, HS);
        }
    }
}

// ------------------------------------------------------------------ merging partial results

void ct_attention_merge(float *o, float *l, const float *o_part, const float *l_part, long B, long C, long NH,
                        long HS) {
#pragma omp parallel for collapse(2) schedule(static)
    for (long b = 0; b < B; b++)
        for (long t = 0; t < C; t++)
            for (long h = 0; h < NH; h++) {
                float *L = l + (b * NH + h) * C + t;
                const float Lp = l_part[(b * NH + h) * C + t];
                float *O = o + ((b * C + t) * NH + h) * HS;                  // (HS)
                const float *Op = o_part + ((b * C + t) * NH + h) * HS;      // (HS)
                if (Lp == -INFINITY) continue;  // the part saw no key for this row
                if (*L == -INFINITY) {          // nothing yet: take the part
                    *L = Lp;
                    for (long d = 0; d < HS; d++) O[d] = Op[d];
                    continue;
                }
                // weights exp(l_i - l_new) relative to the larger lse, so neither overflows
                const double m = *L > Lp ? *L : Lp;
                const double wa = exp((double)*L - m), wb = exp((double)Lp - m), s = wa + wb;
                const double ca = wa / s, cb = wb / s;
                for (long d = 0; d < HS; d++) O[d] = (float)(ca * O[d] + cb * Op[d]);
                *L = (float)(m + log(s));
            }
}
