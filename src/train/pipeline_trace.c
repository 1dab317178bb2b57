// Text grid, SVG and Chrome trace of a pipeline step, from per-rank action lists and their
// start / end times (simulated or measured), and the gather that brings a measured step's
// timelines to one process.
#include "train/pipeline_trace.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/trace.h"
#include "train/timeline_svg.h"

ct_pp_timeline ct_pp_timeline_of_sim(const ct_schedule *lists, const ct_pp_sim_result *sim) {
    return (ct_pp_timeline){sim->pp, lists, sim->start, sim->end, 0};
}

static bool is_compute(ct_action_kind k) {
    return k == CT_ACT_FORWARD || k == CT_ACT_BACKWARD || k == CT_ACT_BACKWARD_INPUT || k == CT_ACT_BACKWARD_WEIGHT;
}

// Earliest start and latest end over every rank's actions.
static void span_of(const ct_pp_timeline *tl, double *t0, double *t1) {
    *t0 = INFINITY;
    *t1 = -INFINITY;
    for (int r = 0; r < tl->pp; r++)
        for (int i = 0; i < tl->lists[r].count; i++) {
            if (tl->start[r][i] < *t0) *t0 = tl->start[r][i];
            if (tl->end[r][i] > *t1) *t1 = tl->end[r][i];
        }
    if (*t0 > *t1) *t0 = *t1 = 0;  // no actions at all
}

// ------------------------------------------------------------------ a growing text buffer

typedef struct {
    char *s;
    size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) {
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->len + (size_t)n + 1 > t->cap) {
        t->cap = (t->len + (size_t)n + 1) * 2;
        t->s = realloc(t->s, t->cap);
        if (!t->s) ct_fatal("pipeline_trace", "out of memory");
    }
    vsnprintf(t->s + t->len, (size_t)n + 1, fmt, aq);
    va_end(aq);
    t->len += (size_t)n;
}

// ------------------------------------------------------------------ text grid

char *ct_pp_trace_grid(const ct_pp_timeline *tl, double unit, int max_cols) {
    double t0, t1;
    span_of(tl, &t0, &t1);
    if (unit <= 0) unit = 1;
    int cols = (int)lround((t1 - t0) / unit), width = 2;
    for (int r = 0; r < tl->pp; r++)
        for (int i = 0; i < tl->lists[r].count; i++) {
            char tok[48];
            int n = ct_action_format(&tl->lists[r].actions[i], tok, sizeof tok);
            if (is_compute(tl->lists[r].actions[i].kind) && n > width) width = n;
        }
    bool cut = max_cols > 0 && cols > max_cols;
    if (cut) cols = max_cols;
    int cw = width + 1;  // a token and one space
    size_t row_len = (size_t)cols * cw;
    char *row = ct_xmalloc(row_len + 1);
    text out = {0};
    put(&out, "time   |");
    // A column number every 5 columns, left-aligned on its column.
    size_t mark = out.len;
    for (int c = 0; c < cols; c += 5) put(&out, "%-*d", 5 * cw, c);
    while (out.len > mark && out.s[out.len - 1] == ' ') out.s[--out.len] = 0;
    put(&out, "%s\n", cut ? " ..." : "");
    for (int r = 0; r < tl->pp; r++) {
        for (int c = 0; c < cols; c++) {
            memset(row + (size_t)c * cw, ' ', (size_t)cw);
            row[(size_t)c * cw] = '.';
        }
        row[row_len] = 0;
        int cursor = 0;  // first free column: measured actions rounded onto the grid may touch
        for (int i = 0; i < tl->lists[r].count; i++) {
            const ct_action *a = &tl->lists[r].actions[i];
            if (!is_compute(a->kind)) continue;
            int c0 = (int)lround((tl->start[r][i] - t0) / unit);
            int span = (int)lround((tl->end[r][i] - tl->start[r][i]) / unit);
            if (span < 1) span = 1;
            if (c0 < cursor) c0 = cursor;
            if (c0 >= cols) continue;
            if (c0 + span > cols) span = cols - c0;
            char *cell = row + (size_t)c0 * cw;
            memset(cell, '~', (size_t)span * cw - 1);
            cell[(size_t)span * cw - 1] = ' ';
            char tok[48];
            int n = ct_action_format(a, tok, sizeof tok);
            memcpy(cell, tok, (size_t)(n < span * cw - 1 ? n : span * cw - 1));
            cursor = c0 + span;
        }
        // Trailing spaces would make the lines ragged in diffs; keep them out.
        size_t len = row_len;
        while (len > 0 && row[len - 1] == ' ') len--;
        row[len] = 0;
        put(&out, "rank %-2d|%s%s\n", r, row, cut ? " ..." : "");
    }
    free(row);
    return out.s;
}

