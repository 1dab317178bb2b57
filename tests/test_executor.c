// The executor and schedules as data. The main check: the same micro-batches run through the
// executor as (a) whole-micro-batch steps F0 B0 F1 B1 and (b) split backward-input /
// backward-weight actions in another legal order give the same gradients, bit for bit, and the
// same loss -- and both equal the one-call reference (ct_model_step). Then the schedule's text
// form, its legality checks, and the slot counts the executor plans from it.
#include <math.h>
#include <string.h>

#include "model/stage.h"
#include "parallel/executor.h"
#include "parallel/schedule.h"
#include "test.h"

enum { B = 2, T = 12, N_MB = 3 };
#define RIG_B B
#define RIG_T T
#define RIG_MB N_MB
#include "executor_rig.h"

// A stage of blocks [first, last) of the rig's model on local operations (embedding with block
// 0, head with the last block).
static void rig_stage(ct_stage *st, rig *r, int first, int last) {
    const ct_kernels *k = ct_kernels_get("cpu");
    ct_stage_spec spec = {.k = k, .cfg = &r->m, .layer_begin = first, .layer_end = last,
                          .has_embedding = first == 0, .has_head = last == r->m.n_layers, .B = B, .T = T,
                          .ops = ct_stage_ops_local(k), .weights = &r->w, .grads = &r->g};
    ct_stage_init(st, &spec);
}

// Runs the schedule text through a fresh stage + executor; grads (t.total) and the loss sum out.
static double run_text(rig *r, const char *text, float *grads_out) {
    ct_stage st;
    rig_stage(&st, r, 0, r->m.n_layers);
    ct_stage *stages[1] = {&st};
    ct_executor e;
    ct_executor_init(&e, 1, stages, NULL, NULL);
    ct_schedule s;
    CHECK(ct_schedule_parse(&s, text) == CT_OK, "parse %s: %s", text, ct_last_error());
    const ct_schedule *lists[1] = {&s};
    int n_mb[1] = {N_MB};
    bool training[1] = {true};
    CHECK(ct_executor_plan(&e, lists, n_mb, training, 1) == CT_OK, "plan: %s", ct_last_error());
    memset(r->grads, 0, r->t.total * sizeof(float));
    double loss = ct_executor_run(&e, &s, r->mbs, N_MB, true, 1.0f / (float)r->valid);
    memcpy(grads_out, r->grads, r->t.total * sizeof(float));
    ct_schedule_free(&s);
    ct_executor_free(&e);
    ct_stage_free(&st);
    return loss;
}

static void test_split_backward_matches_whole_steps(void) {
    rig r;
    rig_init(&r, 3, 61, 9);
    long P = r.t.total;
    float *ga = ct_xmalloc(P * sizeof(float)), *gb = ct_xmalloc(P * sizeof(float));
    float *gc = ct_xmalloc(P * sizeof(float)), *gref = ct_xmalloc(P * sizeof(float));
    double la = run_text(&r, "0F0 0B0 0F1 0B1 0F2 0B2", ga);
    // Every forward first; backward-input in reverse micro-batch order; weight passes after.
    double lb = run_text(&r, "0F0 0F1 0F2 0I2 0I1 0I0 0W0 0W1 0W2", gb);
    // Interleaved: each weight pass as soon as the next forward is done.
    double lc = run_text(&r, "0F0 0F1 0I0 0W0 0F2 0I1 0W1 0I2 0W2", gc);
    // UNSHARD / RESHARD are no-ops for a stage whose parameters are not sharded.
    float *gd = ct_xmalloc(P * sizeof(float));
    double ld = run_text(&r, "0UNSHARD 0F0 0B0 0F1 0B1 0F2 0B2 0RESHARD", gd);
    CHECK(ld == la && count_differing(gd, ga, P) == 0, "UNSHARD changed an unsharded run");
    free(gd);

    // The one-call reference path.
    ct_model_acts a;
    ct_model_acts_init(&a, &r.m, B, T);
    memset(r.grads, 0, P * sizeof(float));
    double lref = 0;
    for (int mb = 0; mb < N_MB; mb++)
        lref += ct_model_step(&a, &r.w, &r.g, r.mbs[mb].inputs, r.mbs[mb].targets, 1.0f / (float)r.valid);
    memcpy(gref, r.grads, P * sizeof(float));
    ct_model_acts_free(&a);

    CHECK(la == lref && lb == lref && lc == lref, "losses %.17g %.17g %.17g vs %.17g", la, lb, lc, lref);
    CHECK(count_differing(ga, gref, P) == 0, "%ld of %ld gradients differ (whole steps vs reference)",
          count_differing(ga, gref, P), P);
    CHECK(count_differing(gb, ga, P) == 0, "%ld of %ld gradients differ (split, reordered)", count_differing(gb, ga, P),
          P);
    CHECK(count_differing(gc, ga, P) == 0, "%ld of %ld gradients differ (split, interleaved)",
          count_differing(gc, ga, P), P);
    double norm = 0;
    for (long i = 0; i < P; i++) norm += (double)ga[i] * ga[i];
    CHECK(norm > 1e-6, "gradients are (nearly) zero: %g -- the comparison would prove nothing", norm);
    free(ga);
    free(gb);
    free(gc);
    free(gref);
    rig_free(&r);
}

