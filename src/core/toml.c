// TOML reader: a hand-written recursive-descent parser over the whole text. The parser walks
// the bytes once, keeping line and column for messages; every error is reported at the byte
// where something else was expected, in the form `name:line:col: expected <what>`.
#include "core/toml.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_check.h"
#include "core/strbuf.h"

enum { MAX_KEY_PARTS = 32, MAX_DEPTH = 64 };

typedef struct {
    const char *src;
    const char *name;   // for messages
    size_t pos;         // byte offset of the next unread character
    int line;           // 1-based line of src[pos]
    size_t line_start;  // offset of the first byte of that line
    bool failed;        // the first error wins; later ones are consequences
    char path[512];     // dotted name of the current [table], for duplicate-key messages
} parser;

typedef struct {
    char *part[MAX_KEY_PARTS];
    int n;
    int line, col;  // where the key starts
} key_path;

// ---- errors and positions -------------------------------------------------------------------

static int col_at(const parser *p, size_t pos) { return (int)(pos - p->line_start) + 1; }

// Reports an error at byte `pos` of the current line.
__attribute__((format(printf, 3, 4))) static bool fail_at(parser *p, size_t pos, const char *fmt, ...) {
    if (p->failed) return false;
    p->failed = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ct_set_error_at(CT_E_DATA, p->name, "%s:%d:%d: %s", p->name, p->line, col_at(p, pos), msg);
    return false;
}

// Reports an error at an explicit line/column (used once the parser has moved past the spot).
__attribute__((format(printf, 4, 5))) static bool fail_lc(parser *p, int line, int col, const char *fmt, ...) {
    if (p->failed) return false;
    p->failed = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ct_set_error_at(CT_E_DATA, p->name, "%s:%d:%d: %s", p->name, line, col, msg);
    return false;
}

static char peek(const parser *p) { return p->src[p->pos]; }
static char peek_at(const parser *p, size_t k) {
    for (size_t i = 0; i < k; i++)
        if (!p->src[p->pos + i]) return 0;
    return p->src[p->pos + k];
}

static void advance(parser *p) {
    if (!p->src[p->pos]) return;
    if (p->src[p->pos] == '\n') {
        p->line++;
        p->line_start = p->pos + 1;
    }
    p->pos++;
}

static bool is_newline(const parser *p) { return peek(p) == '\n' || (peek(p) == '\r' && peek_at(p, 1) == '\n'); }

static void skip_newline(parser *p) {
    if (peek(p) == '\r') advance(p);
    advance(p);
}

static void skip_ws(parser *p) {
    while (peek(p) == ' ' || peek(p) == '\t') advance(p);
}

static void skip_comment(parser *p) {
    if (peek(p) != '#') return;
    while (peek(p) && !is_newline(p)) advance(p);
}

// Inside arrays: blanks, newlines and comments are all just space.
static void skip_ws_nl(parser *p) {
    for (;;) {
        skip_ws(p);
        if (peek(p) == '#') skip_comment(p);
        else if (is_newline(p)) skip_newline(p);
        else return;
    }
}

// After a key/value or a header only a comment may follow on the line.
static bool expect_eol(parser *p, const char *after) {
    skip_ws(p);
    skip_comment(p);
    if (!peek(p)) return true;
    if (is_newline(p)) {
        skip_newline(p);
        return true;
    }
    unsigned char c = (unsigned char)peek(p);
    if (c >= 0x20 && c < 0x7F) return fail_at(p, p->pos, "expected end of line after %s, found '%c'", after, c);
    return fail_at(p, p->pos, "expected end of line after %s, found byte 0x%02X", after, c);
}

// ---- tree -------------------------------------------------------------------------------------

static ct_toml_value *new_value(ct_toml_type t, int line, int col) {
    ct_toml_value *v = ct_xcalloc(1, sizeof *v);
    v->type = t;
    v->line = line;
    v->col = col;
    return v;
}

void ct_toml_free(ct_toml_value *v) {
    if (!v) return;
    for (int k = 0; k < v->n; k++) {
        if (v->keys) free(v->keys[k]);
        ct_toml_free(v->items[k]);
    }
    free(v->keys);
    free(v->items);
    free(v->s);
    free(v);
}

