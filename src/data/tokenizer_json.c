// A Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, Llama 3, Qwen2/3), read the way
// `tokenizers` reads it, so that a text gets the ids `tokenizers` gives it.
//
// Read:
//   version                 "1.0" (or absent)
//   model                   type "BPE"; vocab {token: id} with ids 0..N-1; merges, as "a b"
//                           strings (lines starting "#version" skipped) or [a, b] pairs: a merge's
//                           rank is its place in the list, its result the token a + b; dropout null
//                           or 0; no continuing_subword_prefix / end_of_word_suffix; ignore_merges
//   normalizer              null, NFC, or a Sequence of at most an NFC
//   pre_tokenizer           ByteLevel, or a Sequence of Split steps ending with one ByteLevel. Split:
//                           pattern {"Regex": ...} or {"String": ...}, behavior "Isolated",
//                           invert false. ByteLevel: add_prefix_space, use_regex (GPT-2's pattern)
//   decoder                 null or ByteLevel
//   added_tokens            id, content, special, normalized; single_word / lstrip / rstrip false.
//                           tokenizers gives an added token the id of its content in model.vocab,
//                           else the next id after the vocabulary, in file order; a file whose ids
//                           say otherwise is refused (tokenizers would silently renumber it)
//   tokenizer_config.json   beside the file, if there: bos_token, eos_token (a string or an
//                           AddedToken object with "content"), add_bos_token
// Not read: post_processor (ids are compared without it: add_special_tokens=False), truncation,
// padding. Refused, with the file and the field named: any other model type (WordPiece, Unigram,
// WordLevel), normalizer or pre-tokenizer, a vocabulary without all 256 byte-level characters.
//
// The byte-level spelling: GPT-2's byte-to-unicode map writes byte b as the character b when b is
// printable (33-126, 161-172, 174-255) and as 256, 257, ... for the other 68 bytes in order. A
// vocab entry whose characters are all in that alphabet stands for the bytes they spell; any other
// entry (a special token kept in the vocab, say) for its own UTF-8 bytes, as tokenizers' ByteLevel
// decoder reads it. Only the former can come out of BPE.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/json.h"
#include "data/tokenizer_internal.h"

// GPT-2's pre-tokenisation pattern: tokenizers' ByteLevel with use_regex.
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct {
    const char *path;
    ct_tokenizer *t;
    ct_vocab keys;          // model.vocab's keys as written, lookup index == id
    int16_t byte_of[324];   // byte-level character -> byte, -1 for other code points below 324
    unsigned cp_of[256];    // byte -> byte-level character
} loader;

