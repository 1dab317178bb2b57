// Runs code that must end the process (a ct_fatal path) in a child, and reports how it ended
// and what it printed to stderr, so a test can check both the exit and the one-line message.
#ifndef CT_TEST_FATAL_CHILD_H
#define CT_TEST_FATAL_CHILD_H
#include <stdio.h>
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

// The same for a function without an argument.
static inline void ct_test_call_void_(void *fn) { ((void (*)(void))fn)(); }
static inline int ct_test_run_fatal_void(void (*fn)(void), char *buf, size_t n) {
    return ct_test_run_fatal(ct_test_call_void_, (void *)fn, buf, n);
}
#endif
