// Runs code that must end the process (a ct_fatal path) in a child, and reports how it ended
// and what it printed to stderr, so a test can check both the exit and the one-line message.
#ifndef CT_TEST_FATAL_CHILD_H
#define CT_TEST_FATAL_CHILD_H
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

// fn(arg) in a child; its stderr into buf (n bytes, NUL-terminated). Returns the exit status,
// -1 when it did not exit normally, -2 when no pipe could be made.
static inline int ct_test_run_fatal(void (*fn)(void *), void *arg, char *buf, size_t n) {
    int fd[2];
    if (pipe(fd) != 0) return -2;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fd[0], buf + got, n - 1 - got)) > 0) got += (size_t)r;
    buf[got] = '\0';
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Limits this process's address space (RLIMIT_AS) to what it has mapped now plus `extra` bytes:
// in a child that must refuse a huge allocation before making it, an attempt then fails at once
// instead of succeeding on a big machine. Relative, not absolute: under AddressSanitizer (make
// test SANITIZE=1) a process has terabytes of shadow memory reserved from its start, and an
// absolute limit of 1 GiB would fail its runtime's next mmap before the code under test ran.
static inline void ct_test_limit_address_space(unsigned long extra) {
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");  // first field: the whole mapped size, in pages
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    unsigned long limit = pages * (unsigned long)sysconf(_SC_PAGESIZE) + extra;
    struct rlimit rl = {limit, limit};
    setrlimit(RLIMIT_AS, &rl);
}

// The same for a function without an argument.
static inline void ct_test_call_void_(void *fn) { ((void (*)(void))fn)(); }
static inline int ct_test_run_fatal_void(void (*fn)(void), char *buf, size_t n) {
    return ct_test_run_fatal(ct_test_call_void_, (void *)fn, buf, n);
}
#endif
