// The pipeline checker: all ranks' lists at once, statically (ownership, ct_schedule_check per
// rank, send/receive matching, receive-before-use) and then in simulated time, where a blocked
// receive with no rank able to move is a deadlock. See ct_pp_simulate in pipeline_schedules.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipeline_schedules.h"

ct_pp_costs ct_pp_costs_default(void) {
    ct_pp_costs c = {{0}, NULL, NULL};
    c.cost[CT_ACT_FORWARD] = 1;
    c.cost[CT_ACT_BACKWARD] = 2;  // input and weight gradients: about twice a forward's flops
    c.cost[CT_ACT_BACKWARD_INPUT] = 1;
    c.cost[CT_ACT_BACKWARD_WEIGHT] = 1;
    return c;
}

void ct_pp_sim_result_free(ct_pp_sim_result *r) {
    for (int i = 0; r->start && i < r->pp; i++) {
        free(r->start[i]);
        free(r->end[i]);
    }
    free(r->start);
    free(r->end);
    free(r->busy);
    free(r->idle_frac);
    free(r->peak_in_flight);
    free(r->n_actions);
    memset(r, 0, sizeof *r);
}

static bool per_mb(ct_action_kind k) { return k <= CT_ACT_RECV_B; }
static bool computes(ct_action_kind k) { return k <= CT_ACT_BACKWARD_WEIGHT; }

// "1RECV_F0", "REDUCE_GRADS", "0UNSHARD": one action's text for messages.
static const char *text_of(const ct_action *a, char *buf, size_t n) {
    ct_schedule one = {(ct_action *)a, 1, 1};
    ct_schedule_format(&one, buf, n);
    return buf;
}

// The simulator's working state: messages in flight are keyed by (direction, receiving stage, mb).
typedef struct {
    const ct_schedule *lists;
    int pp, n_stages, n_mb;
    const int *stage_rank;
    int *send_at, *recv_at;  // (2, n_stages, n_mb) rank * 2^20 + action index of the send / receive, or -1
    double *posted;          // (2, n_stages, n_mb) time the send was issued; < 0: not yet
    double *done;            // (3, n_stages, n_mb) end time of F, of the input grad (B or I), of W (or B); < 0: not yet
} sim;

enum { AT_SHIFT = 20 };
static size_t msg(const sim *s, int dir, int stage, int mb) {
    return ((size_t)dir * (size_t)s->n_stages + (size_t)stage) * (size_t)s->n_mb + (size_t)mb;
}

// Direction 0: activations into `stage` (RECV_F at stage, SEND_F at stage-1); 1: a gradient into
// `stage` (RECV_B at stage, SEND_B at stage+1). Returns the receiving stage, or -1 for a non-message.
static int msg_key(const ct_action *a, int *dir) {
    switch (a->kind) {
    case CT_ACT_SEND_F: *dir = 0; return a->stage + 1;
    case CT_ACT_RECV_F: *dir = 0; return a->stage;
    case CT_ACT_SEND_B: *dir = 1; return a->stage - 1;
    case CT_ACT_RECV_B: *dir = 1; return a->stage;
    default: *dir = 0; return -1;
    }
}

#define FAIL_AT(r, i, ...)                                                                                  \
    do {                                                                                                    \
        char t_[48], w_[200];                                                                               \
        snprintf(w_, sizeof w_, __VA_ARGS__);                                                               \
        return ct_set_error("rank %d action %d (%s): %s", r, i, text_of(&s->lists[r].actions[i], t_, sizeof t_), \
                            w_);                                                                            \
    } while (0)

