// Same tokens whatever the container: one set of documents (tests/corpus_docs.h: non-ASCII,
// multi-line, CRLF, an empty one) written as fortune-format text, JSON Lines (raw UTF-8 and all
// \u escapes, under an extensionless name too), JSONL gzip (one member and three), JSONL zstd
// (one frame and two), gzip text under a misleading name, two Megatron-LM .bin/.idx pairs made
// from the ids ctitan's tokenizer gives (uint16 with <|end_of_text|> appended; int32 without it,
// two sequences per document) and the committed pyarrow Parquet fixtures
// (tests/fixtures/corpus/) -- and `data prepare` must write byte-identical shards from each
// (FNV-1a over the output folder), with a real BPE tokenizer and with the byte-level one, whose
// shards are also checked against the documents' bytes written down independently.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "corpus_docs.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "test.h"

#define BYTES_TOK "tests/fixtures/data/bytes.tiktoken"        // byte b -> id b, <|end_of_text|> 257
#define BPE_TOK "tests/fuzz/corpus/tokenizer/seed-trained"    // a rank file ctitan trained (merges)
#define FIXTURES "tests/fixtures/corpus"

static char tmpdir[64];

typedef struct {
    const char *name;
    char path[512];
} container;

#define N_CONTAINERS 14
static container conts[N_CONTAINERS];

static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

// Writes every container for the documents; the Megatron ones from `tokenizer`'s ids.
static void write_containers(const char *tokenizer) {
    char p[512], q[512];
    int k = 0;
#define ADD(nm, file) (conts[k].name = nm, path_in(conts[k].path, sizeof conts[k].path, file), k++)
    ADD("text", "docs.txt");
    ct_test_write_text(conts[k - 1].path);
    ADD("jsonl", "docs.jsonl");
    ct_test_write_jsonl(conts[k - 1].path, "text", 0);
    ADD("jsonl, \\u escapes, no extension", "records");
    ct_test_write_jsonl(conts[k - 1].path, "text", 1);
    path_in(p, sizeof p, "docs.jsonl");
    ADD("jsonl.gz", "docs.jsonl.gz");
    ct_test_gzip(p, conts[k - 1].path, 1);
    ADD("jsonl.gz, 3 members", "three.jsonl.gz");
    ct_test_gzip(p, conts[k - 1].path, 3);
    ADD("jsonl.zst", "docs.jsonl.zst");
    ct_test_zstd(p, conts[k - 1].path, 1);
    ADD("jsonl.zst, 2 frames", "two.jsonl.zst");
    ct_test_zstd(p, conts[k - 1].path, 2);
    path_in(q, sizeof q, "docs.txt");
    ADD("text.gz named .dat", "fortunes.dat");
    ct_test_gzip(q, conts[k - 1].path, 1);
    ADD("text.zst", "docs.txt.zst");
    ct_test_zstd(q, conts[k - 1].path, 1);
    // Megatron: the ids the tokenizer gives for each document.
    ct_tokenizer *tok = ct_tokenizer_load(tokenizer);
    int32_t eos = ct_tokenizer_eos(tok), *ids = NULL;
    long starts[2][CT_TEST_N_DOCS + 1], n[2] = {0, 0}, cap = 0, got = 0;
    int32_t buf[2][8192];
    for (int d = 0; d < CT_TEST_N_DOCS; d++) {
        long m = 0;
        got = ct_tokenizer_encode(tok, CT_TEST_DOCS[d], (long)strlen(CT_TEST_DOCS[d]), &ids, &m, &cap);
        for (int v = 0; v < 2; v++) {
            starts[v][d] = n[v];
            for (long i = 0; i < got; i++) buf[v][n[v]++] = ids[i];
            if (v == 0 && got > 0) buf[v][n[v]++] = eos;  // --append-eod (none for an empty document)
        }
    }
    starts[0][CT_TEST_N_DOCS] = n[0];
    starts[1][CT_TEST_N_DOCS] = n[1];
    free(ids);
    ct_tokenizer_free(tok);
    ADD("megatron uint16 + eod", "mg16.idx");
    path_in(p, sizeof p, "mg16");
    ct_test_write_megatron(p, buf[0], starts[0], CT_TEST_N_DOCS, 8, 1);
    ADD("megatron int32, 2 sequences/doc, by .bin", "mg32.bin");
    path_in(p, sizeof p, "mg32");
    ct_test_write_megatron(p, buf[1], starts[1], CT_TEST_N_DOCS, 4, 2);
    ADD("megatron by prefix", "mg16");
    snprintf(conts[k].path, sizeof conts[k].path, FIXTURES "/docs_snappy_dict_v1.parquet");
    conts[k++].name = "parquet snappy, dictionary, page v1";
    snprintf(conts[k].path, sizeof conts[k].path, FIXTURES "/docs_zstd_plain_v2.parquet");
    conts[k++].name = "parquet zstd, plain, page v2, nullable, 3 row groups";
#undef ADD
    if (k != N_CONTAINERS) printf("  %d containers written, %d expected\n", k, N_CONTAINERS);
}

