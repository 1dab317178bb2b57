// The growing string of strbuf.h.
#include "core/strbuf.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void ct_sb_putn(ct_strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = 2 * (b->n + n + 1);
        char *p = realloc(b->s, cap);
        if (!p) ct_fatal("strbuf", "out of memory (%zu bytes of text)", cap);
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void ct_sb_puts(ct_strbuf *b, const char *s) { ct_sb_putn(b, s, strlen(s)); }

void ct_sb_putc(ct_strbuf *b, char c) { ct_sb_putn(b, &c, 1); }

void ct_sb_put_utf8(ct_strbuf *b, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp, k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3f)), k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[2] = (char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    ct_sb_putn(b, u, k);
}

char *ct_sb_take(ct_strbuf *b) {
    if (!b->s) ct_sb_putn(b, "", 0);
    char *s = b->s;
    *b = (ct_strbuf){0};
    return s;
}
