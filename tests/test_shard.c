// Token shards: round trips in both widths, llm.c files, and every bad-shard check.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "expect_error.h"
#include "data/shard.h"
#include "test.h"

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void test_roundtrip_u16(void) {
    const char *p = tmp_path("u16.bin");
    int32_t toks[1000];
    for (int i = 0; i < 1000; i++) toks[i] = (i * 7919) % 50257;
    toks[999] = 50256;  // the largest legal id
    CHECK(ct_shard_write(p, toks, 1000, 50257) == CT_OK, "%s", ct_last_error());
    CHECK(file_size(p) == 64 + 2 * 1000, "size %ld", file_size(p));
    // Header bytes, checked by hand: magic, version 2, width 2, count 1000, vocab 50257, no tokenizer
    // recorded (flags and everything after them zero).
    unsigned char h[64];
    FILE *f = fopen(p, "rb");
    CHECK(f && fread(h, 1, 64, f) == 64, "read header");
    if (f) fclose(f);
    CHECK(!memcmp(h, "CTTOKENS", 8), "magic");
    CHECK(h[8] == 2 && h[9] == 0 && h[12] == 2 && h[16] == (1000 & 255) && h[17] == (1000 >> 8), "version/width/count");
    CHECK(h[24] == (50257 & 255) && h[25] == ((50257 >> 8) & 255) && h[26] == 0, "vocab bytes");
    int zeros = 1;
    for (int i = 28; i < 64; i++) zeros &= h[i] == 0;
    CHECK(zeros, "bytes 28..63 not zero without a tokenizer");
    ct_shard s;
    CHECK(ct_shard_open(&s, p, 0) == CT_OK, "%s", ct_last_error());
    CHECK(s.format == CT_SHARD_CTITAN && s.token_width == 2 && s.n_tokens == 1000 && s.vocab_size == 50257, "info");
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += ct_shard_token(&s, (uint64_t)i) != (uint32_t)toks[i];
    int32_t out[10];
    ct_shard_copy(&s, 990, 10, out);
    for (int i = 0; i < 10; i++) bad += out[i] != toks[990 + i];
    CHECK(bad == 0, "%d mismatches", bad);
    ct_shard_close(&s);
}

static void test_roundtrip_u32(void) {
    const char *p = tmp_path("u32.bin");
    const uint32_t vocab = 128256;  // Llama 3
    int32_t toks[777];
    for (int i = 0; i < 777; i++) toks[i] = (int32_t)(((uint64_t)i * 104729u) % vocab);
    toks[0] = 128255;
    toks[1] = 65536;  // first id that needs 4 bytes
    CHECK(ct_shard_token_width(vocab) == 4, "width");
    CHECK(ct_shard_token_width(65536) == 2, "65536 ids fit u16");
    CHECK(ct_shard_write(p, toks, 777, vocab) == CT_OK, "%s", ct_last_error());
    CHECK(file_size(p) == 64 + 4 * 777, "size %ld", file_size(p));
    ct_shard s;
    CHECK(ct_shard_open(&s, p, vocab) == CT_OK, "%s", ct_last_error());
    CHECK(s.token_width == 4 && s.n_tokens == 777, "info");
    int bad = 0;
    for (int i = 0; i < 777; i++) bad += ct_shard_token(&s, (uint64_t)i) != (uint32_t)toks[i];
    CHECK(bad == 0, "%d mismatches", bad);
    ct_shard_close(&s);
}

static void test_streaming_writer(void) {
    // Appending in pieces larger than the writer's internal buffer gives the same file.
    const char *p = tmp_path("stream.bin");
    enum { N = 70000 };
    int32_t *toks = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) toks[i] = i % 1000;
    ct_shard_writer *w = ct_shard_writer_open(p, 1000);
    CHECK(w != NULL, "%s", ct_last_error());
    CHECK(ct_shard_writer_append(w, toks, 5) == CT_OK, "append");
    CHECK(ct_shard_writer_append(w, toks + 5, N - 5) == CT_OK, "append");
    CHECK(ct_shard_writer_count(w) == N, "count");
    CHECK(ct_shard_writer_close(w) == CT_OK, "%s", ct_last_error());
    ct_shard s;
    CHECK(ct_shard_open(&s, p, 0) == CT_OK, "%s", ct_last_error());
    int bad = s.n_tokens != N;
    for (int i = 0; i < N && !bad; i++) bad += ct_shard_token(&s, (uint64_t)i) != (uint32_t)(i % 1000);
    CHECK(bad == 0, "content");
    ct_shard_close(&s);
    // The writer refuses an id outside its vocabulary.
    w = ct_shard_writer_open(tmp_path("refuse.bin"), 1000);
    int32_t big = 1000;
    CHECK(ct_shard_writer_append(w, &big, 1) == CT_ERR, "id 1000 in vocab 1000 accepted");
    ct_shard_writer_close(w);
    free(toks);
}