// ------------------------------------------------------------------ SVG

// Tableau colours: forward blue, backward green, input-gradient orange, weight-gradient purple.
static const char *fill_of(ct_action_kind k) {
    switch (k) {
    case CT_ACT_FORWARD: return "#4e79a7";
    case CT_ACT_BACKWARD: return "#59a14f";
    case CT_ACT_BACKWARD_INPUT: return "#f28e2b";
    case CT_ACT_BACKWARD_WEIGHT: return "#b07aa1";
    case CT_ACT_RECV_F:
    case CT_ACT_RECV_B: return "#c8c8c8";
    case CT_ACT_SEND_F:
    case CT_ACT_SEND_B: return "#7f7f7f";
    default: return "#9c755f";
    }
}

ct_status ct_pp_trace_write_svg(const char *path, const ct_pp_timeline *tl, const char *title) {
    int n = 0;
    for (int r = 0; r < tl->pp; r++) n += tl->lists[r].count;
    ct_svg_bar *bars = ct_xcalloc((size_t)n + 1, sizeof *bars);
    char (*tok)[48] = ct_xcalloc((size_t)n + 1, sizeof *tok);
    char (*lane)[16] = ct_xcalloc((size_t)tl->pp + 1, sizeof *lane);
    const char **lanes = ct_xcalloc((size_t)tl->pp + 1, sizeof *lanes);
    n = 0;
    for (int r = 0; r < tl->pp; r++) {
        snprintf(lane[r], sizeof lane[r], "rank %d", r);
        lanes[r] = lane[r];
        for (int i = 0; i < tl->lists[r].count; i++, n++) {
            const ct_action *a = &tl->lists[r].actions[i];
            ct_action_format(a, tok[n], sizeof tok[n]);
            // Receives and sends drawn thin: a receive's length is waiting, not work.
            bars[n] = (ct_svg_bar){tl->start[r][i], tl->end[r][i], r, 0, !is_compute(a->kind), fill_of(a->kind), tok[n],
                                   NULL};
        }
    }
    static const ct_svg_legend legend[] = {{"#4e79a7", "F forward"},        {"#59a14f", "B backward"},
                                           {"#f28e2b", "I input grad"},     {"#b07aa1", "W weight grad"},
                                           {"#c8c8c8", "receive (wait)"},   {"#7f7f7f", "send"},
                                           {"#9c755f", "step-level"}};
    bool secs = tl->seconds_per_unit > 0;
    ct_svg_timeline svg = {
        .title = title ? title : "pipeline timeline",
        .n_lanes = tl->pp,
        .lane_names = lanes,
        .levels = 1,
        .level_height = 24,
        .bars = bars,
        .n_bars = n,
        .scale = secs ? tl->seconds_per_unit * 1e3 : 1,  // axis labels: ms, or cost units
        .unit = secs ? "ms" : "units",
        .legend = legend,
        .n_legend = (int)(sizeof legend / sizeof legend[0]),
    };
    ct_status st = ct_svg_timeline_write(path, &svg);
    free(bars);
    free(tok);
    free(lane);
    free(lanes);
    return st;
}

// ------------------------------------------------------------------ Chrome trace

