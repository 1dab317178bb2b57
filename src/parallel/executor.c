#include "parallel/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/trace.h"

void ct_executor_init(ct_executor *e, int n_stages, ct_stage **stages, ct_group *pp, const int *stage_rank) {
    memset(e, 0, sizeof *e);
    e->n_stages = n_stages;
    e->stage = ct_xcalloc((size_t)n_stages, sizeof(ct_stage *));
    memcpy(e->stage, stages, (size_t)n_stages * sizeof(ct_stage *));
    e->pp = pp;
    e->stage_rank = stage_rank;
}

void ct_executor_free(ct_executor *e) {
    free(e->stage);
    free(e->slot_of);
    free(e->last_use);
    free(e->pending);
    free(e->t_start);
    free(e->t_end);
    free(e->early);
    ct_mem_free(e->own_loss);
    memset(e, 0, sizeof *e);
}

void ct_executor_add_reducer(ct_executor *e, void (*fn)(void *ctx), void *ctx) {
    if (e->n_reducers == CT_EXECUTOR_MAX_REDUCERS) ct_fatal("executor", "too many gradient reducers");
    e->reducers[e->n_reducers++] = (ct_grad_reducer){ctx, fn};
}

// Where each (stage, mb) last needs its slot in list s, into last (n_stages, max_mb): its last
// action on the stage, or later, when the next stage is on this rank, that stage's forward of
// the micro-batch (which pulls its input from this slot). -1: not in the list.
static void last_uses(const ct_executor *e, const ct_schedule *s, int max_mb, int *last) {
    for (int i = 0; i < e->n_stages * max_mb; i++) last[i] = -1;
    for (int i = 0; i < s->count; i++) {
        const ct_action *a = &s->actions[i];
        if (a->stage < 0 || a->mb < 0) continue;
        last[a->stage * max_mb + a->mb] = i;
        if (a->kind == CT_ACT_FORWARD && a->stage > 0 && e->stage[a->stage - 1])
            last[(a->stage - 1) * max_mb + a->mb] = i;
    }
}

// Slots stage st needs for list s: micro-batches held from their first action to their last use,
// plus one where activations arrive from another rank, so the next one's receive can be posted
// while the current micro-batch still holds its slot (post_next_receive).
static int slots_needed(const ct_executor *e, const ct_schedule *s, int st, int max_mb, const int *last) {
    int most = ct_schedule_peak_held(s, st, e->n_stages, max_mb, last);
    bool receives = false;
    for (int i = 0; i < s->count && !receives; i++)
        receives = s->actions[i].stage == st && s->actions[i].kind == CT_ACT_RECV_F;
    return most + (receives && most > 0);
}

