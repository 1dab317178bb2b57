// parallelism.enable_async_comm: FSDP gathers the next group while the current one computes and
// completes gradient reduce-scatters later. It must not change a bit: every layout trains the
// same 10 steps with async off and on, and the losses, gradient norms, validation loss and every
// parameter must be equal (==, memcmp), and the all-gather / reduce-scatter bytes too (the
// prefetch guessed right, so nothing was gathered twice). Layouts: FSDP 2 and 4 under each
// reshard policy, FSDP with accumulation, bf16 compute (and bf16 reductions) under FSDP 2,
// activation checkpointing (full; every 2nd block) under FSDP 2,
// pp 2 x FSDP 2 (1f1b and interleaved with UNSHARD/RESHARD, 1f1b with per-use gathers under
// `always`, zb_h1 with split backward), FSDP 2 x tp 2 (with and without sequence parallel) and
// HSDP 2 x 2; one layout also against the single-process reference. A white-box case walks a
// stage's acquire/release order and checks which group is in flight when.
#include "parity.h"

typedef struct {
    const char *key, *value;
} kv;

typedef struct {
    parity_result r;
    double gathered, scattered;  // bytes on the fsdp group over the run
} async_result;

// The configuration parity_run trains for `l`, with extra settings on top.
static void layout_config(parity_layout l, const kv *extra, ct_config *c) {
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    *c = parity_base;
    int pp = l.pp > 0 ? l.pp : 1, vpp = l.vpp > 0 ? l.vpp : 1;
    int shard = l.shard == -1 ? world / (l.replicate * l.tp * pp) : l.shard;
    parity_set_int(c, "parallelism.pipeline_degree", pp);
    parity_set_int(c, "parallelism.pipeline_stages_per_rank", vpp);
    if (l.schedule) parity_set(c, "pipeline_schedule", l.schedule);
    parity_set_int(c, "parallelism.data_shard_degree", l.shard);
    parity_set_int(c, "parallelism.data_replicate_degree", l.replicate);
    parity_set_int(c, "parallelism.compute_parallel_degree", l.tp);
    parity_set_int(c, "gradient_accumulation_steps", l.accum);
    parity_set_int(c, "micro_batch_size", GLOBAL_BATCH / (shard * l.replicate) / l.accum);
    parity_set(c, "sequence_parallel.enable", l.sequence_parallel ? "true" : "false");
    parity_set(c, "parallelism.enable_async_comm", l.async ? "true" : "false");
    for (const kv *e = extra; e && e->key; e++) parity_set(c, e->key, e->value);
}

// parity_train, keeping the fsdp group's byte counts.
static void train(const ct_config *c, async_result *out) {
    static ct_trainer t;
    if (ct_trainer_init(&t, c, NULL)) ct_fatal("test", "%s", ct_last_error());
    ct_comm_stats_reset(&t.mesh.fsdp);
    for (int s = 0; s < STEPS; s++) {
        out->r.loss[s] = ct_trainer_step(&t);
        out->r.grad_norm[s] = t.last.grad_norm;
    }
    out->r.val_loss = ct_trainer_validate(&t);
    out->gathered = t.mesh.fsdp.stats[CT_COMM_ALL_GATHER].bytes;
    out->scattered = t.mesh.fsdp.stats[CT_COMM_REDUCE_SCATTER].bytes;
    out->r.total = t.global_table.total;
    out->r.params = ct_xmalloc((size_t)out->r.total * sizeof(float));
    ct_trainer_gather_model(&t, out->r.params);
    ct_trainer_free(&t);
}