// Every action names a stage of its own rank, and sends / receives link stages on two ranks.
static ct_status check_owners(sim *s, bool training) {
    for (int r = 0; r < s->pp; r++) {
        const ct_schedule *l = &s->lists[r];
        bool *runs = ct_xcalloc((size_t)s->n_stages, sizeof(bool));
        for (int i = 0; i < l->count; i++) {
            const ct_action *a = &l->actions[i];
            if (a->stage < 0) continue;
            if (a->stage >= s->n_stages) {
                free(runs);
                FAIL_AT(r, i, "stage %d does not exist (%d stages)", a->stage, s->n_stages);
            }
            if (s->stage_rank[a->stage] != r) {
                free(runs);
                FAIL_AT(r, i, "stage %d runs on rank %d, not here", a->stage, s->stage_rank[a->stage]);
            }
            if (per_mb(a->kind) && a->mb >= s->n_mb) {
                free(runs);
                FAIL_AT(r, i, "micro-batch %d of %d does not exist", a->mb, s->n_mb);
            }
            int dir, to = msg_key(a, &dir);
            if (to >= 0) {
                int peer = a->kind == CT_ACT_SEND_F || a->kind == CT_ACT_RECV_B ? a->stage + 1 : a->stage - 1;
                if (peer < 0 || peer >= s->n_stages) {
                    free(runs);
                    FAIL_AT(r, i, "stage %d has no neighbour stage %d to exchange with", a->stage, peer);
                }
                if (s->stage_rank[peer] == r) {
                    free(runs);
                    FAIL_AT(r, i, "stages %d and %d both run here: the executor passes the tensor locally, drop it",
                            a->stage, peer);
                }
            }
            if (computes(a->kind)) runs[a->stage] = true;
        }
        if (ct_schedule_check(l, s->n_mb, training)) {
            char why[256];
            snprintf(why, sizeof why, "%s", ct_last_error());
            free(runs);
            return ct_set_error("rank %d: %s", r, why);
        }
        for (int st = 0; st < s->n_stages; st++)
            if (s->stage_rank[st] == r && !runs[st]) {
                free(runs);
                return ct_set_error("rank %d never runs stage %d: every micro-batch needs its forward there", r, st);
            }
        free(runs);
    }
    return CT_OK;
}

// Every receive has exactly one send and the other way round; a computation whose input comes
// from another rank comes after its receive.
static ct_status check_messages(sim *s) {
    for (int r = 0; r < s->pp; r++)
        for (int i = 0; i < s->lists[r].count; i++) {
            const ct_action *a = &s->lists[r].actions[i];
            int dir, to = msg_key(a, &dir);
            if (to < 0) continue;
            bool sends = a->kind == CT_ACT_SEND_F || a->kind == CT_ACT_SEND_B;
            int *at = &(sends ? s->send_at : s->recv_at)[msg(s, dir, to, a->mb)];
            if (*at >= 0) FAIL_AT(r, i, "a second %s of this micro-batch", sends ? "send" : "receive");
            *at = r << AT_SHIFT | i;
        }
    for (int r = 0; r < s->pp; r++)
        for (int i = 0; i < s->lists[r].count; i++) {
            const ct_action *a = &s->lists[r].actions[i];
            int dir, to = msg_key(a, &dir);
            if (to < 0) continue;
            size_t k = msg(s, dir, to, a->mb);
            int from = dir == 0 ? to - 1 : to + 1;
            if (a->kind == CT_ACT_RECV_F || a->kind == CT_ACT_RECV_B) {
                if (s->send_at[k] < 0)
                    FAIL_AT(r, i, "no rank sends it (want %d%s%d on rank %d)", from, dir ? "SEND_B" : "SEND_F", a->mb,
                            s->stage_rank[from]);
            } else if (s->recv_at[k] < 0) {
                FAIL_AT(r, i, "never received (want %d%s%d on rank %d)", to, dir ? "RECV_B" : "RECV_F", a->mb,
                        s->stage_rank[to]);
            }
        }
    for (int r = 0; r < s->pp; r++)
        for (int i = 0; i < s->lists[r].count; i++) {
            const ct_action *a = &s->lists[r].actions[i];
            bool fwd = a->kind == CT_ACT_FORWARD;
            bool bwd = a->kind == CT_ACT_BACKWARD || a->kind == CT_ACT_BACKWARD_INPUT;
            int from = fwd ? a->stage - 1 : a->stage + 1;
            if (!(fwd || bwd) || from < 0 || from >= s->n_stages || s->stage_rank[from] == r) continue;
            int got = s->recv_at[msg(s, fwd ? 0 : 1, a->stage, a->mb)];
            if (got < 0 || (got & ((1 << AT_SHIFT) - 1)) > i)
                FAIL_AT(r, i, "its %s from stage %d is not received before it (put %d%s%d before it)",
                        fwd ? "input" : "gradient", from, a->stage, fwd ? "RECV_F" : "RECV_B", a->mb);
        }
    return CT_OK;
}