ct_status ct_executor_plan(ct_executor *e, const ct_schedule *const *schedules, const int *n_mb,
                           const bool *training, int n) {
    int slots[e->n_stages > 0 ? e->n_stages : 1];
    bool split[e->n_stages > 0 ? e->n_stages : 1];
    memset(slots, 0, sizeof slots);
    memset(split, 0, sizeof split);
    int max_mb = 1;
    for (int i = 0; i < n; i++) {
        const ct_schedule *s = schedules[i];
        if (ct_schedule_check(s, n_mb[i], training[i])) return CT_ERR;
        for (int a = 0; a < s->count; a++) {
            int st = s->actions[a].stage;
            if (st >= e->n_stages || (st >= 0 && !e->stage[st]))
                return ct_set_error("schedule: action %d names stage %d, which this rank does not run", a, st);
        }
        if (n_mb[i] > max_mb) max_mb = n_mb[i];
    }
    int *last = ct_xmalloc((size_t)e->n_stages * (size_t)max_mb * sizeof(int));
    for (int i = 0; i < n; i++) {
        last_uses(e, schedules[i], max_mb, last);
        for (int st = 0; st < e->n_stages; st++) {
            if (!e->stage[st]) continue;
            int k = slots_needed(e, schedules[i], st, max_mb, last);
            if (k > slots[st]) slots[st] = k;
            split[st] |= ct_schedule_splits_backward(schedules[i], st);
        }
    }
    free(last);
    // Groups a schedule's UNSHARD holds whole at once: the weight strategy makes room up front
    // (a strategy that holds nothing has no unshard, and UNSHARD is then a no-op).
    int groups_of_stage[e->n_stages > 0 ? e->n_stages : 1], pinned = 0;
    for (int st = 0; st < e->n_stages; st++) {
        groups_of_stage[st] = 0;
        if (e->stage[st]) {
            int g[e->stage[st]->cfg.n_layers + 2];
            groups_of_stage[st] = ct_stage_groups(e->stage[st], g);
        }
    }
    for (int i = 0; i < n; i++) {
        int k = ct_schedule_max_unsharded(schedules[i], groups_of_stage, e->n_stages);
        if (k > pinned) pinned = k;
    }
    for (int st = 0; st < e->n_stages; st++) {
        const ct_weight_ops *w = e->stage[st] ? &e->stage[st]->ops.weights : NULL;
        if (pinned && w && w->reserve) w->reserve(w->ctx, pinned);
    }
    e->max_slots = 1;
    for (int st = 0; st < e->n_stages; st++) {
        if (!e->stage[st]) continue;
        int k = slots[st] > 0 ? slots[st] : 1;
        if (k != e->stage[st]->n_slots || split[st] != e->stage[st]->split_backward)
            ct_stage_plan_slots(e->stage[st], k, split[st]);
        if (k > e->max_slots) e->max_slots = k;
    }
    free(e->slot_of);
    free(e->last_use);
    free(e->pending);
    e->max_mb = max_mb;
    size_t cells = (size_t)e->n_stages * (size_t)max_mb;
    e->slot_of = ct_xmalloc(cells * sizeof(int));
    e->last_use = ct_xmalloc(cells * sizeof(int));
    e->pending = ct_xcalloc((size_t)e->n_stages * (size_t)e->max_slots, sizeof(ct_comm_handle));
    int longest = 0;
    for (int i = 0; i < n; i++)
        if (schedules[i]->count > longest) longest = schedules[i]->count;
    if (longest > e->timeline_cap) {
        free(e->t_start);
        free(e->t_end);
        free(e->early);
        e->timeline_cap = longest;
        e->early = ct_xcalloc((size_t)longest, sizeof(ct_comm_handle));
        e->t_start = ct_xcalloc((size_t)longest, sizeof(double));
        e->t_end = ct_xcalloc((size_t)longest, sizeof(double));
    }
    for (size_t i = 0; i < cells; i++) e->slot_of[i] = -1;
    return CT_OK;
}

// ------------------------------------------------------------------ slots

static int cell(const ct_executor *e, int stage, int mb) { return stage * e->max_mb + mb; }

static ct_act_slot *slot_for(ct_executor *e, int stage, int mb, const ct_microbatch *mbs) {
    ct_stage *s = e->stage[stage];
    int *held = &e->slot_of[cell(e, stage, mb)];
    if (*held >= 0) return &s->slots[*held];
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].mb >= 0) continue;
        ct_comm_wait(&e->pending[stage * e->max_slots + i]);  // a send may still read it
        ct_act_slot *a = &s->slots[i];
        a->mb = mb;
        a->inputs = mbs[mb].inputs;
        a->targets = mbs[mb].targets;
        a->docs = mbs[mb].docs;
        a->rope_pos = mbs[mb].rope_pos;
        a->loss_sum = e->loss_sum;
        *held = i;
        return a;
    }
    ct_fatal("executor", "stage %d has no free activation slot for micro-batch %d (%d planned)", stage, mb,
             s->n_slots);
}

static void give_back(ct_executor *e, int stage, int mb) {
    int *held = &e->slot_of[cell(e, stage, mb)];
    if (*held < 0) return;
    e->stage[stage]->slots[*held].mb = -1;
    *held = -1;
}