// Prepares one container into tmpdir/out-<i>; the folder's hash, or 0 on failure.
static uint64_t prepare_one(int i, const char *tokenizer, int *files) {
    char out[600];
    snprintf(out, sizeof out, "%s/out-%d", tmpdir, i);
    const char *in[] = {conts[i].path};
    // Validation every 4th document (documents 3 and 7 of the 9 non-empty ones), and shards of
    // 40 tokens, so both splits span several shards.
    ct_data_prepare_opts o = {.inputs = in, .n_inputs = 1, .tokenizer_path = tokenizer, .out_dir = out,
                              .val_fraction = 0.25, .shard_tokens = 40, .progress = 0};
    ct_data_prepare_result r;
    if (ct_data_prepare(&o, &r) != CT_OK) {
        printf("  %s: %s\n", conts[i].name, ct_last_error());
        return 0;
    }
    if (r.docs[0] != 7 || r.docs[1] != 2)
        printf("  %s: %llu + %llu documents, expected 7 + 2\n", conts[i].name, (unsigned long long)r.docs[0],
               (unsigned long long)r.docs[1]);
    return ct_test_hash_folder(out, files);
}

static void same_shards(const char *tokenizer) {
    write_containers(tokenizer);
    uint64_t ref = 0;
    int ref_files = 0;
    for (int i = 0; i < N_CONTAINERS; i++) {
        int files;
        uint64_t h = prepare_one(i, tokenizer, &files);
        printf("  %-52s %016llx (%d shards)\n", conts[i].name, (unsigned long long)h, files);
        if (i == 0) ref = h, ref_files = files;
        CHECK(h != 0 && h == ref && files == ref_files, "%s: shards differ from the text container's", conts[i].name);
    }
    CHECK(ref_files >= 4, "only %d shards: the test means several per split", ref_files);
}

static void test_same_shards_bpe(void) { same_shards(BPE_TOK); }
static void test_same_shards_bytes(void) { same_shards(BYTES_TOK); }

// With the byte-level tokenizer the shards must be the documents' bytes, each followed by 257,
// non-empty document j (0..8) going to validation when j % 4 == 3: written down here from the
// documents alone.
static void test_bytes_expected(void) {
    int32_t want[2][4096];
    long nw[2] = {0, 0};
    int j = 0;
    for (int d = 0; d < CT_TEST_N_DOCS; d++) {
        if (!CT_TEST_DOCS[d][0]) continue;
        int v = j++ % 4 == 3;
        for (const char *c = CT_TEST_DOCS[d]; *c; c++) want[v][nw[v]++] = (unsigned char)*c;
        want[v][nw[v]++] = 257;
    }
    char out[600];
    snprintf(out, sizeof out, "%s/out-0", tmpdir);  // the text container, as last prepared
    for (int v = 0; v < 2; v++) {
        int32_t got[4096];
        long n = 0;
        for (int s = 0;; s++) {
            char path[700];
            snprintf(path, sizeof path, "%s/%s_%03d.bin", out, v ? "val" : "train", s);
            if (access(path, F_OK) != 0) break;
            ct_shard sh;
            CHECK(ct_shard_open(&sh, path, 0) == CT_OK, "%s", ct_last_error());
            if (n + (long)sh.n_tokens <= 4096) ct_shard_copy(&sh, 0, sh.n_tokens, got + n);
            n += (long)sh.n_tokens;
            ct_shard_close(&sh);
        }
        CHECK(n == nw[v] && !memcmp(got, want[v], sizeof(int32_t) * (size_t)n), "%s: %ld tokens, expected %ld",
              v ? "val" : "train", n, nw[v]);
    }
}

