// ct_file_open_write (core/file_check.h): what a writer is allowed to open. A FIFO (with or
// without a reader), a character device and a folder are refused in one line naming the path and
// what it is; a link is followed unless the run owns the name; an exclusive create reports EEXIST
// for a taken name of any kind; a regular file is emptied, appended to or created, and the
// descriptor handed back blocks normally. Every open runs in a child under an alarm, so a writer
// that blocks fails its case instead of hanging the suite.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/file_check.h"
#include "test.h"

static char dir[] = "/tmp/ct_file_write_XXXXXX";

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

// Runs ct_file_open_write(path, flags) in a child with a 5 s alarm. Returns the child's result:
// 0 opened (and closed), 1 refused, 2 blocked (killed by the alarm); *msg gets the error line and
// *err the errno the function left.
static int open_in_child(const char *path, int flags, char *msg, size_t n, int *err) {
    int p[2];
    if (pipe(p)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        alarm(5);
        int fd;
        ct_status st = ct_file_open_write(path, "test output", flags, &fd);
        int e = errno;
        char buf[1100];
        int len = snprintf(buf, sizeof buf, "%d %s", e, st == CT_OK ? "" : ct_last_error());
        if (write(p[1], buf, (size_t)len) < 0) _exit(3);
        if (st == CT_OK) close(fd);
        _exit(st == CT_OK ? 0 : 1);
    }
    close(p[1]);
    char buf[1100] = "";
    ssize_t got = 0, r;
    while ((r = read(p[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0) got += r;
    close(p[0]);
    buf[got] = 0;
    int status = 0;
    waitpid(pid, &status, 0);
    *err = atoi(buf);
    const char *sp = strchr(buf, ' ');
    snprintf(msg, n, "%s", sp ? sp + 1 : "");
    if (WIFSIGNALED(status)) return 2;
    return WEXITSTATUS(status);
}

// One refused case: refused (not blocked), one line, naming the path and `is`.
static void check_refused(const char *path, int flags, const char *is) {
    char msg[1100];
    int err, rc = open_in_child(path, flags, msg, sizeof msg, &err);
    CHECK(rc == 1, "%s: expected a refusal, got %s", path, rc == 2 ? "a blocked open" : rc == 0 ? "an open" : "?");
    CHECK(strstr(msg, path) != NULL, "message does not name %s: %s", path, msg);
    CHECK(strstr(msg, is) != NULL, "message does not say '%s': %s", is, msg);
    CHECK(strchr(msg, '\n') == NULL, "more than one line: %s", msg);
}

static void fifo_without_reader_refused(void) {
    char p[256];
    path_in(p, sizeof p, "fifo");
    CHECK(mkfifo(p, 0644) == 0, "mkfifo");
    check_refused(p, CT_FILE_WRITE_TRUNC, "a FIFO");
    check_refused(p, CT_FILE_WRITE_APPEND, "a FIFO");
    check_refused(p, CT_FILE_WRITE_NOFOLLOW, "a FIFO");
}

// A FIFO someone reads from: a plain open would succeed and the writer would feed the reader.
static void fifo_with_reader_refused(void) {
    char p[256];
    path_in(p, sizeof p, "fifo_read");
    CHECK(mkfifo(p, 0644) == 0, "mkfifo");
    int r = open(p, O_RDONLY | O_NONBLOCK);
    CHECK(r >= 0, "reader open");
    check_refused(p, CT_FILE_WRITE_TRUNC, "a FIFO");
    if (r >= 0) close(r);
}

static void device_and_folder_refused(void) {
    check_refused("/dev/null", CT_FILE_WRITE_TRUNC, "a character device");
    check_refused(dir, CT_FILE_WRITE_TRUNC, "a directory");
    check_refused(dir, CT_FILE_WRITE_APPEND, "a directory");
    // A link to a device is refused as the device.
    char p[256];
    path_in(p, sizeof p, "to_null");
    CHECK(symlink("/dev/null", p) == 0, "symlink");
    check_refused(p, CT_FILE_WRITE_TRUNC, "a character device");
}

static bool file_holds(const char *path, const char *text) {
    char buf[256] = "";
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n >= 0 && (buf[n] = 0, !strcmp(buf, text));
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

// A link where the run owns the name is refused, and its target is left as it was; without
// CT_FILE_WRITE_NOFOLLOW the link is followed (a user may name a link on purpose).
static void link_refused_only_when_owned(void) {
    char target[256], link[256];
    path_in(target, sizeof target, "target.txt");
    path_in(link, sizeof link, "link.txt");
    write_text(target, "keep");
    CHECK(symlink(target, link) == 0, "symlink");
    check_refused(link, CT_FILE_WRITE_NOFOLLOW, "symbolic link");
    CHECK(file_holds(target, "keep"), "the link's target was changed");
    FILE *f = ct_file_fopen_write(link, "test output", CT_FILE_WRITE_TRUNC);
    CHECK(f != NULL, "followed link refused: %s", ct_last_error());
    if (f) fputs("new", f), fclose(f);
    CHECK(file_holds(target, "new"), "the followed link's target was not written");
}

static void regular_files_written(void) {
    char p[256];
    path_in(p, sizeof p, "plain.txt");
    FILE *f = ct_file_fopen_write(p, "test output", CT_FILE_WRITE_TRUNC);  // created
    CHECK(f != NULL, "create: %s", ct_last_error());
    if (f) fputs("one", f), fclose(f);
    f = ct_file_fopen_write(p, "test output", CT_FILE_WRITE_APPEND | CT_FILE_WRITE_NOFOLLOW);
    CHECK(f != NULL, "append: %s", ct_last_error());
    if (f) fputs("two", f), fclose(f);
    CHECK(file_holds(p, "onetwo"), "append did not keep the first write");
    int fd = -1;
    CHECK(ct_file_open_write(p, "test output", CT_FILE_WRITE_TRUNC, &fd) == CT_OK, "truncate: %s", ct_last_error());
    int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    CHECK(fl >= 0 && !(fl & O_NONBLOCK), "O_NONBLOCK left set on the descriptor");
    CHECK(fl >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC), "descriptor not close-on-exec");
    if (fd >= 0) close(fd);
    CHECK(file_holds(p, ""), "truncate left the old text");
}

// An exclusive create fails with EEXIST on any taken name (the caller picks another), and never
// opens what is there.
static void exclusive_create(void) {
    char p[256], fifo[256], msg[1100];
    path_in(p, sizeof p, "excl.txt");
    path_in(fifo, sizeof fifo, "excl_fifo");
    int fd = -1;
    CHECK(ct_file_open_write(p, "test output", CT_FILE_WRITE_EXCL, &fd) == CT_OK, "first create: %s", ct_last_error());
    if (fd >= 0) close(fd);
    int err, rc = open_in_child(p, CT_FILE_WRITE_EXCL, msg, sizeof msg, &err);
    CHECK(rc == 1 && err == EEXIST, "second create: rc %d errno %d", rc, err);
    CHECK(mkfifo(fifo, 0644) == 0, "mkfifo");
    rc = open_in_child(fifo, CT_FILE_WRITE_EXCL | CT_FILE_WRITE_NOFOLLOW, msg, sizeof msg, &err);
    CHECK(rc == 1 && err == EEXIST, "FIFO: rc %d errno %d", rc, err);
}

int main(void) {
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    CT_RUN(fifo_without_reader_refused);
    CT_RUN(fifo_with_reader_refused);
    CT_RUN(device_and_folder_refused);
    CT_RUN(link_refused_only_when_owned);
    CT_RUN(regular_files_written);
    CT_RUN(exclusive_create);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) printf("  (could not remove %s)\n", dir);
    CT_TEST_EXIT();
}
