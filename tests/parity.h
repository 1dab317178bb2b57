// The parity harness: a layout trains a tiny model for STEPS steps and must follow the
// single-process run on the same global batch and seed, within the bounds of tests/error_model.h:
// in fp32, per-step loss, gradient norm and validation loss within gamma_K relative and every
// parameter (gathered) within 2 x STEPS x gamma_K, element by element relative to max(|x|, the
// tensor's RMS); in bf16 and the 8-bit recipes, where last-bit differences flip narrow roundings
// and the runs decorrelate, within 4 times the reference's own distance from the same model
// computed wide (over the steps for losses and gradient norms, per tensor as relative RMS for
// the parameters). Every rank trains the reference (and, for a narrow base, the wide run) itself
// on a one-process group. Used by tests/test_parity_*.c.
#ifndef CT_PARITY_H
#define CT_PARITY_H
#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "core/memory.h"
#include "device_test.h"
#include "error_model.h"
#include "mpi_test.h"
#include "train/trainer.h"

enum { STEPS = 10, GLOBAL_BATCH = 8 };

typedef struct {
    double loss[STEPS];
    double grad_norm[STEPS];  // global gradient norm before clipping
    double moe_pairs[STEPS], moe_load_min[STEPS], moe_load_max[STEPS];  // mixture of experts: t.last's
    double moe_aux_loss[STEPS];  // mixture of experts: the load-balancing loss (0: none)
    double val_loss;      // forward-only evaluation after training
    float *params;        // (P) the whole model, gathered
    long total;
    size_t state_bytes;   // params + grads + optimizer state this rank's trainer allocated
    size_t buffer_bytes;  // FSDP gather slots and full-gradient buffer
} parity_result;

static ct_config parity_base;       // the tiny model; set by the test before parity_reference()
static parity_result parity_ref;    // the single-process run
// For a narrow base (bf16, 8-bit linears): the same model computed wide on one process -- fp32
// for bf16, bf16 without the 8-bit casts for float8 and MXFP8 -- whose distance from parity_ref
// scales the bounds (tests/error_model.h). total == 0 for an fp32 base.
static parity_result parity_wide;

static void parity_set(ct_config *c, const char *key, const char *value) {
    if (ct_config_set(c, key, value)) ct_fatal("test", "%s", ct_last_error());
}

static void parity_set_int(ct_config *c, const char *key, int v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", v);
    parity_set(c, key, buf);
}

// Shared settings: 10 steps of a warmed-up schedule on synthetic tokens, validation on.
static void parity_common(ct_config *c) {
    const char *kv[][2] = {
        {"training.seq_len", "16"},         {"training.steps", "10"},    {"training.dataset", "synthetic"},
        {"lr_scheduler.warmup_steps", "2"}, {"validation.enable", "true"}, {"validation.steps", "2"},
        {"metrics.peak_tflops", "1"},       {"training.seed", "7"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) parity_set(c, kv[i][0], kv[i][1]);
}

static size_t parity_state_now(void) {
    return ct_test_mem_current(CT_MEM_PARAMS) + ct_test_mem_current(CT_MEM_GRADS) + ct_test_mem_current(CT_MEM_OPTIM);
}

static void parity_train(const ct_config *c, ct_group *parent, parity_result *out) {
    static ct_trainer t;
    size_t before = parity_state_now();
    if (ct_trainer_init(&t, c, parent)) ct_fatal("test", "%s", ct_last_error());
    out->state_bytes = parity_state_now() - before;
    out->buffer_bytes = t.fsdp.buffer_bytes;
    for (int s = 0; s < STEPS; s++) {
        out->loss[s] = ct_trainer_step(&t);
        out->grad_norm[s] = t.last.grad_norm;
        out->moe_pairs[s] = t.last.moe_pairs;
        out->moe_load_min[s] = t.last.moe_load_min;
        out->moe_load_max[s] = t.last.moe_load_max;
        out->moe_aux_loss[s] = t.last.moe_aux_loss;
    }
    out->val_loss = ct_trainer_validate(&t);
    out->total = t.global_table.total;
    out->params = ct_xmalloc((size_t)out->total * sizeof(float));
    ct_trainer_gather_model(&t, out->params);
    ct_trainer_free(&t);
}

// Trains c on this process alone (a one-process group; c's micro-batch set to the global batch):
// for references other than parity_ref, e.g. the same model in another precision.
static inline void parity_train_alone(ct_config c, parity_result *out) {
    ct_group world, self;
    ct_comm_group_world(&world, 30);  // a failure ends the test in seconds, not minutes
    ct_comm_group_split(&world, world.rank, 0, "self", &self);
    parity_set_int(&c, "parallelism.data_shard_degree", 1);
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH);
    parity_train(&c, &self, out);
    ct_comm_group_free(&self);
    ct_comm_group_free(&world);
}

