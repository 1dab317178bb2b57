// Parity of data-parallel layouts with the single-process run: FSDP at 2, 4 and 8 ranks, DDP
// at 2 and 4, HSDP 2×2, and FSDP with gradient accumulation. Every rank also trains the
// single-process reference (on a one-process group) over the same global batch and seed; the
// distributed run must match it per step (loss within 1e-5 relative over 10 steps) and at the
// end (every parameter, gathered, within 1e-4 relative). At 8 ranks the parameter, gradient
// and optimizer memory per rank is checked against 1/7 of the single-process figure.
#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "core/memory.h"
#include "mpi_test.h"
#include "train/trainer.h"

enum { STEPS = 10, GLOBAL_BATCH = 8 };

static void tiny_config(ct_config *c) {
    ct_config_defaults(c);
    const char *kv[][2] = {
        {"model.dim", "32"},          {"model.n_layers", "2"},     {"model.n_heads", "4"},
        {"model.n_kv_heads", "2"},    {"model.vocab_size", "131"}, {"model.ffn_hidden_dim", "72"},
        {"training.seq_len", "16"},   {"training.steps", "10"},    {"training.dataset", "synthetic"},
        {"lr_scheduler.warmup_steps", "2"}, {"validation.enable", "true"}, {"validation.steps", "2"}, {"metrics.peak_tflops", "1"}, {"training.seed", "7"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (ct_config_set(c, kv[i][0], kv[i][1])) ct_fatal("test", "%s", ct_last_error());
}

static void set_int(ct_config *c, const char *key, int v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", v);
    if (ct_config_set(c, key, buf)) ct_fatal("test", "%s", ct_last_error());
}

typedef struct {
    double loss[STEPS];
    double val_loss;     // forward-only evaluation after training
    float *params;  // (P) gathered
    long total;
    size_t state_bytes;  // params + grads + optimizer state allocated by this rank's trainer
    size_t buffer_bytes; // FSDP gather slots and full-gradient buffer
} run_result;

static size_t state_now(void) {
    return ct_mem_current(CT_MEM_PARAMS) + ct_mem_current(CT_MEM_GRADS) + ct_mem_current(CT_MEM_OPTIM);
}

static void train(const ct_config *c, ct_group *parent, run_result *out) {
    static ct_trainer t;
    size_t before = state_now();
    if (ct_trainer_init(&t, c, parent)) ct_fatal("test", "%s", ct_last_error());
    out->state_bytes = state_now() - before;
    out->buffer_bytes = t.fsdp.buffer_bytes;
    for (int s = 0; s < STEPS; s++) out->loss[s] = ct_trainer_step(&t);
    out->val_loss = ct_trainer_validate(&t);
    out->total = t.table.total;
    out->params = ct_xmalloc((size_t)out->total * sizeof(float));
    ct_fsdp_gather_full(&t.fsdp, out->params);
    ct_trainer_free(&t);
}

static run_result reference;
static ct_config base_config;  // the tiny model every run trains

static void compare(const run_result *r, const char *what) {
    for (int s = 0; s < STEPS; s++)
        CHECK(fabs(r->loss[s] - reference.loss[s]) <= 1e-5 * fabs(reference.loss[s]), "%s step %d loss %.9g vs %.9g",
              what, s + 1, r->loss[s], reference.loss[s]);
    CHECK(fabs(r->val_loss - reference.val_loss) <= 1e-5 * reference.val_loss, "%s validation loss %.9g vs %.9g",
          what, r->val_loss, reference.val_loss);
    // Element by element, relative to the element, with a floor of the tensor's RMS for
    // elements near zero (where float32 rounding of the update is all there is to compare).
    ct_llama_config m;
    ct_param_table table;
    ct_llama_config_from(&m, &base_config);
    ct_param_table_build(&table, &m);
    long bad = 0, worst = -1;
    double worst_err = 0;
    for (int pi = 0; pi < table.count; pi++) {
        const ct_param *p = &table.params[pi];
        double ss = 0;
        for (long i = 0; i < p->numel; i++) ss += (double)reference.params[p->offset + i] * reference.params[p->offset + i];
        double rms = sqrt(ss / p->numel);
        for (long i = p->offset; i < p->offset + p->numel; i++) {
            double a = r->params[i], b = reference.params[i];
            double err = fabs(a - b) / fmax(fabs(b), rms);
            if (err > 1e-4) bad++;
            if (err > 1e-4 && getenv("VERBOSE")) printf("    %s [%ld] %.9g vs %.9g\n", p->name, i - p->offset, a, b);
            if (err > worst_err) worst_err = err, worst = i;
        }
    }
    ct_param_table_free(&table);
    CHECK(bad == 0, "%s: %ld of %ld parameters differ by more than 1e-4 (worst %.3g at %ld)", what, bad, r->total,
          worst_err, worst);
    // The run must have trained: the loss moved.
    CHECK(fabs(r->loss[STEPS - 1] - r->loss[0]) > 1e-3, "%s: loss did not move", what);
}

static void run_layout(int shard, int replicate, int accum, const char *what) {
    ct_config c;
    tiny_config(&c);
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int dp = (shard == -1 ? world / replicate : shard) * replicate;
    set_int(&c, "parallelism.data_shard_degree", shard);
    set_int(&c, "parallelism.data_replicate_degree", replicate);
    set_int(&c, "gradient_accumulation_steps", accum);
    set_int(&c, "micro_batch_size", GLOBAL_BATCH / dp / accum);
    run_result r;
    train(&c, NULL, &r);
    compare(&r, what);
    free(r.params);
}

static void fsdp(void) { run_layout(-1, 1, 1, "fsdp"); }
static void ddp(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    run_layout(1, n, 1, "ddp");
}
static void hsdp_2x2(void) { run_layout(2, 2, 1, "hsdp"); }
static void fsdp_accumulation(void) { run_layout(-1, 1, 2, "fsdp+accum"); }

static void fsdp_memory(void) {
    ct_config c;
    tiny_config(&c);
    set_int(&c, "parallelism.data_shard_degree", 8);
    set_int(&c, "micro_batch_size", 1);
    run_result r;
    train(&c, NULL, &r);
    double limit = reference.state_bytes / 7.0 + r.buffer_bytes;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        printf("  memory: params+grads+optim per rank %.1f KiB at N=8 vs %.1f KiB in one process "
               "(limit 1/7 + gather buffers %.1f KiB = %.1f KiB)\n",
               r.state_bytes / 1024.0, reference.state_bytes / 1024.0, r.buffer_bytes / 1024.0, limit / 1024.0);
    CHECK(r.state_bytes - r.buffer_bytes <= reference.state_bytes / 7.0, "sharded state %zu > 1/7 of %zu",
          r.state_bytes - r.buffer_bytes, reference.state_bytes);
    free(r.params);
}

int main(int argc, char **argv) {
    if (!ct_mpi_test_is_child(argc, argv)) {
        int rc = 0;
        rc |= ct_mpi_test_spawn(argv[0], 2, 300, NULL);
        rc |= ct_mpi_test_spawn(argv[0], 4, 300, NULL);
        rc |= ct_mpi_test_spawn(argv[0], 8, 400, NULL);
        return rc ? 1 : 0;
    }
    if (ct_comm_init(&argc, &argv)) ct_fatal("test", "%s", ct_last_error());
    ct_group world, self;
    ct_comm_group_world(&world, 120);
    ct_comm_group_split(&world, world.rank, 0, "self", &self);
    int n = world.size;

    ct_config c;
    tiny_config(&c);
    set_int(&c, "parallelism.data_shard_degree", 1);
    set_int(&c, "micro_batch_size", GLOBAL_BATCH);
    train(&c, &self, &reference);
    base_config = c;

    CT_MPI_RUN(fsdp);
    if (n <= 4) CT_MPI_RUN(ddp);
    if (n == 4) CT_MPI_RUN(hsdp_2x2);
    if (n == 2) CT_MPI_RUN(fsdp_accumulation);
    if (n == 8) CT_MPI_RUN(fsdp_memory);
    ct_comm_group_free(&self);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
