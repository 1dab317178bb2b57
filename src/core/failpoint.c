#include "core/failpoint.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// Hits of the armed point so far: test-only state, one process per run.
static _Atomic int hits;

bool ct_failpoint_armed(const char *name, int rank) {
    const char *want = getenv("CTITAN_FAILPOINT");
    if (!want || strcmp(want, name)) return false;
    const char *r = getenv("CTITAN_FAILPOINT_RANK");
    if (r && *r && atoi(r) != rank) return false;
    const char *h = getenv("CTITAN_FAILPOINT_HIT");
    int hit = ++hits;
    return hit == (h && *h ? atoi(h) : 1);
}

_Noreturn void ct_failpoint_die(void) {
    kill(getpid(), SIGKILL);
    _exit(137);  // not reached
}

void ct_failpoint(const char *name, int rank) {
    if (ct_failpoint_armed(name, rank)) ct_failpoint_die();
}

void ct_failpoint_pace(const char *name) {
    const char *want = getenv("CTITAN_PACE");
    if (!want) return;
    size_t n = strlen(name);
    // "name:ms" entries separated by commas.
    for (; *want; want += strcspn(want, ","), want += *want == ',')
        if (!strncmp(want, name, n) && want[n] == ':') break;
    if (!*want) return;
    long ms = atol(want + n + 1);
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
