// `data prepare` replaces a dataset only when the new one is complete:
//  - an empty corpus (no non-blank document) is refused with one line and a non-zero exit;
//  - a prepare that fails part way (here: a file-size limit, as a full disk would) leaves the
//    previous shards exactly as they were, and no staging folder behind;
//  - a successful prepare replaces the old shards (none left over) and cleans up after itself.
// (tests/test_prepare_crash.c kills a prepare at each step of the replacement.)
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/commands.h"
#include "data/prepare.h"
#include "fatal_child.h"
#include "test.h"

#define FIX "tests/fixtures/data"

static char tmpdir[64], out[128];

// Every entry of the folder with its bytes, in name order, as one string ("name:size:hash;").
static void snapshot(const char *dir, char *buf, size_t cap) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    size_t k = 0;
    buf[0] = 0;
    if (n < 0) return;  // no folder: empty
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (strcmp(nm, ".") && strcmp(nm, "..")) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            unsigned long h = 5381, size = 0;
            FILE *f = fopen(path, "rb");
            for (int c; f && (c = fgetc(f)) != EOF; size++) h = h * 33 + (unsigned long)c;
            if (f) fclose(f);
            k += (size_t)snprintf(buf + k, cap - k, "%s:%lu:%lx;", nm, size, h);
        }
        free(names[i]);
    }
    free(names);
}

static ct_data_prepare_opts opts(const char *const *in, uint64_t shard_tokens) {
    return (ct_data_prepare_opts){.inputs = in, .n_inputs = 1, .tokenizer_path = FIX "/bytes.tiktoken", .out_dir = out,
                                  .val_fraction = 0.25, .shard_tokens = shard_tokens, .progress = 0};
}

static void prepare_good(uint64_t shard_tokens) {
    const char *in[] = {FIX "/corpus"};
    ct_data_prepare_opts o = opts(in, shard_tokens);
    ct_data_prepare_result r;
    CHECK(ct_data_prepare(&o, &r) == CT_OK, "%s", ct_last_error());
}

static void test_empty_corpus_refused(void) {
    prepare_good(40);
    char before[4096], after[4096];
    snapshot(out, before, sizeof before);
    CHECK(strstr(before, "train_000.bin") && strstr(before, "train_001.bin"), "first prepare: %s", before);
    char blank[128];
    snprintf(blank, sizeof blank, "%s/blank.txt", tmpdir);
    FILE *f = fopen(blank, "w");
    fputs("  \n\n\t\n", f);
    fclose(f);
    const char *in[] = {blank};
    ct_data_prepare_opts o = opts(in, 40);
    ct_data_prepare_result r;
    ct_status st = ct_data_prepare(&o, &r);
    CHECK(st == CT_ERR && strstr(ct_last_error(), "no documents") && !strchr(ct_last_error(), '\n'),
          "empty corpus: status %d, '%s'", st, st == CT_ERR ? ct_last_error() : "");
    snapshot(out, after, sizeof after);
    CHECK(!strcmp(before, after), "the old dataset changed:\n    before %s\n    after  %s", before, after);
    // And the command exits non-zero.
    char *argv[] = {"prepare", "--input", blank, "--tokenizer", FIX "/bytes.tiktoken", "--out", out, "--quiet"};
    fflush(stdout);
    int saved = dup(2), nul = open("/dev/null", O_WRONLY);
    dup2(nul, 2);
    int rc = ct_cmd_data(8, argv);
    dup2(saved, 2);
    close(saved);
    close(nul);
    CHECK(rc != 0, "ctitan data prepare on an empty corpus exits 0");
}

// In a child: a 100-byte limit on file sizes makes the first shard's write fail part way.
static void prepare_with_small_fsize(void *unused) {
    signal(SIGXFSZ, SIG_IGN);  // write then fails with EFBIG instead of killing the process
    struct rlimit rl = {100, 100};
    setrlimit(RLIMIT_FSIZE, &rl);
    const char *in[] = {FIX "/corpus"};
    ct_data_prepare_opts o = opts(in, 1000);
    ct_data_prepare_result r;
    if (ct_data_prepare(&o, &r) == CT_OK) _exit(0);
    fprintf(stderr, "%s\n", ct_last_error());
    _exit(3);
}

static void test_failed_prepare_keeps_old_dataset(void) {
    prepare_good(40);
    char before[4096], after[4096], err[1024];
    snapshot(out, before, sizeof before);
    int rc = ct_test_run_fatal(prepare_with_small_fsize, NULL, err, sizeof err);
    CHECK(rc == 3, "prepare under a 100-byte file limit: exit %d: %s", rc, err);
    snapshot(out, after, sizeof after);
    CHECK(!strcmp(before, after), "the old dataset changed:\n    before %s\n    after  %s", before, after);
}

static void test_success_replaces_and_cleans_up(void) {
    prepare_good(40);  // train_000, train_001, val_000, val_001
    prepare_good(1000);
    char now[4096];
    snapshot(out, now, sizeof now);
    // One shard per split, nothing else (no train_001.bin of the earlier run, no second folder
    // of shards): .current, the folder it names, and a link per shard (data/shard.h).
    CHECK(!strncmp(now, ".current:", 9) && strstr(now, ";.shards-") && strstr(now, ";train_000.bin:") &&
              strstr(now, ";val_000.bin:") && !strstr(now, "001"),
          "%s", now);
    int entries = 0;
    for (const char *p = now; (p = strchr(p, ';')); p++) entries++;
    CHECK(entries == 4, "%d entries: %s", entries, now);
}

// A new folder (absent before) that a failed prepare leaves absent.
static void test_failed_prepare_into_new_folder_leaves_nothing(void) {
    snprintf(out, sizeof out, "%s/fresh/data", tmpdir);
    char err[1024];
    int rc = ct_test_run_fatal(prepare_with_small_fsize, NULL, err, sizeof err);
    CHECK(rc == 3, "exit %d: %s", rc, err);
    char listing[4096];
    snapshot(out, listing, sizeof listing);
    CHECK(access(out, F_OK) != 0 && access(tmpdir, F_OK) == 0, "left behind: '%s'", listing);
    snprintf(out, sizeof out, "%s/fresh", tmpdir);
    CHECK(access(out, F_OK) != 0, "%s left behind", out);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_prepswap_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    snprintf(out, sizeof out, "%s/data", tmpdir);
    CT_RUN(test_empty_corpus_refused);
    CT_RUN(test_failed_prepare_keeps_old_dataset);
    CT_RUN(test_success_replaces_and_cleans_up);
    CT_RUN(test_failed_prepare_into_new_folder_leaves_nothing);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    CT_TEST_EXIT();
}
