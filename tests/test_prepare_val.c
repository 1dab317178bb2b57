// A validation split from any corpus:
//  - a single plain-text file (one document) with --val-fraction F gets the last ceil(F x tokens)
//    tokens as its validation split (it used to get none, and a run with validation stopped);
//  - --val-docs N makes the last N documents the validation split, whether the cut falls inside
//    a shard or on a shard boundary; every token lands once, in order;
//  - the split is deterministic (two prepares, the same bytes), N >= the documents is refused
//    with the option named and nothing written, and N with F is refused;
//  - a run that needs validation shards and finds none is told which prepare option makes them.
// Expected tokens are written down from the text with the byte-level fixture tokenizer (byte b ->
// id b, <|end_of_text|> = 257).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "corpus_docs.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "test.h"

#define BYTES_TOK "tests/fixtures/data/bytes.tiktoken"

static char tmpdir[64];

// Every token of a split, shards in order; the count (or -1); *shards = how many files.
static long read_split(const char *dir, const char *split, int32_t *out, long cap, int *shards) {
    long n = 0;
    *shards = 0;
    for (int k = 0; k < 1000; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s_%03d.bin", dir, split, k);
        if (access(path, F_OK) != 0) break;
        ct_shard s;
        if (ct_shard_open(&s, path, 0) != CT_OK) return -1;
        if (n + (long)s.n_tokens <= cap) ct_shard_copy(&s, 0, s.n_tokens, out + n);
        n += (long)s.n_tokens;
        ++*shards;
        ct_shard_close(&s);
    }
    return n;
}

static ct_status prepare(const char *input, const char *out, double fraction, uint64_t val_docs, uint64_t shard_tokens,
                         ct_data_prepare_result *r) {
    const char *in[] = {input};
    ct_data_prepare_opts o = {.inputs = in, .n_inputs = 1, .tokenizer_path = BYTES_TOK, .out_dir = out,
                              .val_fraction = fraction, .val_docs = val_docs, .shard_tokens = shard_tokens, .progress = 0};
    return ct_data_prepare(&o, r);
}

static void test_single_file_gets_token_tail(void) {
    char path[128], out[128];
    snprintf(path, sizeof path, "%s/one.txt", tmpdir);
    snprintf(out, sizeof out, "%s/one", tmpdir);
    // One document of 209 bytes (no fortune separator): 210 tokens with its <|end_of_text|>.
    char text[210];
    for (int i = 0; i < 209; i++) text[i] = i % 50 == 49 ? '\n' : (char)('a' + i % 26);
    ct_test_write_file(path, text, 209);
    ct_data_prepare_result r;
    CHECK(prepare(path, out, 0.05, 0, 16, &r) == CT_OK, "%s", ct_last_error());
    // ceil(0.05 x 210) = 11 tokens to validation: bytes 199..208 and 257; the cut (199) falls
    // inside train's 13th shard of 16 tokens.
    CHECK(r.val == CT_VAL_LAST_TOKENS && r.tokens[0] == 199 && r.tokens[1] == 11 && r.docs[0] == 1 && r.docs[1] == 0,
          "val mode %d, tokens %llu + %llu", (int)r.val, (unsigned long long)r.tokens[0], (unsigned long long)r.tokens[1]);
    int32_t got[256];
    int shards;
    long n = read_split(out, "train", got, 256, &shards);
    bool same = n == 199;
    for (long i = 0; same && i < n; i++) same = got[i] == (unsigned char)text[i];
    CHECK(same && shards == 13 && r.shards[0] == 13, "train: %ld tokens in %d shards", n, shards);
    n = read_split(out, "val", got, 256, &shards);
    same = n == 11 && got[10] == 257;
    for (long i = 0; same && i < 10; i++) same = got[i] == (unsigned char)text[199 + i];
    CHECK(same && shards == 1, "val: %ld tokens in %d shards", n, shards);
    // The smallest corpus, one byte: 2 tokens, one each at F = 0.5.
    ct_test_write_file(path, "x", 1);
    CHECK(prepare(path, out, 0.5, 0, 0, &r) == CT_OK && r.val == CT_VAL_LAST_TOKENS && r.tokens[0] == 1 && r.tokens[1] == 1,
          "a 2-token corpus at F = 0.5: mode %d, %llu + %llu", (int)r.val, (unsigned long long)r.tokens[0],
          (unsigned long long)r.tokens[1]);
}

