// The tokenizer's identity: SHA-256 of its canonical content (docs/data_format.md, "Tokenizer
// hash", lists it byte for byte; keep the two in step). Everything that decides which ids a text
// gets, or which bytes an id stands for, is in it; nothing about where it came from is:
//
//   "ctitan-tokenizer 1\n"
//   u32 V                                   ids 0..V-1
//   V x (u8 kind, u32 n, n bytes)           kind 0 no token, 1 token, 2 special, 3 added (not special)
//   u8 normalizer                           0 none, 1 NFC
//   u32 S, S x (u8 kind, u32 n, n bytes)    pre-tokenisation steps: 1 regex, 2 string, 3 prefix space (n 0)
//   u8 ignore_merges
//   u32 M, M x (u32 left id, u32 right id)  merges in priority order
//
// integers little-endian. A rank file's merges are the ones its ranks imply, as transformers'
// TikTokenConverter (and ctitan's own export, checkpoint/hf_tokenizer.c) writes them: for each
// token in rank order, every split into two tokens, ordered by (left rank, right rank); its
// ignore_merges is 1 (tiktoken looks a whole piece up first).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "data/tokenizer_internal.h"

static void put_u8(ct_sha256 *s, uint8_t v) { ct_sha256_update(s, &v, 1); }

static void put_u32(ct_sha256 *s, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    ct_sha256_update(s, b, 4);
}

static void put_bytes(ct_sha256 *s, const void *p, long n) {
    put_u32(s, (uint32_t)n);
    ct_sha256_update(s, p, (size_t)n);
}

typedef struct {
    int32_t left, right;
} split;

static int cmp_split(const void *a, const void *b) {
    const split *x = a, *y = b;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

// A rank file's implied merges. -1 if memory ran out.
static int put_rank_merges(ct_sha256 *s, const ct_tokenizer *t) {
    long count = 0, max_len = 1;
    const ct_vocab *v = &t->vocab;
    for (long r = 0; r < v->n; r++) max_len = v->off[r + 1] - v->off[r] > max_len ? v->off[r + 1] - v->off[r] : max_len;
    split *sp = malloc((size_t)max_len * sizeof *sp);
    if (!sp) return -1;
    // Two passes: the count goes first in the content.
    for (int pass = 0; pass < 2; pass++) {
        if (pass) put_u32(s, (uint32_t)count);
        for (long r = 0; r < v->n; r++) {
            long len;
            const uint8_t *tok = ct_vocab_get(v, (int32_t)r, &len);
            int k = 0;
            for (long cut = 1; cut < len; cut++) {
                int32_t a = ct_vocab_find(v, tok, cut), b = ct_vocab_find(v, tok + cut, len - cut);
                if (a >= 0 && b >= 0) sp[k++] = (split){a, b};
            }
            if (!pass) {
                count += k;
                continue;
            }
            qsort(sp, (size_t)k, sizeof *sp, cmp_split);
            for (int i = 0; i < k; i++) put_u32(s, (uint32_t)sp[i].left), put_u32(s, (uint32_t)sp[i].right);
        }
    }
    free(sp);
    return 0;
}

// A tokenizer.json's merges: its list, without the lines a later repeat of the same pair replaced.
static void put_listed_merges(ct_sha256 *s, const ct_merges *m) {
    uint32_t rank;
    int32_t res;
    long live = 0;
    for (long i = 0; i < m->n_list; i++) live += ct_merges_find(m, m->left[i], m->right[i], &rank, &res) && rank == (uint32_t)i;
    put_u32(s, (uint32_t)live);
    for (long i = 0; i < m->n_list; i++)
        if (ct_merges_find(m, m->left[i], m->right[i], &rank, &res) && rank == (uint32_t)i)
            put_u32(s, (uint32_t)m->left[i]), put_u32(s, (uint32_t)m->right[i]);
}

ct_status ct_tokenizer_hash(const ct_tokenizer *t, uint8_t out[CT_TOKENIZER_HASH_BYTES]) {
    ct_sha256 s;
    ct_sha256_init(&s);
    static const char magic[] = "ctitan-tokenizer 1\n";
    ct_sha256_update(&s, magic, sizeof magic - 1);
    put_u32(&s, (uint32_t)t->vocab_size);
    for (long id = 0; id < t->vocab_size; id++) {
        put_u8(&s, t->tkind[id]);
        put_bytes(&s, t->tbytes + t->toff[id], t->toff[id + 1] - t->toff[id] - 1);  // (the table's NUL is no part)
    }
    put_u8(&s, t->nfc ? 1 : 0);
    put_u32(&s, (uint32_t)t->n_steps);
    for (int i = 0; i < t->n_steps; i++) {
        put_u8(&s, (uint8_t)t->steps[i].kind);
        const char *p = t->steps[i].kind == CT_STEP_PREFIX_SPACE ? "" : t->steps[i].pattern;
        put_bytes(&s, p, (long)strlen(p));
    }
    put_u8(&s, t->ignore_merges ? 1 : 0);
    if (t->kind == CT_TOK_RANKS) {
        if (put_rank_merges(&s, t)) return ct_set_error("tokenizer: out of memory");
    } else {
        put_listed_merges(&s, &t->merges);
    }
    uint8_t d[32];
    ct_sha256_final(&s, d);
    memcpy(out, d, CT_TOKENIZER_HASH_BYTES);
    return CT_OK;
}

ct_status ct_tokenizer_hash_hex(const ct_tokenizer *t, char hex[2 * CT_TOKENIZER_HASH_BYTES + 1]) {
    uint8_t h[CT_TOKENIZER_HASH_BYTES];
    hex[0] = 0;
    if (ct_tokenizer_hash(t, h) != CT_OK) return CT_ERR;
    for (int i = 0; i < CT_TOKENIZER_HASH_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", h[i]);
    return CT_OK;
}