// Sets "path: message" and returns NULL.
static ct_tokenizer *bad(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ct_tokenizer *bad(loader *L, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ct_set_error("%s: %s", L->path, msg);
    return NULL;
}

static void byte_map(loader *L) {
    unsigned next = 256;
    for (int i = 0; i < 324; i++) L->byte_of[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        L->cp_of[b] = printable ? b : next++;
        L->byte_of[L->cp_of[b]] = (int16_t)b;
    }
}

// One UTF-8 character at s (n bytes left): its code point and length, or -1 when invalid.
static long utf8_char(const uint8_t *s, long n, unsigned *cp) {
    long k = ct_utf8_valid_prefix(s, n < 4 ? n : 4);
    if (k == 0) return -1;
    long len = s[0] < 0x80 ? 1 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : 4;
    if (len > k) return -1;
    *cp = len == 1 ? s[0] : len == 2 ? s[0] & 0x1fu : len == 3 ? s[0] & 0x0fu : s[0] & 0x07u;
    for (long i = 1; i < len; i++) *cp = *cp << 6 | (s[i] & 0x3fu);
    return len;
}

// The bytes a vocab key stands for, into out (room for strlen(key) bytes): the byte-level reading
// when every character is in the alphabet (returns 1), else the key's own bytes (returns 0).
static int key_bytes(const loader *L, const char *key, long klen, uint8_t *out, long *n) {
    long o = 0;
    for (long i = 0; i < klen;) {
        unsigned cp;
        long k = utf8_char((const uint8_t *)key + i, klen - i, &cp);
        if (k < 0 || cp >= 324 || L->byte_of[cp] < 0) {
            memcpy(out, key, (size_t)klen);
            *n = klen;
            return 0;
        }
        out[o++] = (uint8_t)L->byte_of[cp];
        i += k;
    }
    *n = o;
    return 1;
}

// "null", "\"x\"", "3", "{...}": how a value reads in a message.
static const char *shape(const ct_json *j) {
    if (!j) return "absent";
    switch (j->type) {
        case CT_JSON_NULL: return "null";
        case CT_JSON_BOOL: return j->boolean ? "true" : "false";
        case CT_JSON_NUMBER: return "a number";
        case CT_JSON_STRING: return "a string";
        case CT_JSON_ARRAY: return "an array";
        default: return "an object";
    }
}

static const char *type_of(const ct_json *obj) {
    const ct_json *ty = ct_json_get(obj, "type");
    return ty && ty->type == CT_JSON_STRING ? ty->string : NULL;
}

static int is_null(const ct_json *j) { return !j || j->type == CT_JSON_NULL; }

// ---- model ------------------------------------------------------------------------------------

static ct_tokenizer *read_vocab(loader *L, const ct_json *vocab) {
    if (!vocab || vocab->type != CT_JSON_OBJECT)
        return bad(L, "model.vocab is %s: a BPE model lists its vocabulary as {\"token\": id, ...}", shape(vocab));
    long n = vocab->n;
    const char **key = calloc((size_t)n + 1, sizeof *key);  // (n) key of each id
    if (!key) return bad(L, "out of memory");
    for (long i = 0; i < n; i++) {
        const ct_json *v = &vocab->items[i];
        if (v->type != CT_JSON_NUMBER || !v->is_int || v->integer < 0 || v->integer >= n) {
            free(key);
            return bad(L, "model.vocab[\"%.80s\"] is not an id in [0, %ld): the ids of a vocabulary of %ld tokens are 0..%ld",
                       vocab->keys[i], n, n, n - 1);
        }
        if (key[v->integer]) {
            long id = (long)v->integer;
            bad(L, "model.vocab: \"%.80s\" and \"%.80s\" both have id %ld: each id names one token", key[id],
                vocab->keys[i], id);
            free(key);
            return NULL;
        }
        key[v->integer] = vocab->keys[i];
    }
    for (long id = 0; id < n; id++) {
        int added;
        if (ct_vocab_intern(&L->keys, (const uint8_t *)key[id], (long)strlen(key[id]), &added) < 0) {
            free(key);
            return bad(L, "out of memory");
        }
        if (!added) {
            const char *k = key[id];
            free(key);
            return bad(L, "model.vocab: \"%.80s\" appears twice: each token is listed once", k);
        }
    }
    free(key);
    return L->t;
}

// Key `s` (len bytes) -> id in model.vocab, or -1.
static int32_t key_id(const loader *L, const char *s, long len) { return ct_vocab_find(&L->keys, (const uint8_t *)s, len); }

static ct_tokenizer *read_merges(loader *L, const ct_json *merges) {
    if (!merges || merges->type != CT_JSON_ARRAY)
        return bad(L, "model.merges is %s: a BPE model lists its merges (\"a b\" strings or [\"a\", \"b\"] pairs)",
                   shape(merges));
    int pairs = merges->n > 0 && merges->items[0].type == CT_JSON_ARRAY;
    char *cat = NULL;
    long cat_cap = 0;
    for (int i = 0; i < merges->n; i++) {
        const ct_json *m = &merges->items[i];
        const char *a, *b;
        long la, lb;
        if (pairs) {
            if (m->type != CT_JSON_ARRAY || m->n != 2 || m->items[0].type != CT_JSON_STRING ||
                m->items[1].type != CT_JSON_STRING) {
                free(cat);
                return bad(L, "model.merges[%d] is not a pair of strings like model.merges[0]: write every merge as "
                              "[\"a\", \"b\"] (or every one as \"a b\")",
                           i);
            }
            a = m->items[0].string, b = m->items[1].string;
            la = (long)strlen(a), lb = (long)strlen(b);
        } else {
            if (m->type != CT_JSON_STRING) {
                free(cat);
                return bad(L, "model.merges[%d] is %s, not a string \"a b\" like model.merges[0]", i, shape(m));
            }
            if (!strncmp(m->string, "#version", 8)) continue;  // a merges.txt header, as tokenizers skips it
            const char *sp = strchr(m->string, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                free(cat);
                return bad(L, "model.merges[%d] \"%.80s\" is not two tokens separated by one space", i, m->string);
            }
            a = m->string, la = sp - m->string, b = sp + 1, lb = (long)strlen(b);
        }
        int32_t ia = key_id(L, a, la), ib = key_id(L, b, lb);
        if (ia < 0 || ib < 0) {
            free(cat);
            return bad(L, "model.merges[%d]: \"%.*s\" is not in model.vocab: every merge joins two tokens of the vocabulary", i,
                       (int)(ia < 0 ? (la > 80 ? 80 : la) : (lb > 80 ? 80 : lb)), ia < 0 ? a : b);
        }
        if (la + lb > cat_cap) {
            cat_cap = 2 * (la + lb);
            char *c2 = realloc(cat, (size_t)cat_cap);
            if (!c2) {
                free(cat);
                return bad(L, "out of memory");
            }
            cat = c2;
        }
        memcpy(cat, a, (size_t)la);
        memcpy(cat + la, b, (size_t)lb);
        int32_t r = key_id(L, cat, la + lb);
        if (r < 0) {
            free(cat);
            int pa = (int)(la > 60 ? 60 : la), pb = (int)(lb > 60 ? 60 : lb);
            return bad(L, "model.merges[%d] joins \"%.*s\" and \"%.*s\", but \"%.*s%.*s\" is not in model.vocab: a "
                          "merge's result must be a token",
                       i, pa, a, pb, b, pa, a, pb, b);
        }
        if (ct_merges_add(&L->t->merges, ia, ib, r)) {
            free(cat);
            return bad(L, "out of memory");
        }
    }
    free(cat);
    return L->t;
}

static ct_tokenizer *read_model(loader *L, const ct_json *model) {
    if (!model || model->type != CT_JSON_OBJECT) return bad(L, "model is %s: a tokenizer.json holds a \"model\" object", shape(model));
    const char *ty = type_of(model);
    if (!ty)
        return bad(L, "model.type is missing: ctitan reads byte-level BPE tokenizers (model.type \"BPE\")");
    if (strcmp(ty, "BPE"))
        return bad(L, "model.type is \"%.40s\": ctitan reads byte-level BPE tokenizers only (model.type \"BPE\"), "
                      "not WordPiece, Unigram or WordLevel",
                   ty);
    const ct_json *drop = ct_json_get(model, "dropout");
    if (!is_null(drop) && !(drop->type == CT_JSON_NUMBER && drop->number == 0))
        return bad(L, "model.dropout is set: BPE dropout samples its merges, so the ids are not a function of the text; "
                      "set it to null");
    const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const ct_json *a = ct_json_get(model, affix[k]);
        if (!is_null(a) && !(a->type == CT_JSON_STRING && !a->string[0]))
            return bad(L, "model.%s is set: a byte-level BPE has none (WordPiece-style sub-words are not read); set it "
                          "to null",
                       affix[k]);
    }
    const ct_json *ig = ct_json_get(model, "ignore_merges");
    if (!is_null(ig) && ig->type != CT_JSON_BOOL) return bad(L, "model.ignore_merges is %s, not true or false", shape(ig));
    L->t->ignore_merges = ig && ig->type == CT_JSON_BOOL && ig->boolean;
    if (!read_vocab(L, ct_json_get(model, "vocab"))) return NULL;
    return read_merges(L, ct_json_get(model, "merges"));
}

