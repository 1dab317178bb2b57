// Data loader: packing, seeded order, the data-parallel split, state save/restore, the
// synthetic source, and every bad-dataset check. The reference is the token stream the test
// itself builds (documents + EOS) before cutting it into shards.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "expect_error.h"
#include "core/memory.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "test.h"

enum { V = 1000, EOS = V - 1, T = 16 };

static char tmpdir[256];
static int32_t *stream;  // (n_stream,) the reference: every shard of "train" concatenated
static long n_stream;

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void sh(const char *fmt, const char *arg) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, arg);
    if (system(cmd) != 0) printf("  command failed: %s\n", cmd);
}

// Documents of 1..60 tokens, each followed by EOS, cut into three shards of unequal sizes
// (none a multiple of T, so windows straddle shard boundaries) plus an empty shard.
static void make_dataset(void) {
    sh("mkdir -p %s/ds", tmpdir);
    unsigned s = 12345;
    n_stream = 0;
    stream = malloc(sizeof(int32_t) * 4000);
    while (n_stream < 3000) {
        s = s * 1103515245u + 12345u;
        int len = 1 + (int)((s >> 16) % 60);
        for (int i = 0; i < len; i++, n_stream++) stream[n_stream] = (int32_t)((n_stream * 31 + i) % (V - 1));
        stream[n_stream++] = EOS;
    }
    long cut1 = 1003, cut2 = 2011;
    CHECK(ct_shard_write(tmp_path("ds/train_000.bin"), stream, (uint64_t)cut1, V) == CT_OK, "%s", ct_last_error());
    CHECK(ct_shard_write(tmp_path("ds/train_001.bin"), stream + cut1, (uint64_t)(cut2 - cut1), V) == CT_OK, "write");
    CHECK(ct_shard_write(tmp_path("ds/train_001a.bin"), stream, 0, V) == CT_OK, "write");  // empty, sorts between
    CHECK(ct_shard_write(tmp_path("ds/train_002.bin"), stream + cut2, (uint64_t)(n_stream - cut2), V) == CT_OK, "write");
    // A val split and a non-matching file that must be ignored.
    CHECK(ct_shard_write(tmp_path("ds/val_000.bin"), stream, 100, V) == CT_OK, "write");
    sh("echo junk > %s/ds/README.txt", tmpdir);
}

static ct_loader_config cfg_for(const char *source, int B, int rank, int dp, uint64_t seed) {
    return (ct_loader_config){.source = source, .split = "train", .seq_len = T, .global_batch = B,
                              .dp_rank = rank, .dp_size = dp, .seed = seed, .vocab_size = V};
}

// Offset o of `x` (T + 1 tokens) in the reference stream if it is the window at a multiple of T.
static long window_offset(const int32_t *in, const int32_t *tg) {
    for (long o = 0; o + T + 1 <= n_stream; o += T) {
        if (memcmp(stream + o, in, sizeof(int32_t) * T) == 0 && memcmp(stream + o + 1, tg, sizeof(int32_t) * T) == 0)
            return o;
    }
    return -1;
}

static void test_packing_and_epoch(void) {
    ct_loader *l = ct_loader_open(&(ct_loader_config){.source = tmp_path("ds"), .split = "train", .seq_len = T,
                                                      .global_batch = 4, .dp_rank = 0, .dp_size = 1, .seed = 7,
                                                      .vocab_size = V});
    CHECK(l != NULL, "%s", ct_last_error());
    if (!l) return;
    const long nw = (n_stream - 1) / T;
    CHECK(ct_loader_num_tokens(l) == (uint64_t)n_stream, "tokens %llu vs %ld", (unsigned long long)ct_loader_num_tokens(l), n_stream);
    CHECK(ct_loader_num_windows(l) == (uint64_t)nw, "windows");
    CHECK(ct_loader_num_shards(l) == 4, "shards %d", ct_loader_num_shards(l));
    // One epoch: every window is a contiguous slice of the stream at a multiple of T, each seen once.
    char *seen = calloc((size_t)nw, 1);
    int32_t in[4 * T], tg[4 * T];
    long steps = nw / 4, bad = 0, dup = 0, eos_inside = 0;
    long allocs = ct_mem_alloc_count();
    for (long s = 0; s < steps; s++) {
        ct_loader_next_batch(l, in, tg);
        for (int b = 0; b < 4; b++) {
            long o = window_offset(in + b * T, tg + b * T);
            if (o < 0) { bad++; continue; }
            dup += seen[o / T]++;
            for (int t = 0; t < T - 1; t++) eos_inside += in[b * T + t] == EOS;
        }
    }
    CHECK(ct_mem_alloc_count() == allocs, "next_batch allocated");
    CHECK(bad == 0 && dup == 0, "%ld windows not from the stream, %ld repeats", bad, dup);
    CHECK(eos_inside > 0, "no window spans a document boundary");
    long covered = 0;
    for (long w = 0; w < nw; w++) covered += seen[w];
    CHECK(covered == steps * 4, "covered %ld of %ld", covered, steps * 4);
    // The order is shuffled, not stream order.
    ct_loader_reset(l);
    ct_loader_next_batch(l, in, tg);
    long o0 = window_offset(in, tg), o1 = window_offset(in + T, tg + T), o2 = window_offset(in + 2 * T, tg + 2 * T);
    CHECK(!(o0 == 0 && o1 == T && o2 == 2 * T), "first windows in stream order");
    // Run to the end of the epoch: the state wraps to epoch 1 and the order changes.
    ct_loader_state st = ct_loader_get_state(l);
    CHECK(st.epoch == 0 && st.position == 4, "state after one step");
    ct_loader_set_state(l, (ct_loader_state){0, (uint64_t)nw - 1});
    ct_loader_next_batch(l, in, tg);
    st = ct_loader_get_state(l);
    CHECK(st.epoch == 1 && st.position == 3, "wrap: epoch %llu position %llu", (unsigned long long)st.epoch,
          (unsigned long long)st.position);
    free(seen);
    ct_loader_free(l);
}