static double cost_of(const ct_pp_costs *c, int rank, const ct_action *a) {
    return c->fn ? c->fn(c->ctx, rank, a) : c->cost[a->kind];
}

// Steps every rank as far as it can go, again and again, until all finish or none can move.
// Times do not depend on the order ranks are visited: a receive ends at max(its rank's clock,
// the send's time), whatever happened elsewhere meanwhile.
static ct_status run_time(sim *s, const ct_pp_costs *costs, ct_pp_sim_result *out) {
    int *pc = ct_xcalloc((size_t)s->pp, sizeof(int));
    double *clock = ct_xcalloc((size_t)s->pp, sizeof(double));
    size_t cells = (size_t)s->n_stages * (size_t)s->n_mb;
    ct_status st = CT_OK;
    for (bool moved = true; moved && st == CT_OK;) {
        moved = false;
        for (int r = 0; r < s->pp && st == CT_OK; r++) {
            const ct_schedule *l = &s->lists[r];
            while (pc[r] < l->count) {
                int i = pc[r];
                const ct_action *a = &l->actions[i];
                double t0 = clock[r], d = cost_of(costs, r, a);
                int dir, to = msg_key(a, &dir);
                size_t c = (size_t)a->stage * (size_t)s->n_mb + (size_t)a->mb;
                if (a->kind == CT_ACT_RECV_F || a->kind == CT_ACT_RECV_B) {
                    double sent = s->posted[msg(s, dir, to, a->mb)];
                    if (sent < 0) break;  // blocked until its send is issued
                    if (sent > t0) t0 = sent;
                } else if (a->kind == CT_ACT_SEND_F || a->kind == CT_ACT_SEND_B) {
                    s->posted[msg(s, dir, to, a->mb)] = t0 + d;
                } else if (computes(a->kind)) {
                    // What this computation reads must be done by now, on whichever rank: the
                    // static checks imply it; checking the times guards the checks themselves.
                    double need = 0;
                    if (a->kind == CT_ACT_FORWARD && a->stage > 0) need = s->done[cells * 0 + c - (size_t)s->n_mb];
                    else if (a->kind == CT_ACT_BACKWARD_WEIGHT) need = s->done[cells * 1 + c];
                    else if (a->kind != CT_ACT_FORWARD && a->stage + 1 < s->n_stages)
                        need = s->done[cells * 1 + c + (size_t)s->n_mb];
                    if (need < 0 || need > t0) {
                        char t_[48];
                        st = ct_set_error("rank %d action %d (%s): runs at time %g before what it reads is done",
                                          r, i, text_of(a, t_, sizeof t_), t0);
                        break;
                    }
                    int slot = a->kind == CT_ACT_FORWARD ? 0 : a->kind == CT_ACT_BACKWARD_WEIGHT ? 2 : 1;
                    s->done[cells * (size_t)slot + c] = t0 + d;
                    if (a->kind == CT_ACT_BACKWARD) s->done[cells * 2 + c] = t0 + d;
                    out->busy[r] += d;
                }
                out->start[r][i] = t0;
                out->end[r][i] = clock[r] = t0 + d;
                pc[r]++;
                moved = true;
            }
        }
    }
    bool stuck = false;
    for (int r = 0; r < s->pp; r++) stuck |= pc[r] < s->lists[r].count;
    if (st == CT_OK && stuck) {
        char why[1024] = "deadlock:";
        size_t n = strlen(why);
        const char *sep = " ";
        for (int r = 0; r < s->pp && n < sizeof why; r++) {
            if (pc[r] >= s->lists[r].count) continue;
            char t_[48];
            n += (size_t)snprintf(why + n, sizeof why - n, "%srank %d waits at %s", sep, r,
                                  text_of(&s->lists[r].actions[pc[r]], t_, sizeof t_));
            sep = ", ";
        }
        st = ct_set_error("%s", why);
    }
    for (int r = 0; r < s->pp; r++)
        if (clock[r] > out->makespan) out->makespan = clock[r];
    free(pc);
    free(clock);
    return st;
}


