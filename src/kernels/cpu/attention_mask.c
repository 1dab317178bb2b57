// Which keys a query sees: a key after the query's position is masked, and with document ids a
// key of another document too. The ranges here let whole key tiles be skipped; ct_att_mask_tile
// writes -inf into a score tile where a key is not seen.
#include <limits.h>
#include <math.h>

#include "kernels/cpu/attention_internal.h"

// ---------------------------------------------------------------- positions
// Smallest and largest position among rows [r0, r0 + n) (positions need not be sorted).
void ct_att_pos_range(const int32_t *pos, long r0, long n, long *lo, long *hi) {
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

// Query positions of the item's columns; INT_MAX past its nq queries (those columns see every
// key: their zero Q^T columns give finite scores that nothing reads).
void ct_att_query_positions(int32_t *qp, const int32_t *q_pos, long i0, long nq) {
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
void ct_att_doc_range(const int32_t *doc, long r0, long n, int32_t *lo, int32_t *hi) {
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
void ct_att_query_docs(int32_t *qd, const int32_t *doc, long i0, long nq) {
    for (long i = 0; i < CT_ATT_BQ; i++) qd[i] = doc[i0 + (i < nq ? i : 0)];
}

// What a key tile [j0, j0 + nk) is to the query tile (ids qlo..qhi): 0 skip, 1 visible by
// position alone, 2 masked by document too.
int ct_att_doc_relation(const int32_t *kdoc, long j0, long nk, int32_t qlo, int32_t qhi) {
    if (!kdoc) return 1;
    int32_t lo, hi;
    ct_att_doc_range(kdoc, j0, nk, &lo, &hi);
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
void ct_att_mask_tile(float *st, const int32_t *qp, const int32_t *qd, const int32_t *k_pos, const int32_t *kdoc,
                      long j0, long nk, int dm) {
    for (long j = 0; j < nk; j++) {
        if (dm == 2)
            mask_row_doc(st + j * CT_ATT_BQ, qp, key_position(k_pos, j0 + j), qd, kdoc[j0 + j]);
        else
            mask_row(st + j * CT_ATT_BQ, qp, key_position(k_pos, j0 + j));
    }
}
