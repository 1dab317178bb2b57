// The cpu attention's internals, shared by its files (internal to src/kernels/cpu): the tile
// sizes, the vectors of the per-query passes, the per-thread tiles and the rest of the scratch
// (attention_scratch.c), and what the forward (attention_forward.c) and the backward
// (attention_backward.c) both call: the packing of operands (attention_pack.c), the masks by
// position and document (attention_mask.c), and the products of a tile pair over its diagonal
// band (attention_band.c). The merge of partial results is attention_merge.c. The softmax down
// a tile's columns is attention_softmax.c.
//
// The bf16 attention (attention_bf16_forward.c, attention_bf16_backward.c) is the same algorithm
// on bf16 tiles: its own tile structs, packing into bf16 pairs (attention_bf16_pack.c), band
// products (attention_bf16_band.c) and tile kernel (attention_bf16_tile.c); the masks, band
// geometry, softmax, scratch and the backward's order of adds are the ones here.
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
#ifndef CT_CPU_ATTENTION_INTERNAL_H
#define CT_CPU_ATTENTION_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/fastmath.h"

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

// -------------------------------------------------------- the scratch (attention_scratch.c)
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

// The bf16 attention's tiles (attention_bf16_forward.c, attention_bf16_backward.c). Operands
// of the products are bf16 in pairs along the contraction (attention_tile.h): "rows" tiles hold
// bf16 rows whose adjacent elements are the pairs; "pairs" tiles (uint32_t) interleave two rows,
// word (p, x) = element (2p, x) in its low half and (2p + 1, x) in its high half.
typedef struct {
    uint32_t *qt2;      // (HP / 2, BQ) Q^T, head dims in pairs
    float *st;          // (BK, BQ) S^T, then P^T
    uint32_t *pt2;      // (BK / 2, BQ) P^T in bf16, keys in pairs; with AMX tiles (BQ, BK / 2), P
    float *o;           // (BQ, HP) O accumulator
    uint16_t *kr;       // (BK, HP) the key tile's K rows (head dims in pairs)
    uint32_t *v2;       // (BK / 2, HP) the key tile's V, keys in pairs
    float *m, *l, *al;  // (BQ) running max, running sum, this tile's rescale
    int32_t *qp, *qd;   // (BQ) query positions, document ids
} fwd16_tiles;

typedef struct {
    uint32_t *qt2, *dot2;   // (HP / 2, BQ) Q^T, dO^T: head dims in pairs
    uint32_t *q2, *do2;     // (BQ / 2, HP) Q, dO: queries in pairs
    uint16_t *dor;          // (BQ, HP) dO rounded to bf16, rows (staging for the two above)
    float *pt;              // (BK, BQ) P^T, then dS^T
    uint16_t *pr;           // (BK, BQ) P^T, then dS^T, in bf16 rows (queries in pairs)
    uint32_t *ds2;          // (BK / 2, BQ) dS^T in bf16, keys in pairs; with AMX tiles (BQ, BK / 2), dS
    float *dqa;             // (BQ, HP) dQ accumulator
    uint16_t *kr, *vr;      // (BK, HP) the key tile's K, V rows (head dims in pairs)
    uint32_t *k2;           // (BK / 2, HP) the key tile's K, keys in pairs
    float *dkp, *dvp;       // (BK, HP) this item's shares of the key tile's dK, dV
    float *d, *lv;          // (BQ) D = rowsum(dO * O); lse with +inf for no key (so P = 0)
    int32_t *qp, *qd;       // (BQ) query positions, document ids
    float *dkl, *dvl;       // (Tk, HP) one kv head's dK, dV while its items run (NULL: added in place)
    const uint16_t *krl, *vrl;  // (Tk, HP) the kv head's K, V rows copied, or NULL: packed per tile
    const uint32_t *k2l;        // (ceil(Tk / 2), HP) the kv head's K in key pairs, or NULL
} bwd16_tiles;

// Carves a thread's tiles from base (NULL: only counts); returns the floats they take.
long ct_att_fwd_carve(float *base, long HS, fwd_tiles *t);
long ct_att_bwd_carve(float *base, long HS, bwd_tiles *t);
long ct_att_fwd16_carve(float *base, long HS, fwd16_tiles *t);
long ct_att_bwd16_carve(float *base, long HS, bwd16_tiles *t);
// Floats of one thread's tiles: the largest of the fp32 and bf16 forward's and backward's.
long ct_att_thread_floats(long HS);
// Floats of the backward's shared header, at the start of the scratch.
long ct_att_header_floats(long Tq, long Tk);

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

