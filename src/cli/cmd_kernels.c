// ctitan kernels: the cpu kernel sets this build has, which of them this CPU runs, and the one a
// process takes at start-up (CTITAN_KERNEL_SET, else the highest it runs). `--runnable` prints the
// names of the runnable sets alone, one a line, for scripts (tests/run_tests.sh).
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "kernels/backend.h"

int ct_cmd_kernels(int argc, char **argv) {
    bool names_only = argc >= 1 && !strcmp(argv[0], "--runnable");
    if (argc > 1 || (argc == 1 && !names_only)) {
        fprintf(stderr, "usage: ctitan kernels [--runnable]\n");
        return 2;
    }
    int start = ct_kernel_set_at_start();
    if (!names_only) printf("cpu kernel sets of this build, lowest first:\n");
    for (int i = 0; i < ct_kernel_set_count(); i++) {
        bool runs = ct_kernel_set_runnable(i);
        if (names_only) {
            if (runs) printf("%s\n", ct_kernel_set_name(i));
            continue;
        }
        char lacks[160];
        ct_kernel_set_missing(i, lacks, sizeof lacks);
        printf("  %-12s %s%s%s\n", ct_kernel_set_name(i), runs ? "runs on this CPU" : "this CPU lacks ",
               runs ? "" : lacks, i == start ? " (taken at start-up)" : "");
    }
    return 0;
}
