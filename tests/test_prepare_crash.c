// `data prepare` killed (SIGKILL, by a failpoint) at each step of replacing a dataset leaves the
// loader reading the whole old dataset (killed before the switch of .current) or the whole new
// one (after it), train and val alike; a prepare that then fails keeps that dataset; the next good
// prepare tidies every leftover. Each case starts from a folder this ctitan prepared and from one
// that holds its shards itself (an earlier ctitan's layout, with a file of the user's beside
// them, which must survive), and replaces a dataset of many shards by one of few and back, so that
// every step has something to do. Also: what an earlier ctitan left when killed mid-swap, a second
// prepare while one holds the folder, and a .current the loader must refuse.
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "test.h"

#define FIX "tests/fixtures/data"

static char tmpdir[64], out[128], corpus_b[128];

static void sh(const char *fmt, const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    if (system(cmd) != 0) printf("  setup command failed: %s\n", cmd);
}

// Dataset A: the fixture corpus in shards of 20 tokens (several per split); dataset B: another
// corpus in shards of 1000 (one per split).
typedef enum { DATA_A, DATA_B } dataset;

static ct_data_prepare_opts opts_for(dataset d, const char *const *in) {
    return (ct_data_prepare_opts){.inputs = in, .n_inputs = 1, .tokenizer_path = FIX "/bytes.tiktoken", .out_dir = out,
                                  .val_fraction = 0.25, .shard_tokens = d == DATA_A ? 20 : 1000, .progress = 0};
}

static ct_status prepare(dataset d) {
    const char *in[] = {d == DATA_A ? FIX "/corpus" : corpus_b};
    ct_data_prepare_opts o = opts_for(d, in);
    ct_data_prepare_result r;
    return ct_data_prepare(&o, &r);
}

// What the loader reads of one split: token count, shard count, and a hash of every window.
typedef struct {
    unsigned long long tokens, hash;
    int shards;
} view;

static view read_view(const char *dir, const char *split, char *err, size_t n) {
    view v = {0};
    ct_loader_config c = {.source = dir, .split = split, .seq_len = 1, .global_batch = 1, .dp_size = 1,
                          .vocab_size = 258, .sequential = true};
    ct_loader *l = ct_loader_open(&c);
    if (!l) {
        snprintf(err, n, "%s", ct_last_error());
        return v;
    }
    v.tokens = ct_loader_num_tokens(l);
    v.shards = ct_loader_num_shards(l);
    v.hash = 5381;
    for (uint64_t w = 0; w < ct_loader_num_windows(l); w++) {
        int32_t a, b;
        ct_loader_next_batch(l, &a, &b);
        v.hash = (v.hash * 33 + (unsigned)a) * 33 + (unsigned)b;
    }
    ct_loader_free(l);
    return v;
}

static view want[2][2];  // [dataset][split]: what the loader reads of a clean prepare

static bool same(view a, view b) { return a.tokens == b.tokens && a.hash == b.hash && a.shards == b.shards; }

// Which dataset the loader reads in `out`, train and val alike: DATA_A, DATA_B, or -1 (neither, a
// mix of the two, or unreadable; why in err).
static int reads(char *err, size_t n) {
    err[0] = 0;
    view t = read_view(out, "train", err, n), v = read_view(out, "val", err, n);
    for (int d = 0; d < 2; d++)
        if (same(t, want[d][0]) && same(v, want[d][1])) return d;
    if (!err[0])
        snprintf(err, n, "train %llu tokens in %d shards, val %llu in %d: neither A nor B", t.tokens, t.shards, v.tokens,
                 v.shards);
    return -1;
}

