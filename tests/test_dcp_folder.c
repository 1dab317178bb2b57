// The checkpoint folder's bookkeeping (checkpoint/dcp.h) against folders that are not the run's
// own: symbolic links out of it (a step folder, a file in a step folder, a link to ..) are never
// followed by a removal, and a step folder whose name disagrees with its manifest (a copy from
// another run) is neither the latest checkpoint nor pruned.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/dcp.h"
#include "test.h"

static char root[] = "/tmp/ct_test_dcp_folder_XXXXXX";

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void join(char *out, size_t n, const char *a, const char *b) { snprintf(out, n, "%s/%s", a, b); }

// An order-independent fingerprint of the tree under dir (not following links): every entry's
// path, type, size, link target and contents. skip: a top-level name left out (NULL: none).
static unsigned long long fingerprint(const char *dir, const char *rel, const char *skip) {
    unsigned long long sum = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || (skip && !strcmp(e->d_name, skip))) continue;
        char path[1024], sub[1024];
        join(path, sizeof path, dir, e->d_name);
        join(sub, sizeof sub, rel, e->d_name);
        struct stat sb;
        if (lstat(path, &sb)) continue;
        unsigned long long h = 1469598103934665603ULL;  // FNV-1a over "sub mode size" and the data
        char head[1200];
        int n = snprintf(head, sizeof head, "%s %o %lld ", sub, (unsigned)sb.st_mode, (long long)sb.st_size);
        for (int i = 0; i < n; i++) h = (h ^ (unsigned char)head[i]) * 1099511628211ULL;
        if (S_ISLNK(sb.st_mode)) {
            char target[1024];
            ssize_t k = readlink(path, target, sizeof target);
            for (ssize_t i = 0; i < k; i++) h = (h ^ (unsigned char)target[i]) * 1099511628211ULL;
        } else if (S_ISREG(sb.st_mode)) {
            FILE *f = fopen(path, "rb");
            for (int c; f && (c = fgetc(f)) != EOF;) h = (h ^ (unsigned char)c) * 1099511628211ULL;
            if (f) fclose(f);
        } else if (S_ISDIR(sb.st_mode)) {
            h += fingerprint(path, sub, NULL);
        }
        sum += h;
    }
    closedir(d);
    return sum;
}