// Appends to a table (key != NULL) or an array (key == NULL); the container takes ownership.
static void append(ct_toml_value *c, char *key, ct_toml_value *item) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->items = realloc(c->items, (size_t)c->cap * sizeof *c->items);
        if (c->type == CT_TOML_TABLE) c->keys = realloc(c->keys, (size_t)c->cap * sizeof *c->keys);
        if (!c->items || (c->type == CT_TOML_TABLE && !c->keys)) ct_fatal("toml", "out of memory");
    }
    if (c->type == CT_TOML_TABLE) c->keys[c->n] = key;
    c->items[c->n++] = item;
}

const ct_toml_value *ct_toml_get(const ct_toml_value *t, const char *key) {
    if (!t || t->type != CT_TOML_TABLE) return NULL;
    for (int k = 0; k < t->n; k++)
        if (!strcmp(t->keys[k], key)) return t->items[k];
    return NULL;
}

const ct_toml_value *ct_toml_get_path(const ct_toml_value *root, const char *path) {
    char part[256];
    const ct_toml_value *v = root;
    while (v && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof part) return NULL;
        memcpy(part, path, n);
        part[n] = 0;
        v = ct_toml_get(v, part);
        path += n + (path[n] == '.');
    }
    return v;
}

const char *ct_toml_type_name(ct_toml_type t) {
    switch (t) {
    case CT_TOML_TABLE: return "table";
    case CT_TOML_ARRAY: return "array";
    case CT_TOML_STRING: return "string";
    case CT_TOML_INT: return "integer";
    case CT_TOML_FLOAT: return "float";
    case CT_TOML_BOOL: return "boolean";
    }
    return "?";
}

// "an integer", "a table", ... for messages.
static const char *a_type(ct_toml_type t) {
    switch (t) {
    case CT_TOML_ARRAY: return "an array";
    case CT_TOML_INT: return "an integer";
    case CT_TOML_TABLE: return "a table";
    case CT_TOML_STRING: return "a string";
    case CT_TOML_FLOAT: return "a float";
    case CT_TOML_BOOL: return "a boolean";
    }
    return "a value";
}

// ---- strings ----------------------------------------------------------------------------------

// Control characters other than tab may not appear raw inside strings.
static bool is_control(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7F; }

// Decodes one escape sequence starting at the backslash.
static bool parse_escape(parser *p, ct_strbuf *b) {
    size_t at = p->pos;
    advance(p);  // the backslash
    char c = peek(p);
    switch (c) {
    case 'b': ct_sb_putc(b, '\b'); break;
    case 't': ct_sb_putc(b, '\t'); break;
    case 'n': ct_sb_putc(b, '\n'); break;
    case 'f': ct_sb_putc(b, '\f'); break;
    case 'r': ct_sb_putc(b, '\r'); break;
    case 'e': ct_sb_putc(b, 0x1B); break;
    case '"': ct_sb_putc(b, '"'); break;
    case '\\': ct_sb_putc(b, '\\'); break;
    case 'u':
    case 'U': {
        int nd = c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int k = 1; k <= nd; k++) {
            char h = peek_at(p, (size_t)k);
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) return fail_at(p, p->pos + (size_t)k, "expected %d hex digits after '\\%c'", nd, c);
            cp = cp * 16 + (uint32_t)d;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return fail_at(p, at, "expected a Unicode scalar value, got U+%X", cp);
        ct_sb_put_utf8(b, cp);
        for (int k = 0; k < nd; k++) advance(p);
        break;
    }
    default:
        return fail_at(p, at, "expected an escape sequence (\\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX \\UXXXXXXXX)");
    }
    advance(p);
    return true;
}

