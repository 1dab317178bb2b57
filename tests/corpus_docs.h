// One set of documents and writers that store it in each corpus container (plain text in fortune
// format, JSON Lines, JSONL gzip / zstd, a Megatron-LM .bin/.idx pair), for the tests of
// `data prepare` (test_corpus_formats.c, test_corpus_errors.c). The Parquet fixtures in
// tests/fixtures/corpus/ and tests/interop/parquet_corpus.py hold the same documents: change
// them together (CT_TEST_DOCS below, DOCS in tests/fixtures/corpus/make_parquet.py).
//
// The writers follow each format's own description, not ctitan's readers: JSON escaping by
// RFC 8259, gzip through zlib's gz* calls, zstd through ZSTD_compress, and the Megatron index as
// megatron/core/datasets/indexed_dataset.py's _IndexWriter lays it out (docs/data_format.md).
#ifndef CT_TEST_CORPUS_DOCS_H
#define CT_TEST_CORPUS_DOCS_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "data/shard.h"

// Every document ends with a newline (a fortune holds its last newline), or is empty; none holds
// a line that is exactly "%". Non-ASCII, JSON's special characters, CRLF, tabs, an empty one.
#define CT_TEST_N_DOCS 10
static const char *const CT_TEST_DOCS[CT_TEST_N_DOCS] = {
    "The first document.\n",
    "Multi-line text,\n  an indented second line,\n\tand a tab.\n",
    "",
    "Non-ASCII: \xc3\xa9 \xc3\xbc \xc3\x9f \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x99\x82 \xe2\x80\x94 "
    "\xe2\x80\x9cquotes\xe2\x80\x9d\n",
    "JSON's own characters: \"quoted\", back\\slash, {braces} and [brackets]\n",
    "A % sign inside a line.\n%% is not a separator either.\n",
    "CRLF line ends\r\nstay as they are.\r\n",
    "\n\nLeading blank lines, then text.\n",
    "Science is what we understand well enough to explain to a computer.\nArt is everything else.\n",
    "The last document.\n",
};

// ---- files ------------------------------------------------------------------------------------

static inline void ct_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) {
        perror(path);
        exit(1);
    }
}

// Reads a whole file (malloc'd, NUL after it); NULL if it cannot (a folder included: fopen opens
// one, and its "length" is no size to allocate).
static inline char *ct_test_read_file(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 && len < (1L << 40) ? malloc((size_t)len + 1) : NULL;
    if (!buf) {
        fclose(f);
        return NULL;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) len = 0;
    buf[len] = 0;
    fclose(f);
    *n = (size_t)len;
    return buf;
}

// ---- the containers ---------------------------------------------------------------------------

// Fortune format: documents separated by lines holding only "%".
static inline void ct_test_write_text(const char *path) {
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < CT_TEST_N_DOCS; i++) fprintf(f, "%s%s", i ? "%\n" : "", CT_TEST_DOCS[i]);
    fclose(f);
}

// s as a JSON string literal (RFC 8259): '"' and '\' escaped, control characters as \n, \r, \t
// or \u00XX; with `escape_all`, every non-ASCII character as \uXXXX (a surrogate pair above
// U+FFFF), else raw UTF-8.
static inline void ct_test_json_string(FILE *f, const char *str, int escape_all) {
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    while (*s) {
        unsigned c = *s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c), s++;
        else if (c == '\n') fputs("\\n", f), s++;
        else if (c == '\r') fputs("\\r", f), s++;
        else if (c == '\t') fputs("\\t", f), s++;
        else if (c < 0x20) fprintf(f, "\\u%04x", c), s++;
        else if (c < 0x80 || !escape_all) fputc((int)c, f), s++;
        else {  // decode one UTF-8 sequence
            int k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
            unsigned cp = c & (0x3f >> k);
            for (int j = 1; j <= k; j++) cp = cp << 6 | (s[j] & 0x3f);
            s += k + 1;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                fprintf(f, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else
                fprintf(f, "\\u%04x", cp);
        }
    }
    fputc('"', f);
}

// One object per line; the text under `field`, after an "id" and before a nested "meta" (other
// fields are read past).
static inline void ct_test_write_jsonl(const char *path, const char *field, int escape_all) {
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < CT_TEST_N_DOCS; i++) {
        fprintf(f, "{\"id\": %d, ", i);
        ct_test_json_string(f, field, 0);
        fputs(": ", f);
        ct_test_json_string(f, CT_TEST_DOCS[i], escape_all);
        fprintf(f, ", \"meta\": {\"n\": [1, 2.5e3, null, true], \"s\": \"x\"}}\n");
    }
    fclose(f);
}