// Ten JSONL documents "doc0 <i*'x'>" of growing length; the last `val` documents to validation.
static void val_docs_case(uint64_t val, uint64_t shard_tokens, bool want_boundary) {
    char path[128], out[128];
    snprintf(path, sizeof path, "%s/ten.jsonl", tmpdir);
    snprintf(out, sizeof out, "%s/ten-%llu-%llu", tmpdir, (unsigned long long)val, (unsigned long long)shard_tokens);
    char docs[10][32];
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 10; i++) {
        snprintf(docs[i], sizeof docs[i], "doc%d %.*s", i, i, "xxxxxxxxx");
        fprintf(f, "{\"text\": \"%s\"}\n", docs[i]);
    }
    fclose(f);
    int32_t want[2][512];
    long nw[2] = {0, 0};
    for (int i = 0; i < 10; i++) {
        int v = i >= 10 - (int)val;
        for (const char *c = docs[i]; *c; c++) want[v][nw[v]++] = (unsigned char)*c;
        want[v][nw[v]++] = 257;
    }
    CHECK((nw[0] % (long)shard_tokens == 0) == want_boundary, "the case does not test what it says (%ld, %llu)", nw[0],
          (unsigned long long)shard_tokens);
    ct_data_prepare_result r;
    CHECK(prepare(path, out, 0, val, shard_tokens, &r) == CT_OK, "%s", ct_last_error());
    CHECK(r.val == CT_VAL_LAST_DOCS && r.docs[0] == 10 - val && r.docs[1] == val && r.tokens[0] == (uint64_t)nw[0] &&
              r.tokens[1] == (uint64_t)nw[1],
          "mode %d, docs %llu + %llu, tokens %llu + %llu", (int)r.val, (unsigned long long)r.docs[0],
          (unsigned long long)r.docs[1], (unsigned long long)r.tokens[0], (unsigned long long)r.tokens[1]);
    for (int v = 0; v < 2; v++) {
        int32_t got[512];
        int shards;
        long n = read_split(out, v ? "val" : "train", got, 512, &shards);
        long want_shards = (nw[v] + (long)shard_tokens - 1) / (long)shard_tokens;
        CHECK(n == nw[v] && !memcmp(got, want[v], sizeof(int32_t) * (size_t)n) && shards == want_shards &&
                  r.shards[v] == shards,
              "%s: %ld tokens in %d shards (want %ld in %ld)", v ? "val" : "train", n, shards, nw[v], want_shards);
    }
    // No leftovers: exactly the reported shards are in the folder.
    int files;
    ct_test_hash_folder(out, &files);
    CHECK(files == r.shards[0] + r.shards[1], "%d files for %d + %d shards", files, r.shards[0], r.shards[1]);
}

// Document i is 5 + i bytes and its <|end_of_text|>: documents 0..6 hold 6 + 7 + ... + 12 = 63
// tokens, so with 8 per shard the cut falls inside a shard, with 9 on a boundary.
static void test_val_docs_cut_inside_a_shard(void) { val_docs_case(3, 8, false); }
static void test_val_docs_cut_on_a_boundary(void) { val_docs_case(3, 9, true); }
static void test_val_docs_one_shard(void) { val_docs_case(1, 1000, false); }