static bool exists_nofollow(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

// A manifest saying `step` (and a single listed file, as the reader wants one) in dir.
static void write_manifest_at(const char *dir, int step) {
    mkdir(dir, 0755);
    ct_dcp_manifest m = {.step = step, .optimizer_step = step, .world_size = 1, .seq_len = 16};
    snprintf(m.layout, sizeof m.layout, "single");
    snprintf(m.model.flavor, sizeof m.model.flavor, "test");
    m.model.dim = m.model.n_layers = m.model.n_heads = m.model.n_kv_heads = m.model.ffn_hidden = 1;
    m.model.vocab_size = 1;
    m.model.norm_eps = 1e-5;
    m.model.rope_theta = 5e5;
    ct_dcp_file f = {.name = "config.toml"};
    m.files = &f;
    m.n_files = 1;
    CHECK(ct_dcp_write_manifest(dir, &m) == CT_OK, "%s", ct_last_error());
}

// Links out of the checkpoint folder: cleanup, listing and removal leave everything they point
// at as it was.
static void test_links_are_never_followed(void) {
    char base[300], ckpt[400], outside[400], other[400], p[600], q[600];
    join(base, sizeof base, root, "links");
    join(ckpt, sizeof ckpt, base, "ckpt");
    join(outside, sizeof outside, base, "outside");
    join(other, sizeof other, base, "other_run");
    mkdir(base, 0755);
    mkdir(ckpt, 0755);
    mkdir(outside, 0755);
    join(p, sizeof p, outside, "sub");
    mkdir(p, 0755);
    join(p, sizeof p, outside, "a.bin");
    write_text(p, "precious a");
    join(p, sizeof p, outside, "sub/b.bin");
    write_text(p, "precious b");
    join(p, sizeof p, base, "top.txt");
    write_text(p, "precious top");
    write_manifest_at(other, 40);  // a complete checkpoint of another run
    join(p, sizeof p, other, "config.toml");
    write_text(p, "precious config");

    // step-5: a link to a folder outside, no manifest there (an "incomplete" save to a cleanup
    // that follows it); step-6.tmp likewise; step-7: a link to ..; step-40: a link to another
    // run's complete checkpoint (what pruning would take); step-8: a real folder without a
    // manifest holding a regular file, a link to a file outside and a link to ..
    join(p, sizeof p, ckpt, "step-5");
    CHECK(symlink("../outside", p) == 0, "symlink");
    join(p, sizeof p, ckpt, "step-6.tmp");
    CHECK(symlink(outside, p) == 0, "symlink");
    join(p, sizeof p, ckpt, "step-7");
    CHECK(symlink("..", p) == 0, "symlink");
    join(p, sizeof p, ckpt, "step-40");
    CHECK(symlink("../other_run", p) == 0, "symlink");
    join(p, sizeof p, ckpt, "step-8");
    mkdir(p, 0755);
    join(p, sizeof p, ckpt, "step-8/rank-00000.safetensors");
    write_text(p, "partial");
    join(p, sizeof p, ckpt, "step-8/rank-00001.safetensors");
    join(q, sizeof q, outside, "a.bin");
    CHECK(symlink(q, p) == 0, "symlink");
    join(p, sizeof p, ckpt, "step-8/up");
    CHECK(symlink("..", p) == 0, "symlink");
    // A real, complete checkpoint of this run beside them.
    join(p, sizeof p, ckpt, "step-20");
    write_manifest_at(p, 20);

    unsigned long long before = fingerprint(base, "", "ckpt");
    int steps[8], bad = -1, skipped = -1;
    ct_dcp_remove_incomplete(ckpt, NULL);
    CHECK(fingerprint(base, "", "ckpt") == before, "the cleanup changed something outside the checkpoint folder");
    int n = ct_dcp_list_steps(ckpt, steps, 8, &bad, &skipped, NULL);
    CHECK(n == 1 && steps[0] == 20, "n %d (first %d): a link was taken for a checkpoint", n, n ? steps[0] : -1);
    CHECK(skipped == 4, "%d skipped, not the 4 step-named links", skipped);
    const char *links[] = {"step-5", "step-6.tmp", "step-7", "step-40"};
    for (int i = 0; i < 4; i++) {
        join(p, sizeof p, ckpt, links[i]);
        CHECK(ct_dcp_remove_dir(p) == CT_ERR && strstr(ct_last_error(), links[i]) &&
                  strstr(ct_last_error(), "symbolic link"),
              "%s: %s", links[i], ct_last_error());
        CHECK(exists_nofollow(p), "the link %s itself was removed", links[i]);
    }
    join(p, sizeof p, ckpt, "step-8");
    CHECK(ct_dcp_remove_dir(p) == CT_ERR && strstr(ct_last_error(), "step-8/") &&
              strstr(ct_last_error(), "symbolic link"),
          "step-8: %s", ct_last_error());
    CHECK(exists_nofollow(p), "step-8 (holding links) was removed");
    CHECK(fingerprint(base, "", "ckpt") == before, "something outside the checkpoint folder changed");
    join(p, sizeof p, outside, "a.bin");
    CHECK(exists_nofollow(p), "outside/a.bin was deleted");
    join(p, sizeof p, other, "manifest.toml");
    CHECK(exists_nofollow(p), "the other run's manifest was deleted");
    join(p, sizeof p, ckpt, "step-20/manifest.toml");
    CHECK(exists_nofollow(p), "the real checkpoint was touched");
}

// A real step folder of regular files is still removed whole, and a missing one is no error.
static void test_real_folders_are_removed(void) {
    char ckpt[300], p[600];
    join(ckpt, sizeof ckpt, root, "real");
    mkdir(ckpt, 0755);
    join(p, sizeof p, ckpt, "step-3.tmp");
    mkdir(p, 0755);
    join(p, sizeof p, ckpt, "step-3.tmp/rank-00000.safetensors");
    write_text(p, "partial");
    join(p, sizeof p, ckpt, "step-4");
    mkdir(p, 0755);
    CHECK(ct_dcp_remove_incomplete(ckpt, NULL) == 2, "removed");
    join(p, sizeof p, ckpt, "step-3.tmp");
    CHECK(!exists_nofollow(p), "step-3.tmp left");
    join(p, sizeof p, ckpt, "step-9");
    write_manifest_at(p, 9);
    CHECK(ct_dcp_remove_dir(p) == CT_OK && !exists_nofollow(p), "%s", ct_last_error());
    CHECK(ct_dcp_remove_dir(p) == CT_OK, "a missing folder: %s", ct_last_error());
}

// step-50 copied from another run holds step 10: it is not the latest, and the listing pruning
// orders by leaves it out.
static void test_manifest_step_is_the_truth(void) {
    char ckpt[300], p[600];
    join(ckpt, sizeof ckpt, root, "copied");
    mkdir(ckpt, 0755);
    join(p, sizeof p, ckpt, "step-10");
    write_manifest_at(p, 10);
    join(p, sizeof p, ckpt, "step-30");
    write_manifest_at(p, 30);
    join(p, sizeof p, ckpt, "step-50");
    write_manifest_at(p, 10);
    // step-010 holds step 10 too, but is not the name step 10 is saved under: not a step folder.
    join(p, sizeof p, ckpt, "step-010");
    write_manifest_at(p, 10);
    int steps[8], bad = -1, skipped = -1;
    char *text = NULL;
    size_t len = 0;
    FILE *report = open_memstream(&text, &len);
    int n = ct_dcp_list_steps(ckpt, steps, 8, &bad, &skipped, report);
    fclose(report);
    CHECK(n == 2 && steps[0] == 10 && steps[1] == 30 && bad == 0 && skipped == 1, "n %d, latest %d, bad %d, skipped %d",
          n, n ? steps[n - 1] : -1, bad, skipped);
    // One line, naming the folder and both steps.
    const char *nl = text ? strchr(text, '\n') : NULL;
    CHECK(text && nl && !nl[1] && strstr(text, "/step-50 holds step 10") && strstr(text, "not 50"), "report: %s",
          text ? text : "(none)");
    free(text);
}

int main(void) {
    if (!mkdtemp(root)) return 1;
    CT_RUN(test_links_are_never_followed);
    CT_RUN(test_real_folders_are_removed);
    CT_RUN(test_manifest_step_is_the_truth);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) return 1;
    CT_TEST_EXIT();
}
