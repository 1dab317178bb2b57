// The lowering passes of parallel/schedule_lowering.h, one after the other.
#include "parallel/schedule_lowering.h"

// Adds sends and receives around a compute order, then the step's tail.
void ct_schedule_add_comms(const ct_schedule *compute, const int *stage_rank, int n_stages, bool training,
                           ct_schedule *out) {
    for (int i = 0; i < compute->count; i++) {
        ct_action a = compute->actions[i];
        int s = a.stage, here = stage_rank[s];
        bool prev_away = s > 0 && stage_rank[s - 1] != here;
        bool next_away = s + 1 < n_stages && stage_rank[s + 1] != here;
        bool input_grad = a.kind == CT_ACT_BACKWARD || a.kind == CT_ACT_BACKWARD_INPUT;
        if (a.kind == CT_ACT_FORWARD && prev_away) ct_schedule_push(out, CT_ACT_RECV_F, s, a.mb);
        if (input_grad && next_away) ct_schedule_push(out, CT_ACT_RECV_B, s, a.mb);
        ct_schedule_push(out, a.kind, s, a.mb);
        if (a.kind == CT_ACT_FORWARD && next_away) ct_schedule_push(out, CT_ACT_SEND_F, s, a.mb);
        if (input_grad && prev_away) ct_schedule_push(out, CT_ACT_SEND_B, s, a.mb);
    }
    if (training) ct_schedule_push(out, CT_ACT_REDUCE_GRADS, -1, -1);
    ct_schedule_push(out, CT_ACT_RESHARD, -1, -1);
}

// Forwards only, micro-batch-major over this rank's stages, then the sends and receives.
void ct_schedule_forward_only(const int *stage_rank, int n_stages, int me, int n_mb, ct_schedule *out) {
    ct_schedule compute;
    ct_schedule_init(&compute);
    for (int mb = 0; mb < n_mb; mb++)
        for (int st = 0; st < n_stages; st++)
            if (stage_rank[st] == me) ct_schedule_push(&compute, CT_ACT_FORWARD, st, mb);
    ct_schedule_add_comms(&compute, stage_rank, n_stages, false, out);
    ct_schedule_free(&compute);
}

// Wraps each stage's span of actions in UNSHARD ... RESHARD.
void ct_schedule_unshard_per_stage(ct_schedule *s, int n_stages) {
    int first[n_stages], last[n_stages];
    for (int st = 0; st < n_stages; st++) first[st] = last[st] = -1;
    for (int i = 0; i < s->count; i++) {
        int st = s->actions[i].stage;
        if (st < 0 || s->actions[i].mb < 0) continue;
        if (first[st] < 0) first[st] = i;
        last[st] = i;
    }
    ct_schedule out;
    ct_schedule_init(&out);
    for (int i = 0; i < s->count; i++) {  // (first[st] and last[st] are actions of stage st)
        const ct_action *a = &s->actions[i];
        int st = a->stage;
        bool counted = st >= 0 && a->mb >= 0;
        if (counted && first[st] == i) ct_schedule_push(&out, CT_ACT_UNSHARD, st, -1);
        ct_schedule_push(&out, a->kind, a->stage, a->mb);
        if (counted && last[st] == i) ct_schedule_push(&out, CT_ACT_RESHARD, st, -1);
    }
    ct_schedule_free(s);
    *s = out;
}
