// For the corpus fuzz targets: the rest of an input stored as gzip (zlib) or zstd (libzstd), so
// that the readers' decompressing streams carry fuzzed content.
#ifndef CT_FUZZ_PACK_H
#define CT_FUZZ_PACK_H
#include <stdint.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>

// data compressed with gzip (how 1) or zstd (how 2) into a malloc'd buffer of *out_n bytes.
static inline uint8_t *ct_fuzz_pack(int how, const uint8_t *data, size_t n, size_t *out_n) {
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

// Whether a gzip (1f 8b) or zstd input decompresses to more than `cap` bytes (or is corrupt past
// that point): such inputs -- a few hundred bytes that inflate to megabytes of blank lines --
// are read correctly but slowly, and would take the fuzzer's time from everything else.
static inline int ct_fuzz_inflates_past(const uint8_t *data, size_t n, size_t cap) {
    static uint8_t out[1 << 16];
    size_t total = 0;
    if (n >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
        z_stream z = {0};
        if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return 0;
        z.next_in = (Bytef *)data;
        z.avail_in = (uInt)n;
        int rc = Z_OK;
        while (total <= cap && rc == Z_OK) {
            z.next_out = out;
            z.avail_out = sizeof out;
            rc = inflate(&z, Z_NO_FLUSH);
            total += sizeof out - z.avail_out;
            if (rc == Z_STREAM_END && z.avail_in > 0) rc = inflateReset(&z);
        }
        inflateEnd(&z);
    } else if (n >= 4 && data[0] == 0x28 && data[1] == 0xb5 && data[2] == 0x2f && data[3] == 0xfd) {
        ZSTD_DStream *zs = ZSTD_createDStream();
        ZSTD_inBuffer in = {data, n, 0};
        size_t rc = 1;
        while (total <= cap && !ZSTD_isError(rc) && (in.pos < in.size || rc != 0)) {
            ZSTD_outBuffer o = {out, sizeof out, 0};
            rc = ZSTD_decompressStream(zs, &o, &in);
            total += o.pos;
            if (o.pos == 0 && in.pos == in.size) break;
        }
        ZSTD_freeDStream(zs);
    }
    return total > cap;
}
#endif