// "..." or """...""" (basic, with escapes) and '...' or '''...''' (literal, as written).
static bool parse_string(parser *p, char **out, bool allow_multiline) {
    char q = peek(p);
    bool literal = q == '\'';
    size_t start = p->pos;
    int start_line = p->line, start_col = col_at(p, start);
    bool multi = allow_multiline && peek_at(p, 1) == q && peek_at(p, 2) == q;
    ct_strbuf b = {0};
    if (!multi) {
        advance(p);
        for (;;) {
            char c = peek(p);
            if (c == q) {
                advance(p);
                break;
            }
            if (!c || c == '\n' || c == '\r') {
                free(b.s);
                return fail_at(p, p->pos, "expected %c to close the string that starts at column %d", q, start_col);
            }
            if (!literal && c == '\\') {
                if (!parse_escape(p, &b)) return free(b.s), false;
                continue;
            }
            if (is_control((unsigned char)c)) {
                free(b.s);
                return fail_at(p, p->pos, "expected a printable character (control characters must be escaped)");
            }
            ct_sb_putc(&b, c);
            advance(p);
        }
        *out = ct_sb_take(&b);
        return true;
    }
    // Multi-line: a newline right after the opening delimiter is dropped.
    advance(p), advance(p), advance(p);
    if (is_newline(p)) skip_newline(p);
    for (;;) {
        char c = peek(p);
        if (!c) {
            free(b.s);
            return fail_lc(p, start_line, start_col, "expected %c%c%c to close the multi-line string", q, q, q);
        }
        if (c == q && peek_at(p, 1) == q && peek_at(p, 2) == q) {
            // Up to two quotes may sit right before the closing delimiter: """a""""" is a"".
            int run = 0;
            while (peek_at(p, (size_t)run) == q) run++;
            if (run > 5) {
                free(b.s);
                return fail_at(p, p->pos + 5, "expected at most five %c in a row in a multi-line string", q);
            }
            for (int k = 0; k < run - 3; k++) ct_sb_putc(&b, q);
            for (int k = 0; k < run; k++) advance(p);
            break;
        }
        if (is_newline(p)) {
            ct_sb_putc(&b, '\n');
            skip_newline(p);
            continue;
        }
        if (!literal && c == '\\') {
            // A backslash at the end of a line joins it to the next non-blank text.
            size_t k = 1;
            while (peek_at(p, k) == ' ' || peek_at(p, k) == '\t') k++;
            if (peek_at(p, k) == '\n' || (peek_at(p, k) == '\r' && peek_at(p, k + 1) == '\n')) {
                advance(p);
                while (peek(p) == ' ' || peek(p) == '\t' || is_newline(p)) {
                    if (is_newline(p)) skip_newline(p);
                    else advance(p);
                }
                continue;
            }
            if (!parse_escape(p, &b)) return free(b.s), false;
            continue;
        }
        if (is_control((unsigned char)c)) {
            free(b.s);
            return fail_at(p, p->pos, "expected a printable character (control characters must be escaped)");
        }
        ct_sb_putc(&b, c);
        advance(p);
    }
    *out = ct_sb_take(&b);
    return true;
}

// ---- keys -------------------------------------------------------------------------------------

static bool is_bare_key_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void free_key(key_path *k) {
    for (int i = 0; i < k->n; i++) free(k->part[i]);
    k->n = 0;
}

// key = simple-key ( ws '.' ws simple-key )*
static bool parse_key_parts(parser *p, key_path *k) {
    k->n = 0;
    k->line = p->line;
    k->col = col_at(p, p->pos);
    for (;;) {
        if (k->n == MAX_KEY_PARTS) return fail_at(p, p->pos, "expected at most %d parts in a dotted key", MAX_KEY_PARTS);
        char c = peek(p);
        if (c == '"' || c == '\'') {
            if (!parse_string(p, &k->part[k->n], false)) return false;
            k->n++;
        } else if (is_bare_key_char(c)) {
            size_t s = p->pos;
            while (is_bare_key_char(peek(p))) advance(p);
            size_t n = p->pos - s;
            char *part = ct_xmalloc(n + 1);
            memcpy(part, p->src + s, n);
            part[n] = 0;
            k->part[k->n++] = part;
        } else {
            if (k->n == 0) return fail_at(p, p->pos, "expected a key (letters, digits, '_', '-', or a quoted string)");
            return fail_at(p, p->pos, "expected a key after '.'");
        }
        skip_ws(p);
        if (peek(p) != '.') return true;
        advance(p);
        skip_ws(p);
    }
}

// "a.b.c" from the current table path and the first n parts of a key, for messages.
static const char *key_name(const parser *p, const key_path *k, int n, char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "%s", p->path);
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? "." : "", k->part[i]);
    return buf;
}

// On failure the parts read so far are freed, so callers own a key only after success.
static bool parse_key(parser *p, key_path *k) {
    if (parse_key_parts(p, k)) return true;
    free_key(k);
    return false;
}