// ------------------------------------------------------------------ point to point

// Distinct tags per (stage, micro-batch, direction), so messages in flight never match wrongly.
static int tag_of(const ct_executor *e, int stage, int mb, int backward) {
    return (mb * e->n_stages + stage) * 2 + backward;
}

static int peer_of(const ct_executor *e, int stage, const char *what) {
    if (!e->pp || !e->stage_rank || stage < 0 || stage >= e->n_stages)
        ct_fatal("executor", "%s with stage %d: no pipeline stage there", what, stage);
    return e->stage_rank[stage];
}

static void send(ct_executor *e, int stage, int mb, int to_stage, ct_tensor buf, int backward, const char *what) {
    int slot = e->slot_of[cell(e, stage, mb)];
    ct_comm_handle *h = &e->pending[stage * e->max_slots + slot];
    ct_comm_wait(h);
    // The receiver tags by its own (stage, mb, direction): the stage it receives for.
    *h = ct_comm_send_start(e->pp, buf.data, (size_t)ct_tensor_numel(buf), buf.dtype, peer_of(e, to_stage, what),
                            tag_of(e, backward ? stage - 1 : stage + 1, mb, backward));
}

// A receive's destination: the slot's input (RECV_F) or its residual gradient (RECV_B).
static ct_tensor recv_buffer(ct_stage *st, const ct_action *a, ct_act_slot *slot) {
    return a->kind == CT_ACT_RECV_F ? ct_stage_input(st, slot) : ct_stage_grad(st, slot);
}

static ct_comm_handle recv_start(ct_executor *e, const ct_action *a, ct_act_slot *slot) {
    int backward = a->kind == CT_ACT_RECV_B;
    ct_tensor buf = recv_buffer(e->stage[a->stage], a, slot);
    return ct_comm_recv_start(e->pp, buf.data, (size_t)ct_tensor_numel(buf), buf.dtype,
                              peer_of(e, backward ? a->stage + 1 : a->stage - 1, ct_action_kind_name(a->kind)),
                              tag_of(e, a->stage, a->mb, backward));
}

// Receive i: completes the copy posted ahead of time, or receives now.
static void recv(ct_executor *e, int i, const ct_action *a, ct_act_slot *slot) {
    if (!e->early[i].group) e->early[i] = recv_start(e, a, slot);
    ct_comm_wait(&e->early[i]);
}

// Before compute action i runs, the list's next receive is posted, so its data travels while
// this rank computes. A gradient goes into a slot that is already held; an activation takes a
// slot only if one is free now (never one a later action was planned to use).
static void post_next_receive(ct_executor *e, const ct_schedule *s, int i, const ct_microbatch *mbs) {
    if (!e->pp) return;
    int j = i + 1;
    while (j < s->count && s->actions[j].kind != CT_ACT_RECV_F && s->actions[j].kind != CT_ACT_RECV_B) j++;
    if (j == s->count || j >= e->timeline_cap || e->early[j].group) return;
    const ct_action *a = &s->actions[j];
    ct_stage *st = e->stage[a->stage];
    bool held = e->slot_of[cell(e, a->stage, a->mb)] >= 0, free_slot = false;
    for (int k = 0; k < st->n_slots && !held; k++) free_slot |= st->slots[k].mb < 0;
    if (!held && (a->kind == CT_ACT_RECV_B || !free_slot)) return;
    e->early[j] = recv_start(e, a, slot_for(e, a->stage, a->mb, mbs));
}

// ------------------------------------------------------------------ stages on one rank

// Consecutive stages on this rank (ZBV's turn, or a test's placement) pass tensors by copy, not
// by message: the input is pulled from the previous stage's held slot at forward, the gradient
// pushed into the previous stage's held slot after backward (both slots are held then: a stage's
// slot lives until its own backward, which comes after the next stage's).
static bool local(const ct_executor *e, int stage) { return stage >= 0 && stage < e->n_stages && e->stage[stage]; }

