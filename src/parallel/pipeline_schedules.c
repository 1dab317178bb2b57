// Placement, schedule names, validation and the generators of pipeline_schedules.h.
//
// Each generator first writes a rank's compute order (F, B, I, W only), in the order PyTorch's
// torch.distributed.pipelining builds them (the runtime TorchTitan uses), so a schedule named
// here runs the same order as there; ct_schedule_add_comms (parallel/schedule_lowering.c) then
// puts the sends and receives around them.
#include "parallel/pipeline_schedules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "parallel/schedule_lowering.h"

// ------------------------------------------------------------------ placement

int ct_pp_stage_rank(ct_pp_placement placement, int stage, int pp) {
    int chunk = stage / pp, pos = stage % pp;
    if (placement == CT_PP_V_SHAPE && chunk % 2 == 1) return pp - 1 - pos;  // coming back up the V
    return pos;
}

void ct_pp_stage_ranks(ct_pp_placement placement, int pp, int vpp, int *stage_rank) {
    for (int s = 0; s < pp * vpp; s++) stage_rank[s] = ct_pp_stage_rank(placement, s, pp);
}

// ------------------------------------------------------------------ names

static const struct {
    ct_pp_kind kind;
    const char *name;  // matched case-insensitively; the first per kind is its TorchTitan name
} names[] = {
    {CT_PP_GPIPE, "GPipe"},
    {CT_PP_1F1B, "1F1B"},
    {CT_PP_INTERLEAVED_1F1B, "Interleaved1F1B"},
    {CT_PP_LOOPED_BFS, "LoopedBFS"},
    {CT_PP_INTERLEAVED_ZB, "InterleavedZeroBubble"},
    {CT_PP_ZB_H1, "zb_h1"},
    {CT_PP_ZBV, "ZBVZeroBubble"},
    {CT_PP_INTERLEAVED_1F1B, "interleaved_1f1b"},
    {CT_PP_LOOPED_BFS, "looped_bfs"},
    {CT_PP_INTERLEAVED_ZB, "interleaved_zb"},
    {CT_PP_ZB_H1, "zbh1"},
    {CT_PP_ZB_H1, "zb1p"},
    {CT_PP_ZBV, "zbv"},
};
enum { N_NAMES = sizeof names / sizeof names[0] };

ct_status ct_pp_kind_parse(const char *name, ct_pp_kind *kind) {
    for (int i = 0; name && i < N_NAMES; i++)
        if (!strcasecmp(name, names[i].name)) {
            *kind = names[i].kind;
            return CT_OK;
        }
    return ct_set_error("pipeline schedule '%s' is unknown: use GPipe, 1F1B, Interleaved1F1B, LoopedBFS, "
                        "InterleavedZeroBubble, ZBVZeroBubble (any case) or gpipe, 1f1b, interleaved_1f1b, "
                        "looped_bfs, zb_h1, zbv",
                        name ? name : "(none)");
}

const char *ct_pp_kind_name(ct_pp_kind kind) {
    for (int i = 0; i < N_NAMES; i++)
        if (names[i].kind == kind) return names[i].name;
    return "?";
}

ct_pp_placement ct_pp_kind_placement(ct_pp_kind kind) { return kind == CT_PP_ZBV ? CT_PP_V_SHAPE : CT_PP_ROUND_ROBIN; }

ct_status ct_pp_placement_of(const char *name, ct_pp_placement *placement) {
    ct_pp_kind kind = CT_PP_GPIPE;
    if (ct_pp_kind_parse(name, &kind)) return CT_ERR;
    *placement = ct_pp_kind_placement(kind);
    return CT_OK;
}

bool ct_pp_kind_splits_backward(ct_pp_kind kind) {
    return kind == CT_PP_INTERLEAVED_ZB || kind == CT_PP_ZB_H1 || kind == CT_PP_ZBV;
}

// ------------------------------------------------------------------ validation