static void test_llmc_read(void) {
    // Written by hand here (not by ct_shard_write_llmc): 256 int32 header, then u16 tokens.
    const char *p = tmp_path("llmc_by_hand.bin");
    int32_t h[256] = {0};
    h[0] = 20240520;
    h[1] = 1;
    h[2] = 5;
    uint16_t toks[5] = {50256, 15496, 11, 995, 0};
    FILE *f = fopen(p, "wb");
    fwrite(h, 4, 256, f);
    fwrite(toks, 2, 5, f);
    fclose(f);
    ct_shard s;
    CHECK(ct_shard_open(&s, p, 50257) == CT_OK, "%s", ct_last_error());
    CHECK(s.format == CT_SHARD_LLMC && s.n_tokens == 5 && s.token_width == 2, "info");
    for (int i = 0; i < 5; i++) CHECK(ct_shard_token(&s, (uint64_t)i) == toks[i], "token %d", i);
    ct_shard_close(&s);
    // Our llm.c writer produces the same bytes.
    const char *q = tmp_path("llmc_writer.bin");
    int32_t t32[5] = {50256, 15496, 11, 995, 0};
    CHECK(ct_shard_write_llmc(q, t32, 5) == CT_OK, "%s", ct_last_error());
    FILE *a = fopen(p, "rb"), *b = fopen(q, "rb");
    unsigned char ba[1100], bb[1100];
    size_t na = fread(ba, 1, sizeof ba, a), nb = fread(bb, 1, sizeof bb, b);
    fclose(a);
    fclose(b);
    CHECK(na == 1034 && nb == na && !memcmp(ba, bb, na), "llm.c writer bytes differ (%zu vs %zu)", na, nb);
}

// Expects ct_shard_open to fail as a data error about the file, with a message containing the
// path and `what`.
static int open_fails(const char *path, uint32_t vocab_limit, const char *what) {
    ct_shard s;
    if (ct_shard_open(&s, path, vocab_limit) == CT_OK) {
        ct_shard_close(&s);
        printf("  %s opened\n", path);
        return 0;
    }
    return error_is(CT_E_DATA, path, path) && error_is(CT_E_DATA, path, what);
}

static void test_bad_magic(void) {
    const char *p = tmp_path("badmagic.bin");
    FILE *f = fopen(p, "wb");
    fputs("NOTTOKENS and some more bytes to pass the size check.................................", f);
    fclose(f);
    CHECK(open_fails(p, 0, "wrong magic"), "bad magic");
}

static void test_truncated(void) {
    int32_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = i;
    const char *p = tmp_path("trunc.bin");
    CHECK(ct_shard_write(p, toks, 100, 100) == CT_OK, "write");
    CHECK(truncate(p, 64 + 2 * 99) == 0, "truncate");
    CHECK(open_fails(p, 0, "truncated"), "one token short");
    CHECK(truncate(p, 40) == 0, "truncate");
    CHECK(open_fails(p, 0, "truncated"), "header cut");
    // A file longer than the header says is as wrong as a shorter one.
    CHECK(ct_shard_write(p, toks, 100, 100) == CT_OK, "write");
    FILE *f = fopen(p, "ab");
    fputc(0, f);
    fputc(0, f);
    fclose(f);
    CHECK(open_fails(p, 0, "truncated"), "extra bytes");
    // llm.c header claiming more tokens than the file has.
    const char *q = tmp_path("trunc_llmc.bin");
    CHECK(ct_shard_write_llmc(q, toks, 100) == CT_OK, "write");
    CHECK(truncate(q, 1024 + 150) == 0, "truncate");
    CHECK(open_fails(q, 0, "truncated"), "llm.c");
}

static void test_token_out_of_vocab(void) {
    int32_t toks[300];
    for (int i = 0; i < 300; i++) toks[i] = i % 50;
    const char *p = tmp_path("vocab.bin");
    CHECK(ct_shard_write(p, toks, 300, 100) == CT_OK, "write");
    ct_shard s;
    CHECK(ct_shard_open(&s, p, 50) == CT_OK, "ids < 50 should pass a limit of 50: %s", ct_last_error());
    ct_shard_close(&s);
    CHECK(open_fails(p, 49, ">= vocab"), "limit 49");
    CHECK(strstr(ct_last_error(), "token id 49 at index 49"), "%s", ct_last_error());
    // Corrupt one token on disk beyond the header's own vocab size.
    FILE *f = fopen(p, "r+b");
    fseek(f, 64 + 2 * 123, SEEK_SET);
    uint16_t v = 100;
    fwrite(&v, 2, 1, f);
    fclose(f);
    CHECK(open_fails(p, 0, "token id 100 at index 123"), "header vocab");
}