// A thread's copy of one kv head's dK and dV (or K and V) for Tk keys: 0 past the limit.
long ct_att_local_floats(long Tk, long HS);

// A thread that takes whole kv heads also copies each head's K and V rows, contiguous and padded
// to HP (ct_att_pack_rows), once per head (forward and backward): every product of the head's
// items then reads them from there, where single items read K in place from the (B, T, ...)
// tensor, rows a token stride apart, and copy a key tile's K or V rows again for every item that
// sees it (10 copies of the 4 key tiles of a head at T 256). The forward takes whole kv heads too
// where the backward does (whole_kv_heads), all but the last few (forward's tail). The same
// values multiplied in the same order: the same bits. As much room as the dK / dV copy
// (ct_att_local_floats), under the same limit. Measured on a 2-core Xeon with AMX, two threads,
// with and without called in turn (medians of 20-60 pairs): B 4, T 512,
// 12 heads (bench M's) forward 0.875-0.93, backward 0.935-0.96; B 2, T 1024, 8 heads over 2:
// backward 0.96 (its 4 kv heads are too few to hand out whole in the forward); bench S's shape
// (B 8, T 256, 4 heads) forward 0.99-1.03, backward 0.985-0.99. (-D for the variants: 0 is off.)
#ifndef CT_ATT_KV_COPY
#define CT_ATT_KV_COPY 1
#endif

// This thread's copies of a kv head's rows, after every thread's tiles at base.
float *ct_att_thread_copies(float *base, long per_thread, long Tk, long HS);

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
static inline bool whole_kv_heads(long n_kv_heads, long threads) {
    return n_kv_heads % threads == 0 || n_kv_heads >= 8 * threads;
}

// -------------------------------------------------------- packing (attention_pack.c)
void ct_att_pack_t(float *restrict dst, const float *restrict src, long ld, long n, long HS);
void ct_att_pack_rows(float *restrict dst, long w, const float *restrict src, long ld, long n, long HS);
void ct_att_copy_kv_head(float *kl, float *vl, const float *k, long ldk, const float *v, long ldv, long c, long NKV,
                         long Tk, long HS);
void ct_att_prefetch_rows(const float *x, long ld, long n, long HS, int rw);
void ct_att_add_shares(float *dK, long ldk, float *dV, long ldv, const float *dkp, const float *dvp, long nk, long HS);
void ct_att_copy_rows(float *dst, long ldd, const float *src, long lds, long n, long HS);

// bf16 forms (attention_bf16_pack.c), HP even. Rows: dst (n, w) bf16 = src (n, HS), zero
// columns past HS. Row pairs: dst (ceil(n / 2), w) words from rows 2p, 2p + 1 of src (n, HS),
// a missing row and columns past HS zero. Transposed pairs: dst (HP / 2, BQ) words, word (p, i)
// = (src[i][2p], src[i][2p + 1]), zero past n rows and HS columns.
void ct_att16_pack_rows(uint16_t *restrict dst, long w, const uint16_t *restrict src, long ld, long n, long HS);
void ct_att16_pack_row_pairs(uint32_t *restrict dst, long w, const uint16_t *restrict src, long ld, long n, long HS);
void ct_att16_pack_t_pairs(uint32_t *restrict dst, const uint16_t *restrict src, long ld, long n, long HS);
// An fp32 tile (n, BQ) rounded to bf16 (nearest, ties to even; finite values): as rows (n, BQ),
// and as key pairs (ceil(n / 2), BQ) words, a missing row zero.
void ct_att16_round_rows(uint16_t *restrict dst, const float *restrict src, long n);
void ct_att16_round_pairs(uint32_t *restrict dst, const float *restrict src, long n);
// The same tile rounded as query rows of key pairs: dst (BQ, BK / 2) words, word (i, p) =
// (src[2p][i], src[2p + 1][i]), a missing row zero; pairs past ceil(n / 2) not written.
void ct_att16_round_pairs_t(uint32_t *restrict dst, const float *restrict src, long n);
// src (n, HS) fp32 rows (row stride ld) rounded to bf16 rows dst (n, w), zero past HS.
void ct_att16_round_in(uint16_t *restrict dst, long w, const float *restrict src, long ld, long n, long HS);
// One kv head's K rows, K in key pairs (k2l: NULL for none) and V rows (vrl) or V in key pairs
// (v2l), copied for Tk keys: kv head c (batch c / NKV, head c % NKV).
void ct_att16_copy_kv_head(uint16_t *krl, uint32_t *k2l, uint16_t *vrl, uint32_t *v2l, const uint16_t *k, long ldk,
                           const uint16_t *v, long ldv, long c, long NKV, long Tk, long HS);

