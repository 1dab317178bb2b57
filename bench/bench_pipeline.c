// Pipeline bubble and memory.
//
//   mpirun -np 2 build/bench/bench_pipeline           bubble: every schedule at pp 2, measured vs simulated
//   mpirun -np 4 build/bench/bench_pipeline memory    activation memory per rank, GPipe vs 1F1B at p 4, m 8
//
// Bubble: a small Llama (4 layers, dim 256, vocab 256 so the head stage is not much heavier than
// the others, seq 128; each action takes milliseconds) trains with
// pipeline_degree 2 for each schedule; from the executor's timeline of a step (e->t_start /
// t_end, gathered over the pp group) each rank's measured idle fraction is 1 − compute / step,
// the step running from the earliest action start on any rank to the latest end. The same lists
// go through the simulator with each (stage, kind)'s measured mean duration, which gives the
// schedule's own idle fraction for those costs; the textbook formula is printed beside both.
// Of the measured steps after warm-up the shortest is kept (the least disturbed by the machine).
// The simulator with the measured costs then predicts the bubble at larger p and m.
//
// Cores: run with OMP_NUM_THREADS=1 and as many ranks as cores (2 here), so that each rank has a
// core of its own and idle time is real waiting. A waiting rank does not busy-poll a core away
// from the other: ct_comm_wait spins 200 tests, then sched_yield()s for 5 ms, then sleeps 50 µs
// between tests (comm/comm.c), so a rank blocked in a receive hands its core back; OMPI's own
// progress engine is only entered from those tests (mpi_yield_when_idle is then not needed).
//
// Memory: 4 ranks (timing is irrelevant there, so 4 ranks on 2 cores is fine): each rank's
// ct_mem_peak(CT_MEM_ACTIVATIONS) after init and one step (activation slots sized by the
// executor from the schedule's micro-batches in flight, plus buffers shared by every slot),
// beside the slots it holds and the simulator's peak in flight.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/memory.h"
#include "train/pipeline_trace.h"
#include "train/trainer.h"

enum { MAX_STAGES = 16, WARMUP = 2, MEASURED = 4, N_MB = 8 };

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) ct_fatal("bench_pipeline", "%s", ct_last_error());
}