// The readers by themselves: format and codec from the content, documents as written.
static void test_reader_documents(void) {
    ct_corpus_opts opts = {.text_field = "text", .vocab_size = 258};
    struct {
        int i;
        ct_corpus_format f;
        ct_corpus_codec c;
    } cases[] = {{0, CT_CORPUS_TEXT, CT_CODEC_NONE},      {2, CT_CORPUS_JSONL, CT_CODEC_NONE},
                 {4, CT_CORPUS_JSONL, CT_CODEC_GZIP},     {6, CT_CORPUS_JSONL, CT_CODEC_ZSTD},
                 {7, CT_CORPUS_TEXT, CT_CODEC_GZIP},      {12, CT_CORPUS_PARQUET, CT_CODEC_NONE},
                 {13, CT_CORPUS_PARQUET, CT_CODEC_NONE}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ct_corpus *c = ct_corpus_open(conts[cases[k].i].path, &opts);
        CHECK(c != NULL, "%s", ct_last_error());
        if (!c) continue;
        CHECK(ct_corpus_format_of(c) == cases[k].f && ct_corpus_codec_of(c) == cases[k].c, "%s: format %s codec %s",
              conts[cases[k].i].name, ct_corpus_format_name(ct_corpus_format_of(c)), ct_corpus_codec_name(ct_corpus_codec_of(c)));
        ct_corpus_doc doc;
        int d = 0, rc;
        while ((rc = ct_corpus_next(c, &doc)) == 1) {
            while (d < CT_TEST_N_DOCS && !CT_TEST_DOCS[d][0]) d++;  // the empty one is skipped
            CHECK(d < CT_TEST_N_DOCS && doc.text && doc.len == strlen(CT_TEST_DOCS[d]) &&
                      !memcmp(doc.text, CT_TEST_DOCS[d], doc.len),
                  "%s: document %d differs", conts[cases[k].i].name, d);
            d++;
        }
        CHECK(rc == 0 && d == CT_TEST_N_DOCS, "%s: rc %d after %d documents", conts[cases[k].i].name, rc, d);
        ct_corpus_close(c);
    }
}

// A folder of every kind: text, compressed, Parquet and Megatron files are listed (a pair once,
// by its .idx), a binary of no known format is skipped, and prepare reads them all.
static void test_mixed_folder(void) {
    char dir[128], p[4096], q[600];
    snprintf(dir, sizeof dir, "%s/mixed", tmpdir);
    snprintf(p, sizeof p, "mkdir -p %s && cp %s %s %s %s/mg16.bin %s/mg16.idx %s %s", dir, conts[0].path, conts[3].path,
             conts[6].path, tmpdir, tmpdir, conts[12].path, dir);
    CHECK(system(p) == 0, "%s", p);
    snprintf(q, sizeof q, "%s/zz_binary.dat", dir);
    ct_test_write_file(q, "\x7f" "ELF\0\0\0junk", 11);
    const char *in[] = {dir};
    char **files;
    int n = ct_data_list_files(in, 1, &files);
    CHECK(n == 5, "%d files listed: %s", n, n < 0 ? ct_last_error() : "");
    if (n > 0) {
        for (int i = 0; i < n; i++) CHECK(!strstr(files[i], "zz_binary") && !strstr(files[i], "mg16.bin"), "%s listed", files[i]);
        ct_data_free_list(files, n);
    }
    char out[600];
    snprintf(out, sizeof out, "%s/out-mixed", tmpdir);
    ct_data_prepare_opts o = {.inputs = in, .n_inputs = 1, .tokenizer_path = BYTES_TOK, .out_dir = out,
                              .val_fraction = 0.25, .progress = 0};
    ct_data_prepare_result r;
    CHECK(ct_data_prepare(&o, &r) == CT_OK, "%s", ct_last_error());
    CHECK(r.files == 5 && r.files_of[CT_CORPUS_TEXT] == 1 && r.files_of[CT_CORPUS_JSONL] == 2 &&
              r.files_of[CT_CORPUS_PARQUET] == 1 && r.files_of[CT_CORPUS_MEGATRON] == 1 && r.docs[0] + r.docs[1] == 45,
          "%llu files, %llu documents", (unsigned long long)r.files, (unsigned long long)(r.docs[0] + r.docs[1]));
    // The same pair named three ways is read once.
    const char *twice[] = {conts[9].path, conts[11].path, conts[9].path};
    n = ct_data_list_files(twice, 3, &files);
    CHECK(n == 1, "a Megatron pair named 3 ways listed %d times", n);
    if (n > 0) ct_data_free_list(files, n);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_corpus_formats_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    CT_RUN(test_same_shards_bpe);
    CT_RUN(test_same_shards_bytes);
    CT_RUN(test_bytes_expected);
    CT_RUN(test_reader_documents);
    CT_RUN(test_mixed_folder);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("  could not remove %s\n", tmpdir);
    CT_TEST_EXIT();
}
