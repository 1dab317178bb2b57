#include "core/error.h"

#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];
static _Thread_local bool last_error_shared;  // see ct_error_mark_shared
static _Thread_local ct_error_code last_error_code;
static _Thread_local char last_error_subject[512];

// Length of the UTF-8 sequence at p (1..4), or 0 when p does not start a well-formed one
// (a stray continuation byte, an overlong form, a surrogate, a value past U+10FFFF).
static int utf8_len(const unsigned char *p) {
    unsigned c = p[0];
    int n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (c < 0xc2 || c > 0xf4) return 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0) || (c == 0xf0 && p[1] < 0x90) ||
        (c == 0xf4 && p[1] >= 0x90))
        return 0;
    return n;
}

// Copies src into dst (cap bytes, always NUL-terminated) as one line of printable text.
// Messages quote input -- keys, values, paths, file contents -- and a newline in a TOML key
// once split an error in two, an escape sequence went to the terminal. Control characters
// become \n \r \t \xNN (C0, DEL) or \u00NN (C1, U+0080..U+009F, which terminals also obey);
// bytes that are not UTF-8 become \xNN. UTF-8 text and backslashes are kept, so escaping an
// already escaped message (a message wrapped in another) changes nothing.
static void escape_line(char *dst, size_t cap, const char *src) {
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p;) {
        char esc[8];
        const char *out = esc;
        size_t n;
        int u = *p < 0x80 ? 1 : utf8_len(p);
        if (*p >= 0x20 && *p != 0x7f && u >= 1 && !(u == 2 && p[0] == 0xc2 && p[1] < 0xa0)) {
            out = (const char *)p;  // printable ASCII or a well-formed UTF-8 character
            n = (size_t)u;
        } else if (u == 2) {  // C1 control
            n = (size_t)snprintf(esc, sizeof esc, "\\u%04x", p[1]);
        } else if (*p == '\n' || *p == '\r' || *p == '\t') {
            n = (size_t)snprintf(esc, sizeof esc, "\\%c", *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't');
            u = 1;
        } else {
            n = (size_t)snprintf(esc, sizeof esc, "\\x%02x", *p);
            u = 1;
        }
        if (k + n >= cap) break;  // no room for the whole piece: stop at a clean boundary
        memcpy(dst + k, out, n);
        k += n;
        p += u;
    }
    dst[k] = 0;
}

void ct_error_escape(char *dst, size_t cap, const char *src) {
    if (cap) escape_line(dst, cap, src);
}

// Whether `msg` wraps `old`: holds it whole, or ends with its beginning where the wrap filled
// the buffer and cut it.
static bool wraps(const char *msg, const char *old) {
    size_t n_old = strlen(old), n_msg = strlen(msg);
    if (!n_old) return false;
    if (strstr(msg, old)) return true;
    if (n_msg + 8 < sizeof last_error) return false;  // not cut: the old message is not in it
    for (const char *p = strchr(msg, old[0]); p; p = strchr(p + 1, old[0])) {
        size_t rest = n_msg - (size_t)(p - msg);
        if (rest >= 32 && rest < n_old && !strncmp(p, old, rest)) return true;
    }
    return false;
}

// Formats into scratch buffers first: wrapping the previous message, as in
// ct_set_error("%s: %s", path, ct_last_error()), reads the buffer this call replaces, and the
// subject may be ct_last_error_subject() itself. `keep_code` and a NULL `subject` take the
// previous error's when the new message wraps it.
static ct_status set_error(bool keep_code, ct_error_code code, const char *subject, const char *fmt, va_list ap) {
    char msg[sizeof last_error], line[sizeof last_error], subj[sizeof last_error_subject];
    if (subject) escape_line(subj, sizeof subj, subject);
    vsnprintf(msg, sizeof msg, fmt, ap);
    escape_line(line, sizeof line, msg);
    bool wrap = wraps(line, last_error);
    last_error_shared = last_error_shared && wrap;
    last_error_code = keep_code ? (wrap ? last_error_code : CT_E_NONE) : code;
    if (subject) memcpy(last_error_subject, subj, sizeof subj);
    else if (!wrap) last_error_subject[0] = 0;
    memcpy(last_error, line, sizeof line);
    return CT_ERR;
}

ct_status ct_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(true, CT_E_NONE, NULL, fmt, ap);
    va_end(ap);
    return CT_ERR;
}

ct_status ct_set_error_code(ct_error_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(false, code, NULL, fmt, ap);
    va_end(ap);
    return CT_ERR;
}

ct_status ct_set_error_at(ct_error_code code, const char *subject, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(false, code, subject ? subject : "", fmt, ap);
    va_end(ap);
    return CT_ERR;
}

ct_error_code ct_last_error_code(void) { return last_error_code; }

const char *ct_last_error_subject(void) { return last_error_subject; }

const char *ct_error_code_name(ct_error_code code) {
    static const char *const names[] = {"none", "config", "data", "io", "comm", "numeric", "memory", "internal"};
    return (unsigned)code < sizeof names / sizeof names[0] ? names[code] : "unknown";
}

void ct_error_mark_shared(void) { last_error_shared = last_error[0] != 0; }

bool ct_error_is_shared(void) { return last_error_shared; }

const char *ct_last_error(void) { return last_error; }

// The registered hook, process-wide like the job it describes (see ct_set_abort_hook).
static _Atomic(const ct_abort_hook *) abort_hook;

void ct_set_abort_hook(const ct_abort_hook *h) { atomic_store(&abort_hook, h); }

void ct_fatal(const char *where, const char *fmt, ...) {
    const ct_abort_hook *h = atomic_load(&abort_hook);
    int rank = 0, size = 1;
    if (h) {
        rank = h->rank(h->ctx);
        size = h->size(h->ctx);
    }
    char raw[1024], msg[1024], at[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    escape_line(msg, sizeof msg, raw);  // one line, whatever the input it quotes
    escape_line(at, sizeof at, where);
    if (size > 1)
        fprintf(stderr, "[rank %d] %s: %s\n", rank, at, msg);
    else
        fprintf(stderr, "%s: %s\n", at, msg);
    fflush(stderr);
    fflush(stdout);
    // A job of one ends by exit, so its status and atexit handlers are the ordinary ones.
    if (h && size > 1) h->abort_job(h->ctx, 1);
    exit(1);
}

void *ct_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) ct_fatal("alloc", "out of memory allocating %zu bytes", n);
    return p;
}

void *ct_xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) ct_fatal("alloc", "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

char *ct_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ct_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
