// Encoding text to ids and decoding ids to bytes.
//
// Per piece, the whole-piece lookup comes first: most English words (with their leading space)
// are tokens themselves, and one hash probe replaces the whole merge loop for them.
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_internal.h"

typedef struct {
    const ct_tokenizer *tok;
    int32_t **ids;
    long *n, *cap;
    int failed;
} encode_ctx;

static int reserve(int32_t **ids, long *cap, long need) {
    if (need <= *cap) return 0;
    long c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    int32_t *p = realloc(*ids, (size_t)c * sizeof *p);
    if (!p) return -1;
    *ids = p;
    *cap = c;
    return 0;
}

static int encode_piece(void *vctx, const char *piece, long len) {
    encode_ctx *c = vctx;
    // A piece of len bytes becomes at most len tokens.
    if (reserve(c->ids, c->cap, *c->n + len)) {
        c->failed = 1;
        ct_set_error("tokenizer: out of memory");
        return 1;
    }
    int32_t whole = ct_vocab_find(&c->tok->vocab, (const uint8_t *)piece, len);
    if (whole >= 0) {
        (*c->ids)[(*c->n)++] = whole;
        return 0;
    }
    long m = ct_bpe_merge(&c->tok->vocab, (const uint8_t *)piece, len, *c->ids + *c->n, 0);
    if (m < 0) {
        c->failed = 1;
        ct_set_error("tokenizer: out of memory merging a %ld-byte piece", len);
        return 1;
    }
    *c->n += m;
    return 0;
}

long ct_tokenizer_encode(const ct_tokenizer *tok, const char *text, long len, int32_t **ids, long *n, long *cap) {
    encode_ctx c = {tok, ids, n, cap, 0};
    if (ct_pretok_split(tok->pre, text, len, encode_piece, &c) != CT_OK || c.failed) return -1;
    return *n;
}

long ct_tokenizer_encode_doc(const ct_tokenizer *tok, const char *text, long len, int bos, int eos, int32_t **ids,
                             long *n, long *cap) {
    if (bos) {
        if (reserve(ids, cap, *n + 1)) return ct_set_error("tokenizer: out of memory"), -1;
        (*ids)[(*n)++] = tok->bos;
    }
    if (ct_tokenizer_encode(tok, text, len, ids, n, cap) < 0) return -1;
    if (eos) {
        if (reserve(ids, cap, *n + 1)) return ct_set_error("tokenizer: out of memory"), -1;
        (*ids)[(*n)++] = tok->eos;
    }
    return *n;
}

const char *ct_tokenizer_token(const ct_tokenizer *tok, int32_t id, long *len) {
    if (id >= 0 && id < tok->vocab.n) return (const char *)ct_vocab_get(&tok->vocab, id, len);
    for (int i = 0; i < tok->n_special; i++)
        if (tok->special[i].id == id) {
            *len = tok->special[i].len;
            return tok->special[i].text;
        }
    return NULL;
}

char *ct_tokenizer_decode(const ct_tokenizer *tok, const int32_t *ids, long n, long *out_len) {
    long total = 0, len;
    for (long i = 0; i < n; i++) {
        if (!ct_tokenizer_token(tok, ids[i], &len)) {
            ct_set_error("tokenizer: id %d (position %ld) is not in the vocabulary (size %ld)", ids[i], i,
                         tok->vocab_size);
            return NULL;
        }
        total += len;
    }
    char *out = malloc((size_t)total + 1);
    if (!out) {
        ct_set_error("tokenizer: out of memory");
        return NULL;
    }
    long o = 0;
    for (long i = 0; i < n; i++) {
        const char *s = ct_tokenizer_token(tok, ids[i], &len);
        memcpy(out + o, s, (size_t)len);
        o += len;
    }
    out[o] = 0;
    if (out_len) *out_len = o;
    return out;
}

ct_status ct_tokenizer_pretokenize(const ct_tokenizer *tok, const char *text, long len, ct_tokenizer_piece_fn fn,
                                   void *ctx) {
    return ct_pretok_split(tok->pre, text, len, fn, ctx);
}