static ct_act_slot *held_slot(ct_executor *e, int stage, int mb, const char *why) {
    int i = e->slot_of[cell(e, stage, mb)];
    if (i < 0) ct_fatal("executor", "stage %d holds no activations of micro-batch %d (%s)", stage, mb, why);
    return &e->stage[stage]->slots[i];
}

static void copy_tensor(const ct_kernels *k, ct_tensor dst, ct_tensor src) {
    k->copy(dst.data, src.data, ct_tensor_bytes(src));
}

static void pull_input(ct_executor *e, int stage, int mb, ct_act_slot *slot) {
    if (e->stage[stage]->has_embedding || !local(e, stage - 1)) return;
    ct_act_slot *prev = held_slot(e, stage - 1, mb, "forward input");
    copy_tensor(e->stage[stage]->k, ct_stage_input(e->stage[stage], slot), ct_stage_output(e->stage[stage - 1], prev));
}

static void push_grad(ct_executor *e, int stage, int mb, ct_act_slot *slot) {
    if (!local(e, stage - 1)) return;
    ct_act_slot *prev = held_slot(e, stage - 1, mb, "output gradient");
    copy_tensor(e->stage[stage]->k, ct_stage_grad(e->stage[stage - 1], prev), ct_stage_grad(e->stage[stage], slot));
}

// ------------------------------------------------------------------ running

// Profiling: one span per action, named by what it does and its token ("forward 0F3"), with
// the stage and micro-batch as arguments. Called only while spans are recorded.
static int trace_action(const ct_action *a) {
    static const char *const names[CT_ACT_NKINDS] = {
        "forward", "backward", "backward_input", "backward_weight", "send_f", "recv_f",
        "send_b",  "recv_b",   "unshard",        "reshard",         "reduce_grads",
    };
    char tok[48];
    ct_action_format(a, tok, sizeof tok);
    const char *name = (unsigned)a->kind < CT_ACT_NKINDS ? names[a->kind] : "action";
    return ct_trace_begin_full(CT_TRACE_ACTION, name, tok, "stage", a->stage, "mb", a->mb);
}

// UNSHARD / RESHARD of one stage: every parameter group it computes.
static void stage_sharding(ct_stage *st, bool unshard) {
    const ct_weight_ops *w = &st->ops.weights;
    void (*fn)(void *, int) = unshard ? w->unshard : w->reshard;
    if (!fn) return;
    int groups[st->cfg.n_layers + 2];
    int n = ct_stage_groups(st, groups);
    for (int i = 0; i < n; i++) fn(w->ctx, groups[i]);
}

static void reshard_all(ct_executor *e) {
    // Stages of one rank usually share one weight strategy: finish each context once.
    for (int i = 0; i < e->n_stages; i++) {
        ct_stage *s = e->stage[i];
        if (!s || !s->ops.weights.finish) continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = e->stage[j] && e->stage[j]->ops.weights.ctx == s->ops.weights.ctx &&
                   e->stage[j]->ops.weights.finish == s->ops.weights.finish;
        if (!seen) s->ops.weights.finish(s->ops.weights.ctx);
    }
}