// c computed wide: bf16 for a base with 8-bit linears, fp32 for a bf16 base; false for fp32.
static bool parity_widened(ct_config *c) {
    if (c->float8 || c->mxfp8) {
        parity_set(c, "quantization.float8.enable", "false");
        parity_set(c, "quantization.mxfp8.enable", "false");
        return true;
    }
    if (c->mixed_precision != CT_CFG_BF16) return false;
    parity_set(c, "mixed_precision", "fp32");
    return true;
}

// The single-process run, on every rank (one-process group each), and for a narrow base the
// wide run beside it.
static void parity_reference(ct_group *world) {
    ct_group self;
    ct_comm_group_split(world, world->rank, 0, "self", &self);
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.data_shard_degree", 1);
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH);
    parity_train(&c, &self, &parity_ref);
    free(parity_wide.params);
    memset(&parity_wide, 0, sizeof parity_wide);
    if (parity_widened(&c)) parity_train(&c, &self, &parity_wide);
    ct_comm_group_free(&self);
}

static bool parity_narrow(void) { return parity_wide.total > 0; }

// The bound for the loss (which = 0) or gradient norm (which = 1) of every step: fp32's gamma_K,
// or for a narrow base 4 times the reference's largest distance from the wide run over the STEPS
// steps. Over the run, not step by step: one step's distance is a signed sample of the noise and
// can be near 0 by chance (the 8-bit errors of a step's loss cancel), while another run's noise at
// that step need not.
static double parity_step_bound(int which) {
    if (!parity_narrow()) return ct_em_fp32_stat();
    const double *ref = which ? parity_ref.grad_norm : parity_ref.loss;
    const double *wide = which ? parity_wide.grad_norm : parity_wide.loss;
    double d = 0;
    for (int t = 0; t < STEPS; t++) d = fmax(d, fabs(ref[t] - wide[t]) / fabs(wide[t]));
    return ct_em_narrow(d, ct_em_fp32_stat());
}

// The validation loss's: its own distance is one signed sample, near 0 by chance on some machines
// (6.3e-6 against the training loss's 6.3e-4 for float8 tensorwise on an AVX-512 BF16 set), so the
// noise scale is the larger of it and the training loss's largest distance over the steps: the
// loss of the same model on other tokens carries narrow noise of the same size.
static double parity_val_bound(void) {
    if (!parity_narrow()) return ct_em_fp32_stat();
    double d = fabs(parity_ref.val_loss - parity_wide.val_loss) / parity_wide.val_loss;
    for (int t = 0; t < STEPS; t++)
        d = fmax(d, fabs(parity_ref.loss[t] - parity_wide.loss[t]) / fabs(parity_wide.loss[t]));
    return ct_em_narrow(d, ct_em_fp32_stat());
}

// ||a - b|| / ||b|| over one tensor.
static double parity_rel_rms(const float *a, const float *b, long n) {
    double dd = 0, bb = 0;
    for (long i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        dd += d * d, bb += (double)b[i] * b[i];
    }
    return bb > 0 ? sqrt(dd / bb) : sqrt(dd);
}