static void config(ct_config *c, const char *schedule, int pp, int vpp) {
    ct_config_defaults(c);
    const char *kv[][2] = {{"model.n_layers", "4"},        {"model.dim", "256"},           {"model.n_heads", "4"},
                           {"model.n_kv_heads", "4"},      {"model.ffn_hidden_dim", "768"}, {"model.vocab_size", "256"},
                           {"training.seq_len", "128"},    {"training.dataset", "synthetic"},
                           {"training.steps", "1000"},     {"metrics.peak_tflops", "1"},
                           {"parallelism.pipeline_microbatch_size", "1"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) set(c, kv[i][0], kv[i][1]);
    char buf[16];
    snprintf(buf, sizeof buf, "%d", N_MB);
    set(c, "micro_batch_size", buf);  // N_MB pipeline micro-batches of one sequence
    snprintf(buf, sizeof buf, "%d", pp);
    set(c, "parallelism.pipeline_degree", buf);
    snprintf(buf, sizeof buf, "%d", vpp);
    set(c, "parallelism.pipeline_stages_per_rank", buf);
    set(c, "pipeline_schedule", schedule);
}

static bool compute(ct_action_kind k) {
    return k == CT_ACT_FORWARD || k == CT_ACT_BACKWARD || k == CT_ACT_BACKWARD_INPUT || k == CT_ACT_BACKWARD_WEIGHT;
}

// Mean measured duration of each (stage, kind); the simulator's cost function.
typedef struct {
    double sum[MAX_STAGES][CT_ACT_NKINDS];
    int n[MAX_STAGES][CT_ACT_NKINDS];
} cost_table;

static double measured_cost(void *ctx, int rank, const ct_action *a) {
    const cost_table *c = ctx;
    if (!compute(a->kind) || a->stage < 0) return 0;
    int n = c->n[a->stage][a->kind];
    return n ? c->sum[a->stage][a->kind] / n : 0;
}

// Mean over stages of a kind's mean (the per-kind cost for predictions).
static double kind_mean(const cost_table *c, int n_stages, ct_action_kind k) {
    double s = 0;
    int n = 0;
    for (int st = 0; st < n_stages; st++)
        if (c->n[st][k]) s += c->sum[st][k] / c->n[st][k], n++;
    return n ? s / n : 0;
}

typedef struct {
    double span, idle[8], busy[8];
} measured_step;

static measured_step measure(const ct_pp_measured *m, cost_table *costs) {
    measured_step out = {0};
    double t0 = INFINITY, t1 = -INFINITY;
    for (int r = 0; r < m->pp; r++)
        for (int i = 0; i < m->lists[r].count; i++) {
            t0 = fmin(t0, m->start[r][i]);
            t1 = fmax(t1, m->end[r][i]);
            const ct_action *a = &m->lists[r].actions[i];
            if (!compute(a->kind)) continue;
            double d = m->end[r][i] - m->start[r][i];
            out.busy[r] += d;
            if (costs) costs->sum[a->stage][a->kind] += d, costs->n[a->stage][a->kind]++;
        }
    out.span = t1 - t0;
    for (int r = 0; r < m->pp; r++) out.idle[r] = 1 - out.busy[r] / out.span;
    return out;
}

typedef struct {
    const char *name;
    int vpp;
    double measured, simulated, span_ms;  // mean idle over ranks
    double cost[CT_ACT_NKINDS];           // per-kind mean (ms) per virtual stage
} result;

static void bubble_run(result *res, ct_group *world) {
    ct_config c;
    config(&c, res->name, 2, res->vpp);
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) ct_fatal("bench_pipeline", "%s", ct_last_error());
    ct_group *pp = &t.mesh.dim[CT_MESH_PP];
    for (int i = 0; i < WARMUP; i++) ct_trainer_step(&t);
    ct_pp_measured best = {0};
    double best_span = INFINITY;
    for (int i = 0; i < MEASURED; i++) {
        ct_trainer_step(&t);
        ct_pp_measured m;
        ct_pp_trace_gather(pp, &t.train_schedule, t.exec.t_start, t.exec.t_end, t.exec.timeline_count, &m);
        double span = measure(&m, NULL).span;  // the same on every rank: the gather gives all the same data
        if (span < best_span) {
            if (best.lists) ct_pp_measured_free(&best);
            best = m, best_span = span;
        } else {
            ct_pp_measured_free(&m);
        }
    }
    cost_table costs = {0};
    measured_step ms = measure(&best, &costs);
    ct_pp_costs pc = {{0}, measured_cost, &costs};
    ct_pp_sim_result sim;
    if (ct_pp_simulate(best.lists, best.pp, t.par.stage_rank, t.par.n_stages, t.n_mb, &pc, &sim))
        ct_fatal("bench_pipeline", "simulating the measured lists: %s", ct_last_error());
    ct_pp_costs kc = ct_pp_costs_default();
    for (int k = 0; k < CT_ACT_NKINDS; k++) res->cost[k] = kind_mean(&costs, t.par.n_stages, (ct_action_kind)k) * 1e3;
    for (int k = 0; k < CT_ACT_NKINDS; k++) kc.cost[k] = res->cost[k];
    ct_pp_kind kind;
    ct_pp_kind_parse(res->name, &kind);
    const char *formula;
    double tb = ct_pp_textbook_bubble(kind, best.pp, res->vpp, t.n_mb, &kc, &formula);
    res->measured = res->simulated = 0;
    for (int r = 0; r < best.pp; r++) res->measured += ms.idle[r] / best.pp;
    res->simulated = sim.bubble;
    res->span_ms = ms.span * 1e3;
    if (world->rank == 0) {
        printf("%-16s vpp %d, m %d: step %.1f ms; F %.2f B %.2f I %.2f W %.2f ms per action (mean over stages)\n",
               ct_pp_kind_name(kind), res->vpp, t.n_mb, ms.span * 1e3, res->cost[CT_ACT_FORWARD],
               res->cost[CT_ACT_BACKWARD], res->cost[CT_ACT_BACKWARD_INPUT], res->cost[CT_ACT_BACKWARD_WEIGHT]);
        printf("    per stage (ms):");  // unequal stages (embedding first, head last) are why GPipe != 1F1B here
        for (int st = 0; st < t.par.n_stages; st++) {
            printf(" %d:", st);
            for (int k = 0; k < CT_ACT_NKINDS; k++)
                if (costs.n[st][k]) printf(" %s %.2f", ct_action_kind_name((ct_action_kind)k), 1e3 * costs.sum[st][k] / costs.n[st][k]);
            printf(st + 1 < t.par.n_stages ? ";" : "\n");
        }
        for (int r = 0; r < best.pp; r++)
            printf("    rank %d: idle measured %.3f, simulated %.3f (measured costs): %+.1f points\n", r, ms.idle[r],
                   sim.idle_frac[r], 100 * (ms.idle[r] - sim.idle_frac[r]));
        printf("    bubble: measured %.3f, simulated %.3f, ratio %.3f; textbook ", res->measured, res->simulated,
               res->measured / res->simulated);
        if (tb >= 0) printf("%s = %.3f, measured/textbook %.3f\n", formula, tb, res->measured / tb);
        else printf("none for %s\n", ct_pp_kind_name(kind));
    }
    ct_pp_sim_result_free(&sim);
    ct_pp_measured_free(&best);
    ct_trainer_free(&t);
}

