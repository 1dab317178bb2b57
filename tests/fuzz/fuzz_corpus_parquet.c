// Fuzz target: the Parquet corpus reader (data/corpus_parquet.c, data/parquet_thrift.c): the
// Thrift compact footer, the schema walk, row groups and column chunks, page headers, the
// SNAPPY / GZIP / ZSTD decoders, dictionary pages, definition levels and the RLE / bit-packed
// hybrid. The input is the file; its first byte also picks the column read ("text" or "t"),
// without being removed from the file. Seeds: files pyarrow and `datasets` wrote
// (tests/fuzz/make_corpus.sh).
//
// Properties beyond "no crash, no leak, no UB": every document is UTF-8 without NUL and no longer
// than the file's uncompressed bound; reading the file twice gives the same documents (no state
// leaks between pages or row groups); a refusal is one line that names the file; a refused reader
// stays refused.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "fuzz_util.h"

static uint64_t read_all(const char *path, const char *field, int *rc_out, uint64_t *docs) {
    ct_corpus_opts opts = {.text_field = field};
    ct_corpus *c = ct_corpus_open(path, &opts);
    *docs = 0;
    if (!c) {
        *rc_out = -2;
        ct_fuzz_check(!strchr(ct_last_error(), '\n') && strstr(ct_last_error(), path), "message: %s", ct_last_error());
        return 0;
    }
    uint64_t h = 1469598103934665603ull;
    ct_corpus_doc doc;
    int rc;
    size_t bad;
    while ((rc = ct_corpus_next(c, &doc)) == 1) {
        ct_fuzz_check(doc.text && ct_utf8_check(doc.text, doc.len, &bad), "a document that is not UTF-8 text");
        ct_fuzz_check(doc.len <= CT_CORPUS_DOC_MAX, "a document of %zu bytes", doc.len);
        for (size_t i = 0; i < doc.len; i++) h = (h ^ (unsigned char)doc.text[i]) * 1099511628211ull;
        h = (h ^ 0x100) * 1099511628211ull;
        h ^= doc.where;
        ++*docs;
    }
    if (rc < 0) {
        ct_fuzz_check(!strchr(ct_last_error(), '\n') && strstr(ct_last_error(), path), "message: %s", ct_last_error());
        ct_fuzz_check(ct_corpus_next(c, &doc) == -1, "a refused reader read on");
    }
    *rc_out = rc;
    ct_corpus_close(c);
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20) return 0;
    const char *field = size && (data[0] & 1) ? "t" : "text";
    char path[1024];
    ct_fuzz_write("corpus.parquet", data, size, path, sizeof path);
    int rc1, rc2;
    uint64_t d1, d2;
    uint64_t h1 = read_all(path, field, &rc1, &d1);
    uint64_t h2 = read_all(path, field, &rc2, &d2);
    ct_fuzz_check(rc1 == rc2 && h1 == h2 && d1 == d2, "two reads differ: rc %d/%d, %llu/%llu documents", rc1, rc2,
                  (unsigned long long)d1, (unsigned long long)d2);
    return 0;
}