// Two epochs one window at a time: each is a permutation of all windows, the two orders
// differ, and a fresh loader set to (epoch 1, 0) reads epoch 1 exactly.
static void test_epoch_orders(void) {
    ct_loader_config c = cfg_for(tmp_path("ds"), 1, 0, 1, 11);
    ct_loader *l = ct_loader_open(&c), *m = ct_loader_open(&c);
    CHECK(l && m, "%s", ct_last_error());
    if (!l || !m) return;
    const long nw = (long)ct_loader_num_windows(l);
    long *order = malloc(sizeof(long) * 2 * (size_t)nw);
    char *seen = calloc(2 * (size_t)nw, 1);
    int32_t in[T], tg[T], in2[T], tg2[T];
    long bad = 0, same = 0, resumed_bad = 0;
    ct_loader_set_state(m, (ct_loader_state){1, 0});
    for (long k = 0; k < 2 * nw; k++) {
        ct_loader_next_batch(l, in, tg);
        order[k] = window_offset(in, tg) / T;
        if (order[k] < 0) bad++;
        else bad += seen[(k / nw) * nw + order[k]]++;
        if (k >= nw) {
            ct_loader_next_batch(m, in2, tg2);
            resumed_bad += memcmp(in, in2, sizeof in) != 0 || memcmp(tg, tg2, sizeof tg) != 0;
            same += order[k] == order[k - nw];
        }
    }
    CHECK(bad == 0, "%ld windows missing or repeated within an epoch", bad);
    CHECK(same < nw / 4, "epoch 1 repeats epoch 0's order (%ld of %ld equal)", same, nw);
    CHECK(resumed_bad == 0, "%ld windows differ after restoring to epoch 1", resumed_bad);
    free(order);
    free(seen);
    ct_loader_free(l);
    ct_loader_free(m);
}

static void test_sequential_order(void) {
    ct_loader_config c = cfg_for(tmp_path("ds"), 2, 0, 1, 1);
    c.sequential = true;
    ct_loader *l = ct_loader_open(&c);
    CHECK(l != NULL, "%s", ct_last_error());
    if (!l) return;
    int32_t in[2 * T], tg[2 * T];
    for (int s = 0; s < 3; s++) {
        ct_loader_next_batch(l, in, tg);
        for (int b = 0; b < 2; b++)
            CHECK(window_offset(in + b * T, tg + b * T) == (long)(2 * s + b) * T, "step %d sample %d", s, b);
    }
    ct_loader_free(l);
}

// Runs `steps` steps and returns the (steps, B, T) inputs and targets of one loader.
static void run_steps(ct_loader *l, int steps, int B, int32_t *in, int32_t *tg) {
    for (int s = 0; s < steps; s++) ct_loader_next_batch(l, in + (size_t)s * B * T, tg + (size_t)s * B * T);
}