static void patch(const char *p, long off, const void *bytes, size_t n) {
    FILE *f = fopen(p, "r+b");
    fseek(f, off, SEEK_SET);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

// Version 2 records the tokenizer: flags bit 0 at 28, BOS at 32, EOS at 36, the hash at 40..55.
static void test_tokenizer_record(void) {
    int32_t toks[5] = {1, 2, 3, 299, 0};
    const char *p = tmp_path("tok.bin");
    ct_shard_writer *w = ct_shard_writer_open(p, 300);
    ct_shard_tok rec = {.present = 1, .bos = 298, .eos = 299};
    for (int i = 0; i < CT_SHARD_TOK_HASH_BYTES; i++) rec.hash[i] = (uint8_t)(0xa0 + i);
    ct_shard_writer_set_tokenizer(w, &rec);
    CHECK(w && ct_shard_writer_append(w, toks, 5) == CT_OK && ct_shard_writer_close(w) == CT_OK, "%s", ct_last_error());
    unsigned char h[64];
    FILE *f = fopen(p, "rb");
    CHECK(f && fread(h, 1, 64, f) == 64, "read header");
    if (f) fclose(f);
    CHECK(h[8] == 2 && h[28] == 1 && h[29] == 0 && h[32] == (298 & 255) && h[33] == 1 && h[36] == (299 & 255) && h[37] == 1,
          "flags/bos/eos bytes");
    CHECK(h[40] == 0xa0 && h[55] == 0xaf && h[56] == 0 && h[63] == 0, "hash bytes");
    ct_shard s;
    CHECK(ct_shard_open(&s, p, 0) == CT_OK, "%s", ct_last_error());
    CHECK(s.version == 2 && s.tok.present && s.tok.bos == 298 && s.tok.eos == 299 && !memcmp(s.tok.hash, rec.hash, 16),
          "record read back");
    ct_shard_close(&s);
    char d[160];
    ct_shard_tok_describe(&rec, d, sizeof d);
    CHECK(!strcmp(d, "tokenizer a0a1a2a3a4a5a6a7a8a9aaabacadaeaf, bos 298, eos 299"), "%s", d);
    ct_shard_tok other = rec;
    CHECK(ct_shard_tok_same(&rec, &other), "same");
    other.hash[15] ^= 1;
    CHECK(!ct_shard_tok_same(&rec, &other), "another hash");
    other = rec, other.eos = 1;
    CHECK(!ct_shard_tok_same(&rec, &other), "another eos");
    other = rec, other.bos = -1;  // one side names no BOS: nothing to compare there
    CHECK(ct_shard_tok_same(&rec, &other), "bos -1");

    // Unknown flags, and a BOS the vocabulary does not hold, are refused.
    uint32_t flags = 3;
    patch(p, 28, &flags, 4);
    CHECK(open_fails(p, 0, "unknown header flags 0x3"), "flags");
    flags = 1;
    patch(p, 28, &flags, 4);
    int32_t bos = 300;
    patch(p, 32, &bos, 4);
    CHECK(open_fails(p, 0, "header bos id 300 is outside the vocabulary of 300"), "bos");
    uint32_t version = 3;
    patch(p, 8, &version, 4);
    CHECK(open_fails(p, 0, "unsupported shard version 3 (expected 1 or 2)"), "version 3");
}

// A version 1 shard (written before the tokenizer fields; 28..63 reserved) still reads, recording
// no tokenizer.
static void test_version_1(void) {
    int32_t toks[4] = {5, 6, 7, 8};
    const char *p = tmp_path("v1.bin");
    CHECK(ct_shard_write(p, toks, 4, 10) == CT_OK, "%s", ct_last_error());
    uint32_t version = 1;
    patch(p, 8, &version, 4);
    ct_shard s;
    CHECK(ct_shard_open(&s, p, 0) == CT_OK, "%s", ct_last_error());
    CHECK(s.version == 1 && !s.tok.present && s.n_tokens == 4 && ct_shard_token(&s, 3) == 8, "v1 read");
    ct_shard_close(&s);
    char d[160];
    ct_shard_tok_describe(&s.tok, d, sizeof d);
    CHECK(!strcmp(d, "no tokenizer recorded"), "%s", d);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_test_shard_%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", tmpdir);
    if (system(cmd) != 0) return 1;
    CT_RUN(test_roundtrip_u16);
    CT_RUN(test_roundtrip_u32);
    CT_RUN(test_streaming_writer);
    CT_RUN(test_llmc_read);
    CT_RUN(test_bad_magic);
    CT_RUN(test_truncated);
    CT_RUN(test_token_out_of_vocab);
    CT_RUN(test_tokenizer_record);
    CT_RUN(test_version_1);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) return 1;
    CT_TEST_EXIT();
}
