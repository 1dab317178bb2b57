// Pipeline schedules as data: placement, every generator at pp 2 and 4 through the all-rank
// simulator, the bubble each leaves against the textbook formulas, peak micro-batches in flight,
// the CSV round trip, and hand-made broken schedules refused with the action that breaks a rule.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipeline_schedules.h"
#include "test.h"

enum { MAX_PP = 8 };

typedef struct {
    int pp, vpp, n_mb, n_stages;
    ct_schedule lists[MAX_PP];
    int stage_rank[MAX_PP * 4];
    ct_pp_sim_result sim;
    ct_status gen, simst;
} run;

// Generates (kind, pp, vpp, m) and simulates it with the default costs (F 1, B 2, I 1, W 1).
static run *make_run(ct_pp_kind kind, int pp, int vpp, int n_mb) {
    run *r = calloc(1, sizeof *r);
    *r = (run){.pp = pp, .vpp = vpp, .n_mb = n_mb, .n_stages = pp * vpp};
    r->gen = ct_pp_generate(kind, pp, vpp, n_mb, r->lists);
    if (r->gen) return r;
    ct_pp_stage_ranks(ct_pp_kind_placement(kind), pp, vpp, r->stage_rank);
    r->simst = ct_pp_simulate(r->lists, pp, r->stage_rank, r->n_stages, n_mb, NULL, &r->sim);
    return r;
}

static void free_run(run *r) {
    if (!r->gen) ct_pp_lists_free(r->lists, r->pp);
    ct_pp_sim_result_free(&r->sim);
    free(r);
}

static const ct_pp_kind all_kinds[] = {CT_PP_GPIPE,     CT_PP_1F1B,           CT_PP_INTERLEAVED_1F1B, CT_PP_LOOPED_BFS,
                                       CT_PP_ZB_H1,     CT_PP_INTERLEAVED_ZB, CT_PP_ZBV};
enum { N_KINDS = sizeof all_kinds / sizeof all_kinds[0] };

static int vpp_of(ct_pp_kind k) {
    return k == CT_PP_GPIPE || k == CT_PP_1F1B || k == CT_PP_ZB_H1 ? 1 : 2;
}

static void test_placement(void) {
    // Round-robin: stage s on rank s % pp. V-shape, pp 4: 0 1 2 3 | 3 2 1 0.
    int want_v[8] = {0, 1, 2, 3, 3, 2, 1, 0};
    for (int s = 0; s < 8; s++) {
        CHECK(ct_pp_stage_rank(CT_PP_ROUND_ROBIN, s, 4) == s % 4, "round-robin stage %d", s);
        CHECK(ct_pp_stage_rank(CT_PP_V_SHAPE, s, 4) == want_v[s], "V stage %d on %d", s,
              ct_pp_stage_rank(CT_PP_V_SHAPE, s, 4));
    }
    ct_pp_placement p = CT_PP_ROUND_ROBIN;
    CHECK(ct_pp_placement_of("ZBVZeroBubble", &p) == CT_OK && p == CT_PP_V_SHAPE, "ZBV is V-shaped");
    CHECK(ct_pp_placement_of("interleaved_1f1b", &p) == CT_OK && p == CT_PP_ROUND_ROBIN, "interleaved is round-robin");
}

static void test_names(void) {
    struct { const char *name; ct_pp_kind kind; } ok[] = {
        {"GPipe", CT_PP_GPIPE}, {"gpipe", CT_PP_GPIPE}, {"1F1B", CT_PP_1F1B}, {"1f1b", CT_PP_1F1B},
        {"Interleaved1F1B", CT_PP_INTERLEAVED_1F1B}, {"interleaved_1f1b", CT_PP_INTERLEAVED_1F1B},
        {"LOOPEDBFS", CT_PP_LOOPED_BFS}, {"looped_bfs", CT_PP_LOOPED_BFS},
        {"InterleavedZeroBubble", CT_PP_INTERLEAVED_ZB}, {"zb_h1", CT_PP_ZB_H1}, {"ZB1P", CT_PP_ZB_H1},
        {"zbvzerobubble", CT_PP_ZBV}, {"zbv", CT_PP_ZBV},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ct_pp_kind k = CT_PP_NKINDS;
        CHECK(ct_pp_kind_parse(ok[i].name, &k) == CT_OK && k == ok[i].kind, "'%s' read as %d", ok[i].name, (int)k);
    }
    ct_pp_kind k;
    CHECK(ct_pp_kind_parse("2F2B", &k) == CT_ERR && strstr(ct_last_error(), "Interleaved1F1B"),
          "unknown name: %s", ct_last_error());
    CHECK(!strcmp(ct_pp_kind_name(CT_PP_ZBV), "ZBVZeroBubble"), "%s", ct_pp_kind_name(CT_PP_ZBV));
}

