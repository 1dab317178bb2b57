// Helpers for test programs that need several MPI ranks (used with tests/test.h).
//
// tests/run_tests.sh starts every build/tests/test_* directly, without mpirun. An MPI test
// program therefore has two roles, chosen by its arguments:
//   - started plainly (the parent): it runs its pure cases, then re-runs ITSELF under
//     `mpirun -np N <self> --child` for each N it needs (ct_mpi_test_spawn) and fails when a
//     child run fails. Children inherit stdout, so their PASS/FAIL lines land in the same log.
//   - started with --child (under mpirun): it runs the MPI cases; CT_MPI_RUN agrees on each
//     case's verdict across ranks and only rank 0 prints the PASS/FAIL line.
// Started by hand under mpirun without --child, it also takes the child role (it sees the
// launcher's environment).
#ifndef CT_MPI_TEST_H
#define CT_MPI_TEST_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static int ct_mpi_test_is_child(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--child") == 0) return 1;
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL;
}

// Runs `timeout <limit_s> mpirun [--allow-run-as-root] --oversubscribe --bind-to none -np N
// <self> --child [extra...]` and returns its exit status (non-zero on any failure). Oversubscribe
// because the test machine has fewer cores than ranks; bind-to none so oversubscribed ranks are
// not pinned to one core.
static int ct_mpi_test_spawn(const char *self, int np, int limit_s, const char *extra) {
    char nps[16], lim[16];
    snprintf(nps, sizeof nps, "%d", np);
    snprintf(lim, sizeof lim, "%d", limit_s);
    const char *args[16];
    int n = 0;
    args[n++] = "timeout";
    args[n++] = lim;
    args[n++] = "mpirun";
    if (geteuid() == 0) args[n++] = "--allow-run-as-root";
    args[n++] = "--oversubscribe";
    args[n++] = "--bind-to";
    args[n++] = "none";
    args[n++] = "-np";
    args[n++] = nps;
    args[n++] = self;
    args[n++] = "--child";
    if (extra) args[n++] = extra;
    args[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        execvp(args[0], (char *const *)args);
        perror("execvp timeout/mpirun");
        _exit(127);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) < 0) return 1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// The parent's usual loop: ct_mpi_test_spawn at each of n sizes with OMP_NUM_THREADS threads[i]
// (NULL: 1), a failed run counted as one failure "FAIL mpirun_np<N>".
static inline void ct_mpi_test_spawn_each(const char *self, const int *nps, const int *threads, int n, int limit_s) {
    for (int i = 0; i < n; i++) {
        char t[16];
        snprintf(t, sizeof t, "%d", threads ? threads[i] : 1);
        setenv("OMP_NUM_THREADS", t, 1);
        int rc = ct_mpi_test_spawn(self, nps[i], limit_s, NULL);
        if (rc != 0) {
            printf("FAIL mpirun_np%d: exit %d\n", nps[i], rc);
            ct_test_failures++;
        }
    }
}

// Runs one case on every rank; the case passes only if it passed on every rank. Prints
// "PASS <fn>_np<N>" from rank 0.
#define CT_MPI_RUN(fn)                                                                     \
    do {                                                                                   \
        ct_test_case_failed = 0;                                                           \
        fn();                                                                              \
        int ct_any_, ct_rank_, ct_size_;                                                   \
        MPI_Allreduce(&ct_test_case_failed, &ct_any_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); \
        MPI_Comm_rank(MPI_COMM_WORLD, &ct_rank_);                                          \
        MPI_Comm_size(MPI_COMM_WORLD, &ct_size_);                                          \
        if (ct_rank_ == 0) printf("%s %s_np%d\n", ct_any_ ? "FAIL" : "PASS", #fn, ct_size_); \
        fflush(stdout);                                                                    \
        ct_test_failures += ct_any_;                                                       \
    } while (0)
#endif