// The simulator with measured per-kind costs at larger p and m (costs of one pp-2 stage each; a
// virtual stage of a looped schedule holds 1/v of a stage's layers, so costs 1/v).
static void predict(const result *r1f1b, const result *rzb) {
    ct_pp_costs c = ct_pp_costs_default();
    c.cost[CT_ACT_FORWARD] = (r1f1b->cost[CT_ACT_FORWARD] + rzb->cost[CT_ACT_FORWARD]) / 2;
    c.cost[CT_ACT_BACKWARD] = r1f1b->cost[CT_ACT_BACKWARD];
    c.cost[CT_ACT_BACKWARD_INPUT] = rzb->cost[CT_ACT_BACKWARD_INPUT];
    c.cost[CT_ACT_BACKWARD_WEIGHT] = rzb->cost[CT_ACT_BACKWARD_WEIGHT];
    printf("\npredicted bubble (simulator, measured costs per stage: F %.2f B %.2f I %.2f W %.2f ms; a virtual stage "
           "of v costs 1/v):\n   p   m      GPipe     1F1B  Interleaved(v2)  ZB-H1     ZBV   (1F1B textbook)\n",
           c.cost[CT_ACT_FORWARD], c.cost[CT_ACT_BACKWARD], c.cost[CT_ACT_BACKWARD_INPUT],
           c.cost[CT_ACT_BACKWARD_WEIGHT]);
    const ct_pp_kind kinds[] = {CT_PP_GPIPE, CT_PP_1F1B, CT_PP_INTERLEAVED_1F1B, CT_PP_ZB_H1, CT_PP_ZBV};
    const int ps[] = {2, 4, 8}, ms[] = {8, 16, 32};
    for (int pi = 0; pi < 3; pi++)
        for (int mi = 0; mi < 3; mi++) {
            int p = ps[pi], m = ms[mi];
            printf("%4d %3d", p, m);
            for (int k = 0; k < 5; k++) {
                int v = (kinds[k] == CT_PP_INTERLEAVED_1F1B || kinds[k] == CT_PP_ZBV) ? 2 : 1;
                ct_pp_costs cv = c;
                for (int a = 0; a < CT_ACT_NKINDS; a++) cv.cost[a] /= v;
                ct_schedule lists[p];
                int stage_rank[p * v];
                ct_pp_sim_result sim;
                if (ct_pp_generate(kinds[k], p, v, m, lists)) {
                    printf(k == 2 ? "  %15s" : "  %7s", "-");
                    continue;
                }
                ct_pp_stage_ranks(ct_pp_kind_placement(kinds[k]), p, v, stage_rank);
                if (ct_pp_simulate(lists, p, stage_rank, p * v, m, &cv, &sim)) ct_fatal("bench_pipeline", "%s", ct_last_error());
                printf(k == 2 ? "  %15.3f" : "  %7.3f", sim.bubble);
                ct_pp_sim_result_free(&sim);
                ct_pp_lists_free(lists, p);
            }
            printf("   (%.3f)\n", (double)(p - 1) / (m + p - 1));
        }
}

static int bubble(ct_group *world) {
    if (world->size != 2) {
        if (world->rank == 0) fprintf(stderr, "bench_pipeline: the bubble part runs on 2 ranks (mpirun -np 2)\n");
        return 2;
    }
    result res[] = {{.name = "gpipe", .vpp = 1},
                    {.name = "1f1b", .vpp = 1},
                    {.name = "interleaved_1f1b", .vpp = 2},
                    {.name = "zb_h1", .vpp = 1},
                    {.name = "zbv", .vpp = 2}};
    int n = sizeof res / sizeof res[0];
    if (world->rank == 0)
        printf("pipeline bubble, pp 2, %d micro-batches, 4 layers dim 256 vocab 256 seq 128, 1 thread per rank on a core of its "
               "own;\nidle = 1 - compute / step (step: earliest start to latest end over ranks), the shortest of %d "
               "steps after %d warm-up;\nwaiting ranks yield their core (ct_comm_wait: sched_yield, then 50 us "
               "sleeps), so no busy-polling steals compute\n\n",
               N_MB, MEASURED, WARMUP);
    for (int i = 0; i < n; i++) bubble_run(&res[i], world);
    if (world->rank != 0) return 0;
    const result *g = &res[0], *f = &res[1], *il = &res[2], *zb = &res[3], *zbv = &res[4];
    printf("\nat p 2, m %d (bubble = mean idle fraction; step ms measured):\n", N_MB);
    printf("  ZB-H1 vs 1F1B:        simulated %.3f vs %.3f (%s), measured %.3f vs %.3f (%s); step %.1f vs %.1f ms\n",
           zb->simulated, f->simulated, zb->simulated < f->simulated ? "beats" : "does NOT beat", zb->measured,
           f->measured, zb->measured < f->measured ? "beats" : "does not beat", zb->span_ms, f->span_ms);
    printf("  ZBV vs 1F1B:          simulated %.3f vs %.3f (%s), measured %.3f vs %.3f (%s); step %.1f vs %.1f ms\n",
           zbv->simulated, f->simulated, zbv->simulated < f->simulated ? "beats" : "does NOT beat", zbv->measured,
           f->measured, zbv->measured < f->measured ? "beats" : "does not beat", zbv->span_ms, f->span_ms);
    printf("  Interleaved vs 1F1B:  simulated %.3f vs %.3f (%s), measured %.3f vs %.3f (%s); step %.1f vs %.1f ms\n",
           il->simulated, f->simulated, il->simulated < f->simulated ? "beats" : "does NOT beat", il->measured,
           f->measured, il->measured < f->measured ? "beats" : "does not beat", il->span_ms, f->span_ms);
    printf("  GPipe vs 1F1B:        simulated %.3f vs %.3f (equal only for equal stages), measured %.3f vs %.3f\n",
           g->simulated,
           f->simulated, g->measured, f->measured);
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(res[i].measured - res[i].simulated));
    printf("  largest |measured - simulated| bubble: %.1f points (target: within 5)\n", 100 * worst);
    predict(f, zb);
    return 0;
}