// ---- normalizer and pre-tokenizer ---------------------------------------------------------------

static ct_tokenizer *read_normalizer(loader *L, const ct_json *n) {
    if (is_null(n)) return L->t;
    const char *ty = type_of(n);
    if (ty && !strcmp(ty, "NFC")) {
        L->t->nfc = 1;
        return L->t;
    }
    if (ty && !strcmp(ty, "Sequence")) {
        const ct_json *list = ct_json_get(n, "normalizers");
        if (list && list->type == CT_JSON_ARRAY && list->n == 0) return L->t;
        if (list && list->type == CT_JSON_ARRAY && list->n == 1 && type_of(&list->items[0]) &&
            !strcmp(type_of(&list->items[0]), "NFC")) {
            L->t->nfc = 1;
            return L->t;
        }
        return bad(L, "normalizer: a Sequence of other than one NFC is not supported (ctitan reads normalizer null or "
                      "NFC)");
    }
    return bad(L, "normalizer.type is \"%.40s\": ctitan reads normalizer null or NFC (a byte-level BPE needs no other)",
               ty ? ty : "missing");
}

static ct_tokenizer *add_step(loader *L, ct_step_kind kind, const char *pattern, const char *field) {
    ct_tokenizer *t = L->t;
    ct_pre_step *s2 = realloc(t->steps, (size_t)(t->n_steps + 1) * sizeof *s2);
    if (!s2) return bad(L, "out of memory");
    t->steps = s2;
    ct_pre_step *st = &t->steps[t->n_steps];
    *st = (ct_pre_step){kind, NULL, NULL};
    if (kind != CT_STEP_PREFIX_SPACE) {
        st->re = ct_pretok_compile(pattern, kind == CT_STEP_STRING);
        if (!st->re) {
            char why[512];
            snprintf(why, sizeof why, "%s", ct_last_error());
            return bad(L, "%s: %s", field, why);
        }
        st->pattern = strdup(pattern);
        if (!st->pattern) {
            ct_pretok_free(st->re);
            return bad(L, "out of memory");
        }
    }
    t->n_steps++;
    return t;
}