static void test_determinism(void) {
    enum { B = 4, S = 20 };
    int32_t a[S * B * T], at[S * B * T], b[S * B * T], bt[S * B * T], c[S * B * T], ct[S * B * T];
    ct_loader_config ca = cfg_for(tmp_path("ds"), B, 0, 1, 42), cc = cfg_for(tmp_path("ds"), B, 0, 1, 43);
    ct_loader *la = ct_loader_open(&ca), *lb = ct_loader_open(&ca), *lc = ct_loader_open(&cc);
    CHECK(la && lb && lc, "%s", ct_last_error());
    if (!la || !lb || !lc) return;
    run_steps(la, S, B, a, at);
    run_steps(lb, S, B, b, bt);
    run_steps(lc, S, B, c, ct);
    CHECK(!memcmp(a, b, sizeof a) && !memcmp(at, bt, sizeof at), "same seed, different batches");
    CHECK(memcmp(a, c, sizeof a) != 0, "different seed, same batches");
    ct_loader_free(la);
    ct_loader_free(lb);
    ct_loader_free(lc);
}

// For dp ranks: rank r's rows at step s == rows [r·B/dp, (r+1)·B/dp) of the single-rank batch.
static void check_dp_split(const char *source, int dp, int B, int steps) {
    int32_t *ref = malloc(sizeof(int32_t) * (size_t)steps * B * T), *reft = malloc(sizeof(int32_t) * (size_t)steps * B * T);
    int32_t *got = malloc(sizeof(int32_t) * (size_t)steps * B * T), *gott = malloc(sizeof(int32_t) * (size_t)steps * B * T);
    ct_loader_config c = cfg_for(source, B, 0, 1, 9);
    ct_loader *l = ct_loader_open(&c);
    CHECK(l != NULL, "%s", ct_last_error());
    if (!l) return;
    run_steps(l, steps, B, ref, reft);
    const long nw = (long)ct_loader_num_windows(l);
    ct_loader_free(l);
    const int lb = B / dp;
    for (int r = 0; r < dp; r++) {
        c = cfg_for(source, B, r, dp, 9);
        l = ct_loader_open(&c);
        CHECK(l && ct_loader_local_batch(l) == lb, "rank %d: %s", r, ct_last_error());
        if (!l) continue;
        int32_t *in = malloc(sizeof(int32_t) * (size_t)lb * T), *tg = malloc(sizeof(int32_t) * (size_t)lb * T);
        for (int s = 0; s < steps; s++) {
            ct_loader_next_batch(l, in, tg);
            // Place rank r's rows where the single-rank batch has them.
            memcpy(got + ((size_t)s * B + (size_t)r * lb) * T, in, sizeof(int32_t) * (size_t)lb * T);
            memcpy(gott + ((size_t)s * B + (size_t)r * lb) * T, tg, sizeof(int32_t) * (size_t)lb * T);
        }
        free(in);
        free(tg);
        ct_loader_free(l);
    }
    CHECK(!memcmp(ref, got, sizeof(int32_t) * (size_t)steps * B * T), "dp=%d inputs differ from the single-rank batch", dp);
    CHECK(!memcmp(reft, gott, sizeof(int32_t) * (size_t)steps * B * T), "dp=%d targets differ", dp);
    // Disjoint: within a step, rows of different ranks are different windows of the stream
    // (unless the step straddles an epoch end, where a window may legitimately recur).
    if (strcmp(source, "synthetic") != 0) {
        long clashes = 0;
        for (int s = 0; s < steps; s++) {
            if ((long)s * B / nw != ((long)s * B + B - 1) / nw) continue;
            for (int i = 0; i < B; i++)
                for (int j = i + 1; j < B; j++) {
                    if (i / lb == j / lb) continue;  // same rank
                    long oi = window_offset(ref + ((size_t)s * B + i) * T, reft + ((size_t)s * B + i) * T);
                    long oj = window_offset(ref + ((size_t)s * B + j) * T, reft + ((size_t)s * B + j) * T);
                    clashes += oi < 0 || oi == oj;
                }
        }
        CHECK(clashes == 0, "dp=%d: %ld rows shared between ranks", dp, clashes);
    }
    free(ref);
    free(reft);
    free(got);
    free(gott);
}

static void test_dp_split(void) {
    // 8 sequences a step, 60 steps: past one epoch (187 windows), so the wrap is covered too.
    check_dp_split(tmp_path("ds"), 2, 8, 60);
    check_dp_split(tmp_path("ds"), 4, 8, 60);
    check_dp_split("synthetic", 4, 8, 5);
    ct_loader_config c = cfg_for(tmp_path("ds"), 6, 0, 4, 9);
    CHECK(ct_loader_open(&c) == NULL && strstr(ct_last_error(), "not divisible"), "B=6 over dp=4 accepted");
}

