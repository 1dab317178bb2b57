// The BPE merge of one pre-tokenised piece, as tiktoken defines it: start from single bytes and
// repeatedly merge the adjacent pair whose concatenation has the lowest rank (the leftmost such
// pair on ties) until no adjacent pair is a token.
//
// Two implementations of that one rule. Short pieces (nearly all of them) use tiktoken's
// linear scan over a small array: O(n^2) but tiny n and no allocation. Long pieces (runs of
// spaces, digits-free symbol soup, a megabyte of 'a') would make that quadratic, so they use a
// linked list of segments and a min-heap of candidate merges keyed by (rank, position), which
// picks the same pair at every step in O(n log n).
#include <stdlib.h>

#include "data/tokenizer_internal.h"

// Rank of s[0..len) as unsigned, so "not a token" (-1) sorts after every real rank.
static inline uint32_t rank_of(const ct_vocab *v, const uint8_t *s, long len) {
    return (uint32_t)ct_vocab_find(v, s, len);
}

static long merge_scan(const ct_vocab *v, const uint8_t *p, long n, int32_t *out) {
    enum { STACK_N = CT_BPE_HEAP_MIN + 1 };
    long start_s[STACK_N];
    uint32_t pair_s[STACK_N];
    long *start = start_s;         // (m + 1) segment k is p[start[k] .. start[k+1])
    uint32_t *pair = pair_s;       // (m - 1) rank of segment k joined with segment k+1
    if (n + 1 > STACK_N) {
        start = malloc((size_t)(n + 1) * sizeof *start);
        pair = malloc((size_t)(n + 1) * sizeof *pair);
        if (!start || !pair) {
            free(start);  // both came from malloc in this branch (free(NULL) is fine)
            free(pair);
            return -1;
        }
    }
    long m = n;
    for (long k = 0; k <= n; k++) start[k] = k;
    for (long k = 0; k + 1 < m; k++) pair[k] = rank_of(v, p + k, 2);
    for (;;) {
        uint32_t best = UINT32_MAX;
        long bk = -1;
        for (long k = 0; k + 1 < m; k++)
            if (pair[k] < best) best = pair[k], bk = k;
        if (bk < 0) break;
        // Segment bk absorbs segment bk+1: drop start[bk+1] and pair[bk] (now inside the token).
        for (long k = bk + 1; k < m; k++) start[k] = start[k + 1];
        for (long k = bk; k + 2 < m; k++) pair[k] = pair[k + 1];
        m--;
        if (bk > 0) pair[bk - 1] = rank_of(v, p + start[bk - 1], start[bk + 1] - start[bk - 1]);
        if (bk + 1 < m) pair[bk] = rank_of(v, p + start[bk], start[bk + 2] - start[bk]);
    }
    for (long k = 0; k < m; k++) out[k] = ct_vocab_find(v, p + start[k], start[k + 1] - start[k]);
    if (start != start_s) free(start);
    if (pair != pair_s) free(pair);
    return m;
}

typedef struct {
    uint32_t rank;
    int32_t pos;  // start byte of the left segment
    int32_t len;  // bytes of left + right segment when pushed (validity check)
} cand;

static inline int cand_less(cand a, cand b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(cand *h, long *hn, cand c) {
    long i = (*hn)++;
    while (i > 0) {
        long up = (i - 1) / 2;
        if (!cand_less(c, h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, long *hn) {
    cand top = h[0], last = h[--*hn];
    long i = 0, n = *hn;
    for (;;) {
        long c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(h[c + 1], h[c])) c++;
        if (!cand_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

static long merge_heap(const ct_vocab *v, const uint8_t *p, long n, int32_t *out) {
    // Segments are named by their start byte; next/prev link the live ones.
    int32_t *next = malloc((size_t)n * sizeof *next);   // (n) start of the following segment, n at the end
    int32_t *prev = malloc((size_t)n * sizeof *prev);   // (n) start of the preceding segment, -1 at the start
    uint8_t *alive = malloc((size_t)n);                 // (n)
    // Each merge pushes at most 2 candidates and there are at most n-1 merges.
    cand *h = malloc((size_t)(3 * n + 1) * sizeof *h);  // (<= 3n) min-heap by (rank, pos)
    long hn = 0, m = 0;
    if (!next || !prev || !alive || !h) goto done;
    for (long i = 0; i < n; i++) next[i] = (int32_t)(i + 1), prev[i] = (int32_t)(i - 1), alive[i] = 1;
    for (long i = 0; i + 1 < n; i++) {
        uint32_t r = rank_of(v, p + i, 2);
        if (r != UINT32_MAX) heap_push(h, &hn, (cand){r, (int32_t)i, 2});
    }
    while (hn) {
        cand c = heap_pop(h, &hn);
        long i = c.pos;
        if (!alive[i] || next[i] >= n) continue;
        long j = next[i];
        if (next[j] - i != c.len) continue;  // a neighbour changed since this was pushed
        alive[j] = 0;
        next[i] = next[j];
        if (next[i] < n) prev[next[i]] = (int32_t)i;
        if (prev[i] >= 0) {
            long a = prev[i];
            uint32_t r = rank_of(v, p + a, next[i] - a);
            if (r != UINT32_MAX) heap_push(h, &hn, (cand){r, (int32_t)a, (int32_t)(next[i] - a)});
        }
        if (next[i] < n) {
            long b = next[next[i]];
            uint32_t r = rank_of(v, p + i, b - i);
            if (r != UINT32_MAX) heap_push(h, &hn, (cand){r, (int32_t)i, (int32_t)(b - i)});
        }
    }
    for (long i = 0; i < n; i = next[i]) out[m++] = ct_vocab_find(v, p + i, next[i] - i);
done:
    free(next);
    free(prev);
    free(alive);
    free(h);
    return m ? m : -1;
}

long ct_bpe_merge(const ct_vocab *v, const uint8_t *piece, long len, int32_t *out, int force) {
    if (len <= 0) return 0;
    if (len == 1) {
        out[0] = ct_vocab_find(v, piece, 1);
        return 1;
    }
    if (len > INT32_MAX / 4) return -1;
    if (force == 2 || (force == 0 && len > CT_BPE_HEAP_MIN)) return merge_heap(v, piece, len, out);
    return merge_scan(v, piece, len, out);
}
