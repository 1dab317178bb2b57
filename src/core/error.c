#include "core/error.h"

#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

// Formats into a scratch buffer first: wrapping the previous message, as in
// ct_set_error("%s: %s", path, ct_last_error()), reads the buffer this call replaces.
ct_status ct_set_error(const char *fmt, ...) {
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return CT_ERR;
}

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
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (size > 1)
        fprintf(stderr, "[rank %d] %s: %s\n", rank, where, msg);
    else
        fprintf(stderr, "%s: %s\n", where, msg);
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
