#include "parallel/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[CT_ACT_NKINDS] = {
    "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRADS",
};

const char *ct_action_kind_name(ct_action_kind k) { return (unsigned)k < CT_ACT_NKINDS ? kind_names[k] : "?"; }

// Actions on a micro-batch carry (stage, mb); UNSHARD / RESHARD a stage only (RESHARD without a
// stage: every stage); REDUCE_GRADS neither.
static bool per_mb(ct_action_kind k) { return k < CT_ACT_UNSHARD; }
static bool per_stage(ct_action_kind k) { return k == CT_ACT_UNSHARD || k == CT_ACT_RESHARD; }

void ct_schedule_init(ct_schedule *s) { memset(s, 0, sizeof *s); }

void ct_schedule_free(ct_schedule *s) {
    free(s->actions);
    memset(s, 0, sizeof *s);
}

void ct_schedule_push(ct_schedule *s, ct_action_kind kind, int stage, int mb) {
    if (s->count == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        ct_action *grown = realloc(s->actions, (size_t)s->cap * sizeof(ct_action));
        if (!grown) ct_fatal("schedule", "out of memory for %d actions", s->cap);
        s->actions = grown;
    }
    s->actions[s->count++] = (ct_action){kind, per_mb(kind) || per_stage(kind) ? stage : -1, per_mb(kind) ? mb : -1};
}

void ct_schedule_accumulation(ct_schedule *s, int stage, int n_mb, bool training) {
    for (int mb = 0; mb < n_mb; mb++) {
        ct_schedule_push(s, CT_ACT_FORWARD, stage, mb);
        if (training) ct_schedule_push(s, CT_ACT_BACKWARD, stage, mb);
    }
    if (training) ct_schedule_push(s, CT_ACT_REDUCE_GRADS, -1, -1);
    ct_schedule_push(s, CT_ACT_RESHARD, -1, -1);
}

// ------------------------------------------------------------------ text form

static ct_status parse_token(const char *tok, ct_action *out) {
    for (int k = 0; k < CT_ACT_NKINDS; k++)
        if (!per_mb((ct_action_kind)k) && k != CT_ACT_UNSHARD && !strcmp(tok, kind_names[k])) {
            *out = (ct_action){(ct_action_kind)k, -1, -1};  // REDUCE_GRADS, or RESHARD of every stage
            return CT_OK;
        }
    char *end;
    long stage = strtol(tok, &end, 10);
    if (end == tok || stage < 0 || stage > 100000) goto bad;
    for (int k = CT_ACT_NKINDS - 1; k >= 0; k--) {  // longest names first: "SEND_F" before "F"
        size_t n = strlen(kind_names[k]);
        if (k == CT_ACT_REDUCE_GRADS || strncmp(end, kind_names[k], n)) continue;
        if (per_stage((ct_action_kind)k)) {
            if (end[n]) goto bad;
            *out = (ct_action){(ct_action_kind)k, (int)stage, -1};
            return CT_OK;
        }
        char *mb_end;
        long mb = strtol(end + n, &mb_end, 10);
        if (mb_end == end + n || *mb_end || mb < 0 || mb > 1000000) goto bad;
        *out = (ct_action){(ct_action_kind)k, (int)stage, (int)mb};
        return CT_OK;
    }
bad:
    return ct_set_error("schedule: cannot read action '%s' (expected e.g. 0F3, 1I0, 0W2, 1SEND_F0, REDUCE_GRADS)",
                        tok);
}

ct_status ct_schedule_parse(ct_schedule *s, const char *text) {
    ct_schedule_init(s);
    char tok[64];
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        size_t n = 0;
        while (p[n] && p[n] != ' ' && p[n] != ',' && p[n] != '\n' && p[n] != '\t' && p[n] != '\r') n++;
        if (n >= sizeof tok) {
            ct_schedule_free(s);
            return ct_set_error("schedule: action '%.20s...' is too long", p);
        }
        memcpy(tok, p, n);
        tok[n] = 0;
        p += n;
        ct_action a = {CT_ACT_FORWARD, -1, -1};
        if (parse_token(tok, &a)) {
            ct_schedule_free(s);
            return CT_ERR;
        }
        ct_schedule_push(s, a.kind, a.stage, a.mb);
    }
    return CT_OK;
}

