// Shared by the libFuzzer targets in tests/fuzz/ (issue 14). Most of ctitan's parsers read
// files, not buffers, so a target writes its input to a file in a temporary folder of its own
// process (under $TMPDIR, else /dev/shm where it exists, since a fuzzer writes it thousands of
// times a second, else /tmp) and hands the parser the path. The folder is removed at exit.
//
// A target calls ct_fuzz_check for properties a correct parser must hold (a round trip, a count
// that matches); a failed check aborts, which libFuzzer reports as a crash with the input saved.
#ifndef CT_FUZZ_UTIL_H
#define CT_FUZZ_UTIL_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char ct_fuzz_dir[512];

#define ct_fuzz_check(cond, ...)                                               \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: property failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            abort();                                                           \
        }                                                                      \
    } while (0)

// rm -r of a folder the target made (files and folders it wrote; no links are followed: lstat).
static void ct_fuzz_rmtree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
                ct_fuzz_rmtree(path);
            else
                unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void ct_fuzz_cleanup(void) {
    if (ct_fuzz_dir[0]) ct_fuzz_rmtree(ct_fuzz_dir);
}

// The process's temporary folder (made on first use).
static const char *ct_fuzz_tmpdir(void) {
    if (ct_fuzz_dir[0]) return ct_fuzz_dir;
    const char *base = getenv("TMPDIR");
    struct stat st;
    if (!base || !*base) base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
                                    ? "/dev/shm"
                                    : "/tmp";
    snprintf(ct_fuzz_dir, sizeof ct_fuzz_dir, "%s/ctitan-fuzz-XXXXXX", base);
    if (!mkdtemp(ct_fuzz_dir)) {
        perror(ct_fuzz_dir);
        abort();  // not the parser's fault, but nothing can be fuzzed without it
    }
    atexit(ct_fuzz_cleanup);
    return ct_fuzz_dir;
}

// Writes n bytes to <tmpdir>/<name> and returns its path in out (cap bytes).
static const char *ct_fuzz_write(const char *name, const uint8_t *data, size_t n, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", ct_fuzz_tmpdir(), name);
    FILE *f = fopen(out, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) {
        perror(out);
        abort();
    }
    return out;
}
#endif
