// Pictures of a pipeline step: a text grid, an SVG timeline and a Chrome trace
// (JSON that Perfetto and chrome://tracing open), all drawn from the same data: every pp rank's
// action list plus when each action started and ended. The simulator (ct_pp_simulate) gives
// those times in its cost units; the executor measures them in seconds (e->t_start / t_end), and
// ct_pp_trace_gather_write brings every rank's measured timeline to one process.
#ifndef CT_PIPELINE_TRACE_H
#define CT_PIPELINE_TRACE_H
#include <stdbool.h>

#include "comm/comm.h"
#include "core/error.h"
#include "core/config.h"
#include "parallel/executor.h"
#include "parallel/pipeline_schedules.h"

typedef struct {
    int pp;                    // ranks
    const ct_schedule *lists;  // (pp) each rank's actions
    double *const *start;      // (pp)[lists[r].count] when each action started
    double *const *end;        // (pp)[lists[r].count] ... and ended; any common origin
    double seconds_per_unit;   // 1: times are seconds (measured); 0: abstract simulator units
} ct_pp_timeline;

// The timeline of a simulation (lists as passed to ct_pp_simulate, sim filled by it).
ct_pp_timeline ct_pp_timeline_of_sim(const ct_schedule *lists, const ct_pp_sim_result *sim);

// Text grid, one row per rank, one column per `unit` of time from the earliest start (the
// simulator's default costs: unit 1). Only compute actions (F, B, I, W) are drawn, each as its
// token ("1F3": stage 1, forward, micro-batch 3) with '~' over the further columns it spans;
// '.' marks an idle column. Columns past max_cols (> 0) are cut with "...". Returns a malloc'd
// text (the caller frees it), lines ending in '\n'.
char *ct_pp_trace_grid(const ct_pp_timeline *tl, double unit, int max_cols);

// SVG: one lane per rank, a rect per action (colour by kind; receives drawn thin and grey: their
// length is waiting), labelled with the token where it fits, a time axis and a legend.
ct_status ct_pp_trace_write_svg(const char *path, const ct_pp_timeline *tl, const char *title);
// Chrome trace JSON: {"traceEvents": [...]}, one complete event (ph "X") per action with
// ts / dur in microseconds from the earliest start, pid = pp rank, tid = stage (step-level
// actions such as REDUCE_GRADS on tid 1000), name = the action's token, one event per line;
// plus process / thread name metadata (ph "M"). Simulator units are drawn as milliseconds.
ct_status ct_pp_trace_write_chrome(const char *path, const ct_pp_timeline *tl);
// SVG when path ends in ".svg", Chrome JSON otherwise.
ct_status ct_pp_trace_write(const char *path, const ct_pp_timeline *tl, const char *title);

// Every pp rank's measured timeline, owned (ct_pp_measured_free).
typedef struct {
    int pp;
    ct_schedule *lists;     // (pp)
    double **start, **end;  // (pp)[lists[r].count] seconds on ct_now_seconds' clock
} ct_pp_measured;

// Collective over `pp`: every rank contributes its list and the start / end (ct_now_seconds) of
// its first `count` actions (the executor's e->t_start / t_end) and receives everyone's in out.
// Times are compared across processes as they are: CLOCK_MONOTONIC is one clock for every
// process of one host, which is what this assumes (ranks on several hosts would need their
// offsets measured first).
void ct_pp_trace_gather(ct_group *pp, const ct_schedule *list, const double *t_start, const double *t_end, int count,
                        ct_pp_measured *out);
void ct_pp_measured_free(ct_pp_measured *m);
ct_pp_timeline ct_pp_measured_timeline(const ct_pp_measured *m);  // seconds_per_unit 1
// ct_pp_trace_gather, then the one rank with `write` set writes the timeline to `path`
// (ct_pp_trace_write) and returns the outcome (the others CT_OK).
ct_status ct_pp_trace_gather_write(ct_group *pp, const ct_schedule *list, const double *t_start,
                                   const double *t_end, int count, bool write, const char *path,
                                   const char *title);

// After the last training step, before validation replaces the executor's timeline: every pp
// rank's measured timeline of that step (its action list, timed by exec) goes to the pp group's
// members and the writer (world rank 0) writes cfg's metrics.pipeline_trace, titled with the
// schedule, the n_mb micro-batches and the step (collective over pp; nothing when the setting is
// ""). A failure to write is printed, never fatal: the trace is a by-product of training.
void ct_pp_trace_write_step(const ct_config *cfg, ct_group *pp, bool writer, const ct_schedule *list,
                            const ct_executor *exec, int n_mb, int step);

// The textbook bubble fraction of a schedule, with *formula set to how it reads:
//   GPipe, 1F1B            (p−1)/(m+p−1)
//   Interleaved1F1B,
//   LoopedBFS              (p−1)/(v·m+p−1)
//   ZB-H1                  (p−1)(F+I−W) / (m(F+I+W) + (p−1)(F+I−W))   (costs from c; NULL: defaults)
// and -1 for the others (interleaved zero bubble, ZBV), whose bubble has no
// one-line formula.
double ct_pp_textbook_bubble(ct_pp_kind kind, int p, int v, int m, const ct_pp_costs *c, const char **formula);
#endif