// ------------------------------------------------------------------ memory (4 ranks)

static int memory(ct_group *world) {
    if (world->size != 4) {
        if (world->rank == 0) fprintf(stderr, "bench_pipeline: the memory part runs on 4 ranks (mpirun -np 4 ... memory)\n");
        return 2;
    }
    const char *names[] = {"gpipe", "1f1b"};
    double mib[2][4], slots[2][4], inflight[2][4];
    for (int s = 0; s < 2; s++) {
        ct_config c;
        config(&c, names[s], 4, 1);
        ct_mem_reset_peaks();
        static ct_trainer t;
        if (ct_trainer_init(&t, &c, NULL)) ct_fatal("bench_pipeline", "%s", ct_last_error());
        ct_trainer_step(&t);
        int me = t.mesh.dim[CT_MESH_PP].rank, n_slots = 0;
        for (int st = 0; st < t.par.n_stages; st++)
            if (t.par.stage_rank[st] == me) n_slots += t.par.stages[st].n_slots;
        double mine[2] = {(double)ct_mem_peak(CT_MEM_ACTIVATIONS) / 1048576.0, n_slots}, all[8];
        ct_comm_all_gather(world, mine, all, 2, CT_F64);
        // The simulator's count, from every rank's list (regenerated: the generator is a pure function).
        ct_schedule lists[4];
        ct_pp_sim_result sim;
        if (ct_pp_schedule_build(names[s], 4, 1, t.n_mb, lists) ||
            ct_pp_simulate(lists, 4, t.par.stage_rank, t.par.n_stages, t.n_mb, NULL, &sim))
            ct_fatal("bench_pipeline", "%s", ct_last_error());
        for (int r = 0; r < 4; r++) mib[s][r] = all[2 * r], slots[s][r] = all[2 * r + 1], inflight[s][r] = sim.peak_in_flight[r];
        ct_pp_sim_result_free(&sim);
        ct_pp_lists_free(lists, 4);
        ct_trainer_free(&t);
    }
    if (world->rank != 0) return 0;
    printf("peak activation memory per rank, pp 4, m %d (1 layer per stage, seq 128, dim 256): measured\n"
           "ct_mem_peak(CT_MEM_ACTIVATIONS) on each of 4 ranks after one step: slots x slot bytes + shared buffers\n"
           "rank   GPipe: slots in-flight MiB    1F1B: slots in-flight MiB    GPipe/1F1B\n", N_MB);
    for (int r = 0; r < 4; r++)
        printf("%4d   %12.0f %9.0f %6.2f   %11.0f %9.0f %6.2f    %.2fx\n", r, slots[0][r], inflight[0][r], mib[0][r],
               slots[1][r], inflight[1][r], mib[1][r], mib[0][r] / mib[1][r]);
    printf("in-flight: the simulator's peak; slots: what the executor allocated (a receive posted ahead can hold one\n"
           "more). 1F1B holds at most p = 4 micro-batches in flight (rank r: p - r); GPipe holds all %d\n", N_MB);
    return 0;
}

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv)) return 1;
    ct_group world;
    if (ct_comm_group_world(&world, CT_COMM_DEFAULT_TIMEOUT_S)) ct_fatal("bench_pipeline", "%s", ct_last_error());
    int rc = argc > 1 && !strcmp(argv[1], "memory") ? memory(&world) : bubble(&world);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    return rc;
}