// Forward-only (evaluation) through the executor equals the reference's forward-only losses.
static void test_forward_only_schedule(void) {
    rig r;
    rig_init(&r, 3, 61, 9);
    ct_stage st;
    rig_stage(&st, &r, 0, r.m.n_layers);
    ct_stage *stages[1] = {&st};
    ct_executor e;
    ct_executor_init(&e, 1, stages, NULL, NULL);
    ct_schedule s;
    ct_schedule_init(&s);
    ct_schedule_accumulation(&s, 0, N_MB, false);
    const ct_schedule *lists[1] = {&s};
    int n_mb[1] = {N_MB};
    bool training[1] = {false};
    CHECK(ct_executor_plan(&e, lists, n_mb, training, 1) == CT_OK, "plan: %s", ct_last_error());
    CHECK(st.n_slots == 1 && !st.split_backward, "forward-only needs one slot, got %d", st.n_slots);
    double loss = ct_executor_run(&e, &s, r.mbs, N_MB, false, 0.0f);
    ct_model_acts a;
    ct_model_acts_init(&a, &r.m, B, T);
    double ref = 0;
    for (int mb = 0; mb < N_MB; mb++) ref += ct_model_step(&a, &r.w, NULL, r.mbs[mb].inputs, r.mbs[mb].targets, 0);
    CHECK(loss == ref, "%.17g vs %.17g", loss, ref);
    CHECK(loss / r.valid > 1.0, "mean loss %g is implausible for a random model over 61 tokens", loss / r.valid);
    ct_model_acts_free(&a);
    ct_schedule_free(&s);
    ct_executor_free(&e);
    ct_stage_free(&st);
    rig_free(&r);
}

// Two stages on one rank (as ZBV's turn places them): tensors pass by copy, and the gradients and
// loss equal the one-stage run's bit for bit, whole or split.
static void test_two_local_stages(void) {
    rig r;
    rig_init(&r, 3, 61, 9);
    long P = r.t.total;
    float *gref = ct_xmalloc(P * sizeof(float)), *g = ct_xmalloc(P * sizeof(float));
    double lref = run_text(&r, "0F0 0B0 0F1 0B1 0F2 0B2", gref);
    ct_stage st[2];
    rig_stage(&st[0], &r, 0, 2);
    rig_stage(&st[1], &r, 2, r.m.n_layers);
    ct_stage *stages[2] = {&st[0], &st[1]};
    const char *texts[2] = {"0F0 1F0 1B0 0B0 0F1 1F1 0F2 1F2 1B1 0B1 1B2 0B2",
                            "0F0 1F0 0F1 1F1 1I0 0I0 1I1 1W0 0W0 0I1 0W1 1W1 0F2 1F2 1I2 0I2 0W2 1W2"};
    for (int t = 0; t < 2; t++) {
        ct_executor e;
        ct_executor_init(&e, 2, stages, NULL, NULL);
        ct_schedule s;
        CHECK(ct_schedule_parse(&s, texts[t]) == CT_OK, "%s", ct_last_error());
        const ct_schedule *lists[1] = {&s};
        int n_mb[1] = {N_MB};
        bool training[1] = {true};
        CHECK(ct_executor_plan(&e, lists, n_mb, training, 1) == CT_OK, "plan: %s", ct_last_error());
        memset(r.grads, 0, P * sizeof(float));
        double loss = ct_executor_run(&e, &s, r.mbs, N_MB, true, 1.0f / (float)r.valid);
        memcpy(g, r.grads, P * sizeof(float));
        CHECK(loss == lref, "list %d: loss %.17g vs %.17g", t, loss, lref);
        CHECK(count_differing(g, gref, P) == 0, "list %d: %ld of %ld gradients differ", t, count_differing(g, gref, P),
              P);
        ct_schedule_free(&s);
        ct_executor_free(&e);
    }
    ct_stage_free(&st[0]);
    ct_stage_free(&st[1]);
    free(g);
    free(gref);
    rig_free(&r);
}