// Trains `l` (with `extra`) blocking and async and requires the same bits.
static void same_bits(parity_layout l, const kv *extra, const char *what) {
    async_result r[2];
    for (int a = 0; a < 2; a++) {
        l.async = a;
        ct_config c;
        layout_config(l, extra, &c);
        train(&c, &r[a]);
    }
    for (int s = 0; s < STEPS; s++) {
        CHECK(r[1].r.loss[s] == r[0].r.loss[s], "%s step %d loss %.17g async vs %.17g blocking", what, s + 1,
              r[1].r.loss[s], r[0].r.loss[s]);
        CHECK(r[1].r.grad_norm[s] == r[0].r.grad_norm[s], "%s step %d grad norm %.17g async vs %.17g blocking", what,
              s + 1, r[1].r.grad_norm[s], r[0].r.grad_norm[s]);
    }
    CHECK(r[1].r.val_loss == r[0].r.val_loss, "%s validation loss %.17g vs %.17g", what, r[1].r.val_loss,
          r[0].r.val_loss);
    long differ = 0;
    for (long i = 0; i < r[0].r.total; i++) differ += memcmp(&r[0].r.params[i], &r[1].r.params[i], sizeof(float)) != 0;
    CHECK(differ == 0, "%s: %ld of %ld parameters differ with async on", what, differ, r[0].r.total);
    CHECK(r[1].gathered == r[0].gathered && r[1].scattered == r[0].scattered,
          "%s: async gathered %.0f / reduce-scattered %.0f bytes, blocking %.0f / %.0f", what, r[1].gathered,
          r[1].scattered, r[0].gathered, r[0].scattered);
    CHECK(fabs(r[0].r.loss[STEPS - 1] - r[0].r.loss[0]) > 1e-3, "%s: loss did not move", what);
    free(r[0].r.params);
    free(r[1].r.params);
}

static const char *const policies[] = {"default", "always", "never"};

static void fsdp_policies(void) {
    for (int p = 0; p < 3; p++) {
        kv extra[] = {{"parallelism.fsdp_reshard_after_forward", policies[p]}, {NULL, NULL}};
        char what[64];
        snprintf(what, sizeof what, "fsdp reshard %s", policies[p]);
        same_bits((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 1}, extra, what);
    }
}

static void fsdp_accumulation(void) {
    same_bits((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 2}, NULL, "fsdp accum 2");
}

static void fsdp_bf16(void) {
    kv bf16[] = {{"mixed_precision", "bf16"}, {NULL, NULL}};
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1}, bf16, "fsdp2 bf16");
    kv reduce[] = {{"mixed_precision", "bf16"}, {"mixed_precision_reduce", "bf16"}, {NULL, NULL}};
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2}, reduce, "fsdp2 bf16 reduce bf16");
}

// Activation checkpointing: the recompute phase gathers the group for its backward and starts
// the one below.
static void fsdp_checkpointing(void) {
    kv full[] = {{"activation_checkpoint.mode", "full"}, {NULL, NULL}};
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2}, full, "fsdp2 ac full");
    kv every2[] = {{"activation_checkpoint.mode", "selective"}, {"activation_checkpoint.selective_ac_option", "2"},
                   {"parallelism.fsdp_reshard_after_forward", "always"}, {NULL, NULL}};
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1}, every2,
              "fsdp2 ac every 2nd block, reshard always");
}

// Against the one-process run too (parity_layout.async), not only against blocking.
static void fsdp_reference(void) {
    parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 1, .async = true}, "fsdp async");
}

static void pp2_fsdp2(void) {
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "1f1b"}, NULL,
              "pp2 x fsdp2 1f1b (UNSHARD)");
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .vpp = 2,
                              .schedule = "interleaved_1f1b"},
              NULL, "pp2 x fsdp2 interleaved (UNSHARD)");
    kv always[] = {{"parallelism.fsdp_reshard_after_forward", "always"}, {NULL, NULL}};
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "1f1b"}, always,
              "pp2 x fsdp2 1f1b, per-use gathers");
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "zb_h1"}, NULL,
              "pp2 x fsdp2 zb_h1");
    kv bf16[] = {{"mixed_precision", "bf16"}, {"mixed_precision_reduce", "bf16"}, {NULL, NULL}};
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .vpp = 2,
                              .schedule = "interleaved_1f1b"},
              bf16, "pp2 x fsdp2 interleaved bf16");
}

static void fsdp2_tp2(void) {
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1}, NULL, "fsdp2 x tp2");
    same_bits((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1, .sequence_parallel = true}, NULL,
              "fsdp2 x tp2+sp");
}

static void hsdp(void) {
    same_bits((parity_layout){.shard = 2, .replicate = 2, .tp = 1, .accum = 1}, NULL, "hsdp 2x2");
}

