// Ranked byte strings with hash lookup: the table behind BPE rank lookups and the piece
// counter of training. Strings live concatenated in one buffer (id order) and the hash table
// holds only ids plus a 32-bit tag, so a probe touches the string bytes only on a tag match.
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_internal.h"

// Hash of a short byte string: 8 bytes at a time through a multiply-xorshift mixer. Pieces
// are mostly under 16 bytes, so this is a couple of multiplies per lookup.
static inline uint64_t bytes_hash(const uint8_t *s, long n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n * 0xff51afd7ed558ccdull;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, (size_t)n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

void ct_vocab_init(ct_vocab *v) { memset(v, 0, sizeof *v); }

void ct_vocab_free(ct_vocab *v) {
    free(v->bytes);
    free(v->off);
    free(v->slot);
    free(v->tag);
    memset(v, 0, sizeof *v);
}

static int32_t probe(const ct_vocab *v, const uint8_t *s, long len, uint64_t h, long *empty_at) {
    if (!v->slot_cap) {
        *empty_at = -1;
        return -1;
    }
    unsigned long mask = (unsigned long)v->slot_cap - 1, i = (unsigned long)h & mask;
    uint32_t tag = (uint32_t)(h >> 32);
    for (;; i = (i + 1) & mask) {
        int32_t id = v->slot[i];
        if (id < 0) {
            *empty_at = (long)i;
            return -1;
        }
        if (v->tag[i] == tag && v->off[id + 1] - v->off[id] == len && !memcmp(v->bytes + v->off[id], s, (size_t)len))
            return id;
    }
}

int32_t ct_vocab_find(const ct_vocab *v, const uint8_t *s, long len) {
    long empty;
    return probe(v, s, len, bytes_hash(s, len), &empty);
}

static int rehash(ct_vocab *v, long cap) {
    int32_t *slot = malloc((size_t)cap * sizeof *slot);
    uint32_t *tag = malloc((size_t)cap * sizeof *tag);
    if (!slot || !tag) {
        free(slot);
        free(tag);
        return -1;
    }
    memset(slot, 0xff, (size_t)cap * sizeof *slot);
    unsigned long mask = (unsigned long)cap - 1;
    for (long id = 0; id < v->n; id++) {
        uint64_t h = bytes_hash(v->bytes + v->off[id], v->off[id + 1] - v->off[id]);
        unsigned long i = (unsigned long)h & mask;
        while (slot[i] >= 0) i = (i + 1) & mask;
        slot[i] = (int32_t)id;
        tag[i] = (uint32_t)(h >> 32);
    }
    free(v->slot);
    free(v->tag);
    v->slot = slot;
    v->tag = tag;
    v->slot_cap = cap;
    return 0;
}

int32_t ct_vocab_intern(ct_vocab *v, const uint8_t *s, long len, int *added) {
    uint64_t h = bytes_hash(s, len);
    long empty;
    int32_t id = probe(v, s, len, h, &empty);
    *added = 0;
    if (id >= 0) return id;
    if (v->n >= INT32_MAX - 1) return -1;
    // Grow first so the load factor stays <= 1/2; a rehash moves the empty slot, so probe again.
    if (2 * (v->n + 1) > v->slot_cap) {
        if (rehash(v, v->slot_cap ? 2 * v->slot_cap : 1024)) return -1;
        probe(v, s, len, h, &empty);
    }
    if (v->n + 2 > v->n_cap) {
        long cap = v->n_cap ? 2 * v->n_cap : 1024;
        long *off = realloc(v->off, (size_t)cap * sizeof *off);
        if (!off) return -1;
        v->off = off;
        v->n_cap = cap;
        if (v->n == 0) v->off[0] = 0;
    }
    if (v->nbytes + len > v->bytes_cap) {
        long cap = v->bytes_cap ? 2 * v->bytes_cap : 16384;
        while (cap < v->nbytes + len) cap *= 2;
        uint8_t *b = realloc(v->bytes, (size_t)cap);
        if (!b) return -1;
        v->bytes = b;
        v->bytes_cap = cap;
    }
    if (len) memcpy(v->bytes + v->nbytes, s, (size_t)len);
    v->nbytes += len;
    id = (int32_t)v->n++;
    v->off[v->n] = v->nbytes;
    v->slot[empty] = id;
    v->tag[empty] = (uint32_t)(h >> 32);
    *added = 1;
    return id;
}