ct_status ct_pp_validate(ct_pp_kind kind, int pp, int vpp, int n_mb) {
    if ((unsigned)kind >= CT_PP_NKINDS) return ct_set_error("pipeline schedule kind %d is unknown", (int)kind);
    const char *name = ct_pp_kind_name(kind);
    if (pp < 1) return ct_set_error("%s: pipeline_degree must be 1 or more (got %d)", name, pp);
    if (n_mb < 1) return ct_set_error("%s: micro-batches must be 1 or more (got %d)", name, n_mb);
    switch (kind) {
    case CT_PP_GPIPE:
    case CT_PP_1F1B:
    case CT_PP_ZB_H1:
        if (vpp != 1)
            return ct_set_error("%s runs one stage per rank (got vpp %d): use vpp 1, or %s for more", name,
                                vpp, kind == CT_PP_ZB_H1 ? "InterleavedZeroBubble" : "Interleaved1F1B or LoopedBFS");
        break;
    case CT_PP_INTERLEAVED_1F1B:
    case CT_PP_LOOPED_BFS:
        if (vpp < 2)
            return ct_set_error("%s needs 2 or more stages per rank (got vpp %d): use vpp 2, or %s for one",
                                name, vpp, kind == CT_PP_LOOPED_BFS ? "GPipe" : "1F1B");
        break;
    case CT_PP_INTERLEAVED_ZB:
        if (vpp < 1) return ct_set_error("%s needs 1 or more stages per rank (got vpp %d)", name, vpp);
        break;
    case CT_PP_ZBV:
        if (vpp != 2) return ct_set_error("%s needs exactly 2 stages per rank (got vpp %d): use vpp 2", name, vpp);
        break;
    default: break;
    }
    // Megatron's interleaved order walks micro-batches in rounds of pp: a partial round has no order.
    if ((kind == CT_PP_INTERLEAVED_1F1B || (kind == CT_PP_INTERLEAVED_ZB && vpp > 1)) && n_mb % pp != 0)
        return ct_set_error("%s needs micro-batches to be a multiple of pipeline_degree %d (got %d): use %d, %d, %d...",
                            name, pp, n_mb, pp, 2 * pp, 3 * pp);
    return CT_OK;
}

// ------------------------------------------------------------------ compute orders (one rank)

static void push(ct_schedule *s, ct_action_kind k, int stage, int mb) { ct_schedule_push(s, k, stage, mb); }

static void gpipe_rank(ct_schedule *c, int r, int n_mb) {
    for (int m = 0; m < n_mb; m++) push(c, CT_ACT_FORWARD, r, m);
    for (int m = 0; m < n_mb; m++) push(c, CT_ACT_BACKWARD, r, m);
}

// Warm-up: the forwards that fill the pipeline below this rank (pp-1-r of them); then one forward,
// one backward; then the backwards left. Holds at most pp - r micro-batches.
static void one_f_one_b_rank(ct_schedule *c, int r, int pp, int n_mb) {
    int warm = pp - 1 - r < n_mb ? pp - 1 - r : n_mb;
    for (int m = 0; m < warm; m++) push(c, CT_ACT_FORWARD, r, m);
    for (int i = 0; i < n_mb; i++) {
        if (warm + i < n_mb) push(c, CT_ACT_FORWARD, r, warm + i);
        push(c, CT_ACT_BACKWARD, r, i);
    }
}

// Every micro-batch through each local stage in turn; backward the other way round, latest
// micro-batch first (PyTorch's ScheduleLoopedBFS).
static void looped_bfs_rank(ct_schedule *c, int r, int pp, int vpp, int n_mb) {
    for (int k = 0; k < vpp; k++)
        for (int m = 0; m < n_mb; m++) push(c, CT_ACT_FORWARD, k * pp + r, m);
    for (int k = vpp - 1; k >= 0; k--)
        for (int m = n_mb - 1; m >= 0; m--) push(c, CT_ACT_BACKWARD, k * pp + r, m);
}

