// Fault injection for crash tests: a named point in the code where a test can make this process
// die as `kill -9` would, so that what a crash leaves on disk is tested at exactly that moment.
//
//   CTITAN_FAILPOINT=ckpt.before_manifest   the point's name (see each call site)
//   CTITAN_FAILPOINT_RANK=1                 only on this rank (unset: every rank)
//   CTITAN_FAILPOINT_HIT=2                  only the 2nd time the point is reached (unset: the 1st)
//
// A pace point (ct_failpoint_pace) never kills: armed by CTITAN_PACE=train.step_end:20 it sleeps
// 20 ms at every hit, so a test that must act *during* a run (kill -9 at a random moment) has
// the same window on a machine of any speed.
//
// Unset (every normal run), a failpoint costs one getenv per hit.
#ifndef CT_FAILPOINT_H
#define CT_FAILPOINT_H
#include <stdbool.h>

// True when the environment names this point for this rank and this is the hit it names. Each
// call counts as one hit of the named point.
bool ct_failpoint_armed(const char *name, int rank);
// Dies by SIGKILL (no handlers, no flushing, no atexit) when the point is armed.
void ct_failpoint(const char *name, int rank);
// Dies by SIGKILL now (after a caller has staged the damage an armed point stands for).
_Noreturn void ct_failpoint_die(void);
// Sleeps the milliseconds CTITAN_PACE names for this point ("name:ms", several separated by
// commas: "train.step_end:5,ckpt.write:1500"); nothing when unset.
void ct_failpoint_pace(const char *name);
#endif
