// Hugging Face BPE: the merges of a tokenizer.json, and the loop that applies them to one piece.
//
// Where a rank file's rule is "merge the adjacent pair whose concatenation has the lowest rank",
// a tokenizer.json lists the merges themselves: pair (a, b) may merge (into the token a + b)
// only if it is listed, and an earlier line wins. The loop below is tokenizers' own
// (models/bpe/word.rs, merge_all), step for step, so that every piece gives its ids:
//   - a min-heap of candidates (rank, position, result), one per listed adjacent pair;
//   - pop the lowest (rank, then position); skip it when its left symbol is gone or last, or when
//     the pair now at its position does not merge into the same result (a stale candidate);
//   - merge, then push the candidates the new symbol forms with its neighbours.
// A stale candidate whose position now holds another pair with the same result is applied at the
// stale rank, as tokenizers applies it.
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_internal.h"

#define EMPTY UINT64_MAX

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

void ct_merges_free(ct_merges *m) {
    free(m->key);
    free(m->rank);
    free(m->result);
    free(m->left);
    free(m->right);
    memset(m, 0, sizeof *m);
}

static long slot_of(const ct_merges *m, uint64_t key) {
    unsigned long mask = (unsigned long)m->cap - 1, i = (unsigned long)mix(key) & mask;
    while (m->key[i] != EMPTY && m->key[i] != key) i = (i + 1) & mask;
    return (long)i;
}

static int grow(ct_merges *m) {
    long cap = m->cap ? 2 * m->cap : 1024;
    ct_merges g = {.cap = cap};
    g.key = malloc((size_t)cap * sizeof *g.key);
    g.rank = malloc((size_t)cap * sizeof *g.rank);
    g.result = malloc((size_t)cap * sizeof *g.result);
    if (!g.key || !g.rank || !g.result) {
        free(g.key), free(g.rank), free(g.result);
        return -1;
    }
    memset(g.key, 0xff, (size_t)cap * sizeof *g.key);
    for (long i = 0; i < m->cap; i++)
        if (m->key[i] != EMPTY) {
            long s = slot_of(&g, m->key[i]);
            g.key[s] = m->key[i], g.rank[s] = m->rank[i], g.result[s] = m->result[i];
        }
    free(m->key), free(m->rank), free(m->result);
    m->key = g.key, m->rank = g.rank, m->result = g.result, m->cap = cap;
    return 0;
}

int ct_merges_add(ct_merges *m, int32_t left, int32_t right, int32_t result) {
    if (2 * (m->n_list + 1) > m->cap && grow(m)) return -1;
    if ((m->n_list & (m->n_list - 1)) == 0) {  // list capacity doubles at powers of two
        size_t want = (size_t)(m->n_list ? 2 * m->n_list : 1);
        int32_t *l = realloc(m->left, want * sizeof *l);
        if (!l) return -1;
        m->left = l;
        int32_t *r = realloc(m->right, want * sizeof *r);
        if (!r) return -1;
        m->right = r;
    }
    // The list keeps every line; a repeated pair takes the later rank (tokenizers collects the
    // list into a hash map, where the later insert wins).
    uint64_t key = pair_key(left, right);
    long s = slot_of(m, key);
    m->key[s] = key;
    m->rank[s] = (uint32_t)m->n_list;
    m->result[s] = result;
    m->left[m->n_list] = left;
    m->right[m->n_list] = right;
    m->n_list++;
    return 0;
}

int ct_merges_find(const ct_merges *m, int32_t left, int32_t right, uint32_t *rank, int32_t *result) {
    if (!m->cap) return 0;
    long s = slot_of(m, pair_key(left, right));
    if (m->key[s] == EMPTY) return 0;
    *rank = m->rank[s];
    *result = m->result[s];
    return 1;
}

typedef struct {
    uint32_t rank;
    int32_t pos;
    int32_t result;
} cand;

static inline int before(cand a, cand b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void push(cand *h, long *n, cand c) {
    long i = (*n)++;
    while (i > 0) {
        long up = (i - 1) / 2;
        if (!before(c, h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = c;
}

static cand pop(cand *h, long *n) {
    cand top = h[0], last = h[--*n];
    long i = 0;
    for (;;) {
        long c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && before(h[c + 1], h[c])) c++;
        if (!before(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

long ct_merges_apply(const ct_merges *m, int32_t *ids, long n) {
    if (n < 2) return n;
    enum { SMALL = 64 };
    int32_t prev_s[SMALL], next_s[SMALL];
    uint8_t gone_s[SMALL];
    cand heap_s[3 * SMALL];
    int32_t *prev = prev_s, *next = next_s;  // (n) neighbours of each symbol; -1 / n at the ends
    uint8_t *gone = gone_s;                   // (n) merged into its left neighbour
    cand *heap = heap_s;                      // (<= 3n) each merge pushes at most 2 candidates
    if (n > SMALL) {
        prev = malloc((size_t)n * sizeof *prev);
        next = malloc((size_t)n * sizeof *next);
        gone = malloc((size_t)n);
        heap = malloc((size_t)(3 * n) * sizeof *heap);
        if (!prev || !next || !gone || !heap) {
            free(prev), free(next), free(gone), free(heap);
            return -1;
        }
    }
    long hn = 0;
    uint32_t rank;
    int32_t res;
    for (long i = 0; i < n; i++) prev[i] = (int32_t)(i - 1), next[i] = (int32_t)(i + 1), gone[i] = 0;
    for (long i = 0; i + 1 < n; i++)
        if (ct_merges_find(m, ids[i], ids[i + 1], &rank, &res)) push(heap, &hn, (cand){rank, (int32_t)i, res});
    while (hn) {
        cand c = pop(heap, &hn);
        long i = c.pos;
        if (gone[i] || next[i] >= n) continue;
        long j = next[i];
        if (!ct_merges_find(m, ids[i], ids[j], &rank, &res) || res != c.result) continue;
        ids[i] = c.result;
        gone[j] = 1;
        next[i] = next[j];
        if (next[i] < n) prev[next[i]] = (int32_t)i;
        if (prev[i] >= 0 && ct_merges_find(m, ids[prev[i]], ids[i], &rank, &res))
            push(heap, &hn, (cand){rank, prev[i], res});
        if (next[i] < n && ct_merges_find(m, ids[i], ids[next[i]], &rank, &res)) push(heap, &hn, (cand){rank, (int32_t)i, res});
    }
    long k = 0;
    for (long i = 0; i < n; i++)
        if (!gone[i]) ids[k++] = ids[i];
    if (n > SMALL) free(prev), free(next), free(gone), free(heap);
    return k;
}
