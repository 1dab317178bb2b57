// Pre-tokenisation: splits text into the pieces BPE runs on, with PCRE2 (UTF + UCP, JIT when
// the library has it) and a tokenizer's pattern (the Llama 3 / cl100k one for rank files; a
// tokenizer.json's Split patterns, or GPT-2's for its ByteLevel step).
//
// Invalid UTF-8: PCRE2 in UTF mode refuses (or, with PCRE2_NO_UTF_CHECK, misreads) invalid
// input, so the text is first cut into maximal valid UTF-8 spans. The regex runs over each span
// as its own subject (with PCRE2_NO_UTF_CHECK, since the span was just validated), and every
// byte between spans becomes a one-byte piece. The pieces therefore always tile the input,
// which is what makes decode(encode(x)) == x hold for every byte string.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_internal.h"

struct ct_pretok {
    pcre2_code *re;
    int jit;  // pcre2_jit_compile succeeded: use the JIT fast path
};

// The pattern in PCRE2's reading of what Oniguruma (tokenizers) and Rust's regex (tiktoken) mean
// by \s: Unicode White_Space. PCRE2's \s (with UCP) is its \h and \v, which hold U+180E (MONGOLIAN
// VOWEL SEPARATOR, a format character since Unicode 6.3, not white space), so \s becomes the
// White_Space list itself and \S its complement. A \S inside a class is left as PCRE2 reads it.
#define WHITE_SPACE "\\t-\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
static char *unicode_spaces(const char *pat) {
    size_t n = strlen(pat);
    char *out = malloc(64 * n + 1), *o = out;  // "\s" (2 bytes) -> at most sizeof WHITE_SPACE + 3
    if (!out) return NULL;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char e = pat[++i];
            if (e == 'Q') {  // \Q...\E: literal text, copied as it is
                const char *q = strstr(pat + i + 1, "\\E");
                size_t k = q ? (size_t)(q - pat) + 1 : n - 1;  // the E, or the last byte
                memcpy(o, pat + i - 1, k - (i - 1) + 1);
                o += k - (i - 1) + 1;
                i = k;
            } else if (e == 's' || (e == 'S' && !in_class)) {
                const char *w = e == 'S' ? "[^" WHITE_SPACE "]" : in_class ? WHITE_SPACE : "[" WHITE_SPACE "]";
                memcpy(o, w, strlen(w));
                o += strlen(w);
            } else {
                *o++ = '\\';
                *o++ = e;
            }
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {  // [:alpha:] inside a class
            const char *q = strstr(pat + i + 2, ":]");
            size_t k = q ? (size_t)(q - pat) + 1 : i;
            memcpy(o, pat + i, k - i + 1);
            o += k - i + 1;
            i = k;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            *o++ = c;
            // A ']' first in the class (after an optional '^') is a literal.
            if (i + 1 < n && pat[i + 1] == '^') *o++ = pat[++i];
            if (i + 1 < n && pat[i + 1] == ']') *o++ = pat[++i];
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        *o++ = c;
    }
    *o = 0;
    return out;
}

ct_pretok *ct_pretok_compile(const char *pattern, int literal) {
    int err;
    PCRE2_SIZE erroff;
    char *pat = literal ? strdup(pattern) : unicode_spaces(pattern);
    if (!pat) {
        ct_set_error("tokenizer: out of memory");
        return NULL;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &err, &erroff, NULL);
    free(pat);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        ct_set_error("pattern does not compile (PCRE2, near byte %zu): %s", (size_t)erroff, (char *)msg);
        return NULL;
    }
    ct_pretok *p = calloc(1, sizeof *p);
    if (!p) {
        pcre2_code_free(re);
        ct_set_error("tokenizer: out of memory");
        return NULL;
    }
    p->re = re;
    p->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return p;
}

ct_pretok *ct_pretok_new(void) {
    ct_pretok *p = ct_pretok_compile(CT_TOKENIZER_PATTERN, 0);
    if (!p) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        ct_set_error("tokenizer: pre-tokenisation %s", msg);
    }
    return p;
}

