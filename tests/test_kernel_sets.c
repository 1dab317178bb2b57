// The cpu kernel sets (kernels/cpu/kernel_set.h): the process takes CTITAN_KERNEL_SET or the
// highest set the CPU runs; installing a set sends both the table and the plain kernels.h names
// to that set's code; a set the build lacks or the CPU lacks is refused with one line.
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/kernel_set.h"
#include "test.h"

extern const ct_cpu_kernel_set *const ct_kernel_set_list[];  // (scripts/kernel_sets.sh)

static void test_start_choice(void) {
    int n = ct_kernel_set_count(), best = ct_kernel_set_best();
    CHECK(n >= 1, "%d kernel sets", n);
    CHECK(best >= 0 && ct_kernel_set_runnable(best), "best %d", best);
    for (int i = best + 1; i < n; i++)
        CHECK(!ct_kernel_set_runnable(i), "set %s runs but is above the best", ct_kernel_set_name(i));
    const char *env = getenv("CTITAN_KERNEL_SET");
    int want = env && *env && strcmp(env, "auto") ? ct_kernel_set_find(env) : best;
    CHECK(ct_kernel_set_at_start() == want && ct_kernel_set_active() == want, "at start %s, active %s, want %s",
          ct_kernel_set_name(ct_kernel_set_at_start()), ct_kernel_set_name(ct_kernel_set_active()),
          want >= 0 ? ct_kernel_set_name(want) : "?");
    CHECK(!strcmp(ct_cpu_kernel_set_compiled(), ct_kernel_set_name(want)), "the plain names reach %s, not %s",
          ct_cpu_kernel_set_compiled(), ct_kernel_set_name(want));
    // the sets' levels nest, lowest first
    for (int i = 1; i < n; i++)
        CHECK((ct_kernel_set_list[i - 1]->needs & ~ct_kernel_set_list[i]->needs) == 0, "%s needs what %s does not",
              ct_kernel_set_name(i - 1), ct_kernel_set_name(i));
}

// Every set, runnable or not, is reached through both ways in: only a function that runs no
// instruction of its level is called (ct_cpu_kernel_set_compiled returns a pointer).
static void test_install_reaches_each_set(void) {
    int start = ct_kernel_set_active();
    for (int i = 0; i < ct_kernel_set_count(); i++) {
        ct_kernel_set_install(i);
        CHECK(ct_kernel_set_active() == i, "active %d after installing %d", ct_kernel_set_active(), i);
        CHECK(!strcmp(ct_cpu_kernel_set_compiled(), ct_kernel_set_name(i)), "installed %s, the plain name reaches %s",
              ct_kernel_set_name(i), ct_cpu_kernel_set_compiled());
        CHECK(ct_kernels_get("cpu") == ct_kernel_set_list[i]->kernels, "ct_kernels_get(\"cpu\") is not %s's table",
              ct_kernel_set_name(i));
    }
    ct_kernel_set_install(start);
}

static void test_resolve(void) {
    CHECK(ct_kernel_set_resolve("auto", "training.kernel_set auto") == ct_kernel_set_at_start(), "auto");
    for (int i = 0; i < ct_kernel_set_count(); i++)
        if (ct_kernel_set_runnable(i))
            CHECK(ct_kernel_set_resolve(ct_kernel_set_name(i), "x") == i, "%s", ct_kernel_set_name(i));
    CHECK(ct_kernel_set_resolve("avx9", "training.kernel_set avx9") == -1, "avx9 accepted");
    const char *e = ct_last_error();
    CHECK(!strncmp(e, "training.kernel_set avx9: this build has no such kernel set (it has ", 68) && !strchr(e, '\n'),
          "message: %s", e);
    int lacking = -1;
    for (int i = 0; i < ct_kernel_set_count(); i++)
        if (!ct_kernel_set_runnable(i)) lacking = i;
    if (lacking < 0) {
        printf("  (this CPU runs every set of the build: no set to refuse)\n");
        return;
    }
    char what[64], want[96];
    snprintf(what, sizeof what, "training.kernel_set %s", ct_kernel_set_name(lacking));
    CHECK(ct_kernel_set_resolve(ct_kernel_set_name(lacking), what) == -1, "%s accepted", what);
    e = ct_last_error();
    snprintf(want, sizeof want, "%s: this CPU lacks ", what);
    CHECK(!strncmp(e, want, strlen(want)) && strstr(e, "; it runs ") && !strchr(e, '\n'), "message: %s", e);
}

int main(void) {
    CT_RUN(test_start_choice);
    CT_RUN(test_install_reaches_each_set);
    CT_RUN(test_resolve);
    CT_TEST_EXIT();
}