static void test_val_docs_deterministic(void) {
    char path[128], a[128], b[128];
    snprintf(path, sizeof path, "%s/docs.jsonl", tmpdir);
    snprintf(a, sizeof a, "%s/det-a", tmpdir);
    snprintf(b, sizeof b, "%s/det-b", tmpdir);
    ct_test_write_jsonl(path, "text", 0);
    ct_data_prepare_result r;
    CHECK(prepare(path, a, 0, 2, 13, &r) == CT_OK && prepare(path, b, 0, 2, 13, &r) == CT_OK, "%s", ct_last_error());
    int fa, fb;
    CHECK(ct_test_hash_folder(a, &fa) == ct_test_hash_folder(b, &fb) && fa == fb && fa > 2, "two prepares differ");
}

static void test_val_docs_refusals(void) {
    char path[128], out[128];
    snprintf(path, sizeof path, "%s/docs.jsonl", tmpdir);
    snprintf(out, sizeof out, "%s/never", tmpdir);
    ct_test_write_jsonl(path, "text", 0);  // 9 documents that are not empty
    ct_data_prepare_result r;
    CHECK(prepare(path, out, 0, 9, 0, &r) == CT_ERR && strstr(ct_last_error(), "--val-docs 9") &&
              strstr(ct_last_error(), "9 documents") && access(out, F_OK) != 0,
          "--val-docs 9 of 9: %s", ct_last_error());
    CHECK(prepare(path, out, 0.1, 2, 0, &r) == CT_ERR && strstr(ct_last_error(), "both"), "both options accepted");
    // The command refuses the pair too, before reading anything.
    char *argv[] = {"prepare", "--input", path, "--tokenizer", BYTES_TOK, "--out", out, "--val-docs", "2",
                    "--val-fraction", "0.1"};
    fflush(stdout);
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    int rc = ct_cmd_data(11, argv);
    fclose(stderr);
    stderr = saved;
    CHECK(rc == 2 && access(out, F_OK) != 0, "exit %d", rc);
}

// The loader, asked for a validation split that prepare did not make, names the option.
static void test_missing_val_names_the_option(void) {
    char path[128], out[128];
    snprintf(path, sizeof path, "%s/docs.jsonl", tmpdir);
    snprintf(out, sizeof out, "%s/noval", tmpdir);
    ct_test_write_jsonl(path, "text", 0);
    ct_data_prepare_result r;
    CHECK(prepare(path, out, 0, 0, 0, &r) == CT_OK && r.shards[1] == 0, "%s", ct_last_error());
    ct_loader_config c = {.source = out, .split = "val", .seq_len = 8, .global_batch = 1, .dp_size = 1,
                          .vocab_size = 258, .sequential = true};
    ct_loader *l = ct_loader_open(&c);
    CHECK(!l && strstr(ct_last_error(), "no val shards") && strstr(ct_last_error(), "--val-docs") &&
              strstr(ct_last_error(), "--val-fraction"),
          "%s", l ? "opened" : ct_last_error());
    if (l) ct_loader_free(l);
    // A split too small for one sample says so, and how to make a larger one.
    CHECK(prepare(path, out, 0, 1, 0, &r) == CT_OK, "%s", ct_last_error());
    c.seq_len = 512;
    l = ct_loader_open(&c);
    CHECK(!l && strstr(ct_last_error(), "fewer than one sample") && strstr(ct_last_error(), "--val-docs"), "%s",
          l ? "opened" : ct_last_error());
    if (l) ct_loader_free(l);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_prepare_val_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    CT_RUN(test_single_file_gets_token_tail);
    CT_RUN(test_val_docs_cut_inside_a_shard);
    CT_RUN(test_val_docs_cut_on_a_boundary);
    CT_RUN(test_val_docs_one_shard);
    CT_RUN(test_val_docs_deterministic);
    CT_RUN(test_val_docs_refusals);
    CT_RUN(test_missing_val_names_the_option);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("  could not remove %s\n", tmpdir);
    CT_TEST_EXIT();
}