enum { STEP_TID = 1000 };  // REDUCE_GRADS, RESHARD of every stage: no stage of their own

ct_status ct_pp_trace_write_chrome(const char *path, const ct_pp_timeline *tl) {
    double t0, t1;
    span_of(tl, &t0, &t1);
    double ns = (tl->seconds_per_unit > 0 ? tl->seconds_per_unit * 1e6 : 1e3) * 1e3;  // simulator units as ms
    char buf[8192];
    ct_chrome_writer w;
    if (ct_chrome_open(&w, path, buf, sizeof buf)) return CT_ERR;
    for (int r = 0; r < tl->pp; r++) {
        char name[32];
        snprintf(name, sizeof name, "pp rank %d", r);
        ct_chrome_process_name(&w, r, name);
        // One thread-name record per stage this rank runs (and the step lane when used).
        for (int i = 0; i < tl->lists[r].count; i++) {
            const ct_action *a = &tl->lists[r].actions[i];
            int tid = a->stage >= 0 ? a->stage : STEP_TID;
            bool seen = false;
            for (int j = 0; j < i && !seen; j++) {
                int s = tl->lists[r].actions[j].stage;
                seen = (s >= 0 ? s : STEP_TID) == tid;
            }
            if (seen) continue;
            if (tid != STEP_TID) snprintf(name, sizeof name, "stage %d", tid);
            ct_chrome_thread_name(&w, r, tid, tid == STEP_TID ? "step" : name);
        }
    }
    for (int r = 0; r < tl->pp; r++)
        for (int i = 0; i < tl->lists[r].count; i++) {
            const ct_action *a = &tl->lists[r].actions[i];
            char tok[48], args[64];
            ct_action_format(a, tok, sizeof tok);
            snprintf(args, sizeof args, "\"stage\": %d, \"mb\": %d", a->stage, a->mb);
            int64_t ts = llround((tl->start[r][i] - t0) * ns), end = llround((tl->end[r][i] - t0) * ns);
            ct_chrome_complete(&w, tok, NULL, ct_action_kind_name(a->kind), r, a->stage >= 0 ? a->stage : STEP_TID, ts,
                               end > ts ? end - ts : 0, args);
        }
    return ct_chrome_close(&w);
}

ct_status ct_pp_trace_write(const char *path, const ct_pp_timeline *tl, const char *title) {
    size_t n = strlen(path);
    if (n >= 4 && !strcmp(path + n - 4, ".svg")) return ct_pp_trace_write_svg(path, tl, title);
    return ct_pp_trace_write_chrome(path, tl);
}

// ------------------------------------------------------------------ measured timelines

// Each rank packs [count, then per action kind, stage, mb, start, end] into doubles (exact for
// these small integers), padded to the longest list so that one all-gather carries them all.
void ct_pp_trace_gather(ct_group *pp, const ct_schedule *list, const double *t_start, const double *t_end, int count,
                        ct_pp_measured *out) {
    int32_t longest = count;
    ct_comm_all_reduce(pp, &longest, &longest, 1, CT_I32, CT_COMM_MAX);
    size_t per = 1 + 5 * (size_t)longest;
    double *mine = ct_xcalloc(per, sizeof(double)), *all = ct_xcalloc(per * pp->size, sizeof(double));
    mine[0] = count;
    for (int i = 0; i < count; i++) {
        const ct_action *a = &list->actions[i];
        double *p = mine + 1 + 5 * (size_t)i;
        p[0] = a->kind, p[1] = a->stage, p[2] = a->mb, p[3] = t_start[i], p[4] = t_end[i];
    }
    ct_comm_all_gather(pp, mine, all, per, CT_F64);
    int n = pp->size;
    out->pp = n;
    out->lists = ct_xcalloc((size_t)n, sizeof(ct_schedule));
    out->start = ct_xcalloc((size_t)n, sizeof(double *));
    out->end = ct_xcalloc((size_t)n, sizeof(double *));
    for (int r = 0; r < n; r++) {
        const double *q = all + per * r;
        int c = (int)q[0];
        ct_schedule_init(&out->lists[r]);
        out->start[r] = ct_xcalloc((size_t)c + 1, sizeof(double));
        out->end[r] = ct_xcalloc((size_t)c + 1, sizeof(double));
        for (int i = 0; i < c; i++) {
            const double *p = q + 1 + 5 * (size_t)i;
            ct_schedule_push(&out->lists[r], (ct_action_kind)p[0], (int)p[1], (int)p[2]);
            out->start[r][i] = p[3], out->end[r][i] = p[4];
        }
    }
    free(mine);
    free(all);
}