static ct_tokenizer *read_byte_level(loader *L, const ct_json *b, const char *field) {
    char f[128];
    const char *names[2] = {"add_prefix_space", "use_regex"};
    int val[2] = {0, 1};  // use_regex defaults to true in tokenizers; add_prefix_space has no default
    for (int k = 0; k < 2; k++) {
        const ct_json *v = ct_json_get(b, names[k]);
        if (!v && k == 0) return bad(L, "%s.add_prefix_space is missing: say true or false", field);
        if (v && v->type != CT_JSON_BOOL) return bad(L, "%s.%s is %s, not true or false", field, names[k], shape(v));
        if (v) val[k] = v->boolean;
    }
    if (val[0] && !add_step(L, CT_STEP_PREFIX_SPACE, NULL, field)) return NULL;
    snprintf(f, sizeof f, "%s (use_regex: GPT-2's pattern)", field);
    if (val[1] && !add_step(L, CT_STEP_REGEX, GPT2_PATTERN, f)) return NULL;
    return L->t;
}

static ct_tokenizer *read_split(loader *L, const ct_json *s, const char *field) {
    const ct_json *pat = ct_json_get(s, "pattern"), *beh = ct_json_get(s, "behavior"), *inv = ct_json_get(s, "invert");
    const ct_json *re = ct_json_get(pat, "Regex"), *str = ct_json_get(pat, "String");
    if (!pat || pat->type != CT_JSON_OBJECT || pat->n != 1 || !(re || str) || (re ? re : str)->type != CT_JSON_STRING)
        return bad(L, "%s.pattern is not {\"Regex\": \"...\"} or {\"String\": \"...\"}", field);
    if (!beh || beh->type != CT_JSON_STRING || strcmp(beh->string, "Isolated"))
        return bad(L, "%s.behavior is %s%s%s: ctitan reads Split with behavior \"Isolated\" (each match a piece)", field,
                   beh && beh->type == CT_JSON_STRING ? "\"" : "", beh && beh->type == CT_JSON_STRING ? beh->string : shape(beh),
                   beh && beh->type == CT_JSON_STRING ? "\"" : "");
    if (!inv || inv->type != CT_JSON_BOOL || inv->boolean)
        return bad(L, "%s.invert is %s: ctitan reads Split with invert false", field, shape(inv));
    char f[128];
    snprintf(f, sizeof f, "%s.pattern", field);
    return add_step(L, re ? CT_STEP_REGEX : CT_STEP_STRING, (re ? re : str)->string, f);
}

