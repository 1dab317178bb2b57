// Bad corpus files of every kind -- truncated, corrupt, wrong-typed, binary -- are refused by
// `data prepare` with one line that names the file, where (byte offset, line, row group /
// column / page, document) and what is wrong; and nothing is left half-written: a folder that
// held a dataset holds exactly the same files afterwards, and a folder that did not exist still
// does not. The bad files are made here from good ones (tests/corpus_docs.h, the Parquet
// fixtures) by cutting, flipping or retyping a known part of them.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "corpus_docs.h"
#include "data/prepare.h"
#include "test.h"

#define BYTES_TOK "tests/fixtures/data/bytes.tiktoken"  // vocabulary of 258 ids
#define FIXTURES "tests/fixtures/corpus"

static char tmpdir[64], good_out[128], good_snapshot[8192];

// Every entry of a folder with its size and hash, in name order (hidden ones too).
static void snapshot(const char *dir, char *buf, size_t cap) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (strcmp(nm, ".") && strcmp(nm, "..")) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            size_t len = 0;
            char *data = ct_test_read_file(path, &len);
            unsigned long h = 5381;
            for (size_t j = 0; data && j < len; j++) h = h * 33 + (unsigned char)data[j];
            free(data);
            k += (size_t)snprintf(buf + k, cap - k, "%s:%zu:%lx;", nm, len, h);
        }
        free(names[i]);
    }
    if (n >= 0) free(names);
}

static char *tmp(const char *name) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

// The dataset every refused prepare must leave as it was.
static void make_good(void) {
    snprintf(good_out, sizeof good_out, "%s/good", tmpdir);
    char *txt = tmp("good.txt");
    ct_test_write_text(txt);
    const char *in[] = {txt};
    ct_data_prepare_opts o = {.inputs = in, .n_inputs = 1, .tokenizer_path = BYTES_TOK, .out_dir = good_out,
                              .val_fraction = 0.25, .shard_tokens = 100, .progress = 0};
    ct_data_prepare_result r;
    if (ct_data_prepare(&o, &r) != CT_OK) printf("FAIL setup: %s\n", ct_last_error());
    snapshot(good_out, good_snapshot, sizeof good_snapshot);
}

// The file `path` (as given to prepare, with `field` as --text-field) is refused, with a one-line
// message holding the path, `where` and `what`; the old dataset is untouched and a new folder is
// not made.
static void refused(const char *path, const char *field, const char *where, const char *what) {
    const char *in[] = {path};
    ct_data_prepare_opts o = {.inputs = in, .n_inputs = 1, .tokenizer_path = BYTES_TOK, .out_dir = good_out,
                              .val_fraction = 0.25, .text_field = field, .progress = 0};
    ct_data_prepare_result r;
    ct_status st = ct_data_prepare(&o, &r);
    const char *e = ct_last_error();
    CHECK(st == CT_ERR, "%s accepted", path);
    if (st != CT_ERR) {
        make_good();  // for the cases after this one
        return;
    }
    bool ok = strstr(e, path) && strstr(e, where) && strstr(e, what) && !strchr(e, '\n');
    if (!ok) printf("  message for %s lacks '%s' / '%s':\n    %s\n", path, where, what, e);
    CHECK(ok, "(above)");
    char now[8192];
    snapshot(good_out, now, sizeof now);
    CHECK(!strcmp(now, good_snapshot), "the dataset in %s changed:\n    before %s\n    after  %s", good_out, good_snapshot, now);
    o.out_dir = tmp("fresh/out");
    CHECK(ct_data_prepare(&o, &r) == CT_ERR && access(tmp("fresh"), F_OK) != 0, "%s: a new output folder was left behind",
          path);
}

static char *file_bytes(const char *path, size_t *n) {
    char *d = ct_test_read_file(path, n);
    if (!d) printf("  cannot read %s\n", path);
    return d;
}

// ---- text -------------------------------------------------------------------------------------

