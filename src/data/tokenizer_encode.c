// Encoding text to ids and decoding ids to bytes.
//
// The pipeline is tokenizers' (tokenizer/mod.rs, encode_single_sequence), which a rank file
// follows too with an empty normalizer and one split:
//   1. added tokens whose `normalized` is false are found in the text (leftmost, then longest);
//   2. each stretch of text between them is normalized (NFC, when the tokenizer says so), and the
//      added tokens whose `normalized` is true are found in it the same way;
//   3. each remaining stretch goes through the pre-tokenisation steps (splits by pattern;
//      ByteLevel's prefix space), and every final piece through BPE.
// The ordinary encoder skips the matches of special added tokens (tokenizers' encode_special_tokens:
// the text of a special token stays text); a rank file's added tokens are all special, so for it
// step 1 finds nothing and step 2 does not exist.
//
// BPE, per piece: a rank file looks the whole piece up first (most English words with their
// leading space are tokens themselves: one probe replaces the merge loop), then merges by rank
// (tokenizer_bpe.c); a tokenizer.json looks it up first only under ignore_merges, then applies its
// merges (tokenizer_merges.c).
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "data/tokenizer_internal.h"

typedef struct {
    const ct_tokenizer *tok;
    int32_t **ids;
    long *n, *cap;
    int match_special;
    int failed;
    char *scratch;  // the prefix-space step's piece
    long scratch_cap;
    ct_tokenizer_piece_fn piece_fn;  // ct_tokenizer_pretokenize: final pieces go here, not to BPE
    void *piece_ctx;
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

static int oom(encode_ctx *c) {
    c->failed = 1;
    ct_set_error("tokenizer: out of memory");
    return 1;
}

static int bpe_piece(encode_ctx *c, const char *piece, long len) {
    if (c->piece_fn) {
        if (c->piece_fn(c->piece_ctx, piece, len)) c->failed = -1;  // a stop, not an error
        return c->failed;
    }
    const ct_tokenizer *t = c->tok;
    // A piece of len bytes becomes at most len tokens.
    if (reserve(c->ids, c->cap, *c->n + len)) return oom(c);
    int32_t *out = *c->ids + *c->n;
    if (t->ignore_merges) {
        int32_t whole = ct_vocab_find(&t->vocab, (const uint8_t *)piece, len);
        if (whole >= 0) {
            out[0] = t->vocab_id ? t->vocab_id[whole] : whole;
            *c->n += 1;
            return 0;
        }
    }
    long m;
    if (t->kind == CT_TOK_RANKS) {
        m = ct_bpe_merge(&t->vocab, (const uint8_t *)piece, len, out, 0);
    } else {
        for (long i = 0; i < len; i++) out[i] = t->byte_id[(uint8_t)piece[i]];
        m = ct_merges_apply(&t->merges, out, len);
    }
    if (m < 0) {
        c->failed = 1;
        ct_set_error("tokenizer: out of memory merging a %ld-byte piece", len);
        return 1;
    }
    *c->n += m;
    return 0;
}

static int run_steps(encode_ctx *c, int step, const char *s, long n);

typedef struct {
    encode_ctx *c;
    int step;
} step_ctx;

static int next_step(void *vctx, const char *piece, long len) {
    step_ctx *sc = vctx;
    return run_steps(sc->c, sc->step, piece, len);
}

// Pre-tokenisation step `step` on the piece s[0..n), then the later steps, then BPE.
static int run_steps(encode_ctx *c, int step, const char *s, long n) {
    const ct_tokenizer *t = c->tok;
    if (step == t->n_steps) return bpe_piece(c, s, n);
    const ct_pre_step *st = &t->steps[step];
    if (st->kind == CT_STEP_PREFIX_SPACE) {
        if (n == 0 || s[0] == ' ') return run_steps(c, step + 1, s, n);
        // One ByteLevel step per tokenizer, so no later step overwrites the scratch piece.
        if (n + 1 > c->scratch_cap) {
            char *p = realloc(c->scratch, (size_t)(n + 1));
            if (!p) return oom(c);
            c->scratch = p;
            c->scratch_cap = n + 1;
        }
        c->scratch[0] = ' ';
        memcpy(c->scratch + 1, s, (size_t)n);
        return run_steps(c, step + 1, c->scratch, n + 1);
    }
    step_ctx sc = {c, step + 1};
    if (ct_pretok_split(st->re, s, n, next_step, &sc) != CT_OK) c->failed = 1;
    return c->failed;
}

// Leftmost, then longest, match at or after `from` of the added tokens of set `set` (0: found in
// the raw text, 1: in the normalized text). 1 with [*ms, *me) and the token's index, else 0.
static int find_added(const ct_tokenizer *t, int set, const char *s, long n, long from, long *ms, long *me, int *k) {
    const int32_t *off = t->match_off[set], *idx = t->match_idx[set];
    for (long p = from; p < n; p++) {
        uint8_t b = (uint8_t)s[p];
        long best = 0;
        for (int32_t q = off[b]; q < off[b + 1]; q++) {
            const ct_special *a = &t->special[idx[q]];
            const char *text = set && a->norm ? a->norm : a->text;
            long len = set && a->norm ? a->norm_len : a->len;
            if (len > best && len <= n - p && !memcmp(s + p, text, (size_t)len)) best = len, *k = idx[q];
        }
        if (best) {
            *ms = p, *me = p + best;
            return 1;
        }
    }
    return 0;
}

static int encode_stretch(encode_ctx *c, int set, const char *s, long n);

// Text between added tokens of set 0: normalized, then split by the tokens of set 1.
static int encode_normalized(encode_ctx *c, const char *s, long n) {
    if (!c->tok->nfc) return encode_stretch(c, 1, s, n);
    char *norm;
    long m = ct_nfc(s, n, &norm);
    if (m < 0) {
        c->failed = 1;
        return 1;
    }
    int rc = encode_stretch(c, 1, norm ? norm : s, norm ? m : n);
    free(norm);
    return rc;
}

// Finds the added tokens of `set` in s[0..n); the text around them goes on (set 0: to the
// normalizer; set 1: to pre-tokenisation).
static int encode_stretch(encode_ctx *c, int set, const char *s, long n) {
    const ct_tokenizer *t = c->tok;
    long pos = 0, from = 0, ms, me;
    int k;
    // Nothing to find: no tokens in the set, or (ordinary encoder) only special ones.
    int search = c->match_special ? t->match_n[set] > 0 : t->match_n[set] > t->match_special_n[set];
    while (search && !c->failed && find_added(t, set, s, n, from, &ms, &me, &k)) {
        from = me;
        // The ordinary encoder drops the match of a special token: its text stays text, and the
        // search goes on after it (tokenizers' leftmost_find_iter does not look inside it again).
        if (t->special[k].special && !c->match_special) continue;
        if (ms > pos && (set ? run_steps(c, 0, s + pos, ms - pos) : encode_normalized(c, s + pos, ms - pos))) break;
        if (c->piece_fn) {
            if (c->piece_fn(c->piece_ctx, s + ms, me - ms)) c->failed = -1;
        } else if (reserve(c->ids, c->cap, *c->n + 1)) {
            oom(c);
        } else {
            (*c->ids)[(*c->n)++] = t->special[k].id;
        }
        pos = me;
    }
    if (c->failed || pos >= n) return c->failed;
    return set ? run_steps(c, 0, s + pos, n - pos) : encode_normalized(c, s + pos, n - pos);
}

static long encode_impl(const ct_tokenizer *tok, const char *text, long len, int match_special, int32_t **ids, long *n,
                        long *cap) {
    encode_ctx c = {.tok = tok, .ids = ids, .n = n, .cap = cap, .match_special = match_special};
    encode_stretch(&c, 0, text, len);
    free(c.scratch);
    return c.failed ? -1 : *n;
}

long ct_tokenizer_encode(const ct_tokenizer *tok, const char *text, long len, int32_t **ids, long *n, long *cap) {
    return encode_impl(tok, text, len, 0, ids, n, cap);
}

long ct_tokenizer_encode_special(const ct_tokenizer *tok, const char *text, long len, int32_t **ids, long *n,
                                 long *cap) {
    return encode_impl(tok, text, len, 1, ids, n, cap);
}

long ct_tokenizer_encode_doc(const ct_tokenizer *tok, const char *text, long len, int bos, int eos, int32_t **ids,
                             long *n, long *cap) {
    if ((bos && tok->bos < 0) || (eos && tok->eos < 0))
        return ct_set_error("tokenizer: it names no %s token (bos_token / eos_token in tokenizer_config.json)",
                            bos && tok->bos < 0 ? "BOS" : "EOS"),
               -1;
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
    if (id < 0 || id >= tok->vocab_size || tok->tkind[id] == CT_ID_NONE) return NULL;
    *len = tok->toff[id + 1] - tok->toff[id] - 1;  // without the NUL after it
    return (const char *)tok->tbytes + tok->toff[id];
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
    int32_t *none = NULL;
    long n = 0, cap = 0;
    encode_ctx c = {.tok = tok, .ids = &none, .n = &n, .cap = &cap, .piece_fn = fn, .piece_ctx = ctx};
    encode_stretch(&c, 0, text, len);
    free(c.scratch);
    return c.failed > 0 ? CT_ERR : CT_OK;
}

// ---- NFC --------------------------------------------------------------------------------------

long ct_nfc(const char *s, long n, char **out) {
    *out = NULL;
    long i = 0;
    while (i < n && !((uint8_t)s[i] & 0x80)) i++;
    if (i == n) return n;  // ASCII is its own NFC: *out stays NULL
    char *buf = NULL;
    long len = 0, cap = 0;
    for (long pos = 0; pos < n;) {
        long valid = ct_utf8_valid_prefix((const uint8_t *)s + pos, n - pos);
        const char *add = s + pos;
        long k = valid ? valid : 1;  // an invalid byte is copied as it is
        utf8proc_uint8_t *mapped = NULL;
        if (valid) {
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s + pos, valid, &mapped,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m < 0) {
                free(buf);
                return ct_set_error("tokenizer: NFC failed: %s", utf8proc_errmsg(m)), -1;
            }
            add = (const char *)mapped;
            k = (long)m;
        }
        if (len + k > cap) {
            cap = 2 * (len + k) + 16;
            char *b2 = realloc(buf, (size_t)cap);
            if (!b2) {
                free(buf), free(mapped);
                return ct_set_error("tokenizer: out of memory"), -1;
            }
            buf = b2;
        }
        memcpy(buf + len, add, (size_t)k);
        len += k;
        free(mapped);
        pos += valid ? valid : 1;
    }
    *out = buf;
    return len;
}