static ct_tokenizer *read_pre_tokenizer(loader *L, const ct_json *p) {
    if (is_null(p))
        return bad(L, "pre_tokenizer is %s: a byte-level BPE tokenizer.json has a ByteLevel pre-tokenizer", shape(p));
    const char *ty = type_of(p);
    if (ty && !strcmp(ty, "ByteLevel")) return read_byte_level(L, p, "pre_tokenizer");
    if (!ty || strcmp(ty, "Sequence"))
        return bad(L, "pre_tokenizer.type is \"%.40s\": ctitan reads ByteLevel, or a Sequence of Split steps and one "
                      "ByteLevel",
                   ty ? ty : "missing");
    const ct_json *list = ct_json_get(p, "pretokenizers");
    if (!list || list->type != CT_JSON_ARRAY || list->n == 0)
        return bad(L, "pre_tokenizer.pretokenizers is %s: a Sequence lists its steps", shape(list));
    for (int i = 0; i < list->n; i++) {
        char field[64];
        snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%d]", i);
        const char *t = type_of(&list->items[i]);
        int last = i == list->n - 1;
        if (t && !strcmp(t, "ByteLevel") && last) {
            if (!read_byte_level(L, &list->items[i], field)) return NULL;
        } else if (t && !strcmp(t, "Split") && !last) {
            if (!read_split(L, &list->items[i], field)) return NULL;
        } else if (t && (!strcmp(t, "Split") || !strcmp(t, "ByteLevel"))) {
            return bad(L, "%s is a %s: ctitan reads Split steps followed by one ByteLevel, last", field, t);
        } else {
            return bad(L, "%s.type \"%.40s\" is not supported: ctitan reads Split steps followed by one ByteLevel", field,
                       t ? t : "missing");
        }
    }
    return L->t;
}

// ---- added tokens -------------------------------------------------------------------------------