// ------------------------------------------------------------------ schedules as data

static void test_text_round_trip(void) {
    const char *text = "0F0 1RECV_F0 1F0 1SEND_B0 0RECV_B0 0I0 0W0 1I3 0SEND_F12 REDUCE_GRADS RESHARD";
    const char *sharding = "0UNSHARD 1UNSHARD 0F0 1RESHARD 0RESHARD RESHARD";
    ct_schedule s;
    CHECK(ct_schedule_parse(&s, text) == CT_OK, "%s", ct_last_error());
    CHECK(s.count == 11, "count %d", s.count);
    CHECK(s.actions[1].kind == CT_ACT_RECV_F && s.actions[1].stage == 1 && s.actions[1].mb == 0, "RECV_F");
    CHECK(s.actions[8].kind == CT_ACT_SEND_F && s.actions[8].mb == 12, "SEND_F12");
    CHECK(s.actions[9].kind == CT_ACT_REDUCE_GRADS && s.actions[9].stage == -1, "REDUCE_GRADS");
    char buf[256];
    int len = ct_schedule_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, text) && len == (int)strlen(text), "formatted '%s'", buf);
    char small[8];
    ct_schedule_format(&s, small, sizeof small);
    CHECK(!strcmp(small, "0F0"), "cut to whole actions that fit: '%s'", small);
    ct_schedule_free(&s);
    CHECK(ct_schedule_parse(&s, sharding) == CT_OK, "%s", ct_last_error());
    CHECK(s.actions[1].kind == CT_ACT_UNSHARD && s.actions[1].stage == 1 && s.actions[1].mb == -1, "1UNSHARD");
    CHECK(s.actions[5].kind == CT_ACT_RESHARD && s.actions[5].stage == -1, "RESHARD of every stage");
    ct_schedule_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, sharding), "formatted '%s'", buf);
    int groups[2] = {4, 3};  // stage 0 and 1's parameter groups
    CHECK(ct_schedule_max_unsharded(&s, groups, 2) == 7, "both stages whole at once: %d",
          ct_schedule_max_unsharded(&s, groups, 2));
    ct_schedule_free(&s);
    ct_schedule_parse(&s, "0UNSHARD 0RESHARD 1UNSHARD 0F0 RESHARD");
    CHECK(ct_schedule_max_unsharded(&s, groups, 2) == 4, "one at a time: %d", ct_schedule_max_unsharded(&s, groups, 2));
    ct_schedule_free(&s);
    ct_schedule_init(&s);
    ct_schedule_accumulation(&s, 0, 3, true);
    ct_schedule_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "0F0 0B0 0F1 0B1 0F2 0B2 REDUCE_GRADS RESHARD"), "accumulation: '%s'", buf);
    ct_schedule_free(&s);
}

static void test_bad_text_is_refused(void) {
    const char *bad[] = {"0X0", "F0", "0F", "0Fx", "-1F0", "0SEND0", "REDUCE", "0F0 0B0junk", "0UNSHARD3", "UNSHARD"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_schedule s;
        CHECK(ct_schedule_parse(&s, bad[i]) == CT_ERR, "'%s' was accepted", bad[i]);
        CHECK(strstr(ct_last_error(), "schedule: cannot read action") != NULL, "'%s': %s", bad[i], ct_last_error());
    }
}