static void test_state_restore(void) {
    enum { B = 4, S1 = 30, S2 = 40 };  // S1 + S2 steps cross the epoch end (187 windows)
    static int32_t ref[(S1 + S2) * B * T], reft[(S1 + S2) * B * T], got[S2 * B * T], gott[S2 * B * T];
    ct_loader_config c = cfg_for(tmp_path("ds"), B, 0, 1, 5);
    ct_loader *l = ct_loader_open(&c);
    CHECK(l != NULL, "%s", ct_last_error());
    if (!l) return;
    run_steps(l, S1, B, ref, reft);
    ct_loader_state saved = ct_loader_get_state(l);
    run_steps(l, S2, B, ref + S1 * B * T, reft + S1 * B * T);
    ct_loader_free(l);
    // A fresh loader (as after a restart) restored to the saved state.
    l = ct_loader_open(&c);
    CHECK(ct_loader_set_state(l, saved) == CT_OK, "%s", ct_last_error());
    run_steps(l, S2, B, got, gott);
    CHECK(!memcmp(got, ref + S1 * B * T, sizeof got) && !memcmp(gott, reft + S1 * B * T, sizeof gott), "resumed batches differ");
    CHECK(ct_loader_set_state(l, (ct_loader_state){0, ct_loader_num_windows(l)}) == CT_ERR, "out-of-range position accepted");
    ct_loader_free(l);
}

static void test_synthetic(void) {
    ct_loader_config c = cfg_for("synthetic", 2, 0, 1, 3);
    ct_loader *a = ct_loader_open(&c), *b = ct_loader_open(&c);
    c.seed = 4;
    ct_loader *d = ct_loader_open(&c);
    CHECK(a && b && d, "%s", ct_last_error());
    if (!a || !b || !d) return;
    int32_t ia[2 * T], ta[2 * T], ib[2 * T], tb[2 * T], id[2 * T], td[2 * T];
    int out_of_range = 0, shift_bad = 0;
    for (int s = 0; s < 5; s++) {
        ct_loader_next_batch(a, ia, ta);
        ct_loader_next_batch(b, ib, tb);
        ct_loader_next_batch(d, id, td);
        CHECK(!memcmp(ia, ib, sizeof ia) && !memcmp(ta, tb, sizeof ta), "same seed differs");
        CHECK(memcmp(ia, id, sizeof ia) != 0, "different seed same tokens");
        for (int i = 0; i < 2 * T; i++) out_of_range += ia[i] < 0 || ia[i] >= V || ta[i] < 0 || ta[i] >= V;
        for (int r = 0; r < 2; r++)
            for (int t = 0; t + 1 < T; t++) shift_bad += ta[r * T + t] != ia[r * T + t + 1];
    }
    CHECK(out_of_range == 0 && shift_bad == 0, "%d ids out of range, %d shift errors", out_of_range, shift_bad);
    ct_loader_free(a);
    ct_loader_free(b);
    ct_loader_free(d);
    c.vocab_size = 0;
    CHECK(ct_loader_open(&c) == NULL, "synthetic without vocab accepted");
}

static void test_llmc_folder_and_val(void) {
    sh("mkdir -p %s/llmc", tmpdir);
    CHECK(ct_shard_write_llmc(tmp_path("llmc/tiny_train_000001.bin"), stream, 500) == CT_OK, "write");
    CHECK(ct_shard_write_llmc(tmp_path("llmc/tiny_val_000000.bin"), stream + 500, 100) == CT_OK, "write");
    ct_loader_config c = cfg_for(tmp_path("llmc"), 2, 0, 1, 1);
    c.sequential = true;
    ct_loader *l = ct_loader_open(&c);
    CHECK(l && ct_loader_num_tokens(l) == 500, "%s", ct_last_error());
    int32_t in[2 * T], tg[2 * T];
    if (l) {
        ct_loader_next_batch(l, in, tg);
        CHECK(!memcmp(in, stream, sizeof(int32_t) * T) && !memcmp(tg + T, stream + T + 1, sizeof(int32_t) * T), "llm.c content");
        ct_loader_free(l);
    }
    c.split = "val";
    l = ct_loader_open(&c);
    CHECK(l && ct_loader_num_tokens(l) == 100, "val: %s", ct_last_error());
    if (l) {
        ct_loader_next_batch(l, in, tg);
        CHECK(!memcmp(in, stream + 500, sizeof(int32_t) * T), "val content");
        ct_loader_free(l);
    }
    c.source = tmp_path("ds");  // our own val split
    l = ct_loader_open(&c);
    CHECK(l && ct_loader_num_tokens(l) == 100 && ct_loader_num_shards(l) == 1, "ds val: %s", ct_last_error());
    ct_loader_free(l);
}