static ct_tokenizer *read_added(loader *L, const ct_json *list, long *n_new) {
    ct_tokenizer *t = L->t;
    *n_new = 0;
    if (is_null(list)) return t;
    if (list->type != CT_JSON_ARRAY) return bad(L, "added_tokens is %s, not an array", shape(list));
    t->special = calloc((size_t)list->n + 1, sizeof *t->special);
    if (!t->special) return bad(L, "out of memory");
    long next_id = L->keys.n;
    for (int i = 0; i < list->n; i++) {
        const ct_json *a = &list->items[i];
        const ct_json *id = ct_json_get(a, "id"), *content = ct_json_get(a, "content");
        if (a->type != CT_JSON_OBJECT || !id || id->type != CT_JSON_NUMBER || !id->is_int || !content ||
            content->type != CT_JSON_STRING || !content->string[0])
            return bad(L, "added_tokens[%d] has no integer \"id\" and non-empty \"content\"", i);
        const char *text = content->string;
        int flag[5];
        static const char *const names[5] = {"special", "normalized", "single_word", "lstrip", "rstrip"};
        for (int k = 0; k < 5; k++) {
            const ct_json *f = ct_json_get(a, names[k]);
            if (!f || f->type != CT_JSON_BOOL)
                return bad(L, "added_tokens[%d] (\"%.60s\"): \"%s\" is %s, not true or false (tokenizers needs all of "
                              "special, normalized, single_word, lstrip, rstrip)",
                           i, text, names[k], shape(f));
            flag[k] = f->boolean;
            if (k >= 2 && f->boolean)
                return bad(L, "added_tokens[%d] (\"%.60s\"): %s true is not supported (ctitan matches added tokens "
                              "exactly); set it to false",
                           i, text, names[k]);
        }
        for (int k = 0; k < t->n_special; k++)
            if (!strcmp(t->special[k].text, text))
                return bad(L, "added_tokens[%d]: \"%.60s\" is already added_tokens[%d]: list each token once", i, text, k);
        // tokenizers' AddedVocabulary::add_tokens: the content's id in model.vocab, else the next one.
        int32_t in_vocab = key_id(L, text, (long)strlen(text));
        long want = in_vocab >= 0 ? in_vocab : next_id;
        if (id->integer != want)
            return bad(L, "added_tokens[%d] (\"%.60s\") has id %lld, but tokenizers gives it %ld (%s): fix the id", i, text,
                       (long long)id->integer, want,
                       in_vocab >= 0 ? "its id in model.vocab" : "added tokens outside model.vocab take the ids after it, in file order");
        if (in_vocab < 0) next_id++, (*n_new)++;
        ct_special *s = &t->special[t->n_special++];
        s->text = strdup(text);
        if (!s->text) return bad(L, "out of memory");
        s->len = (long)strlen(text);
        s->id = (int32_t)want;
        s->special = (uint8_t)flag[0];
        s->normalized = (uint8_t)flag[1];
    }
    return t;
}

// NFC of the added tokens found in normalized text (tokenizers normalizes their content).
static ct_tokenizer *normalize_added(loader *L) {
    ct_tokenizer *t = L->t;
    for (int i = 0; i < t->n_special && t->nfc; i++) {
        ct_special *s = &t->special[i];
        if (!s->normalized) continue;
        long m = ct_nfc(s->text, s->len, &s->norm);
        if (m < 0) return bad(L, "added_tokens[%d]: %s", i, ct_last_error());
        if (s->norm && (m != s->len || memcmp(s->norm, s->text, (size_t)m))) {
            s->norm_len = m;
        } else {
            free(s->norm);
            s->norm = NULL;
        }
    }
    return t;
}

// ---- the id table and the BPE lookup ------------------------------------------------------------