static void test_text(void) {
    char *p = tmp("nul.txt");
    ct_test_write_file(p, "abc\ndef\0ghi\n", 12);
    refused(p, NULL, "byte 7", "NUL byte");
    p = tmp("latin1.txt");
    ct_test_write_file(p, "ok\ncaf\xe9\n", 8);  // Latin-1 e-acute
    refused(p, NULL, "byte 6", "invalid UTF-8 (byte 0xe9)");
    p = tmp("overlong.txt");
    ct_test_write_file(p, "a\xc0\xaf", 3);
    refused(p, NULL, "byte 1", "invalid UTF-8");
    p = tmp("surrogate.txt");
    ct_test_write_file(p, "ab\xed\xa0\x80", 5);
    refused(p, NULL, "byte 2", "invalid UTF-8");
    p = tmp("cut.txt");
    ct_test_write_file(p, "abc\xe6\xbc", 5);  // a 3-byte character cut by the file's end
    refused(p, NULL, "byte 3", "invalid UTF-8");
    // A good fortune first: it was encoded, but nothing of it may reach the output.
    p = tmp("late.txt");
    ct_test_write_file(p, "first\n%\nsecond\n%\nthird \xff\n", 24);
    refused(p, NULL, "byte 23", "invalid UTF-8");
    // A program is binary: refused at its first NUL, not tokenised.
    refused("build/ctitan", NULL, "byte ", "not text");
}

// ---- JSON Lines -------------------------------------------------------------------------------

static void jsonl(const char *name, const char *content, const char *where, const char *what) {
    char *p = tmp(name);
    ct_test_write_file(p, content, strlen(content));
    refused(p, NULL, where, what);
}

static void test_jsonl(void) {
    jsonl("missing.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\", \"id\": 2}\n", "line 2", "no \"text\" field (the record has \"body\", \"id\")");
    jsonl("number.jsonl", "{\"text\": \"a\"}\n\n{\"text\": 3}\n", "line 3", "field \"text\" is a number, not a string");
    jsonl("null.jsonl", "{\"text\": null}\n", "line 1", "is null, not a string");
    jsonl("object.jsonl", "{\"text\": {\"en\": \"a\"}}\n", "line 1", "is an object, not a string");
    jsonl("array.jsonl", "[\"text\", \"a\"]\n", "line 1", "not a JSON object");
    jsonl("cut.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b", "line 2", "bad JSON");
    jsonl("nul-escape.jsonl", "{\"text\": \"a\\u0000b\"}\n", "line 1", "bad JSON");
    jsonl("lone-surrogate.jsonl", "{\"text\": \"a\\ud800b\"}\n", "line 1", "surrogate");
    jsonl("raw-latin1.jsonl", "{\"text\": \"caf\xe9\"}\n", "byte 13", "invalid UTF-8");
    // The field named by --text-field must be there.
    char *p = tmp("docs.jsonl");
    ct_test_write_jsonl(p, "text", 0);
    refused(p, "body", "line 1", "no \"body\" field (the record has \"id\", \"text\", \"meta\"); name the text field with --text-field");
}

// ---- gzip / zstd ------------------------------------------------------------------------------

