// A growing string, always NUL-terminated once anything is put: the text the JSON and TOML
// parsers decode, and the header the safetensors writer builds. Out of memory ends the job
// (ct_fatal), as every other set-up allocation does.
#ifndef CT_CORE_STRBUF_H
#define CT_CORE_STRBUF_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *s;     // NULL until the first put; the caller frees it (or takes it)
    size_t n;    // length, not counting the NUL
    size_t cap;  // bytes allocated
} ct_strbuf;

void ct_sb_putn(ct_strbuf *b, const char *s, size_t n);
void ct_sb_puts(ct_strbuf *b, const char *s);
void ct_sb_putc(ct_strbuf *b, char c);
// cp (at most 0x10FFFF) encoded as UTF-8: 1 to 4 bytes.
void ct_sb_put_utf8(ct_strbuf *b, uint32_t cp);
// The string, "" if nothing was put (allocated either way: the caller frees it).
char *ct_sb_take(ct_strbuf *b);
#endif