// Opening `source` must fail with `code`, a subject (the file or folder at fault) that ends in
// `name`, and a message containing `name` and `what`.
static int loader_fails_with(ct_error_code code, const char *source, uint32_t vocab, const char *name, const char *what) {
    ct_loader_config c = cfg_for(source, 2, 0, 1, 1);
    c.vocab_size = vocab;
    ct_loader *l = ct_loader_open(&c);
    if (l) {
        ct_loader_free(l);
        printf("  %s opened\n", source);
        return 0;
    }
    const char *subject = ct_last_error_subject();
    size_t ns = strlen(subject), nn = strlen(name);
    if (ns < nn || strcmp(subject + ns - nn, name)) {
        printf("  subject '%s' does not end in '%s' (%s)\n", subject, name, ct_last_error());
        return 0;
    }
    return error_is(code, NULL, name) && error_is(code, NULL, what);
}
static int loader_fails(const char *source, uint32_t vocab, const char *name, const char *what) {
    return loader_fails_with(CT_E_DATA, source, vocab, name, what);
}

static void test_bad_datasets(void) {
    // Each case: a folder holding one good shard and one bad one; the message names the bad file.
    const char *cases[] = {"magic", "trunc", "vocab", "short", "empty"};
    for (int k = 0; k < 5; k++) {
        char dir[600], good[700], bad[700];
        snprintf(dir, sizeof dir, "%s/bad_%s", tmpdir, cases[k]);
        sh("mkdir -p %s", dir);
        snprintf(good, sizeof good, "%s/train_000.bin", dir);
        snprintf(bad, sizeof bad, "%s/train_001.bin", dir);
        static int32_t small[200];  // ids 0..99: valid under any vocab used below
        for (int i = 0; i < 200; i++) small[i] = i % 100;
        if (k != 3 && k != 4) CHECK(ct_shard_write(good, small, 200, V) == CT_OK, "write");
        if (k == 0) {
            FILE *f = fopen(bad, "wb");
            fputs("GARBAGE!................................................................................", f);
            fclose(f);
            CHECK(loader_fails(dir, V, bad, "wrong magic"), "magic");
        } else if (k == 1) {
            CHECK(ct_shard_write(bad, stream, 200, V) == CT_OK, "write");
            CHECK(truncate(bad, 64 + 2 * 150) == 0, "truncate");
            CHECK(loader_fails(dir, V, bad, "truncated"), "truncated");
        } else if (k == 2) {
            CHECK(ct_shard_write(bad, stream, 200, V) == CT_OK, "write");
            // The model's vocabulary is smaller than the ids in the shard.
            CHECK(loader_fails(dir, 500, bad, ">= vocab"), "token >= vocab");
        } else if (k == 3) {
            CHECK(ct_shard_write(bad, stream, T, V) == CT_OK, "write");  // T tokens: one short of a sample
            CHECK(loader_fails(dir, V, dir, "fewer than one sample"), "too short");
        } else {
            CHECK(ct_shard_write(tmp_path("bad_empty/val_000.bin"), stream, 200, V) == CT_OK, "write");  // wrong split
            CHECK(loader_fails(dir, V, dir, "no train shards"), "empty folder");
        }
    }
    CHECK(loader_fails_with(CT_E_IO, tmp_path("does_not_exist"), V, "does_not_exist", "not found"), "missing folder");
}

// ---- corpus -> shards (fixtures in tests/fixtures/data, described in its README) -----------

#define FIX "tests/fixtures/data"

static void test_corpus_listing(void) {
    const char *in[] = {FIX "/corpus"};
    char **files;
    int n = ct_data_list_files(in, 1, &files);
    CHECK(n == 2, "%d files: %s", n, n < 0 ? ct_last_error() : "");
    if (n == 2) {
        CHECK(!strcmp(files[0], FIX "/corpus/a_fortunes"), "%s", files[0]);
        CHECK(!strcmp(files[1], FIX "/corpus/b_plain.txt"), "%s", files[1]);
    }
    if (n >= 0) ct_data_free_list(files, n);
    const char *in2[] = {FIX "/corpus/b_plain.txt", FIX "/corpus"};  // a file is taken as given
    n = ct_data_list_files(in2, 2, &files);
    CHECK(n == 3 && !strcmp(files[0], FIX "/corpus/b_plain.txt"), "%d", n);
    if (n >= 0) ct_data_free_list(files, n);
    const char *in3[] = {FIX "/no_such_thing"};
    CHECK(ct_data_list_files(in3, 1, &files) == -1 && strstr(ct_last_error(), "no_such_thing"), "missing input");
}