// Each illegal list is refused with a message naming what is wrong.
static void test_illegal_schedules_are_refused(void) {
    struct {
        const char *text;
        int n_mb;
        bool training;
        const char *why;
    } cases[] = {
        {"0B0 0F0", 1, true, "backward without a forward"},
        {"0F0 0W0", 1, true, "backward-weight without its backward-input"},
        {"0F0 0I0", 1, true, "never backward-weight"},
        {"0F0 0B0 0F0 0B0", 1, true, "a second forward"},
        {"0F0 0B0", 2, true, "micro-batch 1 never runs forward"},
        {"0F0 0B0 0F1", 2, true, "micro-batch 1 never runs backward"},
        {"0F0 0B0", 1, false, "a backward in a forward-only schedule"},
        {"0F3", 2, false, "micro-batch 3 of 2 does not exist"},
        {"1F0 0F0 0B0 1B0", 1, true, "forward before the previous stage's forward"},
        {"0F0 1F0 0B0 1B0", 1, true, "backward before the next stage's backward"},
        {"0F0 0SEND_B0 0B0", 1, true, "sending a gradient not computed yet"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_schedule s;
        CHECK(ct_schedule_parse(&s, cases[i].text) == CT_OK, "%s", ct_last_error());
        CHECK(ct_schedule_check(&s, cases[i].n_mb, cases[i].training) == CT_ERR, "'%s' accepted", cases[i].text);
        CHECK(strstr(ct_last_error(), cases[i].why) != NULL, "'%s': got '%s', want '%s'", cases[i].text,
              ct_last_error(), cases[i].why);
        ct_schedule_free(&s);
    }
    const char *good[] = {"0F0 0B0 0F1 0B1", "0F0 0F1 0I1 0I0 0W0 0W1", "0F0 1F0 1B0 0B0", "0F0 0SEND_F0 0I0 0SEND_B0 0W0"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ct_schedule s;
        ct_schedule_parse(&s, good[i]);
        int n_mb = strstr(good[i], "F1") ? 2 : 1;
        CHECK(ct_schedule_check(&s, n_mb, true) == CT_OK, "'%s' refused: %s", good[i], ct_last_error());
        ct_schedule_free(&s);
    }
}

static void test_slots_in_flight(void) {
    struct {
        const char *text;
        int stage, want;
        bool split;
    } cases[] = {
        {"0F0 0B0 0F1 0B1 0F2 0B2", 0, 1, false},
        {"0F0 0F1 0F2 0B0 0B1 0B2", 0, 3, false},                 // GPipe-like: all in flight
        {"0F0 0F1 0I1 0I0 0W0 0W1", 0, 2, true},
        {"0F0 0I0 0F1 0W0 0I1 0W1", 0, 2, true},                  // mb0 held until its W
        {"0F0 0F1 0F2", 0, 1, false},                             // forward only
        {"1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1", 1, 2, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_schedule s;
        ct_schedule_parse(&s, cases[i].text);
        CHECK(ct_schedule_max_in_flight(&s, cases[i].stage) == cases[i].want, "'%s': %d in flight, want %d",
              cases[i].text, ct_schedule_max_in_flight(&s, cases[i].stage), cases[i].want);
        CHECK(ct_schedule_splits_backward(&s, cases[i].stage) == cases[i].split, "'%s': split", cases[i].text);
        ct_schedule_free(&s);
    }
}

// A plan for a schedule naming a stage this rank does not run is refused before any work.
static void test_plan_refuses_foreign_stage(void) {
    rig r;
    rig_init(&r, 3, 61, 9);
    ct_stage st;
    rig_stage(&st, &r, 0, r.m.n_layers);
    ct_stage *stages[2] = {&st, NULL};
    ct_executor e;
    ct_executor_init(&e, 2, stages, NULL, NULL);
    ct_schedule s;
    ct_schedule_parse(&s, "0F0 1F0 1B0 0B0");
    const ct_schedule *lists[1] = {&s};
    int n_mb[1] = {1};
    bool training[1] = {true};
    CHECK(ct_executor_plan(&e, lists, n_mb, training, 1) == CT_ERR, "accepted");
    CHECK(strstr(ct_last_error(), "names stage 1, which this rank does not run") != NULL, "%s", ct_last_error());
    ct_schedule_free(&s);
    ct_executor_free(&e);
    ct_stage_free(&st);
    rig_free(&r);
}

int main(void) {
    CT_RUN(test_split_backward_matches_whole_steps);
    CT_RUN(test_forward_only_schedule);
    CT_RUN(test_two_local_stages);
    CT_RUN(test_text_round_trip);
    CT_RUN(test_bad_text_is_refused);
    CT_RUN(test_illegal_schedules_are_refused);
    CT_RUN(test_slots_in_flight);
    CT_RUN(test_plan_refuses_foreign_stage);
    return ct_test_failures != 0;
}