// gzip of a file through zlib; `members` > 1 writes it as that many concatenated gzip members
// (what `cat a.gz b.gz` gives).
static inline void ct_test_gzip(const char *src, const char *dst, int members) {
    size_t n;
    char *data = ct_test_read_file(src, &n);
    remove(dst);
    for (int m = 0; m < members; m++) {
        gzFile g = gzopen(dst, "ab");
        size_t a = n * (size_t)m / (size_t)members, b = n * (size_t)(m + 1) / (size_t)members;
        if (b > a) gzwrite(g, data + a, (unsigned)(b - a));
        gzclose(g);
    }
    free(data);
}

// zstd of a file through libzstd, as `frames` concatenated frames, each with its content
// checksum (as the zstd command writes by default).
static inline void ct_test_zstd(const char *src, const char *dst, int frames) {
    size_t n;
    char *data = ct_test_read_file(src, &n);
    FILE *f = fopen(dst, "wb");
    for (int m = 0; m < frames; m++) {
        size_t a = n * (size_t)m / (size_t)frames, b = n * (size_t)(m + 1) / (size_t)frames;
        size_t cap = ZSTD_compressBound(b - a);
        char *out = malloc(cap);
        ZSTD_CCtx *cc = ZSTD_createCCtx();
        ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3);
        ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
        size_t k = ZSTD_compress2(cc, out, cap, data + a, b - a);
        ZSTD_freeCCtx(cc);
        if (!ZSTD_isError(k)) fwrite(out, 1, k, f);
        free(out);
    }
    fclose(f);
    free(data);
}

static inline void ct_test_put_le(FILE *f, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) fputc((int)(v >> (8 * i) & 0xff), f);
}

// A Megatron-LM indexed dataset PREFIX.bin / PREFIX.idx of documents given as token ids:
// doc d is ids[starts[d], starts[d + 1]). dtype_code 8 (uint16) or 4 (int32); each document
// is stored as `seqs_per_doc` sequences (Megatron's sentence splitting), an empty document as
// none. Index layout: "MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 sequence count, u64
// document-index count, i32 lengths, i64 byte offsets, i64 document index (0, ..., count).
static inline void ct_test_write_megatron(const char *prefix, const int32_t *ids, const long *starts, int n_docs,
                                   int dtype_code, int seqs_per_doc) {
    char path[1024];
    int item = dtype_code == 8 ? 2 : 4;
    long lens[4096], n_seq = 0, doc_index[1024];
    int64_t ptrs[4096], at = 0;
    snprintf(path, sizeof path, "%s.bin", prefix);
    FILE *bin = fopen(path, "wb");
    doc_index[0] = 0;
    for (int d = 0; d < n_docs; d++) {
        long a = starts[d], b = starts[d + 1];
        int parts = b > a ? seqs_per_doc : 0;
        for (int p = 0; p < parts; p++) {
            long s0 = a + (b - a) * p / parts, s1 = a + (b - a) * (p + 1) / parts;
            lens[n_seq] = s1 - s0;
            ptrs[n_seq++] = at;
            for (long i = s0; i < s1; i++) ct_test_put_le(bin, (uint64_t)(uint32_t)ids[i], item);
            at += (s1 - s0) * item;
        }
        doc_index[d + 1] = n_seq;
    }
    fclose(bin);
    snprintf(path, sizeof path, "%s.idx", prefix);
    FILE *idx = fopen(path, "wb");
    fwrite("MMIDIDX\0\0", 1, 9, idx);
    ct_test_put_le(idx, 1, 8);
    ct_test_put_le(idx, (uint64_t)dtype_code, 1);
    ct_test_put_le(idx, (uint64_t)n_seq, 8);
    ct_test_put_le(idx, (uint64_t)n_docs + 1, 8);
    for (long s = 0; s < n_seq; s++) ct_test_put_le(idx, (uint64_t)lens[s], 4);
    for (long s = 0; s < n_seq; s++) ct_test_put_le(idx, (uint64_t)ptrs[s], 8);
    for (int d = 0; d <= n_docs; d++) ct_test_put_le(idx, (uint64_t)doc_index[d], 8);
    fclose(idx);
}

// ---- shards -----------------------------------------------------------------------------------

// FNV-1a (64 bits) of every file of a dataset folder, in name order, names included; *files = how
// many. A folder `data prepare` wrote is hashed in the folder of shards its .current names (whose
// own name is random: data/shard.h).
static inline uint64_t ct_test_hash_folder(const char *dataset, int *files) {
    char dir[1024];
    if (ct_shard_dataset_folder(dataset, dir, sizeof dir) != CT_OK) snprintf(dir, sizeof dir, "%s", dataset);
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    uint64_t h = 1469598103934665603ull;
    *files = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (strcmp(nm, ".") && strcmp(nm, "..")) {
            char path[1400];
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            size_t len = 0;
            char *data = ct_test_read_file(path, &len);
            for (const char *p = nm; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
            for (size_t k = 0; data && k < len; k++) h = (h ^ (unsigned char)data[k]) * 1099511628211ull;
            free(data);
            ++*files;
        }
        free(names[i]);
    }
    if (n >= 0) free(names);
    return h;
}
#endif
