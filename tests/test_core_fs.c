// core/fs: mkdir -p (nested, existing, a path through a file refused by name) and the atomic write
// (the new content whole, or the old content and no temporary file, whatever fails).
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "test.h"

static char dir[] = "/tmp/ct_core_fs_XXXXXX";

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

// The whole file as text ("" when missing).
static void get(const char *path, char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t k = fread(out, 1, n - 1, f);
    out[k] = 0;
    fclose(f);
}

static void make_dirs_creates_every_level(void) {
    char a[512], b[512], c[512];
    path_in(a, sizeof a, "n1");
    path_in(b, sizeof b, "n1/n2");
    path_in(c, sizeof c, "n1/n2/n3");
    CHECK(ct_fs_make_dirs(c) == CT_OK, "%s", ct_last_error());
    CHECK(is_dir(a) && is_dir(b) && is_dir(c), "not every level of %s is a folder", c);
}

static void make_dirs_keeps_existing_folders(void) {
    char a[512], inner[512], messy[512];
    path_in(a, sizeof a, "e1");
    path_in(inner, sizeof inner, "e1/keep.txt");
    CHECK(ct_fs_make_dirs(a) == CT_OK, "%s", ct_last_error());
    put(inner, "kept");
    CHECK(ct_fs_make_dirs(a) == CT_OK, "an existing folder: %s", ct_last_error());
    // Repeated and trailing slashes name the same folders.
    snprintf(messy, sizeof messy, "%s//e1///e2/", dir);
    CHECK(ct_fs_make_dirs(messy) == CT_OK, "%s: %s", messy, ct_last_error());
    char e2[512], text[64];
    path_in(e2, sizeof e2, "e1/e2");
    CHECK(is_dir(e2), "%s not made", e2);
    get(inner, text, sizeof text);
    CHECK(!strcmp(text, "kept"), "a file in an existing folder changed: '%s'", text);
}

static void make_dirs_refuses_a_path_through_a_file(void) {
    char file[512], through[512];
    path_in(file, sizeof file, "plain_file");
    path_in(through, sizeof through, "plain_file/run/x");
    put(file, "x");
    CHECK(ct_fs_make_dirs(through) == CT_ERR, "a path through a file was accepted");
    const char *msg = ct_last_error();
    char want[1200];
    snprintf(want, sizeof want, "cannot create folder %s: %s is not a folder", through, file);
    CHECK(!strcmp(msg, want), "message '%s', wanted '%s'", msg, want);
    CHECK(!strchr(msg, '\n'), "more than one line: %s", msg);
    // The file itself as the folder wanted.
    CHECK(ct_fs_make_dirs(file) == CT_ERR, "a file was taken for a folder");
    snprintf(want, sizeof want, "cannot create folder %s: %s is not a folder", file, file);
    CHECK(!strcmp(ct_last_error(), want), "message '%s', wanted '%s'", ct_last_error(), want);
    CHECK(ct_fs_make_dirs("") == CT_ERR && strstr(ct_last_error(), "empty name"), "empty path: '%s'",
          ct_last_error());
}

static void rename_names_both_paths(void) {
    char from[512], to[512];
    path_in(from, sizeof from, "missing_source");
    path_in(to, sizeof to, "target");
    CHECK(ct_fs_rename(from, to) == CT_ERR, "renaming a missing file succeeded");
    CHECK(strstr(ct_last_error(), from) && strstr(ct_last_error(), to), "message '%s' names not both", ct_last_error());
}

static void atomic_write_replaces_and_leaves_no_temp(void) {
    char path[512], tmp[600], text[64];
    path_in(path, sizeof path, "atomic.txt");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    put(path, "old");
    ct_fs_atomic a;
    FILE *f = ct_fs_atomic_open(&a, path, "test file", CT_FS_SYNC_FOLDER);
    CHECK(f != NULL, "%s", ct_last_error());
    if (!f) return;
    fputs("new", f);
    get(path, text, sizeof text);
    CHECK(!strcmp(text, "old"), "the new content showed before the commit: '%s'", text);
    CHECK(ct_fs_atomic_commit(&a) == CT_OK, "%s", ct_last_error());
    get(path, text, sizeof text);
    CHECK(!strcmp(text, "new"), "content '%s' after the commit", text);
    CHECK(!exists(tmp), "%s left behind", tmp);
    CHECK(a.f == NULL, "still open after the commit");
    ct_fs_atomic_abort(&a);  // nothing to do once committed
    get(path, text, sizeof text);
    CHECK(!strcmp(text, "new"), "abort after commit changed the file: '%s'", text);
}