// AMX (attention_bf16_amx.c), where this build and CPU run the tile products and Linux granted
// the tile state (ct_bf16_amx_usable): a thread that takes them loads the tile configuration
// first (begin: false where there are none) and releases it after its last product (end).
// While it holds it, ct_att_mm_bf16 hands products whose A is in rows of pairs (cs_a 1), of 16
// rows and 16 pairs or more, to ct_att16_mm_amx: the same C and modes (A row stride lda, words).
bool ct_att16_tiles_begin(void);
void ct_att16_tiles_end(void);
bool ct_att16_tiles_held(void);
void ct_att16_mm_amx(ct_att_mode mode, long M, long N, long Kp, const uint32_t *a, long lda, const uint32_t *b,
                     long ldb, float *c, long ldc, float alpha, const float *vec);

// -------------------------------------------------------- masks (attention_mask.c)
void ct_att_pos_range(const int32_t *pos, long r0, long n, long *lo, long *hi);
void ct_att_query_positions(int32_t *qp, const int32_t *q_pos, long i0, long nq);
void ct_att_doc_range(const int32_t *doc, long r0, long n, int32_t *lo, int32_t *hi);
void ct_att_query_docs(int32_t *qd, const int32_t *doc, long i0, long nq);
int ct_att_doc_relation(const int32_t *kdoc, long j0, long nk, int32_t qlo, int32_t qhi);
void ct_att_mask_tile(float *st, const int32_t *qp, const int32_t *qd, const int32_t *k_pos, const int32_t *kdoc,
                      long j0, long nk, int dm);

// -------------------------------------------------------- the diagonal band (attention_band.c)
// Where a tile pair's queries and keys are runs of consecutive positions, the keys each query
// sees form a band, and blocks of SUB x SUB outside it are skipped (attention_band.c says why
// that changes no sum).
#define CT_ATT_SUB 16  // a multiple of CT_ATT_PAD on every ISA
typedef struct {
    int on;
    long delta;
} diag_band;

// First query column that keys [m0, m0 + SUB) can see (a multiple of SUB; BQ: none).
static inline long band_first_query(diag_band d, long m0) {
    if (!d.on) return 0;
    long c = m0 - d.delta;
    c = c <= 0 ? 0 : c / CT_ATT_SUB * CT_ATT_SUB;
    return c > CT_ATT_BQ ? CT_ATT_BQ : c;
}

// Keys that queries [r0, r0 + SUB) can see: the first this many of the tile's nk.
static inline long band_keys(diag_band d, long r0, long nk) {
    if (!d.on) return nk;
    long n = r0 + CT_ATT_SUB + d.delta;
    return n < 0 ? 0 : n > nk ? nk : n;
}

diag_band ct_att_band_of(const int32_t *q_pos, long i0, long nq, const int32_t *k_pos, long j0, long nk);
void ct_att_scores_t(float *st, const float *K, long ldk, const float *qt, long nk, long HS, float alpha,
                     diag_band d);
void ct_att_queries_by_keys(ct_att_mode mode, float *c, const float *pt, const float *b, long nq, long nk, long HP,
                            const float *rowv, diag_band d);
void ct_att_keys_by_queries(float *c, const float *pt, const float *b, long nq, long nk, long HP, diag_band d);
// The same three products from bf16 pairs (attention_bf16_band.c); a contraction of odd length
// is taken one element longer, whose operands are 0 (zero padding, or P = dS = 0 there).
// K rows kr (nk, HP) bf16, qt2 (HP / 2, BQ).
void ct_att16_scores_t(float *st, const uint16_t *kr, const uint32_t *qt2, long nk, long HP, float alpha, diag_band d);
// C (nq, HP) (mode) P B: p2 (ceil(nk / 2), BQ) key pairs, b2 (ceil(nk / 2), HP) key pairs.
void ct_att16_queries_by_keys(ct_att_mode mode, float *c, const uint32_t *p2, const uint32_t *b2, long nq, long nk,
                              long HP, const float *rowv, diag_band d);
// C (nk, HP) = P^T B: pr (nk, BQ) bf16 rows, b2 (BQ / 2, HP) query pairs.
void ct_att16_keys_by_queries(float *c, const uint16_t *pr, const uint32_t *b2, long nq, long nk, long HP,
                              diag_band d);
// C (nq, HP) (mode) P B as ct_att16_queries_by_keys, P in query rows: pq2 (BQ, BK / 2) words,
// word (i, p) = P keys 2p, 2p + 1 of query i (ct_att16_round_pairs_t): the AMX tiles' A layout.
// Over all nk keys whatever the band (P is 0 past it), in whole blocks of 16 rows (c and pq2 hold
// BQ rows; the rows past nq are computed and not read).
void ct_att16_queries_by_keys_rows(ct_att_mode mode, float *c, const uint32_t *pq2, const uint32_t *b2, long nq,
                                   long nk, long HP, const float *rowv);
