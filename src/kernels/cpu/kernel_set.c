// Choosing the cpu kernel set (kernel_set.h): which sets the build has, which this CPU runs, and
// installing one -- copying its function addresses into the slots the plain names jump through.
//
// This file is shared by every set and compiled for plain x86-64 (the Makefile), so that on a
// CPU below the build's lowest set the start-up check below can still say so in one line instead
// of the process dying on an illegal instruction somewhere later.
#include "kernels/cpu/kernel_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

// Written by scripts/kernel_sets.sh (the build's dispatch.S).
extern void *ct_kernel_slots[];                              // (slots) what the stubs jump to
extern void *const *const ct_kernel_set_slots[];             // (sets)(slots) each set's addresses
extern const ct_cpu_kernel_set *const ct_kernel_set_list[];  // (sets) lowest first
extern const void *const ct_kernel_stubs[];                  // (slots) the plain names
extern const int ct_kernel_set_total, ct_kernel_slot_total;

static int g_active, g_at_start;

unsigned ct_cpu_features(void) {
    __builtin_cpu_init();  // (needed before constructors have run: choose_at_start calls this)
    unsigned f = 0;
    if (__builtin_cpu_supports("x86-64-v3")) f |= CT_CPU_X86_64_V3;
    if (__builtin_cpu_supports("x86-64-v4")) f |= CT_CPU_X86_64_V4;
    if (__builtin_cpu_supports("avx512bf16")) f |= CT_CPU_AVX512_BF16;
    if (__builtin_cpu_supports("amx-tile")) f |= CT_CPU_AMX_TILE;
    if (__builtin_cpu_supports("amx-bf16")) f |= CT_CPU_AMX_BF16;
    return f;
}

int ct_kernel_set_count(void) { return ct_kernel_set_total; }
const char *ct_kernel_set_name(int i) { return ct_kernel_set_list[i]->name; }

int ct_kernel_set_find(const char *name) {
    for (int i = 0; i < ct_kernel_set_total; i++)
        if (!strcmp(name, ct_kernel_set_list[i]->name)) return i;
    return -1;
}

bool ct_kernel_set_runnable(int i) {
    unsigned needs = ct_kernel_set_list[i]->needs;
    return (ct_cpu_features() & needs) == needs;
}

int ct_kernel_set_best(void) {
    int best = -1;
    for (int i = 0; i < ct_kernel_set_total; i++)
        if (ct_kernel_set_runnable(i)) best = i;
    return best;
}

int ct_kernel_set_at_start(void) { return g_at_start; }
int ct_kernel_set_active(void) { return g_active; }

void ct_kernel_set_missing(int i, char *out, size_t n) {
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{CT_CPU_X86_64_V3, "x86-64-v3 (AVX2, FMA, BMI2)"},
                 {CT_CPU_X86_64_V4, "x86-64-v4 (AVX-512 F/BW/CD/DQ/VL)"},
                 {CT_CPU_AVX512_BF16, "AVX-512 BF16"},
                 {CT_CPU_AMX_TILE, "AMX-TILE"},
                 {CT_CPU_AMX_BF16, "AMX-BF16"}};
    unsigned lacks = ct_kernel_set_list[i]->needs & ~ct_cpu_features();
    size_t used = 0;
    out[0] = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if ((lacks & names[k].bit) && used < n)
            used += (size_t)snprintf(out + used, n - used, "%s%s", used ? ", " : "", names[k].name);
}

// "a, b, c": the sets of the build (runnable_only: those this CPU runs).
static void list_sets(char *out, size_t n, bool runnable_only) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < ct_kernel_set_total; i++)
        if ((!runnable_only || ct_kernel_set_runnable(i)) && used < n)
            used += (size_t)snprintf(out + used, n - used, "%s%s", used ? ", " : "", ct_kernel_set_name(i));
}

int ct_kernel_set_resolve(const char *name, const char *what) {
    char sets[128], lacks[160];
    if (!strcmp(name, "auto")) return g_at_start;
    int i = ct_kernel_set_find(name);
    if (i < 0) {
        list_sets(sets, sizeof sets, false);
        ct_set_error("%s: this build has no such kernel set (it has %s, or auto)", what, sets);
        return -1;
    }
    if (!ct_kernel_set_runnable(i)) {
        ct_kernel_set_missing(i, lacks, sizeof lacks);
        list_sets(sets, sizeof sets, true);
        ct_set_error("%s: this CPU lacks %s; it runs %s", what, lacks, sets[0] ? sets : "none of them");
        return -1;
    }
    return i;
}

void ct_kernel_set_install(int i) {
    memcpy(ct_kernel_slots, ct_kernel_set_slots[i], (size_t)ct_kernel_slot_total * sizeof(void *));
    g_active = i;
}

const void *ct_kernel_set_target(const void *stub) {
    for (int i = 0; i < ct_kernel_slot_total; i++)
        if (ct_kernel_stubs[i] == stub) return ct_kernel_slots[i];
    return NULL;
}

const ct_kernels *ct_kernel_set_kernels(void) { return ct_kernel_set_list[g_active]->kernels; }

// Before main: CTITAN_KERNEL_SET, else the highest set this CPU runs. A CPU that runs none of
// them cannot run the rest of the program either (it is built for the lowest set's level).
__attribute__((constructor)) static void choose_at_start(void) {
    int best = ct_kernel_set_best();
    if (best < 0) {
        char lacks[160];
        ct_kernel_set_missing(0, lacks, sizeof lacks);
        fprintf(stderr,
                "ctitan: this program was built for %s CPUs and this CPU lacks %s: rebuild it on this "
                "machine with make NATIVE=1\n",
                ct_kernel_set_name(0), lacks);
        exit(1);
    }
    int chosen = best;
    const char *env = getenv("CTITAN_KERNEL_SET");
    if (env && *env && strcmp(env, "auto")) {
        char what[96];
        snprintf(what, sizeof what, "CTITAN_KERNEL_SET=%s", env);
        chosen = ct_kernel_set_resolve(env, what);
        if (chosen < 0) {
            fprintf(stderr, "ctitan: %s\n", ct_last_error());
            exit(2);
        }
    }
    g_at_start = chosen;
    ct_kernel_set_install(chosen);
}