static void atomic_abort_keeps_the_old_content(void) {
    char path[512], tmp[600], text[64];
    path_in(path, sizeof path, "aborted.txt");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    put(path, "old");
    ct_fs_atomic a;
    FILE *f = ct_fs_atomic_open(&a, path, "test file", 0);
    CHECK(f != NULL && exists(tmp), "no temporary file %s: %s", tmp, ct_last_error());
    if (!f) return;
    fputs("half", f);
    ct_fs_atomic_abort(&a);
    get(path, text, sizeof text);
    CHECK(!strcmp(text, "old"), "content '%s' after an abort", text);
    CHECK(!exists(tmp), "%s left behind", tmp);
}

// A write that fails (the file-size limit stops it, as a full disk would): the old content stays.
static void atomic_write_failure_keeps_the_old_content(void) {
    char path[512], tmp[600], text[64];
    path_in(path, sizeof path, "limited.txt");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    put(path, "old");
    struct rlimit saved, small;
    CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0, "getrlimit: %s", strerror(errno));
    small = saved;
    small.rlim_cur = 4096;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);  // EFBIG from write() instead of a signal
    ct_fs_atomic a;
    FILE *f = ct_fs_atomic_open(&a, path, "test file", 0);
    CHECK(f != NULL, "%s", ct_last_error());
    if (f) {
        CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit: %s", strerror(errno));
        static char block[65536];
        memset(block, 'n', sizeof block);
        fwrite(block, 1, sizeof block, f);
        ct_status st = ct_fs_atomic_commit(&a);
        setrlimit(RLIMIT_FSIZE, &saved);
        CHECK(st == CT_ERR, "a write past the size limit was committed");
        CHECK(strstr(ct_last_error(), path) && strstr(ct_last_error(), "write failed"), "message '%s'",
              ct_last_error());
    }
    signal(SIGXFSZ, was);
    get(path, text, sizeof text);
    CHECK(!strcmp(text, "old"), "content '%s' after a failed write", text);
    CHECK(!exists(tmp), "%s left behind", tmp);
}