// Lays out `out` holding dataset d: prepared here, or as an earlier ctitan left it (the shards in
// the folder itself, and a file of the user's).
static void set_up(dataset d, bool legacy) {
    sh("rm -rf %s%s", out, "");
    if (!legacy) {
        CHECK(prepare(d) == CT_OK, "%s", ct_last_error());
        return;
    }
    char ref[160];
    snprintf(ref, sizeof ref, "%s/ref_%c", tmpdir, d == DATA_A ? 'a' : 'b');
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp -L %s/*.bin %s/ && echo mine >%s/notes.txt", out, ref, out, out);
    CHECK(system(cmd) == 0, "%s", cmd);
}

// Everything in `out` as a good prepare leaves it: .current, one folder of shards, a link per
// shard resolving to a file, notes.txt when the case began from an earlier layout, nothing else.
static void check_tidy(bool legacy, char *why, size_t n) {
    why[0] = 0;
    DIR *d = opendir(out);
    if (!d) {
        snprintf(why, n, "%s: %s", out, strerror(errno));
        return;
    }
    int folders = 0, notes = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *nm = e->d_name;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", out, nm);
        struct stat ls, st;
        lstat(path, &ls);
        bool resolves = stat(path, &st) == 0;
        if (!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, CT_DATASET_CURRENT)) continue;
        if (!strncmp(nm, CT_DATASET_SHARDS_PREFIX, strlen(CT_DATASET_SHARDS_PREFIX)) && S_ISDIR(ls.st_mode)) folders++;
        else if (!strcmp(nm, "notes.txt") && legacy) notes++;
        else if (!(S_ISLNK(ls.st_mode) && resolves && S_ISREG(st.st_mode) && (nm[0] == 't' || nm[0] == 'v')))
            snprintf(why, n, "left behind: %s", nm);
    }
    closedir(d);
    if (!why[0] && folders != 1) snprintf(why, n, "%d folders of shards", folders);
    if (!why[0] && notes != legacy) snprintf(why, n, "the user's notes.txt is gone");
}

// In a child: the prepare of dataset d, with the failpoint armed.
static int run_killed(dataset d, const char *point, int hit) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CTITAN_FAILPOINT", point, 1);
        char h[16];
        snprintf(h, sizeof h, "%d", hit);
        setenv("CTITAN_FAILPOINT_HIT", h, 1);
        _exit(prepare(d) == CT_OK ? 0 : 3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
}

static const struct {
    const char *point;
    int hit;
    bool after_switch;
} points[] = {
    {"prepare.before_links", 1, false},   {"prepare.mid_links", 1, false},    {"prepare.mid_links", 2, false},
    {"prepare.before_switch", 1, false},  {"prepare.after_switch", 1, true},  {"prepare.mid_tidy", 1, true},
    {"prepare.mid_tidy", 2, true},        {"prepare.before_remove_old", 1, true},
    // The switch of .current (hit 1), then a shard name turned into a link (hit 2; only when the
    // folder held its shards itself).
    {"fs.switch_link", 1, false},         {"fs.switch_link", 2, true},
};
enum { N_POINTS = sizeof points / sizeof points[0] };

static void test_killed_at_each_step(void) {
    char err[1024];
    int killed[N_POINTS] = {0};
    for (int p = 0; p < N_POINTS; p++)
        for (int legacy = 0; legacy < 2; legacy++)
            for (int old = 0; old < 2; old++) {
                dataset from = (dataset)old, to = (dataset)!old;
                char what[160];
                snprintf(what, sizeof what, "%s (hit %d), %s %c -> %c", points[p].point, points[p].hit,
                         legacy ? "shards in the folder" : "prepared", "AB"[from], "AB"[to]);
                set_up(from, legacy);
                int rc = run_killed(to, points[p].point, points[p].hit);
                CHECK(rc == -SIGKILL || rc == 0, "%s: the prepare ended with %d", what, rc);
                killed[p] += rc == -SIGKILL;
                // Killed before the switch: the old dataset; after it, or not killed: the new one.
                int expect = rc == -SIGKILL && !points[p].after_switch ? from : to;
                int got = reads(err, sizeof err);
                CHECK(got == expect, "%s: the loader reads %s, expected %c (%s)", what, got < 0 ? "neither" : got ? "B" : "A",
                      "AB"[expect], err);
                // A prepare that fails now keeps that dataset: tidying never removes the only one.
                const char *in[] = {FIX "/missing"};
                ct_data_prepare_opts o = opts_for(to, in);
                ct_data_prepare_result r;
                CHECK(ct_data_prepare(&o, &r) == CT_ERR, "%s: a prepare of a missing input succeeded", what);
                got = reads(err, sizeof err);
                CHECK(got == expect, "%s, then a failed prepare: the loader reads %d (%s)", what, got, err);
                // The next good prepare tidies every leftover.
                CHECK(prepare(to) == CT_OK, "%s, then again: %s", what, ct_last_error());
                CHECK(reads(err, sizeof err) == (int)to, "%s, then again: %s", what, err);
                check_tidy(legacy, err, sizeof err);
                CHECK(!err[0], "%s, then again: %s", what, err);
            }
    for (int p = 0; p < N_POINTS; p++)
        CHECK(killed[p] > 0, "%s (hit %d) was never reached", points[p].point, points[p].hit);
}

// An earlier ctitan swapped one shard at a time through .prepare-old-* / .prepare-new-* folders;
// killed in the middle it left a mix in the folder and the rest in those. A prepare that fails
// leaves them all (they may be the only copy of a dataset); a good one removes them.
static void test_earlier_ctitan_leftovers(void) {
    char cmd[1024];
    sh("rm -rf %s && mkdir -p %s", out, out);
    snprintf(cmd, sizeof cmd,
             "cd %s && mkdir .prepare-old-x1 .prepare-new-y2 && cp -L %s/ref_a/train_000.bin .prepare-old-x1/ && "
             "cp -L %s/ref_a/train_001.bin %s/ref_a/val_000.bin . && cp -L %s/ref_b/train_000.bin .prepare-new-y2/ && "
             "cp -L %s/ref_b/val_000.bin .prepare-new-y2/",
             out, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir);
    CHECK(system(cmd) == 0, "%s", cmd);
    const char *in[] = {FIX "/missing"};
    ct_data_prepare_opts o = opts_for(DATA_B, in);
    ct_data_prepare_result r;
    CHECK(ct_data_prepare(&o, &r) == CT_ERR, "a prepare of a missing input succeeded");
    snprintf(cmd, sizeof cmd, "test -f %s/.prepare-old-x1/train_000.bin && test -f %s/.prepare-new-y2/val_000.bin", out, out);
    CHECK(system(cmd) == 0, "a failed prepare removed an earlier ctitan's set-aside shards");
    CHECK(prepare(DATA_B) == CT_OK, "%s", ct_last_error());
    char err[512];
    CHECK(reads(err, sizeof err) == DATA_B, "%s", err);
    check_tidy(false, err, sizeof err);
    CHECK(!err[0], "%s", err);
}

// A second prepare into a folder another one is writing is refused in one line, and changes nothing.
static void test_second_prepare_refused(void) {
    set_up(DATA_A, false);
    int fd = ct_fs_lock_dir(out, "data prepare");
    CHECK(fd >= 0, "%s", ct_last_error());
    ct_status st = prepare(DATA_B);
    const char *e = st == CT_ERR ? ct_last_error() : "";
    CHECK(st == CT_ERR && strstr(e, out) && strstr(e, "another data prepare is writing this folder") && !strchr(e, '\n'),
          "status %d: '%s'", st, e);
    if (fd >= 0) close(fd);
    char err[512];
    CHECK(reads(err, sizeof err) == DATA_A, "%s", err);
    CHECK(prepare(DATA_B) == CT_OK, "once the lock is released: %s", ct_last_error());
}

// A .current that is not a link to a folder of shards beside it: the loader says so in one line.
static void test_bad_current_refused(void) {
    static const char *const bad[][2] = {
        {"ln -s .shards-gone %s/.current", ".shards-gone, not to a folder of shards beside it"},
        {"ln -s ../elsewhere %s/.current", "../elsewhere, not to a folder of shards beside it"},
        {"mkdir %s/.current", "not a link `data prepare` made"},
    };
    for (int i = 0; i < 3; i++) {
        set_up(DATA_A, false);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "rm %s/.current && ", out);
        snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), bad[i][0], out);
        CHECK(system(cmd) == 0, "%s", cmd);
        ct_loader_config c = {.source = out, .split = "train", .seq_len = 1, .global_batch = 1, .dp_size = 1};
        ct_loader *l = ct_loader_open(&c);
        const char *e = l ? "" : ct_last_error();
        CHECK(!l && strstr(e, ".current") && strstr(e, bad[i][1]) && !strchr(e, '\n'), "%s: '%s'", bad[i][0], e);
        if (l) ct_loader_free(l);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_prepcrash_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    // Corpus B: twelve fortunes unlike the fixture's.
    snprintf(corpus_b, sizeof corpus_b, "%s/b.txt", tmpdir);
    FILE *f = fopen(corpus_b, "w");
    for (int i = 0; i < 12; i++) fprintf(f, "Fortune %d of corpus B, %s.\n%%\n", i, i % 2 ? "odd" : "even");
    fclose(f);
    // The clean datasets the crashes are compared with.
    char err[512];
    for (int d = 0; d < 2; d++) {
        snprintf(out, sizeof out, "%s/ref_%c", tmpdir, d ? 'b' : 'a');
        if (prepare((dataset)d) != CT_OK) return printf("FAIL setup: %s\n", ct_last_error()), 1;
        for (int s = 0; s < 2; s++) want[d][s] = read_view(out, s ? "val" : "train", err, sizeof err);
    }
    if (want[0][0].shards < 3 || want[0][1].shards < 2 || want[1][0].shards != 1 || want[1][1].shards != 1)
        return printf("FAIL setup: A has %d + %d shards, B %d + %d\n", want[0][0].shards, want[0][1].shards,
                      want[1][0].shards, want[1][1].shards),
               1;
    snprintf(out, sizeof out, "%s/data", tmpdir);
    CT_RUN(test_killed_at_each_step);
    CT_RUN(test_earlier_ctitan_leftovers);
    CT_RUN(test_second_prepare_refused);
    CT_RUN(test_bad_current_refused);
    sh("rm -rf %s%s", tmpdir, "");
    CT_TEST_EXIT();
}