ct_status ct_pp_simulate(const ct_schedule *lists, int pp, const int *stage_rank, int n_stages, int n_mb,
                         const ct_pp_costs *costs, ct_pp_sim_result *out) {
    memset(out, 0, sizeof *out);
    bool training = false;  // forward-only (evaluation) lists run no backward at all
    for (int r = 0; r < pp; r++)
        for (int i = 0; i < lists[r].count; i++) {
            ct_action_kind k = lists[r].actions[i].kind;
            training |= k == CT_ACT_BACKWARD || k == CT_ACT_BACKWARD_INPUT || k == CT_ACT_BACKWARD_WEIGHT;
        }
    if (pp < 1 || n_stages < 1 || n_mb < 1)
        return ct_set_error("pipeline check: %d ranks, %d stages, %d micro-batches: each must be 1 or more", pp,
                            n_stages, n_mb);
    for (int st = 0; st < n_stages; st++)
        if (stage_rank[st] < 0 || stage_rank[st] >= pp)
            return ct_set_error("pipeline check: stage %d is placed on rank %d of %d", st, stage_rank[st], pp);
    for (int r = 0; r < pp; r++)
        if (lists[r].count >= 1 << AT_SHIFT) return ct_set_error("pipeline check: rank %d has too many actions", r);
    ct_pp_costs dflt = ct_pp_costs_default();
    if (!costs) costs = &dflt;
    size_t cells = (size_t)n_stages * (size_t)n_mb;
    sim s = {lists, pp, n_stages, n_mb, stage_rank, NULL, NULL, NULL, NULL};
    s.send_at = ct_xmalloc(2 * cells * sizeof(int));
    s.recv_at = ct_xmalloc(2 * cells * sizeof(int));
    s.posted = ct_xmalloc(2 * cells * sizeof(double));
    s.done = ct_xmalloc(3 * cells * sizeof(double));
    for (size_t c = 0; c < 2 * cells; c++) s.send_at[c] = s.recv_at[c] = -1, s.posted[c] = -1;
    for (size_t c = 0; c < 3 * cells; c++) s.done[c] = -1;

    out->pp = pp;
    out->busy = ct_xcalloc((size_t)pp, sizeof(double));
    out->idle_frac = ct_xcalloc((size_t)pp, sizeof(double));
    out->peak_in_flight = ct_xcalloc((size_t)pp, sizeof(int));
    out->n_actions = ct_xcalloc((size_t)pp, sizeof(int));
    out->start = ct_xcalloc((size_t)pp, sizeof(double *));
    out->end = ct_xcalloc((size_t)pp, sizeof(double *));
    for (int r = 0; r < pp; r++) {
        out->n_actions[r] = lists[r].count;
        out->start[r] = ct_xcalloc((size_t)lists[r].count + 1, sizeof(double));
        out->end[r] = ct_xcalloc((size_t)lists[r].count + 1, sizeof(double));
    }
    ct_status st = check_owners(&s, training);
    if (st == CT_OK) st = check_messages(&s);
    if (st == CT_OK) st = run_time(&s, costs, out);
    if (st == CT_OK) {
        for (int r = 0; r < pp; r++) {
            out->idle_frac[r] = out->makespan > 0 ? (out->makespan - out->busy[r]) / out->makespan : 0;
            out->bubble += out->idle_frac[r] / pp;
            out->peak_in_flight[r] = ct_schedule_peak_held(&lists[r], -1, n_stages, n_mb, NULL);
        }
    } else {
        ct_pp_sim_result_free(out);
    }
    free(s.send_at);
    free(s.recv_at);
    free(s.posted);
    free(s.done);
    return st;
}