static void parity_compare(const parity_result *r, const char *what) {
    const parity_result *ref = &parity_ref;
    for (int s = 0; s < STEPS; s++) {
        double tol = parity_step_bound(0);
        CHECK(fabs(r->loss[s] - ref->loss[s]) <= tol * fabs(ref->loss[s]), "%s step %d loss %.9g vs %.9g (bound %.3g)",
              what, s + 1, r->loss[s], ref->loss[s], tol);
    }
    for (int s = 0; s < STEPS; s++) {
        double tol = parity_step_bound(1);
        CHECK(fabs(r->grad_norm[s] - ref->grad_norm[s]) <= tol * ref->grad_norm[s],
              "%s step %d grad norm %.9g vs %.9g (bound %.3g)", what, s + 1, r->grad_norm[s], ref->grad_norm[s], tol);
    }
    // The load-balancing loss: a sum of the same terms as the loss (per sequence or per call).
    for (int s = 0; s < STEPS; s++) {
        double tol = parity_step_bound(0);
        CHECK(fabs(r->moe_aux_loss[s] - ref->moe_aux_loss[s]) <= tol * fabs(ref->moe_aux_loss[s]),
              "%s step %d load-balancing loss %.9g vs %.9g (bound %.3g)", what, s + 1, r->moe_aux_loss[s],
              ref->moe_aux_loss[s], tol);
    }
    // Expert loads: the same (token, expert) pairs whatever the layout, so the same counts; in
    // fp32 the least and most loaded experts' loads are the reference's exactly (at these sizes no
    // reassociated sum moves a score past another's). For a narrow base the routing is
    // chaotic like the parameters and, unlike them, discontinuous: a score a bf16 flip moves past
    // another's sends a token elsewhere, and a burst of tokens onto one expert appears in one run
    // and not in another (the most loaded expert's load at one step: 7.75 in the MXFP8 reference,
    // 3.75 under FSDP 2, 8.5 in the wide run, while the reference stayed within 0.75 of the wide
    // run over the other steps). No single run's distance bounds that, so a narrow base checks
    // the pairs and the load-balancing loss above (a sum of the loads' terms, held like the loss).
    for (int s = 0; s < STEPS; s++) {
        bool loads_held = parity_narrow() || (r->moe_load_min[s] == ref->moe_load_min[s] &&
                                              r->moe_load_max[s] == ref->moe_load_max[s]);
        CHECK(r->moe_pairs[s] == ref->moe_pairs[s] && loads_held,
              "%s step %d expert load: %.0f pairs, min %.6g max %.6g vs %.0f, %.6g, %.6g", what, s + 1,
              r->moe_pairs[s], r->moe_load_min[s], r->moe_load_max[s], ref->moe_pairs[s], ref->moe_load_min[s],
              ref->moe_load_max[s]);
    }
    if (getenv("VERBOSE")) {
        double wl = 0, wg = 0;
        for (int s = 0; s < STEPS; s++) {
            wl = fmax(wl, fabs(r->loss[s] - ref->loss[s]) / fabs(ref->loss[s]));
            wg = fmax(wg, fabs(r->grad_norm[s] - ref->grad_norm[s]) / ref->grad_norm[s]);
        }
        printf("    %s: loss %.3g of bound %.3g, grad norm %.3g of bound %.3g\n", what, wl, parity_step_bound(0), wg,
               parity_step_bound(1));
    }
    double vtol = parity_val_bound();
    CHECK(fabs(r->val_loss - ref->val_loss) <= vtol * ref->val_loss, "%s validation loss %.9g vs %.9g (bound %.3g)",
          what, r->val_loss, ref->val_loss, vtol);
    ct_model_config m;
    ct_param_table table;
    ct_model_config_from(&m, &parity_base);
    ct_param_table_build(&table, &m);
    const double ptol = ct_em_fp32_param(STEPS);
    for (int pi = 0; pi < table.count; pi++) {
        const ct_param *p = &table.params[pi];
        const float *x = r->params + p->offset, *x_ref = ref->params + p->offset;
        if (parity_narrow()) {
            // Per tensor: element by element the narrow runs are chaotic (tests/error_model.h).
            double d = parity_rel_rms(x_ref, parity_wide.params + p->offset, p->numel);
            double err = parity_rel_rms(x, x_ref, p->numel), tol = ct_em_narrow(d, ptol);
            if (getenv("VERBOSE"))
                printf("    %s %s: relative RMS %.3g from the reference, bound %.3g (%.3g from the wide run)\n", what,
                       p->name, err, tol, d);
            CHECK(err <= tol, "%s %s: relative RMS difference %.3g from the reference, bound %.3g (4 x %.3g from the "
                  "wide run + %.3g)", what, p->name, err, tol, d, ptol);
            continue;
        }
        double ss = 0;
        for (long i = 0; i < p->numel; i++) ss += (double)x_ref[i] * x_ref[i];
        double rms = sqrt(ss / p->numel), worst_err = 0;
        long bad = 0, worst = -1;
        for (long i = 0; i < p->numel; i++) {
            double err = fabs((double)x[i] - x_ref[i]) / fmax(fabs(x_ref[i]), rms);
            if (err > ptol) bad++;
            if (err > ptol && getenv("VERBOSE")) printf("    %s [%ld] %.9g vs %.9g\n", p->name, i, x[i], x_ref[i]);
            if (err > worst_err) worst_err = err, worst = i;
        }
        CHECK(bad == 0, "%s %s: %ld of %ld elements differ by more than %.3g (worst %.3g at %ld)", what, p->name, bad,
              p->numel, ptol, worst_err, worst);
    }
    ct_param_table_free(&table);
    CHECK(fabs(r->loss[STEPS - 1] - r->loss[0]) > 1e-3, "%s: loss did not move", what);
}