// dS^T (nk, BQ) = alpha P^T * (V dO^T - D), in place of P^T in pt: vr (nk, HP) bf16 rows,
// dot2 (HP / 2, BQ), d (BQ) = D.
void ct_att16_ds_t(float *pt, const uint16_t *vr, const uint32_t *dot2, long nk, long HP, float alpha, const float *d,
                   diag_band band);

// -------------------------------------------------------- softmax columns
// (inline: called once per key tile, it keeps the forward's registers; the backward's exp is
// attention_softmax.c)
// The forward's online softmax of one key tile, down the columns of S^T (nk, BQ): P^T = exp(S^T
// - m_new) in place; l = l exp(m - m_new) + colsum P; al = exp(m - m_new) for O's rescale, m =
// m_new (each (BQ)). A column that has seen no key yet (max -inf) takes m_new = 0 for the exps:
// P 0, and l, O stay 0.
static inline void ct_att_softmax_columns(float *st, float *m, float *l, float *al, long nk) {
    const attv ninf = attv_splat(-INFINITY), zero = attv_splat(0.0f);
    for (long c = 0; c < CT_ATT_BQ; c += AW) {
        // the running max over four chains, not one: a chain of 64 dependent compares and blends
        // took a sixth of the forward's own time (perf). The max of finite values and -inf is
        // the same whatever the order (a +0 / -0 tie may go either way; both give the same
        // exps, sums and lse below).
        attv mold = attv_load(m + c), mx = mold, m1 = mold, m2 = mold, m3 = mold;
        long j = 0;
        for (; j + 4 <= nk; j += 4) {
            const float *sp = st + j * CT_ATT_BQ + c;
            mx = attv_max(attv_load(sp), mx);
            m1 = attv_max(attv_load(sp + CT_ATT_BQ), m1);
            m2 = attv_max(attv_load(sp + 2 * CT_ATT_BQ), m2);
            m3 = attv_max(attv_load(sp + 3 * CT_ATT_BQ), m3);
        }
        for (; j < nk; j++) mx = attv_max(attv_load(st + j * CT_ATT_BQ + c), mx);
        mx = attv_max(attv_max(m1, mx), attv_max(m3, m2));
        attv mu = attv_select(mx == ninf, zero, mx), sum = zero;
        for (long j = 0; j < nk; j++) {
            float *sp = st + j * CT_ATT_BQ + c;
            attv e = attv_exp(attv_load(sp) - mu);
            attv_store(sp, e);
            sum += e;
        }
        attv a = attv_exp(mold - mu);  // 0 while m is -inf
        attv_store(al + c, a);
        attv_store(l + c, attv_load(l + c) * a + sum);
        attv_store(m + c, mx);
    }
}
// The backward's P^T (nk, BQ) = exp(S^T - lse) in place, down the columns; 0 where masked (S
// -inf) and in columns that saw no key (lv +inf).
void ct_att_exp_columns(float *pt, const float *lv, long nk);

// -------------------------------------------------------- the backward's order of adds
// The backward's shared header, at the start of the scratch (ct_att_header_floats): position
// ranges of every query and key tile, how many query tiles see each key tile, and the turn
// counters (RING, ntk) that order the adds of dK and dV shares (attention_backward.c says how).
typedef struct {
    int64_t *qlo, *qhi, *klo, *khi, *kcnt, *turns;
} att_bwd_header;
// Fills the header in scratch for the call's positions (attention_scratch.c).
att_bwd_header ct_att_bwd_header(float *scratch, const int32_t *q_pos, const int32_t *k_pos, long Tq, long Tk);
// The turn of item (kv head bg, query head hl of its group, query tile qt) at key tile kt: its
// rank among the items of its kv head that see key tile kt, after the earlier kv heads of the
// ring slot.
static inline int64_t att_turn_seq(const att_bwd_header *h, long bg, long group, long hl, long qt, long kt,
                                   long ntq) {
    int64_t rank = hl * h->kcnt[kt];
    for (long q2 = qt + 1; q2 < ntq; q2++) rank += h->klo[kt] <= h->qhi[q2];
    return (int64_t)(bg / CT_ATT_RING) * group * h->kcnt[kt] + rank;
}
// Waits until *turn == seq (another thread's item is adding its tile).
void ct_att_wait_turn(const int64_t *turn, int64_t seq);

#endif