void ct_pretok_free(ct_pretok *p) {
    if (!p) return;
    pcre2_code_free(p->re);
    free(p);
}

// Strict UTF-8 (what PCRE2 accepts): no overlong forms, no surrogates, nothing above U+10FFFF.
long ct_utf8_valid_prefix(const uint8_t *s, long n) {
    long i = 0;
    while (i < n) {
        // ASCII fast path, 8 bytes at a time.
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        long need;
        uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) need = 2, lo = 0xA0;
        else if (c >= 0xE1 && c <= 0xEC) need = 2;
        else if (c == 0xED) need = 2, hi = 0x9F;
        else if (c >= 0xEE && c <= 0xEF) need = 2;
        else if (c == 0xF0) need = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) need = 3, hi = 0x8F;
        else return i;
        if (i + need >= n) return i;  // truncated sequence
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (long k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += need + 1;
    }
    return n;
}

// Length in bytes of the UTF-8 character at s (s is valid UTF-8).
static long char_len(uint8_t c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

// Splits one valid UTF-8 span: each match is a piece, and so is the text between two matches
// (tokenizers' Split with behaviour Isolated; an empty match gives no piece). Returns 1 if fn
// asked to stop, -1 on a regex engine error.
static int split_span(const ct_pretok *p, pcre2_match_data *md, pcre2_match_context *mc, const uint8_t *s, long n,
                      ct_tokenizer_piece_fn fn, void *ctx) {
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    // PCRE2's default match limit (10M backtracking steps) is too small for one long run:
    // "\s*[\r\n]+" tries a run of N spaces N times before "\s+(?!\S)" takes it. The pattern
    // has no nested quantifiers, so the work is linear in the span; allow that much, and a bound
    // still stops a runaway.
    unsigned long limit = 10000000ul + 16ul * (unsigned long)n;
    pcre2_set_match_limit(mc, limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit);
    long pos = 0, from = 0;  // pieces end at pos; the next search starts at from
    while (pos < n) {
        int rc = PCRE2_ERROR_NOMATCH;
        if (from < n) {
            rc = p->jit ? pcre2_jit_match(p->re, s, (PCRE2_SIZE)n, (PCRE2_SIZE)from, 0, md, mc) : PCRE2_ERROR_JIT_BADOPTION;
            // The JIT can run out of its (machine) stack on pathological inputs; the interpreter
            // keeps its backtracking frames on the heap, so retry there.
            if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
                rc = pcre2_match(p->re, s, (PCRE2_SIZE)n, (PCRE2_SIZE)from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, mc);
        }
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            ct_set_error("tokenizer: pre-tokenisation regex failed at byte %ld: %s", from, (char *)msg);
            return -1;
        }
        long ms = rc >= 0 ? (long)ov[0] : n, me = rc >= 0 ? (long)ov[1] : n;
        if (ms > pos && fn(ctx, (const char *)s + pos, ms - pos)) return 1;  // the text before the match
        if (me > ms) {
            if (fn(ctx, (const char *)s + ms, me - ms)) return 1;
            pos = from = me;
        } else {  // an empty match (or none): no piece; search again one character on
            pos = ms;
            from = ms < n ? ms + char_len(s[ms]) : n;
        }
    }
    return 0;
}

ct_status ct_pretok_split(const ct_pretok *p, const char *text, long len, ct_tokenizer_piece_fn fn, void *ctx) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    if (!md || !mc) {
        pcre2_match_data_free(md);
        pcre2_match_context_free(mc);
        return ct_set_error("tokenizer: out of memory");
    }
    const uint8_t *s = (const uint8_t *)text;
    long pos = 0;
    int rc = 0;
    while (pos < len && rc == 0) {
        long valid = ct_utf8_valid_prefix(s + pos, len - pos);
        if (valid > 0) {
            rc = split_span(p, md, mc, s + pos, valid, fn, ctx);
            pos += valid;
        } else {
            rc = fn(ctx, text + pos, 1) ? 1 : 0;  // one invalid byte, a piece of its own
            pos += 1;
        }
    }
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    return rc < 0 ? CT_ERR : CT_OK;
}