// What every generated list must hold: each micro-batch's F, and B or I + W, exactly once on
// every stage (B for the whole-backward kinds, I + W for zero bubble), on the stage's own rank;
// receives right before their consumer and sends right after their producer (the executor's
// convention); the step's tail last.
static void check_structure(const run *r, ct_pp_kind kind, const char *what) {
    int S = r->n_stages, M = r->n_mb;
    int *n = calloc((size_t)S * M * CT_ACT_NKINDS, sizeof(int));
    bool split = ct_pp_kind_splits_backward(kind);
    for (int rank = 0; rank < r->pp; rank++) {
        const ct_schedule *l = &r->lists[rank];
        CHECK(l->count >= 2 && l->actions[l->count - 2].kind == CT_ACT_REDUCE_GRADS &&
                  l->actions[l->count - 1].kind == CT_ACT_RESHARD && l->actions[l->count - 1].stage == -1,
              "%s rank %d does not end with REDUCE_GRADS RESHARD", what, rank);
        for (int i = 0; i < l->count; i++) {
            const ct_action *a = &l->actions[i];
            if (a->mb < 0) continue;
            CHECK(r->stage_rank[a->stage] == rank, "%s: stage %d on rank %d", what, a->stage, rank);
            n[((size_t)a->stage * M + a->mb) * CT_ACT_NKINDS + a->kind]++;
            const ct_action *next = i + 1 < l->count ? &l->actions[i + 1] : NULL, *prev = i ? &l->actions[i - 1] : NULL;
            if (a->kind == CT_ACT_RECV_F)
                CHECK(next && next->kind == CT_ACT_FORWARD && next->stage == a->stage && next->mb == a->mb,
                      "%s rank %d action %d: RECV_F not right before its F", what, rank, i);
            if (a->kind == CT_ACT_RECV_B)
                CHECK(next && (next->kind == CT_ACT_BACKWARD || next->kind == CT_ACT_BACKWARD_INPUT) &&
                          next->stage == a->stage && next->mb == a->mb,
                      "%s rank %d action %d: RECV_B not right before its B / I", what, rank, i);
            if (a->kind == CT_ACT_SEND_F)
                CHECK(prev && prev->kind == CT_ACT_FORWARD && prev->stage == a->stage && prev->mb == a->mb,
                      "%s rank %d action %d: SEND_F not right after its F", what, rank, i);
            if (a->kind == CT_ACT_SEND_B)
                CHECK(prev && (prev->kind == CT_ACT_BACKWARD || prev->kind == CT_ACT_BACKWARD_INPUT) &&
                          prev->stage == a->stage && prev->mb == a->mb,
                      "%s rank %d action %d: SEND_B not right after its B / I", what, rank, i);
        }
    }
    for (int s = 0; s < S; s++)
        for (int m = 0; m < M; m++) {
            int *c = &n[((size_t)s * M + m) * CT_ACT_NKINDS];
            bool once = c[CT_ACT_FORWARD] == 1 &&
                        (split ? c[CT_ACT_BACKWARD] == 0 && c[CT_ACT_BACKWARD_INPUT] == 1 && c[CT_ACT_BACKWARD_WEIGHT] == 1
                               : c[CT_ACT_BACKWARD] == 1 && c[CT_ACT_BACKWARD_INPUT] == 0 && c[CT_ACT_BACKWARD_WEIGHT] == 0);
            bool away_next = s + 1 < S && r->stage_rank[s + 1] != r->stage_rank[s];
            once = once && c[CT_ACT_SEND_F] == away_next && c[CT_ACT_RECV_B] == away_next;
            bool away_prev = s > 0 && r->stage_rank[s - 1] != r->stage_rank[s];
            once = once && c[CT_ACT_RECV_F] == away_prev && c[CT_ACT_SEND_B] == away_prev;
            CHECK(once, "%s: stage %d micro-batch %d: F %d B %d I %d W %d SEND_F %d RECV_F %d SEND_B %d RECV_B %d",
                  what, s, m, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
        }
    free(n);
}

// Every kind at pp 2 and 4 with m = pp, 2pp and an odd allowed count (3pp for the interleaved
// kinds, whose m must be a multiple of pp; 2pp+1 elsewhere): generated, legal, simulated.
static void test_every_kind_runs(void) {
    for (int k = 0; k < N_KINDS; k++)
        for (int pp = 2; pp <= 4; pp += 2) {
            ct_pp_kind kind = all_kinds[k];
            bool multiple = kind == CT_PP_INTERLEAVED_1F1B || kind == CT_PP_INTERLEAVED_ZB;
            int ms[3] = {pp, 2 * pp, multiple ? 3 * pp : 2 * pp + 1};
            for (int j = 0; j < 3; j++) {
                char what[96];
                snprintf(what, sizeof what, "%s pp %d vpp %d m %d", ct_pp_kind_name(kind), pp, vpp_of(kind), ms[j]);
                run *r = make_run(kind, pp, vpp_of(kind), ms[j]);
                CHECK(r->gen == CT_OK, "%s: %s", what, ct_last_error());
                CHECK(r->gen || r->simst == CT_OK, "%s: %s", what, ct_last_error());
                if (!r->gen) check_structure(r, kind, what);
                free_run(r);
            }
        }
}

// Beyond the counts above: every (kind, pp 1..4, vpp, m 1..3pp) the validator accepts must pass
// the simulator, and every one it refuses must say why in one line.
static void test_every_accepted_combination_runs(void) {
    int accepted = 0;
    for (int k = 0; k < N_KINDS; k++)
        for (int pp = 1; pp <= 4; pp++)
            for (int vpp = 1; vpp <= 3; vpp++)
                for (int m = 1; m <= 3 * pp + 1; m++) {
                    ct_pp_kind kind = all_kinds[k];
                    if (ct_pp_validate(kind, pp, vpp, m)) {
                        CHECK(!strchr(ct_last_error(), '\n') && strlen(ct_last_error()) > 20, "'%s'", ct_last_error());
                        continue;
                    }
                    accepted++;
                    run *r = make_run(kind, pp, vpp, m);
                    CHECK(r->gen == CT_OK && r->simst == CT_OK, "%s pp %d vpp %d m %d: %s", ct_pp_kind_name(kind), pp,
                          vpp, m, ct_last_error());
                    if (!r->gen && !r->simst) {
                        char what[96];
                        snprintf(what, sizeof what, "%s pp %d vpp %d m %d", ct_pp_kind_name(kind), pp, vpp, m);
                        check_structure(r, kind, what);
                    }
                    free_run(r);
                }
    CHECK(accepted > 100, "only %d combinations accepted", accepted);
}

static void test_invalid_combinations_refused(void) {
    struct { ct_pp_kind kind; int pp, vpp, m; const char *says; } bad[] = {
        {CT_PP_INTERLEAVED_1F1B, 4, 2, 6, "multiple of pipeline_degree 4 (got 6): use 4, 8, 12"},
        {CT_PP_INTERLEAVED_ZB, 4, 2, 6, "multiple of pipeline_degree 4"},
        {CT_PP_INTERLEAVED_1F1B, 2, 1, 4, "2 or more stages per rank"},
        {CT_PP_LOOPED_BFS, 2, 1, 4, "2 or more stages per rank"},
        {CT_PP_1F1B, 2, 2, 4, "one stage per rank"},
        {CT_PP_GPIPE, 2, 3, 4, "one stage per rank"},
        {CT_PP_ZB_H1, 2, 2, 4, "InterleavedZeroBubble"},
        {CT_PP_ZBV, 2, 1, 4, "exactly 2 stages per rank"},
        {CT_PP_ZBV, 2, 3, 4, "exactly 2 stages per rank"},
        {CT_PP_1F1B, 0, 1, 4, "pipeline_degree must be 1 or more"},
        {CT_PP_GPIPE, 2, 1, 0, "micro-batches must be 1 or more"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_schedule lists[MAX_PP];
        ct_status st = ct_pp_generate(bad[i].kind, bad[i].pp, bad[i].vpp, bad[i].m, lists);
        CHECK(st == CT_ERR, "case %zu accepted", i);
        CHECK(strstr(ct_last_error(), bad[i].says) && !strchr(ct_last_error(), '\n'), "case %zu: '%s'", i,
              ct_last_error());
    }
    ct_schedule lists[MAX_PP];
    CHECK(ct_pp_schedule_build("PipeDream", 2, 1, 4, lists) == CT_ERR && strstr(ct_last_error(), "PipeDream"), "%s",
          ct_last_error());
}

// Peak micro-batches holding activations per rank: 1F1B at most pp (rank 0 exactly pp once
// m >= pp), GPipe all m on every rank.
static void test_peak_in_flight(void) {
    for (int pp = 2; pp <= 4; pp += 2)
        for (int m = pp; m <= 3 * pp; m += pp) {
            run *a = make_run(CT_PP_1F1B, pp, 1, m), *g = make_run(CT_PP_GPIPE, pp, 1, m);
            CHECK(!a->simst && !g->simst, "%s", ct_last_error());
            if (!a->simst) {
                CHECK(a->sim.peak_in_flight[0] == pp, "1F1B pp %d m %d: rank 0 holds %d", pp, m, a->sim.peak_in_flight[0]);
                for (int r = 0; r < pp; r++)
                    CHECK(a->sim.peak_in_flight[r] == pp - r, "1F1B rank %d holds %d", r, a->sim.peak_in_flight[r]);
                for (int r = 0; r < pp; r++)
                    CHECK(ct_schedule_max_in_flight(&a->lists[r], r) == a->sim.peak_in_flight[r], "per-stage count");
            }
            for (int r = 0; !g->simst && r < pp; r++)
                CHECK(g->sim.peak_in_flight[r] == m, "GPipe rank %d holds %d of %d", r, g->sim.peak_in_flight[r], m);
            free_run(a);
            free_run(g);
        }
    // ZB-H1 keeps 1F1B's memory: its deferred W hold no more than pp micro-batches on any rank.
    run *z = make_run(CT_PP_ZB_H1, 4, 1, 8);
    for (int r = 0; !z->simst && r < 4; r++) CHECK(z->sim.peak_in_flight[r] <= 4, "ZB-H1 rank %d holds %d", r, z->sim.peak_in_flight[r]);
    free_run(z);
}

// GPipe with F 1, B 2 and free communication: every rank idles (p-1)(F+B) of (m+p-1)(F+B).
static void test_gpipe_bubble_is_textbook(void) {
    for (int pp = 2; pp <= 4; pp++)
        for (int m = 1; m <= 12; m++) {
            run *r = make_run(CT_PP_GPIPE, pp, 1, m);
            double want = (double)(pp - 1) / (m + pp - 1);
            CHECK(!r->simst, "%s", ct_last_error());
            if (!r->simst) {
                CHECK(fabs(r->sim.bubble - want) < 1e-9, "pp %d m %d: %.12f vs %.12f", pp, m, r->sim.bubble, want);
                CHECK(fabs(r->sim.makespan - 3.0 * (m + pp - 1)) < 1e-9, "makespan %g", r->sim.makespan);
                for (int k = 0; k < pp; k++) CHECK(fabs(r->sim.idle_frac[k] - want) < 1e-9, "rank %d", k);
            }
            free_run(r);
        }
}

// Interleaving beats 1F1B at the same p and m, and its simulated bubble equals the textbook
// (p-1)/(v m + p-1). Tolerance 1e-9 (rounding only): the formula assumes free communication and
// every virtual stage costing the same (F 1, B 2 each here), which is exactly what the simulator
// runs, and Megatron's order then idles each rank for exactly (p-1) virtual-stage F+B slots. With
// measured, unequal costs the two part, which is why the bench compares a run against this
// simulator fed with measured durations rather than against the formula.
static void test_interleaved_bubble(void) {
    printf("  p  v  m   1F1B   Interleaved  textbook   LoopedBFS  ZB-H1  InterleavedZB  ZBV\n");
    for (int pp = 2; pp <= 4; pp += 2)
        for (int m = pp; m <= 4 * pp; m *= 2) {
            int v = 2;
            run *a = make_run(CT_PP_1F1B, pp, 1, m), *i = make_run(CT_PP_INTERLEAVED_1F1B, pp, v, m);
            run *b = make_run(CT_PP_LOOPED_BFS, pp, v, m), *z = make_run(CT_PP_ZB_H1, pp, 1, m);
            run *iz = make_run(CT_PP_INTERLEAVED_ZB, pp, v, m), *zv = make_run(CT_PP_ZBV, pp, v, m);
            bool ok = !a->simst && !i->simst && !b->simst && !z->simst && !iz->simst && !zv->simst;
            CHECK(ok, "%s", ct_last_error());
            if (ok) {
                double want = (double)(pp - 1) / (v * m + pp - 1);
                printf("  %d  %d %2d   %.3f  %.3f        %.3f      %.3f      %.3f  %.3f          %.3f\n", pp, v, m,
                       a->sim.bubble, i->sim.bubble, want, b->sim.bubble, z->sim.bubble, iz->sim.bubble, zv->sim.bubble);
                CHECK(i->sim.bubble < a->sim.bubble, "interleaved %g vs 1F1B %g", i->sim.bubble, a->sim.bubble);
                CHECK(fabs(i->sim.bubble - want) < 1e-9, "interleaved pp %d m %d: %.12f vs textbook %.12f", pp, m,
                      i->sim.bubble, want);
            }
            free_run(a), free_run(i), free_run(b), free_run(z), free_run(iz), free_run(zv);
        }
    for (int pp = 2; pp <= 4; pp++)  // more virtual stages, odd pp
        for (int v = 2; v <= 4; v++)
            for (int m = pp; m <= 4 * pp; m += pp) {
                run *i = make_run(CT_PP_INTERLEAVED_1F1B, pp, v, m);
                double want = (double)(pp - 1) / (v * m + pp - 1);
                CHECK(!i->simst && fabs(i->sim.bubble - want) < 1e-9, "pp %d v %d m %d: %.12f vs %.12f (%s)", pp, v, m,
                      i->sim.bubble, want, i->simst ? ct_last_error() : "");
                free_run(i);
            }
}

// Zero bubble beats 1F1B at the same p and m (same total work: I + W = B).
static void test_zero_bubble_beats_1f1b(void) {
    for (int pp = 2; pp <= 4; pp += 2)
        for (int m = pp; m <= 4 * pp; m *= 2) {
            run *a = make_run(CT_PP_1F1B, pp, 1, m), *z = make_run(CT_PP_ZB_H1, pp, 1, m);
            run *iz = make_run(CT_PP_INTERLEAVED_ZB, pp, 2, m), *zv = make_run(CT_PP_ZBV, pp, 2, m);
            bool ok = !a->simst && !z->simst && !iz->simst && !zv->simst;
            CHECK(ok, "%s", ct_last_error());
            if (ok) {
                CHECK(z->sim.bubble < a->sim.bubble, "ZB-H1 pp %d m %d: %g vs 1F1B %g", pp, m, z->sim.bubble, a->sim.bubble);
                CHECK(iz->sim.bubble < a->sim.bubble, "InterleavedZB %g vs %g", iz->sim.bubble, a->sim.bubble);
                CHECK(zv->sim.bubble < a->sim.bubble, "ZBV pp %d m %d: %g vs 1F1B %g", pp, m, zv->sim.bubble, a->sim.bubble);
            }
            free_run(a), free_run(z), free_run(iz), free_run(zv);
        }
}

static bool same_lists(const ct_schedule *a, const ct_schedule *b, int pp) {
    for (int r = 0; r < pp; r++) {
        if (a[r].count != b[r].count) return false;
        for (int i = 0; i < a[r].count; i++)
            if (memcmp(&a[r].actions[i], &b[r].actions[i], sizeof(ct_action))) return false;
    }
    return true;
}

static void test_csv_round_trip(void) {
    for (int k = 0; k < N_KINDS; k++) {
        run *r = make_run(all_kinds[k], 4, vpp_of(all_kinds[k]), 8);
        char *text = ct_pp_schedule_format_csv(r->lists, 4);
        ct_schedule back[4];
        CHECK(ct_pp_schedule_parse_csv(text, 4, back) == CT_OK, "%s", ct_last_error());
        CHECK(same_lists(r->lists, back, 4), "%s: round trip differs", ct_pp_kind_name(all_kinds[k]));
        ct_pp_lists_free(back, 4);
        free(text);
        free_run(r);
    }
    // Through a file, as --pipeline_schedule_file reads it.
    run *r = make_run(CT_PP_ZBV, 2, 2, 4);
    const char *path = "/tmp/ct_test_pipeline_schedule.csv";
    CHECK(ct_pp_schedule_write_csv(path, r->lists, 2) == CT_OK, "%s", ct_last_error());
    ct_schedule back[3];  // room for the 3-row read refused below
    CHECK(ct_pp_schedule_read_csv(path, 2, back) == CT_OK && same_lists(r->lists, back, 2), "%s", ct_last_error());
    ct_pp_lists_free(back, 2);
    CHECK(ct_pp_schedule_read_csv(path, 3, back) == CT_ERR && strstr(ct_last_error(), "2 rows") &&
              strstr(ct_last_error(), path), "%s", ct_last_error());
    remove(path);
    free_run(r);
    // Hand-written: comments, blank lines, spaces and empty cells are fine.
    const char *hand = "# rank 0\n0F0, 0SEND_F0,,0RECV_B0,0B0,REDUCE_GRADS,RESHARD\n\n1RECV_F0,1F0,1B0,1SEND_B0,"
                       "REDUCE_GRADS,RESHARD\r\n";
    CHECK(ct_pp_schedule_parse_csv(hand, 2, back) == CT_OK && back[0].count == 6 && back[1].count == 6, "%s",
          ct_last_error());
    int sr[2] = {0, 1};
    ct_pp_sim_result sim;
    CHECK(ct_pp_simulate(back, 2, sr, 2, 1, NULL, &sim) == CT_OK, "%s", ct_last_error());
    CHECK(fabs(sim.makespan - 6) < 1e-12 && fabs(sim.bubble - 0.5) < 1e-12, "makespan %g bubble %g", sim.makespan,
          sim.bubble);
    ct_pp_sim_result_free(&sim);
    ct_pp_lists_free(back, 2);
    // Bad cells are named by row and column.
    CHECK(ct_pp_schedule_parse_csv("0F0,0B0\n1F0,1X0,1B0\n", 2, back) == CT_ERR &&
              strstr(ct_last_error(), "row 2, column 2") && strstr(ct_last_error(), "1X0"), "%s", ct_last_error());
    CHECK(ct_pp_schedule_parse_csv("0F0,0B0\n1F0 1B0\n", 2, back) == CT_ERR &&
              strstr(ct_last_error(), "row 2, column 1"), "%s", ct_last_error());
    CHECK(ct_pp_schedule_parse_csv("0F0\n1F0\n2F0\n", 2, back) == CT_ERR && strstr(ct_last_error(), "more than 2 rows"),
          "%s", ct_last_error());
    // A row of empty cells is refused, not read as a rank with no actions (found by fuzz_schedule_csv).
    CHECK(ct_pp_schedule_parse_csv("0F0,0B0\n, ,\n", 2, back) == CT_ERR &&
              strstr(ct_last_error(), "row 2 (line 2) has no actions"), "%s", ct_last_error());
}

// Parses "rank0 | rank1 | ..." and simulates it with stage s on rank s % pp (or `sr`).
static ct_status check_text(const char *text, int pp, int n_stages, int n_mb, const int *sr) {
    ct_schedule lists[MAX_PP];
    char *copy = strdup(text), *save = NULL;
    int r = 0;
    for (char *row = strtok_r(copy, "|", &save); row && r < pp; row = strtok_r(NULL, "|", &save))
        if (ct_schedule_parse(&lists[r++], row)) ct_fatal("test", "bad text %s", row);
    free(copy);
    int rr[MAX_PP * 4];
    for (int s = 0; s < n_stages; s++) rr[s] = sr ? sr[s] : s % pp;
    ct_pp_sim_result sim;
    ct_status st = ct_pp_simulate(lists, pp, rr, n_stages, n_mb, NULL, &sim);
    ct_pp_sim_result_free(&sim);
    ct_pp_lists_free(lists, pp);
    return st;
}

static void test_broken_schedules_refused(void) {
    const char *good = "0F0 0SEND_F0 0RECV_B0 0B0 REDUCE_GRADS RESHARD | 1RECV_F0 1F0 1B0 1SEND_B0 REDUCE_GRADS RESHARD";
    CHECK(check_text(good, 2, 2, 1, NULL) == CT_OK, "%s", ct_last_error());
    struct { const char *text, *names, *says; int n_mb; } bad[] = {
        // A missing send: rank 0 never sends stage 0's output, rank 1 waits for it.
        {"0F0 0RECV_B0 0B0 | 1RECV_F0 1F0 1B0 1SEND_B0", "1RECV_F0", "want 0SEND_F0 on rank 0", 1},
        // A send nobody receives.
        {"0F0 0SEND_F0 0RECV_B0 0B0 | 1F0 1B0 1SEND_B0", "0SEND_F0", "never received", 1},
        // A receive with no sender anywhere (micro-batch 1's gradient is never sent).
        {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 | 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1",
         "0RECV_B1", "no rank sends it", 2},
        // A forward before its input arrives.
        {"0F0 0SEND_F0 0RECV_B0 0B0 | 1F0 1RECV_F0 1B0 1SEND_B0", "1F0", "not received before it", 1},
        // W before I.
        {"0F0 0SEND_F0 0W0 0RECV_B0 0I0 | 1RECV_F0 1F0 1I0 1SEND_B0 1W0", "0W0", "backward-weight without", 1},
        // A circular wait: rank 0 wants micro-batch 0's gradient before it sends micro-batch 1; rank 1
        // wants micro-batch 1's activations before it sends micro-batch 0's gradient.
        {"0F0 0SEND_F0 0RECV_B0 0B0 0F1 0SEND_F1 0RECV_B1 0B1 | "
         "1RECV_F0 1F0 1RECV_F1 1F1 1B1 1SEND_B1 1B0 1SEND_B0",
         "deadlock: rank 0 waits at 0RECV_B0, rank 1 waits at 1RECV_F1", "", 2},
        // A stage on the wrong rank.
        {"0F0 0SEND_F0 0RECV_B0 0B0 1F0 | 1RECV_F0 1F0 1B0 1SEND_B0", "1F0", "runs on rank 1", 1},
        // Backward of stage 0 before stage 1's: ct_schedule_check cannot see it (other rank);
        // the gradient's receive must come first.
        {"0F0 0SEND_F0 0B0 0RECV_B0 | 1RECV_F0 1F0 1B0 1SEND_B0", "0B0", "gradient from stage 1", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_status st = check_text(bad[i].text, 2, 2, bad[i].n_mb, NULL);
        CHECK(st == CT_ERR, "case %zu accepted", i);
        CHECK(strstr(ct_last_error(), bad[i].names) && strstr(ct_last_error(), bad[i].says), "case %zu: '%s'", i,
              ct_last_error());
    }
    // ZBV's turn: stages 1 and 2 both on rank 1 exchange nothing.
    int v[4] = {0, 1, 1, 0};
    const char *turn = "0F0 0SEND_F0 3RECV_F0 3F0 3I0 3SEND_B0 0RECV_B0 0I0 0W0 3W0 | "
                       "1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2I0 1I0 1SEND_B0 1W0 2W0";
    CHECK(check_text(turn, 2, 4, 1, v) == CT_OK, "%s", ct_last_error());
    const char *turn_sent = "0F0 0SEND_F0 3RECV_F0 3F0 3I0 3SEND_B0 0RECV_B0 0I0 0W0 3W0 | "
                            "1RECV_F0 1F0 1SEND_F0 2RECV_F0 2F0 2SEND_F0 2RECV_B0 2I0 1I0 1SEND_B0 1W0 2W0";
    CHECK(check_text(turn_sent, 2, 4, 1, v) == CT_ERR && strstr(ct_last_error(), "1SEND_F0") &&
              strstr(ct_last_error(), "locally"), "%s", ct_last_error());
}

// Forward-only lists (evaluation) and the no-pipeline list pass the same simulator.
static void test_forward_only_and_no_pipeline(void) {
    for (int pl = 0; pl < 2; pl++) {
        ct_schedule lists[4];
        int sr[8];
        CHECK(ct_pp_generate_forward((ct_pp_placement)pl, 4, 2, 5, lists) == CT_OK, "%s", ct_last_error());
        ct_pp_stage_ranks((ct_pp_placement)pl, 4, 2, sr);
        ct_pp_sim_result sim;
        CHECK(ct_pp_simulate(lists, 4, sr, 8, 5, NULL, &sim) == CT_OK, "placement %d: %s", pl, ct_last_error());
        for (int r = 0; r < 4; r++) {
            CHECK(lists[r].actions[lists[r].count - 1].kind == CT_ACT_RESHARD, "forward-only tail");
            CHECK(!ct_schedule_splits_backward(&lists[r], r), "a backward in a forward-only list");
        }
        ct_pp_sim_result_free(&sim);
        ct_pp_lists_free(lists, 4);
    }
    ct_schedule one;
    ct_pp_no_pipeline(&one, 3, true);
    char buf[128];
    ct_schedule_format(&one, buf, sizeof buf);
    CHECK(!strcmp(buf, "0F0 0B0 0F1 0B1 0F2 0B2 REDUCE_GRADS RESHARD"), "%s", buf);
    int sr0 = 0;
    ct_pp_sim_result sim;
    CHECK(ct_pp_simulate(&one, 1, &sr0, 1, 3, NULL, &sim) == CT_OK && sim.bubble == 0 && sim.makespan == 9, "%s",
          ct_last_error());
    ct_pp_sim_result_free(&sim);
    ct_schedule_free(&one);
}

// Per-action times: start / end of each action, and a cost function (measured durations).
static double slow_rank1(void *ctx, int rank, const ct_action *a) {
    (void)ctx;
    double c = a->kind == CT_ACT_FORWARD ? 1 : a->kind == CT_ACT_BACKWARD ? 2 : 0;
    return rank == 1 ? 2 * c : c;
}

static void test_timeline_and_cost_fn(void) {
    run *r = make_run(CT_PP_1F1B, 2, 1, 2);
    // Rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1; F0 on rank 0 ends at 1.
    CHECK(r->sim.n_actions[1] == r->lists[1].count, "actions");
    CHECK(r->sim.start[1][1] == 1 && r->sim.end[1][1] == 2 && r->sim.end[1][2] == 4, "rank 1 F0 %g..%g, B0 ends %g",
          r->sim.start[1][1], r->sim.end[1][1], r->sim.end[1][2]);
    ct_pp_costs c = ct_pp_costs_default();
    c.fn = slow_rank1;
    ct_pp_sim_result sim;
    CHECK(ct_pp_simulate(r->lists, 2, r->stage_rank, 2, 2, &c, &sim) == CT_OK, "%s", ct_last_error());
    // Rank 1 doubled: F0 1..3, B0 3..7, F1 7..9, B1 9..13; rank 0's B1 13..15.
    CHECK(sim.makespan == 15 && sim.busy[1] == 12 && sim.busy[0] == 6, "makespan %g busy %g %g", sim.makespan,
          sim.busy[0], sim.busy[1]);
    ct_pp_sim_result_free(&sim);
    free_run(r);
}

// A rank's compute actions (F, B, I, W) in its list's order, as text.
static void compute_text(const ct_schedule *l, char *buf, size_t n) {
    ct_schedule c;
    ct_schedule_init(&c);
    for (int i = 0; i < l->count; i++) {
        ct_action_kind k = l->actions[i].kind;
        if (k == CT_ACT_FORWARD || k == CT_ACT_BACKWARD || k == CT_ACT_BACKWARD_INPUT || k == CT_ACT_BACKWARD_WEIGHT)
            ct_schedule_push(&c, k, l->actions[i].stage, l->actions[i].mb);
    }
    ct_schedule_format(&c, buf, n);
    ct_schedule_free(&c);
}

// ZBV is PyTorch's ScheduleZBVZeroBubble: the orders below were worked out by hand from its
// _calculate_single_rank_operations (warm-up, steady F0 I0 W0 F1 I1 W1, then a cool-down of
// input gradients whose weight gradients follow: the V's return chunk's W before chunk 0's).
// Every W also comes after its own I on the same rank, at every size.
static void test_zbv_matches_pytorch_order(void) {
    struct { int pp, n_mb; const char *rank[2]; } want[] = {
        {2, 4, {"0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3",
                "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3"}},
        // Built for 2pp-1 = 3 micro-batches, micro-batch 2 then dropped.
        {2, 2, {"0F0 0F1 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 0I1 0W1",
                "1F0 2F0 1F1 2F1 2I0 2W0 1I0 1W0 2I1 2W1 1I1 1W1"}},
    };
    for (size_t c = 0; c < sizeof want / sizeof want[0]; c++) {
        run *r = make_run(CT_PP_ZBV, want[c].pp, 2, want[c].n_mb);
        CHECK(r->gen == CT_OK && r->simst == CT_OK, "%s", ct_last_error());
        for (int rank = 0; !r->gen && rank < want[c].pp; rank++) {
            char got[1024];
            compute_text(&r->lists[rank], got, sizeof got);
            CHECK(!strcmp(got, want[c].rank[rank]), "ZBV pp %d m %d rank %d:\n  got  %s\n  want %s", want[c].pp,
                  want[c].n_mb, rank, got, want[c].rank[rank]);
        }
        free_run(r);
    }
    for (int pp = 2; pp <= 4; pp++)
        for (int m = 1; m <= 3 * pp; m++) {
            run *r = make_run(CT_PP_ZBV, pp, 2, m);
            for (int rank = 0; !r->gen && rank < pp; rank++) {
                const ct_schedule *l = &r->lists[rank];
                for (int i = 0; i < l->count; i++) {
                    const ct_action *w = &l->actions[i];
                    if (w->kind != CT_ACT_BACKWARD_WEIGHT) continue;
                    bool after = false;
                    for (int j = 0; j < i && !after; j++)
                        after = l->actions[j].kind == CT_ACT_BACKWARD_INPUT && l->actions[j].stage == w->stage &&
                                l->actions[j].mb == w->mb;
                    CHECK(after, "ZBV pp %d m %d rank %d: %dW%d before its I", pp, m, rank, w->stage, w->mb);
                }
            }
            free_run(r);
        }
}

int main(void) {
    CT_RUN(test_placement);
    CT_RUN(test_names);
    CT_RUN(test_every_kind_runs);
    CT_RUN(test_every_accepted_combination_runs);
    CT_RUN(test_invalid_combinations_refused);
    CT_RUN(test_peak_in_flight);
    CT_RUN(test_gpipe_bubble_is_textbook);
    CT_RUN(test_interleaved_bubble);
    CT_RUN(test_zero_bubble_beats_1f1b);
    CT_RUN(test_csv_round_trip);
    CT_RUN(test_broken_schedules_refused);
    CT_RUN(test_forward_only_and_no_pipeline);
    CT_RUN(test_timeline_and_cost_fn);
    CT_RUN(test_zbv_matches_pytorch_order);
    CT_TEST_EXIT();
}