static ct_tokenizer *build(loader *L, long n_new) {
    ct_tokenizer *t = L->t;
    long n = L->keys.n;
    t->n_ranks = n;
    t->vocab_size = n + n_new;
    t->toff = calloc((size_t)t->vocab_size + 1, sizeof *t->toff);
    t->tkind = calloc((size_t)t->vocab_size, 1);
    t->vocab_id = malloc((size_t)(n ? n : 1) * sizeof *t->vocab_id);
    long nb = L->keys.nbytes + t->vocab_size;  // + a NUL after each
    for (int i = 0; i < t->n_special; i++) nb += t->special[i].len;
    t->tbytes = calloc((size_t)nb + 1, 1);
    uint8_t *buf = malloc((size_t)(L->keys.nbytes ? L->keys.nbytes : 1));
    if (!t->toff || !t->tkind || !t->vocab_id || !t->tbytes || !buf) {
        free(buf);
        return bad(L, "out of memory");
    }
    // Ids 0..n-1 from model.vocab, then added tokens (which replace a vocab entry of their id).
    const char **added = calloc((size_t)t->vocab_size + 1, sizeof *added);
    long *added_len = calloc((size_t)t->vocab_size + 1, sizeof *added_len);
    if (!added || !added_len) {
        free(buf), free(added), free(added_len);
        return bad(L, "out of memory");
    }
    for (int i = 0; i < t->n_special; i++) {
        const ct_special *s = &t->special[i];
        added[s->id] = s->text, added_len[s->id] = s->len;
        t->tkind[s->id] = s->special ? CT_ID_SPECIAL : CT_ID_ADDED;
    }
    long o = 0;
    int oom = 0;
    for (long id = 0; id < t->vocab_size && !oom; id++) {
        t->toff[id] = o;
        if (id < n) {
            long klen, blen;
            const uint8_t *key = ct_vocab_get(&L->keys, (int32_t)id, &klen);
            int level = key_bytes(L, (const char *)key, klen, buf, &blen);
            if (level) {  // reachable by BPE: into the lookup
                int was_added;
                int32_t k = ct_vocab_intern(&t->vocab, buf, blen, &was_added);
                if (k < 0) oom = 1;
                else t->vocab_id[k] = (int32_t)id;  // spellings are one-to-one: always a new entry
            }
            if (!added[id]) {
                memcpy(t->tbytes + o, buf, (size_t)blen);
                o += blen;
                t->tkind[id] = CT_ID_TOKEN;
            }
        }
        if (added[id]) {
            memcpy(t->tbytes + o, added[id], (size_t)added_len[id]);
            o += added_len[id];
        }
        o++;  // the NUL (calloc'd)
    }
    t->toff[t->vocab_size] = o;
    free(buf), free(added), free(added_len);
    if (oom) return bad(L, "out of memory");
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        int32_t k = ct_vocab_find(&t->vocab, &c, 1);
        if (k < 0) {
            char spell[8];
            unsigned cp = L->cp_of[b];
            if (cp < 0x80) snprintf(spell, sizeof spell, "%c", (char)cp);
            else snprintf(spell, sizeof spell, "%c%c", (char)(0xc0 | (cp >> 6)), (char)(0x80 | (cp & 0x3f)));
            return bad(L, "model.vocab has no token for the byte 0x%02x (byte-level spelling \"%s\"): a byte-level BPE "
                          "vocabulary holds all 256",
                       b, spell);
        }
        t->byte_id[b] = t->vocab_id[k];
    }
    return t;
}

// ---- tokenizer_config.json ----------------------------------------------------------------------

// The id of the token config field `name` names (a string or {"content": ...}); -1 when absent or null.
static int read_special_ref(loader *L, const char *cpath, const ct_json *cfg, const char *name, int32_t *id) {
    *id = -1;
    const ct_json *v = ct_json_get(cfg, name);
    if (is_null(v)) return 0;
    const ct_json *c = v->type == CT_JSON_OBJECT ? ct_json_get(v, "content") : v;
    if (!c || c->type != CT_JSON_STRING) {
        ct_set_error("%s: %s is %s: give the token's text, or an AddedToken object with \"content\"", cpath, name,
                     shape(v));
        return -1;
    }
    const ct_tokenizer *t = L->t;
    for (int i = 0; i < t->n_special; i++)
        if (!strcmp(t->special[i].text, c->string)) {
            *id = t->special[i].id;
            return 0;
        }
    int32_t k = key_id(L, c->string, (long)strlen(c->string));
    if (k < 0) {
        ct_set_error("%s: %s \"%.80s\" is not a token of %s (added_tokens or model.vocab): name one of its tokens", cpath,
                     name, c->string, L->path);
        return -1;
    }
    *id = k;
    return 0;
}