// Interleaved 1F1B (Megatron's order) and its zero-bubble variant (PyTorch's _get_1f1b_rank_ops).
// Operations come in rounds of `per_round` micro-batches per local stage: forward op k runs local
// stage (k / per_round) % vpp, backward op j local stage vpp-1 - (j / per_round) % vpp, each on
// that stage's next micro-batch. Warm-up: (vpp-1) rounds plus `factor` ops per hop from the last
// rank (2 for 1F1B: a forward and a backward per hop; 1 for zero bubble, whose W fills the rest).
// Zero bubble runs I instead of B and, after the first r steady steps, one W per step for the
// oldest I still waiting; the W left over go at the end.
static void interleaved_rank(ct_schedule *c, int r, int pp, int vpp, int n_mb, bool zero_bubble) {
    int per_round = n_mb < pp ? n_mb : pp, total = vpp * n_mb;
    int warm = (vpp - 1) * per_round + (zero_bubble ? 1 : 2) * (pp - 1 - r);
    if (warm > total) warm = total;
    int n_stages = pp * vpp;
    int *fmb = calloc((size_t)n_stages * 3, sizeof(int)), *bmb = fmb + n_stages, *wmb = bmb + n_stages;
    int *bwd_stage = malloc((size_t)total * sizeof(int));  // stage of each backward, in order
    if (!fmb || !bwd_stage) ct_fatal("pipeline", "out of memory");
    int n_bwd = 0, n_w = 0;
    ct_action_kind bk = zero_bubble ? CT_ACT_BACKWARD_INPUT : CT_ACT_BACKWARD;
    for (int op = 0; op < total + warm; op++) {
        if (op < total) {
            int s = ((op / per_round) % vpp) * pp + r;
            push(c, CT_ACT_FORWARD, s, fmb[s]++);
        }
        if (op < warm) continue;
        int s = (vpp - 1 - ((op - warm) / per_round) % vpp) * pp + r;
        push(c, bk, s, bmb[s]++);
        bwd_stage[n_bwd++] = s;
        if (zero_bubble && op - warm >= r) {
            int w = bwd_stage[n_w++];
            push(c, CT_ACT_BACKWARD_WEIGHT, w, wmb[w]++);
        }
    }
    while (zero_bubble && n_w < n_bwd) {
        int w = bwd_stage[n_w++];
        push(c, CT_ACT_BACKWARD_WEIGHT, w, wmb[w]++);
    }
    free(fmb);
    free(bwd_stage);
}

// ZBV (PyTorch's ScheduleZBVZeroBubble): rank r holds stage r (chunk 0, going down the V) and
// stage 2pp-1-r (chunk 1, coming back). Built for max(2pp-1, n_mb) micro-batches, the ones past
// n_mb then dropped: removing a micro-batch's actions from a consistent order leaves one.
typedef struct {
    ct_schedule *c;
    int n_mb;
} zbv_out;

static void zbv_push(zbv_out *o, ct_action_kind k, int stage, int mb) {
    if (mb < o->n_mb) push(o->c, k, stage, mb);
}

static void zbv_rank(ct_schedule *c, int r, int pp, int n_mb) {
    zbv_out o = {c, n_mb};
    int n = 2 * pp - 1 > n_mb ? 2 * pp - 1 : n_mb;
    int s0 = r, s1 = 2 * pp - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int i = 0; i < 2 * (pp - r) - 1; i++) zbv_push(&o, CT_ACT_FORWARD, s0, f0++);
    for (int i = 0; i < r; i++) {
        zbv_push(&o, CT_ACT_FORWARD, s1, f1++);
        zbv_push(&o, CT_ACT_FORWARD, s0, f0++);
    }
    for (int i = 0; i < pp - r; i++) {
        zbv_push(&o, CT_ACT_FORWARD, s1, f1++);
        zbv_push(&o, CT_ACT_BACKWARD_INPUT, s1, b1);
        zbv_push(&o, CT_ACT_BACKWARD_WEIGHT, s1, b1++);
    }
    while (f1 < f0 || f0 < n) {  // steady: F0 I0 W0 F1 I1 W1
        if (f0 < n) zbv_push(&o, CT_ACT_FORWARD, s0, f0++);
        zbv_push(&o, CT_ACT_BACKWARD_INPUT, s0, b0);
        zbv_push(&o, CT_ACT_BACKWARD_WEIGHT, s0, b0++);
        zbv_push(&o, CT_ACT_FORWARD, s1, f1++);
        zbv_push(&o, CT_ACT_BACKWARD_INPUT, s1, b1);
        zbv_push(&o, CT_ACT_BACKWARD_WEIGHT, s1, b1++);
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < r; i++) {  // cool-down: input gradients first, weights fill the gaps
        zbv_push(&o, CT_ACT_BACKWARD_INPUT, s0, b0++);
        zbv_push(&o, CT_ACT_BACKWARD_INPUT, s1, b1++);
    }
    for (int i = 0; i < pp - r; i++) {
        zbv_push(&o, CT_ACT_BACKWARD_INPUT, s0, b0++);
        zbv_push(&o, CT_ACT_BACKWARD_WEIGHT, s0, w0++);
    }
    while (w1 < b1) zbv_push(&o, CT_ACT_BACKWARD_WEIGHT, s1, w1++);
    while (w0 < b0) zbv_push(&o, CT_ACT_BACKWARD_WEIGHT, s0, w0++);
}