int ct_action_format(const ct_action *a, char *buf, size_t n) {
    if (a->stage < 0) return snprintf(buf, n, "%s", kind_names[a->kind]);
    if (!per_mb(a->kind)) return snprintf(buf, n, "%d%s", a->stage, kind_names[a->kind]);
    return snprintf(buf, n, "%d%s%d", a->stage, kind_names[a->kind], a->mb);
}

int ct_schedule_format(const ct_schedule *s, char *buf, size_t n) {
    size_t len = 0;
    for (int i = 0; i < s->count; i++) {
        char one[48];
        one[0] = ' ';
        ct_action_format(&s->actions[i], one + 1, sizeof one - 1);
        const char *tok = i ? one : one + 1;
        size_t m = strlen(tok);
        if (len + m < n) memcpy(buf + len, tok, m + 1);
        len += m;
    }
    if (n && len >= n) buf[n - 1] = 0;
    if (n && s->count == 0) buf[0] = 0;
    return (int)len;
}

// ------------------------------------------------------------------ checks

enum { NONE = 0, FORWARD_DONE = 1, INPUT_DONE = 2, DONE = 3 };

ct_status ct_schedule_check(const ct_schedule *s, int n_mb, bool training) {
    int max_stage = -1;
    for (int i = 0; i < s->count; i++)
        if (s->actions[i].stage > max_stage) max_stage = s->actions[i].stage;
    int n_stages = max_stage + 1;
    // state[stage][mb]; present[stage] marks the stages this list runs.
    int *state = calloc((size_t)(n_stages > 0 ? n_stages : 1) * (size_t)(n_mb > 0 ? n_mb : 1), sizeof(int));
    bool *present = calloc((size_t)(n_stages > 0 ? n_stages : 1), sizeof(bool));
    if (!state || !present) ct_fatal("schedule", "out of memory");
    for (int i = 0; i < s->count; i++) {  // the stages this list runs compute here
        ct_action_kind k = s->actions[i].kind;
        if (k == CT_ACT_FORWARD || k == CT_ACT_BACKWARD || k == CT_ACT_BACKWARD_INPUT || k == CT_ACT_BACKWARD_WEIGHT)
            present[s->actions[i].stage] = true;
    }
    ct_status st = CT_OK;
    char why[160] = "";
    for (int i = 0; i < s->count && st == CT_OK; i++) {
        const ct_action *a = &s->actions[i];
        if (!per_mb(a->kind)) continue;
        if (a->mb >= n_mb) {
            st = ct_set_error("schedule: action %d (%d%s%d): micro-batch %d of %d does not exist", i, a->stage,
                              kind_names[a->kind], a->mb, a->mb, n_mb);
            break;
        }
        int *cur = &state[a->stage * n_mb + a->mb];
        switch (a->kind) {
        case CT_ACT_FORWARD:
            if (*cur != NONE) snprintf(why, sizeof why, "a second forward");
            else if (a->stage > 0 && present[a->stage - 1] && state[(a->stage - 1) * n_mb + a->mb] == NONE)
                snprintf(why, sizeof why, "forward before the previous stage's forward of this micro-batch");
            else *cur = FORWARD_DONE;
            break;
        case CT_ACT_BACKWARD:
        case CT_ACT_BACKWARD_INPUT:
            if (!training) snprintf(why, sizeof why, "a backward in a forward-only schedule");
            else if (*cur != FORWARD_DONE) snprintf(why, sizeof why, "backward without a forward before it, or twice");
            else if (a->stage + 1 < n_stages && present[a->stage + 1] && state[(a->stage + 1) * n_mb + a->mb] < INPUT_DONE)
                snprintf(why, sizeof why, "backward before the next stage's backward of this micro-batch");
            else *cur = a->kind == CT_ACT_BACKWARD ? DONE : INPUT_DONE;
            break;
        case CT_ACT_BACKWARD_WEIGHT:
            if (*cur != INPUT_DONE) snprintf(why, sizeof why, "backward-weight without its backward-input before it");
            else *cur = DONE;
            break;
        case CT_ACT_SEND_F:
            if (*cur == NONE) snprintf(why, sizeof why, "sending activations not computed yet");
            break;
        case CT_ACT_SEND_B:
            if (*cur < INPUT_DONE) snprintf(why, sizeof why, "sending a gradient not computed yet");
            break;
        default: break;
        }
        if (why[0]) {
            st = ct_set_error("schedule: action %d (%d%s%d): %s", i, a->stage, kind_names[a->kind], a->mb, why);
            break;
        }
    }
    for (int stg = 0; stg < n_stages && st == CT_OK; stg++) {
        if (!present[stg]) continue;
        for (int mb = 0; mb < n_mb; mb++) {
            int want = training ? DONE : FORWARD_DONE, got = state[stg * n_mb + mb];
            if (got != want) {
                st = ct_set_error("schedule: stage %d micro-batch %d %s", stg, mb,
                                  got == NONE            ? "never runs forward"
                                  : got == FORWARD_DONE  ? "never runs backward"
                                  : got == INPUT_DONE    ? "runs backward-input but never backward-weight"
                                                         : "runs backward in a forward-only schedule");
                break;
            }
        }
    }
    free(state);
    free(present);
    return st;
}