static ct_tokenizer *read_config(loader *L) {
    ct_tokenizer *t = L->t;
    t->bos = t->eos = -1;
    char cpath[4096];
    const char *slash = strrchr(L->path, '/');
    if (slash) snprintf(cpath, sizeof cpath, "%.*s/tokenizer_config.json", (int)(slash - L->path), L->path);
    else snprintf(cpath, sizeof cpath, "tokenizer_config.json");
    if (access(cpath, F_OK) != 0) return t;  // none: no bos / eos
    ct_json *cfg = ct_json_read_file(cpath, "tokenizer_config.json", CT_FILE_TEXT_CONFIG_MAX);
    if (!cfg) return NULL;
    ct_tokenizer *ok = t;
    if (cfg->type != CT_JSON_OBJECT) {
        ct_set_error("%s: not a JSON object", cpath);
        ok = NULL;
    }
    if (ok && (read_special_ref(L, cpath, cfg, "bos_token", &t->bos) || read_special_ref(L, cpath, cfg, "eos_token", &t->eos)))
        ok = NULL;
    const ct_json *ab = ok ? ct_json_get(cfg, "add_bos_token") : NULL;
    if (ok && !is_null(ab)) {
        if (ab->type != CT_JSON_BOOL) {
            ct_set_error("%s: add_bos_token is %s, not true or false", cpath, shape(ab));
            ok = NULL;
        } else if (ab->boolean && t->bos < 0) {
            ct_set_error("%s: add_bos_token is true but bos_token names no token: give bos_token", cpath);
            ok = NULL;
        } else {
            t->add_bos = ab->boolean;
        }
    }
    ct_json_free(cfg);
    if (ok && !(t->config_path = strdup(cpath))) ok = bad(L, "out of memory");
    return ok;
}

// ---- the whole file -----------------------------------------------------------------------------

ct_tokenizer *ct_tokenizer_load_json(const char *path) {
    loader L = {.path = path};
    byte_map(&L);
    ct_vocab_init(&L.keys);
    ct_json *j = ct_json_read_file(path, "tokenizer.json", CT_FILE_TOKENIZER_MAX);
    if (!j) return NULL;
    L.t = calloc(1, sizeof *L.t);
    ct_tokenizer *ok = L.t ? L.t : bad(&L, "out of memory");
    if (ok) {
        L.t->kind = CT_TOK_MERGES;
        L.t->bos = L.t->eos = -1;
        ct_vocab_init(&L.t->vocab);
    }
    const ct_json *ver = ct_json_get(j, "version");
    if (ok && j->type != CT_JSON_OBJECT) ok = bad(&L, "not a JSON object: a tokenizer.json is one");
    if (ok && ver && (ver->type != CT_JSON_STRING || strcmp(ver->string, "1.0")))
        ok = bad(&L, "version is %s%s%s: ctitan reads tokenizer.json version \"1.0\"", ver->type == CT_JSON_STRING ? "\"" : "",
                 ver->type == CT_JSON_STRING ? ver->string : shape(ver), ver->type == CT_JSON_STRING ? "\"" : "");
    const ct_json *dec = ok ? ct_json_get(j, "decoder") : NULL;
    if (ok && !is_null(dec) && (!type_of(dec) || strcmp(type_of(dec), "ByteLevel")))
        ok = bad(&L, "decoder.type is \"%.40s\": a byte-level BPE decodes with ByteLevel (or decoder null)",
                 type_of(dec) ? type_of(dec) : "missing");
    long n_new = 0;
    if (ok) ok = read_model(&L, ct_json_get(j, "model"));
    if (ok) ok = read_normalizer(&L, ct_json_get(j, "normalizer"));
    if (ok) ok = read_pre_tokenizer(&L, ct_json_get(j, "pre_tokenizer"));
    if (ok) ok = read_added(&L, ct_json_get(j, "added_tokens"), &n_new);
    if (ok) ok = normalize_added(&L);
    if (ok) ok = build(&L, n_new);
    if (ok && ct_tokenizer_index_added(L.t)) ok = bad(&L, "out of memory");
    if (ok) ok = read_config(&L);
    if (ok && !(L.t->path = strdup(path))) ok = bad(&L, "out of memory");
    ct_json_free(j);
    ct_vocab_free(&L.keys);
    if (!ok) ct_tokenizer_free(L.t);
    return ok;
}