static void test_compressed(void) {
    char src[512], gz[512], zs[512];  // (tmp's buffers are reused)
    snprintf(src, sizeof src, "%s", tmp("docs.jsonl"));
    snprintf(gz, sizeof gz, "%s", tmp("docs.jsonl.gz"));
    snprintf(zs, sizeof zs, "%s", tmp("docs.jsonl.zst"));
    ct_test_write_jsonl(src, "text", 0);
    ct_test_gzip(src, gz, 1);
    ct_test_zstd(src, zs, 1);
    size_t n;
    char *d = file_bytes(gz, &n);
    char *p = tmp("cut.jsonl.gz");
    ct_test_write_file(p, d, n / 2);
    refused(p, NULL, "compressed byte", "the gzip stream is truncated");
    d[n / 2] ^= 0x55;  // a flipped byte inside the deflate data (or, failing that, the CRC check)
    p = tmp("flipped.jsonl.gz");
    ct_test_write_file(p, d, n);
    refused(p, NULL, "", "");  // where zlib notices depends on the bytes: any one-line refusal
    d[n / 2] ^= 0x55;
    d[n - 6] ^= 0x01;  // the CRC-32 of the trailer
    p = tmp("badcrc.jsonl.gz");
    ct_test_write_file(p, d, n);
    refused(p, NULL, "compressed byte", "corrupt gzip data (incorrect data check)");
    d[n - 6] ^= 0x01;
    d = realloc(d, n + 3);
    memcpy(d + n, "xyz", 3);
    p = tmp("trailing.jsonl.gz");
    ct_test_write_file(p, d, n + 3);
    refused(p, NULL, "compressed byte", "data after the end of the gzip stream");
    free(d);
    d = file_bytes(zs, &n);
    p = tmp("cut.jsonl.zst");
    ct_test_write_file(p, d, n - 5);
    refused(p, NULL, "compressed byte", "the zstd stream is truncated");
    d[n / 2] ^= 0xff;
    d[n / 2 + 1] ^= 0xff;
    p = tmp("flipped.jsonl.zst");
    ct_test_write_file(p, d, n);
    refused(p, NULL, "", "");  // likewise (the frame's checksum catches what decoding does not)
    free(d);
    // Binary inside the compression: refused at its offset in the decompressed data.
    p = tmp("binary.raw");
    ct_test_write_file(p, "text\0more", 9);
    ct_test_gzip(p, tmp("binary.gz"), 1);
    refused(tmp("binary.gz"), NULL, "byte 4 of the decompressed data", "NUL byte");
}

// ---- Parquet ----------------------------------------------------------------------------------

static void test_parquet(void) {
    const char *dict = FIXTURES "/docs_snappy_dict_v1.parquet", *v2 = FIXTURES "/docs_zstd_plain_v2.parquet";
    // Wrong-typed columns of the first fixture (int64 id, list<string> tags), a missing one.
    refused(dict, "id", "column \"id\"", "holds INT64 values, not strings");
    refused(dict, "tags", "column \"tags\"", "is nested");
    refused(dict, "body", "no top-level column \"body\"", "(the columns: \"id\", \"text\", \"tags\")");
    size_t n;
    char *d = file_bytes(v2, &n), *p;
    // Truncated: the footer and its PAR1 are gone.
    p = tmp("cut.parquet");
    ct_test_write_file(p, d, n - 100);
    refused(p, NULL, "no PAR1 at the end", "truncated");
    // A footer length beyond the file.
    char *e = malloc(n);
    memcpy(e, d, n);
    e[n - 5] = 0x7f;
    p = tmp("footlen.parquet");
    ct_test_write_file(p, e, n);
    refused(p, NULL, "footer length", "more than the file holds");
    // A corrupt footer: its first field header names type 15.
    memcpy(e, d, n);
    uint32_t flen = (uint32_t)(unsigned char)d[n - 8] | (uint32_t)(unsigned char)d[n - 7] << 8 |
                    (uint32_t)(unsigned char)d[n - 6] << 16 | (uint32_t)(unsigned char)d[n - 5] << 24;
    e[n - 8 - flen] = (char)0x1f;
    p = tmp("footer.parquet");
    ct_test_write_file(p, e, n);
    refused(p, NULL, "the footer (FileMetaData) is corrupt", "unknown field type");
    // A flipped byte in the first page's compressed values: its CRC-32 no longer matches.
    memcpy(e, d, n);
    e[90] ^= 0x20;
    p = tmp("page.parquet");
    ct_test_write_file(p, e, n);
    refused(p, NULL, "row group 0, column \"text\", page at byte 4", "CRC-32 does not match");
    // An encrypted footer (PARE).
    memcpy(e, d, n);
    memcpy(e + n - 4, "PARE", 4);
    p = tmp("encrypted.parquet");
    ct_test_write_file(p, e, n);
    refused(p, NULL, "encrypted", "not supported");
    // The data of a row group cut off but the footer kept: the chunk's bytes lie past the end.
    size_t keep = 200;
    memcpy(e, d, keep);
    memcpy(e + keep, d + n - 8 - flen, 8 + flen);
    p = tmp("middle.parquet");
    ct_test_write_file(p, e, keep + 8 + flen);
    refused(p, NULL, "row group", "outside the file");
    free(e);
    free(d);
}

