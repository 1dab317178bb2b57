// Asynchronous communication (parallelism.enable_async_comm): how long ranks wait for
// communication per step, and the step time, with FSDP's prefetch and deferred reduce-scatters
// against the blocking path, on a model where compute dominates (debugmodel dims, 4 layers,
// seq 256). Two layouts over 4 ranks: FSDP 4, and FSDP 2 x tp 2. Waited time is what ct_comm_wait
// measured (comm stats wait_s: communication not hidden behind compute), summed over every group
// of the mesh and averaged over ranks; "fsdp" is its all-gathers and reduce-scatters alone. Step
// time is the slowest rank's. Modes alternate run by run (blocking, async, blocking, ...), so a
// machine's background load falls on both; printed as ratios async / blocking (TorchTitan
// reports about -25% waited time, i.e. 0.75).
// Run under MPI: mpirun -np 4 build/bench/bench_async [steps per run, default 4] [runs per mode, default 2]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "train/trainer.h"

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) ct_fatal("bench_async", "%s", ct_last_error());
}

typedef struct {
    double fsdp_wait, all_wait, step;  // seconds, summed over measured steps
    int steps;
} tally;

static double group_wait(const ct_group *g, int kind) {
    if (g->size == 0) return 0;
    if (kind >= 0) return g->stats[kind].wait_s;
    double w = 0;
    for (int k = 0; k < CT_COMM_NKINDS; k++) w += g->stats[k].wait_s;
    return w;
}

static void reset_all(ct_trainer *t) {
    ct_comm_stats_reset(&t->world);
    ct_comm_stats_reset(&t->mesh.fsdp);
    ct_comm_stats_reset(&t->mesh.dp);
    ct_comm_stats_reset(&t->mesh.dp_cp);
    for (int d = 0; d < CT_MESH_NDIMS; d++) ct_comm_stats_reset(&t->mesh.dim[d]);
}

static double wait_all(const ct_trainer *t) {
    double w = group_wait(&t->world, -1) + group_wait(&t->mesh.fsdp, -1) + group_wait(&t->mesh.dp, -1) +
               group_wait(&t->mesh.dp_cp, -1);
    for (int d = 0; d < CT_MESH_NDIMS; d++) w += group_wait(&t->mesh.dim[d], -1);
    return w;
}

// One run of `steps` measured steps (after a warm-up step) of this layout.
static void run(int shard, int tp, bool async, int steps, tally *out) {
    ct_config c;
    ct_config_defaults(&c);
    set(&c, "model.n_layers", "4");
    set(&c, "training.seq_len", "256");
    set(&c, "micro_batch_size", "1");
    set(&c, "training.dataset", "synthetic");
    set(&c, "metrics.peak_tflops", "1");
    char v[16];
    snprintf(v, sizeof v, "%d", shard);
    set(&c, "parallelism.data_shard_degree", v);
    snprintf(v, sizeof v, "%d", tp);
    set(&c, "parallelism.compute_parallel_degree", v);
    set(&c, "parallelism.enable_async_comm", async ? "true" : "false");
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) ct_fatal("bench_async", "%s", ct_last_error());
    ct_trainer_step(&t);  // warm-up
    for (int s = 0; s < steps; s++) {
        reset_all(&t);
        ct_trainer_step(&t);
        double w[2] = {group_wait(&t.mesh.fsdp, CT_COMM_ALL_GATHER) + group_wait(&t.mesh.fsdp, CT_COMM_REDUCE_SCATTER),
                       wait_all(&t)};
        ct_comm_all_reduce(&t.world, w, w, 2, CT_F64, CT_COMM_SUM);  // mean over ranks below
        out->fsdp_wait += w[0] / t.world.size;
        out->all_wait += w[1] / t.world.size;
        out->step += t.last.step_seconds;
        out->steps++;
    }
    ct_trainer_free(&t);
}

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv)) return 1;
    int steps = argc > 1 ? atoi(argv[1]) : 4, runs = argc > 2 ? atoi(argv[2]) : 2;
    ct_group world;
    ct_comm_group_world(&world, 0);
    int rank = world.rank, size = world.size;
    ct_comm_group_free(&world);
    if (size != 4) ct_fatal("bench_async", "run on 4 ranks (got %d)", size);
    static const struct {
        const char *name;
        int shard, tp;
    } layouts[] = {{"fsdp 4", 4, 1}, {"fsdp 2 x tp 2", 2, 2}};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        tally m[2];
        memset(m, 0, sizeof m);
        for (int r = 0; r < runs; r++)
            for (int a = 0; a < 2; a++) run(layouts[l].shard, layouts[l].tp, a, steps, &m[a]);
        if (rank == 0) {
            double n0 = m[0].steps, n1 = m[1].steps;
            printf("async %-14s per step: waited %.4f s -> %.4f s (fsdp %.4f -> %.4f), step %.3f s -> %.3f s; "
                   "ratios async/blocking: waited %.3f, fsdp waited %.3f, step %.3f\n",
                   layouts[l].name, m[0].all_wait / n0, m[1].all_wait / n1, m[0].fsdp_wait / n0, m[1].fsdp_wait / n1,
                   m[0].step / n0, m[1].step / n1, (m[1].all_wait / n1) / (m[0].all_wait / n0),
                   (m[1].fsdp_wait / n1) / (m[0].fsdp_wait / n0), (m[1].step / n1) / (m[0].step / n0));
            fflush(stdout);
        }
    }
    ct_comm_finalize();
    return 0;
}