typedef struct {
    int shard, replicate, tp, accum;
    bool sequence_parallel, disable_loss_parallel;
    int pp, vpp;            // pipeline degree and stages per rank (0: 1)
    int cp;                 // context parallel degree (0: 1)
    const char *schedule;   // pipeline_schedule (NULL: the default)
    const char *schedule_file;  // pipeline_schedule_file (NULL: none)
    bool async;             // parallelism.enable_async_comm
    int ep;                 // expert parallel degree, borrowed from shard x cp (0: 1)
} parity_layout;

// Trains `layout` over all ranks and compares it with the reference.
static void parity_run(parity_layout l, const char *what) {
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ct_config c = parity_base;
    int pp = l.pp > 0 ? l.pp : 1, vpp = l.vpp > 0 ? l.vpp : 1, cp = l.cp > 0 ? l.cp : 1;
    int shard = l.shard == -1 ? world / (l.replicate * l.tp * pp * cp) : l.shard;
    parity_set_int(&c, "parallelism.context_extension_degree", cp);
    int dp = shard * l.replicate;
    parity_set_int(&c, "parallelism.pipeline_degree", pp);
    parity_set_int(&c, "parallelism.pipeline_stages_per_rank", vpp);
    if (l.schedule) parity_set(&c, "pipeline_schedule", l.schedule);
    if (l.schedule_file) parity_set(&c, "pipeline_schedule_file", l.schedule_file);
    parity_set_int(&c, "parallelism.data_shard_degree", l.shard);
    parity_set_int(&c, "parallelism.data_replicate_degree", l.replicate);
    parity_set_int(&c, "parallelism.compute_parallel_degree", l.tp);
    parity_set_int(&c, "parallelism.expert_parallel_degree", l.ep > 0 ? l.ep : 1);
    parity_set_int(&c, "gradient_accumulation_steps", l.accum);
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH / dp / l.accum);
    parity_set(&c, "sequence_parallel.enable", l.sequence_parallel ? "true" : "false");
    parity_set(&c, "parallelism.disable_loss_parallel", l.disable_loss_parallel ? "true" : "false");
    parity_set(&c, "parallelism.enable_async_comm", l.async ? "true" : "false");
    parity_result r;
    parity_train(&c, NULL, &r);
    parity_compare(&r, what);
    free(r.params);
}
// main() of a parity test: started plainly it re-runs itself under mpirun at 2, 4 and 8 ranks;
// as a child it builds the reference for the model `dims` (ndims "key", "value" pairs) and
// calls cases(world size), which runs the layouts that fit.
static int parity_extra_ranks;  // a test may add one larger world (e.g. 16 for a 4-D layout)

static inline int parity_main(int argc, char **argv, const char *dims[][2], size_t ndims, void (*cases)(int world_size)) {
    if (!ct_mpi_test_is_child(argc, argv)) {
        // Up to 8 ranks share this machine's cores: one thread each, or they spin against each other.
        setenv("OMP_NUM_THREADS", "1", 1);
        int rc = 0;
        rc |= ct_mpi_test_spawn(argv[0], 2, 300, NULL);
        rc |= ct_mpi_test_spawn(argv[0], 4, 300, NULL);
        rc |= ct_mpi_test_spawn(argv[0], 8, 400, NULL);
        if (parity_extra_ranks) rc |= ct_mpi_test_spawn(argv[0], parity_extra_ranks, 400, NULL);
        return rc ? 1 : 0;
    }
    if (ct_comm_init(&argc, &argv)) ct_fatal("test", "%s", ct_last_error());
    ct_group world;
    ct_comm_group_world(&world, 30);  // a failure ends the test in seconds, not minutes
    ct_config_defaults(&parity_base);
    for (size_t i = 0; i < ndims; i++) parity_set(&parity_base, dims[i][0], dims[i][1]);
    parity_common(&parity_base);
    parity_reference(&world);
    cases(world.size);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
#endif