typedef struct {
    char docs[8][128];
    int n;
} doc_list;

static int collect(const char *doc, size_t len, void *ctx) {
    doc_list *d = ctx;
    if (d->n < 8 && len < 128) memcpy(d->docs[d->n], doc, len), d->docs[d->n][len] = 0;
    d->n++;
    return 0;
}

static void test_documents(void) {
    const char *f = "The first fortune.\n%\nSecond fortune,\n  two lines.\n%\n   \n%\nThird, after a blank one.\n%\n";
    doc_list d = {0};
    CHECK(ct_data_is_fortune_text(f, strlen(f)), "fortune text not recognised");
    ct_data_for_each_document(f, strlen(f), collect, &d);
    CHECK(d.n == 3, "%d documents", d.n);
    CHECK(!strcmp(d.docs[0], "The first fortune.\n"), "'%s'", d.docs[0]);
    CHECK(!strcmp(d.docs[1], "Second fortune,\n  two lines.\n"), "'%s'", d.docs[1]);
    CHECK(!strcmp(d.docs[2], "Third, after a blank one.\n"), "'%s'", d.docs[2]);
    // No trailing separator and no final newline: the last fortune still counts.
    const char *g = "one\n%\ntwo";
    d = (doc_list){0};
    ct_data_for_each_document(g, strlen(g), collect, &d);
    CHECK(d.n == 2 && !strcmp(d.docs[0], "one\n") && !strcmp(d.docs[1], "two"), "%d", d.n);
    // A '%' that is not alone on its line is text: the whole file is one document.
    const char *h = "A plain file is one document.\n% not a separator\n";
    d = (doc_list){0};
    CHECK(!ct_data_is_fortune_text(h, strlen(h)), "plain text taken as fortunes");
    ct_data_for_each_document(h, strlen(h), collect, &d);
    CHECK(d.n == 1 && !strcmp(d.docs[0], h), "%d", d.n);
}

// Reads every shard of a split through ct_shard_open into one array; returns its length.
static long read_split(const char *dir, const char *split, int32_t *out, long cap, int *n_shards) {
    long n = 0;
    *n_shards = 0;
    for (int k = 0; k < 10; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s_%03d.bin", dir, split, k);
        if (access(path, F_OK) != 0) break;
        ct_shard s;
        if (ct_shard_open(&s, path, 0) != CT_OK) return -1;
        if (n + (long)s.n_tokens <= cap) ct_shard_copy(&s, 0, s.n_tokens, out + n);
        n += (long)s.n_tokens;
        (*n_shards)++;
        ct_shard_close(&s);
    }
    return n;
}

