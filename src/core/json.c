// JSON reader (a recursive descent over RFC 8259) and string writer; see json.h.
#include "core/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_check.h"
#include "core/strbuf.h"

typedef struct {
    const char *p, *start, *end;
    char err[160];
} parser;

// Records the first error; returns -1 so callers can `return fail(...)`.
static int fail(parser *ps, const char *why) {
    if (!ps->err[0]) snprintf(ps->err, sizeof ps->err, "bad JSON at byte %ld: %s", (long)(ps->p - ps->start), why);
    return -1;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static void free_node(ct_json *j) {
    if (j->type == CT_JSON_STRING) free(j->string);
    if (j->type == CT_JSON_ARRAY || j->type == CT_JSON_OBJECT) {
        for (int i = 0; i < j->n; i++) {
            free_node(&j->items[i]);
            if (j->keys) free(j->keys[i]);
        }
        free(j->items);
        free(j->keys);
    }
    memset(j, 0, sizeof *j);
}

void ct_json_free(ct_json *j) {
    if (!j) return;
    free_node(j);
    free(j);
}

// ---- strings ----------------------------------------------------------------------------------

static int hex4(parser *ps, uint32_t *v) {
    if (ps->end - ps->p < 4) return fail(ps, "short \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *ps->p++;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(ps, "bad hex digit in \\u escape");
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

// One escape after the backslash, appended to b.
static int escape(parser *ps, ct_strbuf *b) {
    if (ps->p >= ps->end) return fail(ps, "unterminated escape");
    char e = *ps->p++;
    const char *simple = NULL;
    switch (e) {
        case '"': simple = "\""; break;
        case '\\': simple = "\\"; break;
        case '/': simple = "/"; break;
        case 'b': simple = "\b"; break;
        case 'f': simple = "\f"; break;
        case 'n': simple = "\n"; break;
        case 'r': simple = "\r"; break;
        case 't': simple = "\t"; break;
        case 'u': break;
        default: return fail(ps, "bad escape");
    }
    if (simple) {
        ct_sb_putn(b, simple, 1);
        return 0;
    }
    uint32_t cp;
    if (hex4(ps, &cp)) return -1;
    if (cp >= 0xd800 && cp < 0xdc00) {  // a high surrogate: its low half must follow
        uint32_t lo;
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') return fail(ps, "lone surrogate");
        ps->p += 2;
        if (hex4(ps, &lo)) return -1;
        if (lo < 0xdc00 || lo >= 0xe000) return fail(ps, "bad surrogate pair");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    } else if (cp >= 0xdc00 && cp < 0xe000) {
        return fail(ps, "lone surrogate");
    }
    if (cp == 0) return fail(ps, "\\u0000 in a string");
    ct_sb_put_utf8(b, cp);
    return 0;
}

static int parse_string(parser *ps, char **out) {
    ps->p++;  // the opening quote
    ct_strbuf b = {0};
    for (;;) {
        if (ps->p >= ps->end) {
            free(b.s);
            return fail(ps, "unterminated string");
        }
        unsigned char c = (unsigned char)*ps->p++;
        if (c == '"') break;
        int bad = c < 0x20 ? fail(ps, "control character in a string") : c == '\\' ? escape(ps, &b) : 0;
        if (bad) {
            free(b.s);
            return -1;
        }
        if (c >= 0x20 && c != '\\') ct_sb_putc(&b, (char)c);
    }
    *out = ct_sb_take(&b);
    return 0;
}

// ---- values -----------------------------------------------------------------------------------

static int is_digit(const parser *ps) { return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9'; }

// Checks the grammar of a number, then converts its text with strtod (exact to the nearest double).
static int parse_number(parser *ps, ct_json *out) {
    const char *s = ps->p;
    bool neg = ps->p < ps->end && *ps->p == '-', exact = true;
    if (neg) ps->p++;
    if (!is_digit(ps)) return fail(ps, "unexpected character");
    if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9') return fail(ps, "leading zero");
    uint64_t v = 0;  // the integer part, exactly, while it fits
    while (is_digit(ps)) {
        unsigned d = (unsigned)(*ps->p++ - '0');
        if (v > (UINT64_MAX - d) / 10) exact = false;
        v = v * 10 + d;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        exact = false;
        ps->p++;
        if (!is_digit(ps)) return fail(ps, "bad fraction");
        while (is_digit(ps)) ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        exact = false;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (!is_digit(ps)) return fail(ps, "bad exponent");
        while (is_digit(ps)) ps->p++;
    }
    char tmp[64];
    size_t k = (size_t)(ps->p - s);
    if (k >= sizeof tmp) return fail(ps, "number too long");
    memcpy(tmp, s, k);
    tmp[k] = 0;
    out->type = CT_JSON_NUMBER;
    out->number = strtod(tmp, NULL);  // out of range: +-HUGE_VAL or 0, which the checks that follow refuse
    // -0 is an integer too (0); INT64_MIN's magnitude is INT64_MAX + 1.
    out->is_int = exact && v <= (uint64_t)INT64_MAX + (neg ? 1 : 0);
    out->integer = !out->is_int ? 0 : neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int parse_literal(parser *ps, const char *word, ct_json *out, ct_json_type t, int value) {
    size_t k = strlen(word);
    if ((size_t)(ps->end - ps->p) < k || memcmp(ps->p, word, k)) return fail(ps, "unexpected character");
    ps->p += k;
    out->type = t;
    out->boolean = value;
    return 0;
}

static int parse_value(parser *ps, ct_json *out, int depth);

// '[' ... ']' or '{' ... '}'; children are counted before they are parsed so that freeing a
// half-parsed container releases the half-parsed child too.
static int parse_container(parser *ps, ct_json *out, int depth, int obj) {
    out->type = obj ? CT_JSON_OBJECT : CT_JSON_ARRAY;
    const char close = obj ? '}' : ']';
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    int cap = 0;
    for (;;) {
        if (out->n == cap) {
            cap = cap ? 2 * cap : 8;
            out->items = realloc(out->items, sizeof(ct_json) * (size_t)cap);
            if (obj) out->keys = realloc(out->keys, sizeof(char *) * (size_t)cap);
            if (!out->items || (obj && !out->keys)) ct_fatal("json", "out of memory");
        }
        ct_json *kid = &out->items[out->n];
        memset(kid, 0, sizeof *kid);
        skip_ws(ps);
        if (obj) {
            out->keys[out->n] = NULL;
            if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "expected a string key");
            char *key;
            if (parse_string(ps, &key)) return -1;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                return fail(ps, "expected ':'");
            }
            ps->p++;
            out->keys[out->n] = key;
        }
        out->n++;
        if (parse_value(ps, kid, depth + 1)) return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(parser *ps, ct_json *out, int depth) {
    if (depth > 64) return fail(ps, "nested too deeply");
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, "unexpected end");
    switch (*ps->p) {
        case '{': return parse_container(ps, out, depth, 1);
        case '[': return parse_container(ps, out, depth, 0);
        case '"': out->type = CT_JSON_STRING; return parse_string(ps, &out->string);
        case 't': return parse_literal(ps, "true", out, CT_JSON_BOOL, 1);
        case 'f': return parse_literal(ps, "false", out, CT_JSON_BOOL, 0);
        case 'n': return parse_literal(ps, "null", out, CT_JSON_NULL, 0);
        default: return parse_number(ps, out);
    }
}

ct_json *ct_json_parse(const char *text, size_t len, const char *what) {
    parser ps = {.p = text, .start = text, .end = text + len};
    ct_json *j = ct_xcalloc(1, sizeof *j);
    if (parse_value(&ps, j, 0) == 0) {
        skip_ws(&ps);
        if (ps.p != ps.end) fail(&ps, "trailing characters after the value");
    }
    if (ps.err[0]) {
        ct_json_free(j);
        ct_set_error_at(CT_E_DATA, what, "%s: %s", what, ps.err);
        return NULL;
    }
    return j;
}

// A JSON file a user points at (a model directory's config.json, an index): through
// core/file_check like every reader, so a FIFO or /dev/zero is refused rather than read
// forever, and a file over the caller's limit before it is read.
ct_json *ct_json_read_file(const char *path, const char *what, uint64_t max_bytes) {
    char *text;
    size_t len;
    if (ct_file_read_all(path, what, max_bytes, &text, &len)) return NULL;
    ct_json *j = ct_json_parse(text, len, path);
    free(text);
    return j;
}

const ct_json *ct_json_get(const ct_json *j, const char *key) {
    if (!j || j->type != CT_JSON_OBJECT) return NULL;
    for (int i = j->n - 1; i >= 0; i--)
        if (!strcmp(j->keys[i], key)) return &j->items[i];
    return NULL;
}

void ct_json_write_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}
