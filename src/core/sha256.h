// SHA-256 (FIPS 180-4), streaming: what names a tokenizer in a token shard's header, so that
// anyone can recompute the name from the documented content (Python: hashlib.sha256).
#ifndef CT_SHA256_H
#define CT_SHA256_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bytes;     // message length so far
    uint8_t block[64];  // the partial block
    size_t fill;        // bytes in it
} ct_sha256;

void ct_sha256_init(ct_sha256 *s);
void ct_sha256_update(ct_sha256 *s, const void *data, size_t n);
void ct_sha256_final(ct_sha256 *s, uint8_t digest[32]);
#endif