int ct_schedule_max_unsharded(const ct_schedule *s, const int *groups_of_stage, int n_stages) {
    // Groups held whole by UNSHARD at once: a stage's count from its UNSHARD to its RESHARD.
    bool held[n_stages > 0 ? n_stages : 1];
    for (int i = 0; i < n_stages; i++) held[i] = false;
    int live = 0, most = 0;
    for (int i = 0; i < s->count; i++) {
        const ct_action *a = &s->actions[i];
        if (a->kind == CT_ACT_UNSHARD && a->stage < n_stages && !held[a->stage]) {
            held[a->stage] = true;
            live += groups_of_stage[a->stage];
            if (live > most) most = live;
        } else if (a->kind == CT_ACT_RESHARD) {
            for (int st = 0; st < n_stages; st++)
                if (held[st] && (a->stage < 0 || a->stage == st)) {
                    held[st] = false;
                    live -= groups_of_stage[st];
                }
        }
    }
    return most;
}

int ct_schedule_peak_held(const ct_schedule *s, int stage, int n_stages, int n_mb, const int *last_use) {
    // Each (stage, mb) pair is an interval of list positions [first, end]; the peak is the most
    // intervals covering one position (a difference array swept once). One stage: only its own
    // n_mb cells (the planner asks this per stage of every candidate layout and pp rank: with
    // every stage's cells each time, `ctitan plan --tables` takes 17.5-17.9 s, against 15.8-17.0 s).
    const size_t per_stage = (size_t)(n_mb > 0 ? n_mb : 1), c0 = stage >= 0 ? (size_t)stage * per_stage : 0;
    size_t cells = stage >= 0 ? per_stage : (size_t)(n_stages > 0 ? n_stages : 1) * per_stage;
    int *first = ct_xmalloc(cells * sizeof(int)), *last = ct_xmalloc(cells * sizeof(int));
    int *diff = ct_xcalloc((size_t)s->count + 1, sizeof(int));
    for (size_t c = 0; c < cells; c++) first[c] = last[c] = -1;
    for (int i = 0; i < s->count; i++) {
        const ct_action *a = &s->actions[i];
        if (!per_mb(a->kind) || (stage >= 0 && a->stage != stage)) continue;
        size_t c = (size_t)a->stage * (size_t)n_mb + (size_t)a->mb - c0;
        if (first[c] < 0) first[c] = i;
        last[c] = i;
    }
    for (size_t c = 0; c < cells; c++) {
        if (first[c] < 0) continue;
        int end = last_use && last_use[c0 + c] > last[c] ? last_use[c0 + c] : last[c];
        diff[first[c]]++;
        diff[end + 1]--;
    }
    int live = 0, most = 0;
    for (int i = 0; i < s->count; i++)
        if ((live += diff[i]) > most) most = live;
    free(first);
    free(last);
    free(diff);
    return most;
}

int ct_schedule_max_in_flight(const ct_schedule *s, int stage) {
    int n_stages = stage + 1, n_mb = 0;
    for (int i = 0; i < s->count; i++)
        if (s->actions[i].stage == stage && per_mb(s->actions[i].kind) && s->actions[i].mb >= n_mb)
            n_mb = s->actions[i].mb + 1;
    return n_mb ? ct_schedule_peak_held(s, stage, n_stages, n_mb, NULL) : 0;
}

bool ct_schedule_splits_backward(const ct_schedule *s, int stage) {
    for (int i = 0; i < s->count; i++)
        if (s->actions[i].stage == stage && s->actions[i].kind == CT_ACT_BACKWARD_INPUT) return true;
    return false;
}