void ct_pp_measured_free(ct_pp_measured *m) {
    for (int r = 0; r < m->pp; r++) {
        ct_schedule_free(&m->lists[r]);
        free(m->start[r]);
        free(m->end[r]);
    }
    free(m->lists);
    free(m->start);
    free(m->end);
    *m = (ct_pp_measured){0};
}

ct_pp_timeline ct_pp_measured_timeline(const ct_pp_measured *m) {
    return (ct_pp_timeline){m->pp, m->lists, m->start, m->end, 1};
}

ct_status ct_pp_trace_gather_write(ct_group *pp, const ct_schedule *list, const double *t_start,
                                   const double *t_end, int count, bool write, const char *path,
                                   const char *title) {
    ct_pp_measured m;
    ct_pp_trace_gather(pp, list, t_start, t_end, count, &m);
    ct_pp_timeline tl = ct_pp_measured_timeline(&m);
    ct_status st = write ? ct_pp_trace_write(path, &tl, title) : CT_OK;
    ct_pp_measured_free(&m);
    return st;
}

void ct_pp_trace_write_step(const ct_config *cfg, ct_group *pp, bool writer, const ct_schedule *list,
                            const ct_executor *exec, int n_mb, int step) {
    const char *path = cfg->pipeline_trace;
    if (!path[0]) return;
    char title[160];
    snprintf(title, sizeof title, "%s: pp %d, %d micro-batches, measured step %d", cfg->pipeline_schedule, pp->size,
             n_mb, step);
    if (ct_pp_trace_gather_write(pp, list, exec->t_start, exec->t_end, exec->timeline_count, writer, path, title))
        fprintf(stderr, "train: pipeline trace: %s\n", ct_last_error());
    else if (writer)
        printf("pipeline trace of step %d written to %s\n", step, path);
}

// ------------------------------------------------------------------ textbook bubbles

double ct_pp_textbook_bubble(ct_pp_kind kind, int p, int v, int m, const ct_pp_costs *c, const char **formula) {
    ct_pp_costs d = ct_pp_costs_default();
    if (!c || c->fn) c = &d;
    switch (kind) {
    case CT_PP_GPIPE:
    case CT_PP_1F1B: *formula = "(p-1)/(m+p-1)"; return (double)(p - 1) / (m + p - 1);
    case CT_PP_INTERLEAVED_1F1B:
    case CT_PP_LOOPED_BFS:  // breadth-first (Lamy-Poirier 2022): the same bubble, more in flight
        *formula = "(p-1)/(v*m+p-1)"; return (double)(p - 1) / ((double)v * m + p - 1);
    case CT_PP_ZB_H1: {
        // Zero Bubble (Qi et al. 2023): ZB-H1 leaves (p-1)(F+I-W) of the 1F1B bubble (p-1)(F+B).
        double F = c->cost[CT_ACT_FORWARD], I = c->cost[CT_ACT_BACKWARD_INPUT], W = c->cost[CT_ACT_BACKWARD_WEIGHT];
        double b = (p - 1) * (F + I - W);
        *formula = "(p-1)(F+I-W)/(m(F+I+W)+(p-1)(F+I-W))";
        return b / (m * (F + I + W) + b);
    }
    default: *formula = "none"; return -1;
    }
}