// The rename fails (a non-empty folder holds the name): the folder stays, no temporary file.
static void atomic_rename_failure_leaves_no_temp(void) {
    char path[512], inner[600], tmp[600], text[64];
    path_in(path, sizeof path, "taken_by_folder");
    snprintf(inner, sizeof inner, "%s/inside.txt", path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(ct_fs_make_dirs(path) == CT_OK, "%s", ct_last_error());
    put(inner, "inside");
    ct_fs_atomic a;
    FILE *f = ct_fs_atomic_open(&a, path, "test file", 0);
    CHECK(f != NULL, "%s", ct_last_error());
    if (!f) return;
    fputs("new", f);
    CHECK(ct_fs_atomic_commit(&a) == CT_ERR, "a file was renamed over a folder");
    CHECK(strstr(ct_last_error(), path) != NULL, "message '%s' does not name %s", ct_last_error(), path);
    CHECK(!exists(tmp), "%s left behind", tmp);
    get(inner, text, sizeof text);
    CHECK(is_dir(path) && !strcmp(text, "inside"), "the folder in the way changed");
}

// A process that dies mid-write leaves the old content; its stale temporary file does not stop
// the next write.
static void atomic_crash_keeps_the_old_content(void) {
    char path[512], tmp[600], text[64];
    path_in(path, sizeof path, "crash.txt");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    put(path, "old");
    pid_t pid = fork();
    if (pid == 0) {
        ct_fs_atomic a;
        FILE *f = ct_fs_atomic_open(&a, path, "test file", 0);
        if (!f) _exit(2);
        fputs("half", f);
        fflush(f);
        kill(getpid(), SIGKILL);
        _exit(3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status), "the child was not killed (status %d)", status);
    get(path, text, sizeof text);
    CHECK(!strcmp(text, "old"), "content '%s' after a crash mid-write", text);
    ct_fs_atomic a;
    FILE *f = ct_fs_atomic_open(&a, path, "test file", 0);
    CHECK(f != NULL, "a stale temporary file blocked the next write: %s", ct_last_error());
    if (!f) return;
    fputs("next", f);
    CHECK(ct_fs_atomic_commit(&a) == CT_OK, "%s", ct_last_error());
    get(path, text, sizeof text);
    CHECK(!strcmp(text, "next") && !exists(tmp), "content '%s', temporary file %s", text,
          exists(tmp) ? "left" : "gone");
}

static void atomic_temp_per_process_names_the_pid(void) {
    char path[512], tmp[600], text[64];
    path_in(path, sizeof path, "shared.txt");
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    ct_fs_atomic a;
    FILE *f = ct_fs_atomic_open(&a, path, "test file", CT_FS_TEMP_PER_PROCESS);
    CHECK(f != NULL, "%s", ct_last_error());
    if (!f) return;
    CHECK(exists(tmp), "no temporary file %s", tmp);
    fputs("mine", f);
    CHECK(ct_fs_atomic_commit(&a) == CT_OK, "%s", ct_last_error());
    get(path, text, sizeof text);
    CHECK(!strcmp(text, "mine") && !exists(tmp), "content '%s'", text);
}

// A link under the temporary name is refused, so nothing is written where it points.
static void atomic_refuses_a_link_at_the_temp_name(void) {
    char path[512], tmp[600], target[512], text[64];
    path_in(path, sizeof path, "linked.txt");
    path_in(target, sizeof target, "link_target.txt");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    put(target, "untouched");
    CHECK(symlink(target, tmp) == 0, "symlink: %s", strerror(errno));
    ct_fs_atomic a;
    FILE *f = ct_fs_atomic_open(&a, path, "test file", 0);
    CHECK(f == NULL, "a link at the temporary name was followed");
    if (f) ct_fs_atomic_abort(&a);
    else CHECK(strstr(ct_last_error(), tmp) != NULL, "message '%s' does not name %s", ct_last_error(), tmp);
    get(target, text, sizeof text);
    CHECK(!strcmp(text, "untouched"), "the link's target became '%s'", text);
    unlink(tmp);
}

// A bare name is written in, and its folder synced as, the current folder.
static void atomic_bare_name_syncs_the_current_folder(void) {
    char here[1024], text[64];
    CHECK(getcwd(here, sizeof here) != NULL, "getcwd");
    CHECK(chdir(dir) == 0, "chdir %s", dir);
    ct_fs_atomic a;
    FILE *f = ct_fs_atomic_open(&a, "bare.txt", "test file", CT_FS_SYNC_FOLDER);
    CHECK(f != NULL, "%s", ct_last_error());
    if (f) {
        fputs("bare", f);
        CHECK(ct_fs_atomic_commit(&a) == CT_OK, "%s", ct_last_error());
    }
    get("bare.txt", text, sizeof text);
    CHECK(!strcmp(text, "bare"), "content '%s'", text);
    CHECK(chdir(here) == 0, "chdir back");
}

int main(void) {
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    CT_RUN(make_dirs_creates_every_level);
    CT_RUN(make_dirs_keeps_existing_folders);
    CT_RUN(make_dirs_refuses_a_path_through_a_file);
    CT_RUN(rename_names_both_paths);
    CT_RUN(atomic_write_replaces_and_leaves_no_temp);
    CT_RUN(atomic_abort_keeps_the_old_content);
    CT_RUN(atomic_write_failure_keeps_the_old_content);
    CT_RUN(atomic_rename_failure_leaves_no_temp);
    CT_RUN(atomic_crash_keeps_the_old_content);
    CT_RUN(atomic_temp_per_process_names_the_pid);
    CT_RUN(atomic_refuses_a_link_at_the_temp_name);
    CT_RUN(atomic_bare_name_syncs_the_current_folder);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    CT_TEST_EXIT();
}
