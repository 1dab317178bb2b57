// For the corpus fuzz targets: the rest of an input stored as gzip (zlib) or zstd (libzstd), so
// that the readers' decompressing streams carry fuzzed content.
#ifndef CT_FUZZ_PACK_H
#define CT_FUZZ_PACK_H
#include <stdint.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>

// data compressed with gzip (how 1) or zstd (how 2) into a malloc'd buffer of *out_n bytes.
static uint8_t *ct_fuzz_pack(int how, const uint8_t *data, size_t n, size_t *out_n) {
    if (how == 1) {
        z_stream z = {0};
        deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
        size_t cap = deflateBound(&z, (uLong)n) + 32;
        uint8_t *out = malloc(cap);
        z.next_in = (Bytef *)data;
        z.avail_in = (uInt)n;
        z.next_out = out;
        z.avail_out = (uInt)cap;
        deflate(&z, Z_FINISH);
        *out_n = cap - z.avail_out;
        deflateEnd(&z);
        return out;
    }
    size_t cap = ZSTD_compressBound(n);
    uint8_t *out = malloc(cap);
    *out_n = ZSTD_compress(out, cap, data, n, 1);
    return out;
}
#endif