// End to end with the byte-level fixture tokenizer (byte b -> id b, <|end_of_text|> = 257), so
// the expected shards are the documents' bytes, each followed by 257.
static void test_prepare(void) {
    const char *in[] = {FIX "/corpus"};
    char out[600];
    snprintf(out, sizeof out, "%s/prepared/sub", tmpdir);
    ct_data_prepare_opts o = {.inputs = in, .n_inputs = 1, .tokenizer_path = FIX "/bytes.tiktoken", .out_dir = out,
                              .val_fraction = 0.25, .shard_tokens = 40, .progress = 0};
    ct_data_prepare_result r;
    CHECK(ct_data_prepare(&o, &r) == CT_OK, "%s", ct_last_error());
    // Documents 0, 1, 2 are the fortunes, 3 is b_plain.txt; k = 4 sends document 3 to val.
    const char *docs[4] = {"The first fortune.\n", "Second fortune,\n  two lines.\n", "Third, after a blank one.\n",
                           "A plain file is one document.\n% not a separator\n"};
    int32_t want[2][256];
    long nw[2] = {0, 0};
    for (int i = 0; i < 4; i++) {
        int v = i % 4 == 3;
        for (const char *c = docs[i]; *c; c++) want[v][nw[v]++] = (unsigned char)*c;
        want[v][nw[v]++] = 257;
    }
    CHECK(r.files == 2 && r.docs[0] == 3 && r.docs[1] == 1, "files %llu docs %llu/%llu", (unsigned long long)r.files,
          (unsigned long long)r.docs[0], (unsigned long long)r.docs[1]);
    CHECK(r.tokens[0] == (uint64_t)nw[0] && r.tokens[1] == (uint64_t)nw[1], "token counts");
    int32_t got[256];
    int shards;
    long n = read_split(out, "train", got, 256, &shards);
    CHECK(n == nw[0] && shards == 2 && r.shards[0] == 2 && !memcmp(got, want[0], sizeof(int32_t) * (size_t)nw[0]),
          "train: %ld tokens in %d shards", n, shards);
    n = read_split(out, "val", got, 256, &shards);
    CHECK(n == nw[1] && shards == 2 && !memcmp(got, want[1], sizeof(int32_t) * (size_t)nw[1]), "val: %ld tokens in %d shards",
          n, shards);
    // Preparing again with bigger shards replaces the old files (no stale train_001.bin).
    o.shard_tokens = 1000;
    CHECK(ct_data_prepare(&o, &r) == CT_OK, "%s", ct_last_error());
    n = read_split(out, "train", got, 256, &shards);
    CHECK(n == nw[0] && shards == 1, "rerun: %ld tokens in %d shards", n, shards);
    // The loader reads what prepare wrote.
    ct_loader_config c = {.source = out, .split = "train", .seq_len = 8, .global_batch = 1, .dp_size = 1,
                          .vocab_size = 258, .sequential = true};
    ct_loader *l = ct_loader_open(&c);
    CHECK(l != NULL, "%s", ct_last_error());
    if (l) {
        int32_t a[8], b[8];
        ct_loader_set_state(l, (ct_loader_state){0, 2});
        ct_loader_next_batch(l, a, b);
        CHECK(!memcmp(a, want[0] + 16, sizeof a) && !memcmp(b, want[0] + 17, sizeof b), "window 2");
        ct_loader_free(l);
    }
    o.val_fraction = 0.7;
    CHECK(ct_data_prepare(&o, &r) == CT_ERR && strstr(ct_last_error(), "val-fraction"), "bad fraction accepted");
    o.val_fraction = 0.05;
    o.tokenizer_path = FIX "/missing.tiktoken";
    CHECK(ct_data_prepare(&o, &r) == CT_ERR, "missing tokenizer accepted");
}

// ---- blends ("W1 PATH1 W2 PATH2 ...")

static void make_second_dataset(void) {
    sh("mkdir -p %s/ds2", tmpdir);
    int32_t *s2 = malloc(sizeof(int32_t) * 1500);
    for (long i = 0; i < 1500; i++) s2[i] = (int32_t)((i * 7 + 3) % (V - 1));
    CHECK(ct_shard_write(tmp_path("ds2/train_000.bin"), s2, 1500, V) == CT_OK, "%s", ct_last_error());
    free(s2);
}

static const char *blend_source(void) {
    static char src[1200];
    snprintf(src, sizeof src, "0.75 %s 0.25 %s", tmp_path("ds"), tmp_path("ds2"));
    return src;
}

// Every sequence a blend gives is the next one of its dataset's own order (read with a loader of
// that dataset alone), each dataset's count stays within one sequence of its share after every
// sequence, and the metrics' counts are the sequences drawn times T.
static void test_blend_draws_each_dataset_in_its_order(void) {
    enum { B = 4, STEPS = 40 };
    ct_loader_config c = cfg_for(blend_source(), B, 0, 1, 5);
    ct_loader *l = ct_loader_open(&c);
    CHECK(l != NULL, "%s", ct_last_error());
    if (!l) return;
    CHECK(ct_loader_blend_parts(l) == 2 && fabs(ct_loader_blend_weight(l, 0) - 0.75) < 1e-15, "parts / weights");
    ct_loader_config c0 = cfg_for(tmp_path("ds"), 1, 0, 1, 5), c1 = cfg_for(tmp_path("ds2"), 1, 0, 1, 5);
    ct_loader *own[2] = {ct_loader_open(&c0), ct_loader_open(&c1)};
    int32_t in[B * T], tg[B * T], oin[T], otg[T];
    long count[2] = {0, 0}, worst_gap_x4 = 0, unmatched = 0;
    for (int step = 0; step < STEPS; step++) {
        ct_loader_next_batch(l, in, tg);
        for (int b = 0; b < B; b++) {
            // Which dataset: the one whose next own sequence this is.
            int found = -1;
            for (int d = 0; d < 2 && found < 0; d++) {
                ct_loader_state keep = ct_loader_get_state(own[d]);
                ct_loader_next_batch(own[d], oin, otg);
                if (!memcmp(oin, in + b * T, sizeof oin) && !memcmp(otg, tg + b * T, sizeof otg)) found = d;
                else ct_loader_set_state(own[d], keep);
            }
            if (found < 0) { unmatched++; continue; }
            count[found]++;
            long n = (long)step * B + b + 1;  // sequences so far; shares 3n/4 and n/4
            long gap = labs(4 * count[0] - 3 * n);
            if (gap > worst_gap_x4) worst_gap_x4 = gap;
        }
    }
    CHECK(unmatched == 0, "%ld sequences are not the next of either dataset's order", unmatched);
    CHECK(worst_gap_x4 < 4, "a dataset's count strayed %.2f sequences from its share", worst_gap_x4 / 4.0);
    CHECK((uint64_t)count[0] * T == ct_loader_blend_tokens(l, 0) && (uint64_t)count[1] * T == ct_loader_blend_tokens(l, 1),
          "tokens drawn %llu / %llu, sequences %ld / %ld", (unsigned long long)ct_loader_blend_tokens(l, 0),
          (unsigned long long)ct_loader_blend_tokens(l, 1), count[0], count[1]);
    ct_loader_free(own[0]);
    ct_loader_free(own[1]);
    ct_loader_free(l);
}