// Which group is arriving while which computes: one step's acquire/release order of a stage with
// blocks 1..4 (groups 0 embedding, 5 head) under `default`, async. Forward: acquiring g starts
// g + 1; the head (training) starts group 3, the highest not kept whole (still arriving while
// group 4's backward runs); backward: acquiring g starts g - 1 (group 1 starts nothing: the
// embedding's backward reads no weights).
static void prefetch_order(void) {
    ct_config c;
    layout_config((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1, .async = true}, NULL, &c);
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) ct_fatal("test", "%s", ct_last_error());
    ct_fsdp *f = &t.fsdp;
    ct_weight_ops w = ct_fsdp_weight_ops(f);
    CHECK(f->n_slots == 3 && f->n_lanes == 2 && f->n_full == 2, "async: %d slots, %d lanes, %d full buffers",
          f->n_slots, f->n_lanes, f->n_full);
    const unsigned W = CT_USE_WEIGHTS, G = CT_USE_GRADS;
    static const struct {
        int group;
        ct_phase phase;
        unsigned use;
        int arriving;  // the group prefetched by this acquire (-1: none)
    } walk[] = {
        {0, CT_PHASE_FORWARD, W, 1},      {1, CT_PHASE_FORWARD, W, 2},      {2, CT_PHASE_FORWARD, W, 3},
        {3, CT_PHASE_FORWARD, W, 4},      {4, CT_PHASE_FORWARD, W, 5},      {5, CT_PHASE_FORWARD, W | G, 3},
        {4, CT_PHASE_BACKWARD, W | G, 3},  {3, CT_PHASE_BACKWARD, W | G, 2}, {2, CT_PHASE_BACKWARD, W | G, 1},
        {1, CT_PHASE_BACKWARD, W | G, -1}, {0, CT_PHASE_BACKWARD, G, -1},
    };
    for (size_t i = 0; i < sizeof walk / sizeof walk[0]; i++) {
        int g = walk[i].group;
        w.acquire(w.ctx, g, walk[i].phase, walk[i].use);
        int arriving = -1;
        for (int s = 0; s < f->n_slots; s++)
            if (f->prefetched[s]) arriving = f->slot_group[s];
        CHECK(arriving == walk[i].arriving, "step %zu (group %d %s): group %d arriving, expected %d", i, g,
              ct_phase_name(walk[i].phase), arriving, walk[i].arriving);
        CHECK(!(walk[i].use & W) || (f->group_slot[g] >= 0 && !f->gather_open[f->group_slot[g]]),
              "group %d not whole after acquire", g);
        w.release(w.ctx, g, walk[i].phase, walk[i].use);
        CHECK(f->rs_count <= f->n_lanes, "%d reduce-scatters in flight", f->rs_count);
    }
    CHECK(f->rs_count > 0, "the last reduce-scatters are still in flight before the step ends");
    w.finish(w.ctx);
    int whole = 0;
    for (int s = 0; s < f->n_slots; s++) whole += f->slot_group[s] >= 0;
    CHECK(f->rs_count == 0 && whole == 0, "after finish: %d reduce-scatters, %d groups whole", f->rs_count, whole);
    ct_trainer_free(&t);
}

static void cases(int n) {
    CT_MPI_RUN(fsdp_policies);
    if (n == 2) CT_MPI_RUN(fsdp_accumulation);
    if (n == 2) CT_MPI_RUN(fsdp_bf16);
    if (n == 2) CT_MPI_RUN(fsdp_checkpointing);
    if (n == 2) CT_MPI_RUN(fsdp_reference);
    if (n == 2) CT_MPI_RUN(prefetch_order);
    if (n == 4) CT_MPI_RUN(pp2_fsdp2);
    if (n == 4) CT_MPI_RUN(fsdp2_tp2);
    if (n == 4) CT_MPI_RUN(hsdp);
}

int main(int argc, char **argv) {
    (void)parity_main;  // 2 and 4 ranks are enough here: the 8-rank run would add nothing
    if (!ct_mpi_test_is_child(argc, argv)) {
        setenv("OMP_NUM_THREADS", "1", 1);  // ranks share this machine's cores
        int rc = ct_mpi_test_spawn(argv[0], 2, 300, NULL);
        rc |= ct_mpi_test_spawn(argv[0], 4, 400, NULL);
        return rc ? 1 : 0;
    }
    if (ct_comm_init(&argc, &argv)) ct_fatal("test", "%s", ct_last_error());
    ct_group world;
    ct_comm_group_world(&world, 30);
    static const char *dims[][2] = {{"model.dim", "32"},       {"model.n_layers", "4"},     {"model.n_heads", "4"},
                                    {"model.n_kv_heads", "2"}, {"model.vocab_size", "128"}, {"model.ffn_hidden_dim", "64"}};
    ct_config_defaults(&parity_base);
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) parity_set(&parity_base, dims[i][0], dims[i][1]);
    parity_common(&parity_base);
    if (world.size == 2) parity_reference(&world);  // for fsdp_reference
    cases(world.size);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