static ct_toml_value *get_mut(ct_toml_value *t, const char *key) { return (ct_toml_value *)ct_toml_get(t, key); }

// ---- values -----------------------------------------------------------------------------------

static bool parse_value(parser *p, ct_toml_value **out, int depth);
static bool insert_keyval(parser *p, ct_toml_value *table, key_path *k, ct_toml_value *v);

// Digits with single underscores between them: 1_000 yes, 1__0 / _1 / 1_ no.
static bool scan_digits(parser *p, const char *tok, size_t *i, size_t tok_pos, int base, const char *what) {
    size_t s = *i;
    for (;;) {
        char c = tok[*i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
        if (d < base) {
            (*i)++;
            continue;
        }
        if (c == '_' && *i > s) {
            char n = tok[*i + 1];
            int dn = n >= '0' && n <= '9' ? n - '0' : n >= 'a' && n <= 'f' ? n - 'a' + 10 : n >= 'A' && n <= 'F' ? n - 'A' + 10 : 99;
            if (dn < base) {
                (*i)++;
                continue;
            }
            return fail_at(p, tok_pos + *i + 1, "expected a digit after '_'");
        }
        break;
    }
    if (*i == s) return fail_at(p, tok_pos + *i, "expected %s", what);
    return true;
}

static bool parse_number(parser *p, ct_toml_value **out) {
    size_t tok_pos = p->pos;
    int line = p->line, col = col_at(p, tok_pos);
    size_t n = 0;
    while (is_bare_key_char(p->src[tok_pos + n]) || p->src[tok_pos + n] == '.' || p->src[tok_pos + n] == '+' ||
           p->src[tok_pos + n] == ':')
        n++;
    char tok[128];
    if (n >= sizeof tok) return fail_at(p, tok_pos, "expected a number of at most %zu characters", sizeof tok - 1);
    memcpy(tok, p->src + tok_pos, n);
    tok[n] = 0;
    if (strchr(tok, ':') || (n >= 10 && tok[4] == '-' && tok[7] == '-'))
        return fail_at(p, tok_pos, "expected a string, number or boolean (dates and times are not supported)");
    size_t i = 0;
    bool neg = false;
    if (tok[0] == '+' || tok[0] == '-') neg = tok[0] == '-', i = 1;
    ct_toml_value *v = NULL;
    if (!strcmp(tok + i, "inf") || !strcmp(tok + i, "nan")) {
        v = new_value(CT_TOML_FLOAT, line, col);
        v->f = tok[i] == 'i' ? (neg ? -HUGE_VAL : HUGE_VAL) : (neg ? -NAN : NAN);
    } else if (tok[i] == '0' && (tok[i + 1] == 'x' || tok[i + 1] == 'o' || tok[i + 1] == 'b')) {
        if (i) return fail_at(p, tok_pos, "expected no sign before a hex, octal or binary integer");
        int base = tok[1] == 'x' ? 16 : tok[1] == 'o' ? 8 : 2;
        i = 2;
        if (!scan_digits(p, tok, &i, tok_pos, base, base == 16 ? "a hex digit" : base == 8 ? "an octal digit" : "a binary digit"))
            return false;
        if (tok[i]) return fail_at(p, tok_pos + i, "expected end of the number, found '%c'", tok[i]);
        char clean[128];
        size_t m = 0;
        for (size_t j = 2; tok[j]; j++)
            if (tok[j] != '_') clean[m++] = tok[j];
        clean[m] = 0;
        errno = 0;
        unsigned long long u = strtoull(clean, NULL, base);
        if (errno == ERANGE || u > (unsigned long long)INT64_MAX)
            return fail_at(p, tok_pos, "expected an integer that fits in 64 bits");
        v = new_value(CT_TOML_INT, line, col);
        v->i = (long long)u;
    } else {
        size_t int_start = i;
        if (!scan_digits(p, tok, &i, tok_pos, 10, "a digit")) return false;
        if (tok[int_start] == '0' && i - int_start > 1)
            return fail_at(p, tok_pos + int_start, "expected a number without leading zeros");
        bool is_float = false;
        if (tok[i] == '.') {
            is_float = true;
            i++;
            if (!scan_digits(p, tok, &i, tok_pos, 10, "a digit after '.'")) return false;
        }
        if (tok[i] == 'e' || tok[i] == 'E') {
            is_float = true;
            i++;
            if (tok[i] == '+' || tok[i] == '-') i++;
            if (!scan_digits(p, tok, &i, tok_pos, 10, "a digit in the exponent")) return false;
        }
        if (tok[i]) return fail_at(p, tok_pos + i, "expected end of the number, found '%c'", tok[i]);
        char clean[128];
        size_t m = 0;
        for (size_t j = 0; tok[j]; j++)
            if (tok[j] != '_') clean[m++] = tok[j];
        clean[m] = 0;
        errno = 0;
        if (is_float) {
            v = new_value(CT_TOML_FLOAT, line, col);
            v->f = strtod(clean, NULL);
        } else {
            long long x = strtoll(clean, NULL, 10);
            if (errno == ERANGE) return fail_at(p, tok_pos, "expected an integer that fits in 64 bits");
            v = new_value(CT_TOML_INT, line, col);
            v->i = x;
        }
    }
    for (size_t k = 0; k < n; k++) advance(p);
    *out = v;
    return true;
}

static bool parse_array(parser *p, ct_toml_value **out, int depth) {
    ct_toml_value *a = new_value(CT_TOML_ARRAY, p->line, col_at(p, p->pos));
    a->how = CT_TOML_HOW_FROZEN;
    advance(p);  // '['
    for (;;) {
        skip_ws_nl(p);
        if (peek(p) == ']') break;
        ct_toml_value *item;
        if (!parse_value(p, &item, depth + 1)) return ct_toml_free(a), false;
        append(a, NULL, item);
        skip_ws_nl(p);
        if (peek(p) == ',') {
            advance(p);
            continue;
        }
        if (peek(p) == ']') break;
        ct_toml_free(a);
        return fail_at(p, p->pos, "expected ',' or ']' in the array");
    }
    advance(p);  // ']'
    *out = a;
    return true;
}

// { key = value, ... } on one line.
static bool parse_inline_table(parser *p, ct_toml_value **out, int depth) {
    ct_toml_value *t = new_value(CT_TOML_TABLE, p->line, col_at(p, p->pos));
    advance(p);  // '{'
    char saved[sizeof p->path];
    memcpy(saved, p->path, sizeof saved);
    p->path[0] = 0;  // keys inside are named relative to the inline table in messages
    skip_ws(p);
    bool ok = true;
    if (peek(p) == '}') {
        advance(p);
    } else {
        for (;;) {
            key_path k;
            if (!(ok = parse_key(p, &k))) break;
            if (peek(p) != '=') {
                free_key(&k);
                ok = fail_at(p, p->pos, "expected '=' after the key");
                break;
            }
            advance(p);
            skip_ws(p);
            ct_toml_value *v;
            if (!(ok = parse_value(p, &v, depth + 1))) {
                free_key(&k);
                break;
            }
            ok = insert_keyval(p, t, &k, v);
            free_key(&k);
            if (!ok) break;
            skip_ws(p);
            if (peek(p) == ',') {
                advance(p);
                skip_ws(p);
                continue;
            }
            if (peek(p) == '}') {
                advance(p);
                break;
            }
            ok = fail_at(p, p->pos, "expected ',' or '}' in the inline table");
            break;
        }
    }
    memcpy(p->path, saved, sizeof saved);
    if (!ok) return ct_toml_free(t), false;
    t->how = CT_TOML_HOW_FROZEN;
    *out = t;
    return true;
}

static bool word_at(const parser *p, const char *w) {
    size_t n = strlen(w);
    if (strncmp(p->src + p->pos, w, n)) return false;
    char after = p->src[p->pos + n];
    return !is_bare_key_char(after) && after != '.';
}

static bool parse_value(parser *p, ct_toml_value **out, int depth) {
    if (depth > MAX_DEPTH) return fail_at(p, p->pos, "expected arrays and tables nested at most %d deep", MAX_DEPTH);
    int line = p->line, col = col_at(p, p->pos);
    char c = peek(p);
    if (c == '"' || c == '\'') {
        char *s;
        if (!parse_string(p, &s, true)) return false;
        *out = new_value(CT_TOML_STRING, line, col);
        (*out)->s = s;
        return true;
    }
    if (c == '[') return parse_array(p, out, depth);
    if (c == '{') return parse_inline_table(p, out, depth);
    if (word_at(p, "true") || word_at(p, "false")) {
        *out = new_value(CT_TOML_BOOL, line, col);
        (*out)->b = c == 't';
        for (int k = c == 't' ? 4 : 5; k > 0; k--) advance(p);
        return true;
    }
    if ((c >= '0' && c <= '9') || c == '+' || c == '-' || word_at(p, "inf") || word_at(p, "nan")) return parse_number(p, out);
    if (!c || is_newline(p) || c == '#') return fail_at(p, p->pos, "expected a value after '='");
    return fail_at(p, p->pos, "expected a value (a quoted string, number, true/false, [array] or {inline table})");
}

// Places `v` at the dotted key `k` inside `table`, creating the intermediate tables. On error
// `v` is freed.
static bool insert_keyval(parser *p, ct_toml_value *table, key_path *k, ct_toml_value *v) {
    char name[600];
    ct_toml_value *t = table;
    for (int i = 0; i < k->n - 1; i++) {
        ct_toml_value *child = get_mut(t, k->part[i]);
        if (!child) {
            child = new_value(CT_TOML_TABLE, k->line, k->col);
            child->how = CT_TOML_HOW_DOTTED;
            append(t, ct_xstrdup(k->part[i]), child);
        } else if (child->type != CT_TOML_TABLE) {
            ct_toml_free(v);
            return fail_lc(p, k->line, k->col, "expected '%s' to be a table, but line %d made it %s",
                           key_name(p, k, i + 1, name, sizeof name), child->line, a_type(child->type));
        } else if (child->how == CT_TOML_HOW_FROZEN || child->how == CT_TOML_HOW_HEADER) {
            ct_toml_free(v);
            return fail_lc(p, k->line, k->col, "expected a new key: table '%s' was completed at line %d",
                           key_name(p, k, i + 1, name, sizeof name), child->line);
        }
        t = child;
    }
    const ct_toml_value *old = ct_toml_get(t, k->part[k->n - 1]);
    if (old) {
        ct_toml_free(v);
        return fail_lc(p, k->line, k->col, "duplicate key '%s' (first set at line %d)", key_name(p, k, k->n, name, sizeof name),
                       old->line);
    }
    append(t, ct_xstrdup(k->part[k->n - 1]), v);
    return true;
}

// [a.b.c] or [[a.b.c]]; returns the table that following key/values go into.
static bool parse_header(parser *p, ct_toml_value *root, ct_toml_value **cur) {
    int line = p->line, col = col_at(p, p->pos);
    bool aot = peek_at(p, 1) == '[';
    advance(p);
    if (aot) advance(p);
    skip_ws(p);
    key_path k;
    if (!parse_key(p, &k)) return false;
    bool ok = true;
    if (peek(p) != ']' || (aot && peek_at(p, 1) != ']')) {
        ok = fail_at(p, p->pos, "expected '%s' to close the table header", aot ? "]]" : "]");
    } else {
        advance(p);
        if (aot) advance(p);
    }
    p->path[0] = 0;
    char name[600];
    ct_toml_value *t = root;
    for (int i = 0; ok && i < k.n - 1; i++) {
        ct_toml_value *child = get_mut(t, k.part[i]);
        if (!child) {
            child = new_value(CT_TOML_TABLE, line, col);
            append(t, ct_xstrdup(k.part[i]), child);
        } else if (child->type == CT_TOML_ARRAY && child->how == CT_TOML_HOW_AOT) {
            child = child->items[child->n - 1];
        } else if (child->type != CT_TOML_TABLE || child->how == CT_TOML_HOW_FROZEN) {
            ok = fail_lc(p, line, col, "expected '%s' to be a table, but line %d made it %s",
                         key_name(p, &k, i + 1, name, sizeof name), child->line,
                         child->type == CT_TOML_TABLE ? "a complete inline table" : a_type(child->type));
        }
        t = child;
    }
    const char *last = k.part[k.n - 1];
    if (ok && !aot) {
        ct_toml_value *child = get_mut(t, last);
        if (!child) {
            child = new_value(CT_TOML_TABLE, line, col);
            child->how = CT_TOML_HOW_HEADER;
            append(t, ct_xstrdup(last), child);
        } else if (child->type == CT_TOML_TABLE && child->how == CT_TOML_HOW_IMPLICIT) {
            child->how = CT_TOML_HOW_HEADER;
        } else if (child->type == CT_TOML_TABLE) {
            ok = fail_lc(p, line, col, "expected each table once: [%s] was already defined at line %d",
                         key_name(p, &k, k.n, name, sizeof name), child->line);
        } else {
            ok = fail_lc(p, line, col, "expected '%s' to be a table, but line %d made it %s",
                         key_name(p, &k, k.n, name, sizeof name), child->line, a_type(child->type));
        }
        *cur = child;
    } else if (ok) {
        ct_toml_value *arr = get_mut(t, last);
        if (!arr) {
            arr = new_value(CT_TOML_ARRAY, line, col);
            arr->how = CT_TOML_HOW_AOT;
            append(t, ct_xstrdup(last), arr);
        } else if (arr->type != CT_TOML_ARRAY || arr->how != CT_TOML_HOW_AOT) {
            ok = fail_lc(p, line, col, "expected '%s' to be an array of tables, but line %d made it %s",
                         key_name(p, &k, k.n, name, sizeof name), arr->line,
                         arr->type == CT_TOML_ARRAY ? "a plain array" : a_type(arr->type));
        }
        if (ok) {
            ct_toml_value *elem = new_value(CT_TOML_TABLE, line, col);
            elem->how = CT_TOML_HOW_HEADER;
            append(arr, NULL, elem);
            *cur = elem;
        }
    }
    if (ok) {
        key_name(p, &k, k.n, name, sizeof name);
        size_t n = strnlen(name, sizeof p->path - 1);  // a longer path only shortens messages
        memcpy(p->path, name, n);
        p->path[n] = 0;
    }
    free_key(&k);
    return ok && expect_eol(p, "the table header");
}

ct_toml_value *ct_toml_parse(const char *text, const char *name) {
    parser p = {.src = text, .name = name ? name : "<string>", .line = 1};
    if (!strncmp(text, "\xEF\xBB\xBF", 3)) p.pos = p.line_start = 3;  // UTF-8 byte-order mark
    ct_toml_value *root = new_value(CT_TOML_TABLE, 1, 1);
    root->how = CT_TOML_HOW_HEADER;
    ct_toml_value *cur = root;
    bool ok = true;
    while (ok) {
        skip_ws(&p);
        char c = peek(&p);
        if (!c) break;
        if (c == '#') {
            skip_comment(&p);
        } else if (is_newline(&p)) {
            skip_newline(&p);
        } else if (c == '[') {
            ok = parse_header(&p, root, &cur);
        } else if (is_bare_key_char(c) || c == '"' || c == '\'') {
            key_path k;
            if (!(ok = parse_key(&p, &k))) break;
            if (peek(&p) != '=') {
                free_key(&k);
                ok = fail_at(&p, p.pos, "expected '=' after the key");
                break;
            }
            advance(&p);
            skip_ws(&p);
            ct_toml_value *v;
            if (!(ok = parse_value(&p, &v, 0))) {
                free_key(&k);
                break;
            }
            ok = insert_keyval(&p, cur, &k, v);
            free_key(&k);
            if (ok) ok = expect_eol(&p, "the value");
        } else if (c == '\r') {
            ok = fail_at(&p, p.pos, "expected a line feed after a carriage return");
        } else {
            ok = fail_at(&p, p.pos, "expected a key, a [table] header or a comment");
        }
    }
    if (!ok) {
        ct_toml_free(root);
        return NULL;
    }
    return root;
}

ct_toml_value *ct_toml_parse_file(const char *path) {
    char *text;
    size_t total;
    // A config file is a few kilobytes; the limit keeps a wrong path (a disk image, a dataset)
    // from being read into memory before the first parse error.
    if (ct_file_read_all(path, "config file", CT_FILE_TEXT_CONFIG_MAX, &text, &total) != CT_OK) return NULL;
    if (strlen(text) != total) {
        free(text);
        ct_set_error_at(CT_E_DATA, path, "%s: expected a text file, found a NUL byte", path);
        return NULL;
    }
    ct_toml_value *root = ct_toml_parse(text, path);
    free(text);
    return root;
}