// ------------------------------------------------------------------ generators

ct_status ct_pp_generate(ct_pp_kind kind, int pp, int vpp, int n_mb, ct_schedule *lists) {
    if (ct_pp_validate(kind, pp, vpp, n_mb)) return CT_ERR;
    int n_stages = pp * vpp;
    int *stage_rank = ct_xmalloc((size_t)n_stages * sizeof(int));
    ct_pp_stage_ranks(ct_pp_kind_placement(kind), pp, vpp, stage_rank);
    for (int r = 0; r < pp; r++) {
        ct_schedule compute;
        ct_schedule_init(&compute);
        switch (kind) {
        case CT_PP_GPIPE: gpipe_rank(&compute, r, n_mb); break;
        case CT_PP_1F1B: one_f_one_b_rank(&compute, r, pp, n_mb); break;
        case CT_PP_INTERLEAVED_1F1B: interleaved_rank(&compute, r, pp, vpp, n_mb, false); break;
        case CT_PP_LOOPED_BFS: looped_bfs_rank(&compute, r, pp, vpp, n_mb); break;
        case CT_PP_INTERLEAVED_ZB:
        case CT_PP_ZB_H1: interleaved_rank(&compute, r, pp, vpp, n_mb, true); break;
        case CT_PP_ZBV: zbv_rank(&compute, r, pp, n_mb); break;
        default: break;
        }
        ct_schedule_init(&lists[r]);
        ct_schedule_add_comms(&compute, stage_rank, n_stages, true, &lists[r]);
        ct_schedule_free(&compute);
    }
    free(stage_rank);
    return CT_OK;
}

ct_status ct_pp_schedule_build(const char *name, int pp, int vpp, int n_mb, ct_schedule *lists) {
    ct_pp_kind kind = CT_PP_GPIPE;
    if (ct_pp_kind_parse(name, &kind)) return CT_ERR;
    return ct_pp_generate(kind, pp, vpp, n_mb, lists);
}

ct_status ct_pp_generate_forward(ct_pp_placement placement, int pp, int vpp, int n_mb, ct_schedule *lists) {
    if (pp < 1 || vpp < 1 || n_mb < 1)
        return ct_set_error("forward-only pipeline: pipeline_degree, virtual stages and micro-batches must be 1 or "
                            "more (got %d, %d, %d)", pp, vpp, n_mb);
    int n_stages = pp * vpp;
    int *stage_rank = ct_xmalloc((size_t)n_stages * sizeof(int));
    ct_pp_stage_ranks(placement, pp, vpp, stage_rank);
    for (int r = 0; r < pp; r++) {
        ct_schedule compute;
        ct_schedule_init(&compute);
        // Increasing stage order is consistent across ranks: a stage's inputs come from lower stages.
        for (int s = 0; s < n_stages; s++)
            for (int m = 0; m < n_mb && stage_rank[s] == r; m++) push(&compute, CT_ACT_FORWARD, s, m);
        ct_schedule_init(&lists[r]);
        ct_schedule_add_comms(&compute, stage_rank, n_stages, false, &lists[r]);
        ct_schedule_free(&compute);
    }
    free(stage_rank);
    return CT_OK;
}

void ct_pp_lists_free(ct_schedule *lists, int pp) {
    for (int r = 0; lists && r < pp; r++) ct_schedule_free(&lists[r]);
}

void ct_pp_no_pipeline(ct_schedule *list, int n_mb, bool training) {
    ct_schedule_init(list);
    ct_schedule_accumulation(list, 0, n_mb, training);
}