// Two data-parallel ranks read the one-rank batches between them; a loader set to a saved state
// (a resume, here under another layout) continues with the same sequences.
static void test_blend_layouts_and_resume(void) {
    enum { B = 4 };
    ct_loader_config c = cfg_for(blend_source(), B, 0, 1, 9);
    ct_loader *one = ct_loader_open(&c);
    c.dp_size = 2;
    ct_loader *r0 = ct_loader_open(&c);
    c.dp_rank = 1;
    ct_loader *r1 = ct_loader_open(&c);
    CHECK(one && r0 && r1, "%s", ct_last_error());
    if (!one || !r0 || !r1) return;
    int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T];
    long differ = 0;
    for (int step = 0; step < 30; step++) {
        ct_loader_next_batch(one, in, tg);
        ct_loader_next_batch(r0, in2, tg2);
        ct_loader_next_batch(r1, in2 + 2 * T, tg2 + 2 * T);
        differ += memcmp(in, in2, sizeof in) != 0 || memcmp(tg, tg2, sizeof tg) != 0;
    }
    CHECK(differ == 0, "%ld of 30 batches differ between 1 and 2 data-parallel ranks", differ);
    ct_loader_state st = ct_loader_get_state(one);
    c.dp_rank = 0, c.dp_size = 1;
    ct_loader *resumed = ct_loader_open(&c);
    CHECK(resumed && ct_loader_set_state(resumed, st) == CT_OK, "%s", ct_last_error());
    for (int step = 0; resumed && step < 10; step++) {
        ct_loader_next_batch(one, in, tg);
        ct_loader_next_batch(resumed, in2, tg2);
        CHECK(!memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg), "resumed batch %d differs", step);
    }
    CHECK(resumed && ct_loader_blend_tokens(resumed, 0) == ct_loader_blend_tokens(one, 0), "token counts after resume");
    ct_loader_free(resumed);
    ct_loader_free(one);
    ct_loader_free(r0);
    ct_loader_free(r1);
}

static void test_blend_refusals(void) {
    char src[1400];
    const char *bad[][2] = {{"0.5 %s 0.5", "weight-path pairs"},
                            {"0.5 %s -1 x", "not a positive number"},
                            {"0.5 %s 0.5 synthetic", "'synthetic' cannot be one of them"},
                            {"1 %s 1 /nonexistent/blend", "dataset 2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(src, sizeof src, bad[i][0], tmp_path("ds"));
        ct_loader_config c = cfg_for(src, 4, 0, 1, 1);
        ct_loader *l = ct_loader_open(&c);
        CHECK(!l && strstr(ct_last_error(), bad[i][1]), "'%s': %s", src, l ? "accepted" : ct_last_error());
        ct_loader_free(l);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_test_loader_%d", (int)getpid());
    sh("mkdir -p %s", tmpdir);
    make_dataset();
    CT_RUN(test_packing_and_epoch);
    CT_RUN(test_epoch_orders);
    CT_RUN(test_sequential_order);
    CT_RUN(test_determinism);
    CT_RUN(test_dp_split);
    CT_RUN(test_state_restore);
    CT_RUN(test_synthetic);
    CT_RUN(test_llmc_folder_and_val);
    CT_RUN(test_bad_datasets);
    CT_RUN(test_corpus_listing);
    CT_RUN(test_documents);
    CT_RUN(test_prepare);
    make_second_dataset();
    CT_RUN(test_blend_draws_each_dataset_in_its_order);
    CT_RUN(test_blend_layouts_and_resume);
    CT_RUN(test_blend_refusals);
    sh("rm -rf %s", tmpdir);
    free(stream);
    CT_TEST_EXIT();
}
