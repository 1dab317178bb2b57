// A shard truncated while it is in use (another job rewrites the dataset, a disk fills): the
// reader ends the process with one line naming the file and a non-zero exit, never a signal.
// (Shards used to be memory-mapped: touching a page past the new end raised SIGBUS and the job
// died naming nothing.) Checked through the data loader, as training reads, and through
// ct_shard_copy alone; plus token ids >= 2^31 under a vocabulary limit of 0 (header vocab
// 2^32 - 1), which came back as negative ids.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/loader.h"
#include "data/shard.h"
#include "fatal_child.h"
#include "expect_error.h"
#include "test.h"

static char tmpdir[64];
enum { NTOK = 100000 };

static const char *make_shard(const char *name, uint32_t vocab) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    int32_t *t = malloc(sizeof(int32_t) * NTOK);
    for (int i = 0; i < NTOK; i++) t[i] = (int32_t)((i * 7u) % vocab);
    if (ct_shard_write(path, t, NTOK, vocab) != CT_OK) printf("  write: %s\n", ct_last_error());
    free(t);
    return path;
}

// Opens the loader on the shard, truncates the file to a tenth, reads every batch of an epoch.
static void loader_after_truncate(void *vpath) {
    const char *path = vpath;
    ct_loader_config c = {.source = path, .seq_len = 64, .global_batch = 8, .dp_size = 1, .seed = 1,
                          .vocab_size = 50000, .sequential = true};
    ct_loader *l = ct_loader_open(&c);
    if (!l) {
        fprintf(stderr, "open failed: %s\n", ct_last_error());
        _exit(7);
    }
    if (truncate(path, 64 + 2 * (NTOK / 10)) != 0) _exit(8);
    int32_t in[8 * 64], tg[8 * 64];
    for (uint64_t b = 0; b < ct_loader_num_windows(l) / 8; b++) ct_loader_next_batch(l, in, tg);
    fprintf(stderr, "read every batch\n");
    _exit(0);
}

static void copy_after_truncate(void *vpath) {
    const char *path = vpath;
    ct_shard s;
    if (ct_shard_open(&s, path, 0) != CT_OK) _exit(7);
    if (truncate(path, 64 + 4 * 100) != 0) _exit(8);
    int32_t out[1000];
    ct_shard_copy(&s, 50, 10, out);  // still inside the file: fine
    ct_shard_copy(&s, NTOK - 1000, 1000, out);
    fprintf(stderr, "copied past the end\n");
    _exit(0);
}

static int one_line(const char *s) {
    const char *nl = strchr(s, '\n');
    return nl && nl[1] == 0;
}

static void test_loader_shard_truncated_while_open(void) {
    const char *p = make_shard("train_000.bin", 50000);
    char buf[2048];
    int rc = ct_test_run_fatal(loader_after_truncate, (void *)p, buf, sizeof buf);
    CHECK(rc == 1 && strstr(buf, p) && one_line(buf), "exit %d (-1: killed by a signal): %s", rc, buf);
}

static void test_copy_shard_truncated_while_open(void) {
    const char *p = make_shard("u32.bin", 100000);  // 4-byte tokens
    char buf[2048];
    int rc = ct_test_run_fatal(copy_after_truncate, (void *)p, buf, sizeof buf);
    CHECK(rc == 1 && strstr(buf, p) && one_line(buf), "exit %d (-1: killed by a signal): %s", rc, buf);
}

// Data still reads correctly through the new path, at every offset and both widths.
static void test_copy_matches(void) {
    uint32_t vocabs[2] = {50000, 100000};
    for (int v = 0; v < 2; v++) {
        const char *p = make_shard(v ? "m4.bin" : "m2.bin", vocabs[v]);
        ct_shard s;
        CHECK(ct_shard_open(&s, p, 0) == CT_OK, "%s", ct_last_error());
        int32_t out[300];
        int bad = 0;
        for (uint64_t start = 0; start + 300 <= NTOK; start += 9973) {
            ct_shard_copy(&s, start, 300, out);
            for (int k = 0; k < 300; k++) bad += out[k] != (int32_t)(((start + k) * 7u) % vocabs[v]);
        }
        for (uint64_t i = 0; i < NTOK; i += 777) bad += ct_shard_token(&s, i) != (uint32_t)((i * 7u) % vocabs[v]);
        CHECK(bad == 0, "%d mismatches (width %d)", bad, s.token_width);
        ct_shard_close(&s);
    }
}

// Header vocab 2^32 - 1, one token 2^31 + 5: with no model vocabulary to check against, the
// reader must still refuse ids that do not fit the int32 it hands out.
static void test_ids_beyond_int32_refused(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/big_ids.bin", tmpdir);
    unsigned char h[64] = "CTTOKENS";
    h[8] = 1;                                        // version
    h[12] = 4;                                       // width
    h[16] = 3;                                       // count
    h[24] = h[25] = h[26] = h[27] = 0xff;            // vocab 2^32 - 1
    uint32_t toks[3] = {1, 0x80000005u, 2};
    FILE *f = fopen(path, "wb");
    fwrite(h, 1, 64, f);
    fwrite(toks, 4, 3, f);
    fclose(f);
    ct_shard s;
    ct_status st = ct_shard_open(&s, path, 0);
    if (st == CT_OK) {
        int32_t out[3];
        ct_shard_copy(&s, 0, 3, out);
        CHECK(0, "opened; ids read back as %d %d %d", out[0], out[1], out[2]);
        ct_shard_close(&s);
    } else {
        CHECK(error_is(CT_E_DATA, path, path) && error_is(CT_E_DATA, path, "2147483653"), "message: %s", ct_last_error());
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_shardtrunc_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    CT_RUN(test_loader_shard_truncated_while_open);
    CT_RUN(test_copy_shard_truncated_while_open);
    CT_RUN(test_copy_matches);
    CT_RUN(test_ids_beyond_int32_refused);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    CT_TEST_EXIT();
}