// ---- Megatron ---------------------------------------------------------------------------------

static void megatron(const char *prefix, const int32_t *ids, int n_ids, int code) {
    long starts[3] = {0, n_ids / 2, n_ids};
    ct_test_write_megatron(tmp(prefix), ids, starts, 2, code, 1);
}

static void test_megatron(void) {
    const int32_t ids[6] = {72, 105, 257, 33, 33, 257};
    char idx[512], bin[512];
    megatron("good", ids, 6, 8);
    snprintf(idx, sizeof idx, "%s.idx", tmp("good"));
    snprintf(bin, sizeof bin, "%s.bin", tmp("good"));
    size_t ni, nb;
    char *di = file_bytes(idx, &ni), *db = file_bytes(bin, &nb);
    char *e = malloc(ni), i2[512], b2[512];
#define PAIR(name, idx_bytes, idx_len, bin_bytes, bin_len)                  \
    (snprintf(i2, sizeof i2, "%s.idx", tmp(name)), snprintf(b2, sizeof b2, "%s.bin", tmp(name)), \
     ct_test_write_file(i2, idx_bytes, idx_len), ct_test_write_file(b2, bin_bytes, bin_len))
    PAIR("shortbin", di, ni, db, nb - 3);  // the .bin cut inside the second document
    refused(i2, NULL, "document 1, sequence 1", "lie outside");
    PAIR("shortidx", di, ni - 8, db, nb);
    refused(i2, NULL, "sequences and", "do not fit its");
    memcpy(e, di, ni);
    e[0] = 'X';
    PAIR("magic", e, ni, db, nb);
    refused(i2, NULL, "byte 0", "not a Megatron index");
    memcpy(e, di, ni);
    e[17] = 7;
    PAIR("float", e, ni, db, nb);
    refused(i2, NULL, "byte 17", "dtype code 7 (float32)");
    memcpy(e, di, ni);
    e[9] = 2;
    PAIR("version", e, ni, db, nb);
    refused(i2, NULL, "byte 9", "index version 2");
    memcpy(e, di, ni);
    e[ni - 8] = 5;  // the document index's last entry: 5 sequences of 2
    PAIR("docindex", e, ni, db, nb);
    refused(i2, NULL, "the document index", "corrupt");
    free(e);
    // Ids the tokenizer does not have (its vocabulary is 258).
    const int32_t big[4] = {72, 300, 1, 2};
    megatron("vocab", big, 4, 8);
    snprintf(i2, sizeof i2, "%s.idx", tmp("vocab"));
    refused(i2, NULL, "document 0, sequence 0, token 1", "id 300 is outside the tokenizer's vocabulary (258 ids)");
    const int32_t neg[2] = {1, -5};
    megatron("negative", neg, 2, 4);
    snprintf(i2, sizeof i2, "%s.idx", tmp("negative"));
    refused(i2, NULL, "document 1, sequence 1, token 0", "id -5");
    // A .bin whose .idx is missing is only bytes: refused as binary.
    snprintf(b2, sizeof b2, "%s", tmp("lonely.bin"));
    ct_test_write_file(b2, "\x48\x00\x69\x00", 4);
    refused(b2, NULL, "byte 1", "Megatron .bin/.idx pair");
    free(di);
    free(db);
#undef PAIR
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_corpus_errors_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    make_good();
    CT_RUN(test_text);
    CT_RUN(test_jsonl);
    CT_RUN(test_compressed);
    CT_RUN(test_parquet);
    CT_RUN(test_megatron);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("  could not remove %s\n", tmpdir);
    CT_TEST_EXIT();
}