void ct_executor_run_into(ct_executor *e, const ct_schedule *s, const ct_microbatch *mbs, int n_mb, bool training,
                          float grad_scale, double *loss_sum) {
    if (n_mb > e->max_mb) ct_fatal("executor", "%d micro-batches, but the plan was made for %d", n_mb, e->max_mb);
    last_uses(e, s, e->max_mb, e->last_use);
    e->loss_sum = loss_sum;
    // The weights stay as they are while the list runs (the optimizer steps between runs): the
    // stages may keep what they derive from them (packed bf16 weights) until the end of the run.
    for (int st = 0; st < e->n_stages; st++)
        if (e->stage[st]) ct_stage_weights_fixed(e->stage[st], true);
    for (int i = 0; i < s->count; i++) {
        const ct_action *a = &s->actions[i];
        if (e->trace) {
            char tok[48];
            ct_action_format(a, tok, sizeof tok);
            fprintf(stderr, "[executor] %s\n", tok);
        }
        ct_stage *st = a->stage >= 0 ? e->stage[a->stage] : NULL;
        ct_act_slot *slot = st && a->mb >= 0 ? slot_for(e, a->stage, a->mb, mbs) : NULL;
        if (i < e->timeline_cap) e->t_start[i] = ct_now_seconds();
        int span = ct_trace_on() ? trace_action(a) : -1;
        switch (a->kind) {
        case CT_ACT_FORWARD:
            post_next_receive(e, s, i, mbs);
            pull_input(e, a->stage, a->mb, slot);
            ct_stage_forward(st, slot, training, grad_scale);  // the head adds to *loss_sum
            break;
        case CT_ACT_BACKWARD:
            post_next_receive(e, s, i, mbs);
            ct_stage_backward(st, slot);
            push_grad(e, a->stage, a->mb, slot);
            break;
        case CT_ACT_BACKWARD_INPUT:
            post_next_receive(e, s, i, mbs);
            ct_stage_backward_input(st, slot);
            push_grad(e, a->stage, a->mb, slot);
            break;
        case CT_ACT_BACKWARD_WEIGHT:
            post_next_receive(e, s, i, mbs);
            ct_stage_backward_weight(st, slot);
            break;
        case CT_ACT_SEND_F: send(e, a->stage, a->mb, a->stage + 1, ct_stage_output(st, slot), 0, "SEND_F"); break;
        case CT_ACT_RECV_F: recv(e, i, a, slot); break;
        case CT_ACT_SEND_B: send(e, a->stage, a->mb, a->stage - 1, ct_stage_grad(st, slot), 1, "SEND_B"); break;
        case CT_ACT_RECV_B: recv(e, i, a, slot); break;
        case CT_ACT_REDUCE_GRADS:
            for (int r = 0; r < e->n_reducers; r++) e->reducers[r].fn(e->reducers[r].ctx);
            break;
        case CT_ACT_UNSHARD: stage_sharding(st, true); break;
        case CT_ACT_RESHARD:
            if (st) stage_sharding(st, false);
            else reshard_all(e);
            break;
        default: ct_fatal("executor", "unknown action kind %d", (int)a->kind);
        }
        ct_trace_end(span);
        if (i < e->timeline_cap) e->t_end[i] = ct_now_seconds();
        if (slot && e->last_use[cell(e, a->stage, a->mb)] == i) give_back(e, a->stage, a->mb);
        // The forward that pulled its input from the previous stage's slot may be its last use.
        if (a->kind == CT_ACT_FORWARD && local(e, a->stage - 1) && e->last_use[cell(e, a->stage - 1, a->mb)] == i)
            give_back(e, a->stage - 1, a->mb);
    }
    for (int i = 0; i < e->n_stages * e->max_slots; i++) ct_comm_wait(&e->pending[i]);
    for (int st = 0; st < e->n_stages; st++)
        if (e->stage[st]) ct_stage_weights_fixed(e->stage[st], false);
    e->timeline_count = s->count < e->timeline_cap ? s->count : e->timeline_cap;
    e->loss_sum = NULL;
}

double ct_executor_run(ct_executor *e, const ct_schedule *s, const ct_microbatch *mbs, int n_mb, bool training,
                       float grad_scale) {
    const ct_kernels *k = NULL;
    for (int i = 0; i < e->n_stages && !k; i++)
        if (e->stage[i]) k = e->stage[i]->k;
    if (!k) ct_fatal("executor", "no stage of the model runs on this rank");
    if (!e->own_loss) e->own_loss = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OTHER, sizeof(double));
    k->zero(e->own_loss, sizeof(double));
    ct_executor_run_into(e, s, mbs, n_mb, training, grad_scale, e->own_loss);
    double loss;
    k->copy_to_host(&loss, e->own_loss, sizeof loss);  // the run's one read of its loss
    return loss;
}
