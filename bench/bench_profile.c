// What profiling costs a training step: steps with profiling.enable_profiling
// recording spans and writing each rank's Chrome trace (train/profiling.h), against the same
// trainer's steps with recording off, interleaved in rounds so that drift on a shared machine
// hits both alike. Prints the median step time of each (the slowest rank's, as the trainer
// reports it) and their ratio, the spans a profiled step records per rank and its file size.
//
//   build/bench/bench_profile [pairs] [key=value ...]           one process, benchmark S's layers, 2 x 256 tokens
//   mpirun -np 4 build/bench/bench_profile 5 parallelism.data_shard_degree=2
//       parallelism.compute_parallel_degree=2                   FSDP 2 x TP 2 (one line)
//
// A step with recording off pays one predictable branch per span site (core/trace.h); the
// reference for "on" is "off", so the ratio is the whole cost of a profiled step.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm/comm.h"
#include "core/clock.h"
#include "core/trace.h"
#include "train/profiling.h"
#include "train/trainer.h"

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) {
        fprintf(stderr, "bench_profile: %s\n", ct_last_error());
        exit(1);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv)) return 1;
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    if (rounds < 1) rounds = 1;
    ct_config c;
    ct_config_defaults(&c);
    const char *kv[][2] = {
        {"model.n_layers", "4"},   {"model.dim", "256"},      {"model.n_heads", "4"},       {"model.n_kv_heads", "4"},
        {"model.ffn_hidden_dim", "768"}, {"model.vocab_size", "8192"}, {"micro_batch_size", "2"},
        {"training.seq_len", "256"}, {"training.dataset", "synthetic"}, {"training.steps", "100000"},
        {"metrics.peak_tflops", "1"}, {"profiling.enable_profiling", "true"}, {"profiling.profile_freq", "1"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) set(&c, kv[i][0], kv[i][1]);
    char dump[] = "/tmp/ct_bench_profile_XXXXXX";
    ct_group world;
    if (ct_comm_group_world(&world, 300)) return 1;
    if (world.rank == 0 && !mkdtemp(dump)) return 1;
    ct_comm_broadcast(&world, dump, sizeof dump, CT_U8, 0);
    set(&c, "job.dump_folder", dump);
    for (int i = 2; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "bench_profile: expected key=value, got %s\n", argv[i]);
            return 1;
        }
        *eq = 0;
        set(&c, argv[i], eq + 1);
    }
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) {
        fprintf(stderr, "bench_profile: %s\n", ct_last_error());
        return 1;
    }
    // Pairs of steps, one with recording off and one on, in alternating order (off-on, on-off)
    // so that a trend in the machine's load hits both sides alike; the ratio is the median of
    // the pairs' ratios.
    double *off = calloc((size_t)rounds, sizeof(double)), *on = calloc((size_t)rounds, sizeof(double)),
           *ratio = calloc((size_t)rounds, sizeof(double));
    char path[1200] = "";
    int spans = 0;
    double write_s = 1e30;  // the fastest trace write seen
    for (int i = 0; i < 2; i++) ct_trainer_step(&t);  // warm-up: first touch, oneDNN primitives
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            bool profiled = (k == 0) == (r % 2 == 1);
            double t0 = ct_now_seconds();
            if (profiled) ct_profiler_step_begin(&t.prof, t.step);
            ct_trainer_step(&t);
            if (profiled) {
                spans = ct_trace_count();
                double w0 = ct_now_seconds();
                if (ct_profiler_write_trace(&t.prof, path, sizeof path)) fprintf(stderr, "%s\n", ct_last_error());
                double w = ct_now_seconds() - w0;
                if (w < write_s) write_s = w;
            }
            double dt = ct_now_seconds() - t0;
            ct_comm_all_reduce(&world, &dt, &dt, 1, CT_F64, CT_COMM_MAX);
            (profiled ? on : off)[r] = dt;
        }
        ratio[r] = on[r] / off[r];
    }
    // A span alone, best of 5 runs of many: begin + end while recording (into the reserved
    // buffer) and while not (the one branch every span site pays in every step).
    double on_ns = 1e30, off_ns = 1e30;
    int reps = ct_trace_capacity() - 1;
    for (int k = 0; k < 5; k++) {
        ct_trace_start();
        double t0 = ct_now_seconds();
        for (int i = 0; i < reps; i++) ct_trace_end(ct_trace_begin2(CT_TRACE_COMPUTE, "bench", "i", i, NULL, 0));
        double dt = (ct_now_seconds() - t0) / reps * 1e9;
        ct_trace_stop();
        if (dt < on_ns) on_ns = dt;
        t0 = ct_now_seconds();
        for (int i = 0; i < 1000000; i++) ct_trace_end(ct_trace_begin2(CT_TRACE_COMPUTE, "bench", "i", i, NULL, 0));
        dt = (ct_now_seconds() - t0) / 1000000 * 1e9;
        if (dt < off_ns) off_ns = dt;
    }
    int n = rounds;
    qsort(off, (size_t)n, sizeof(double), cmp);
    qsort(on, (size_t)n, sizeof(double), cmp);
    qsort(ratio, (size_t)n, sizeof(double), cmp);
    struct stat sb;
    long bytes = stat(path, &sb) == 0 ? (long)sb.st_size : -1;
    if (world.rank == 0) {
        char layout[96];
        ct_mesh_layout_format(&t.mesh.layout, layout, sizeof layout);
        printf("profiling overhead (%d ranks, %s; %d layers, dim %d, %d x %d tokens per rank): step %.2f ms off, "
               "%.2f ms on (medians of %d pairs); on/off %.3f (median of the pairs' ratios, range %.3f-%.3f); %d spans per "
               "step on rank 0, trace %ld bytes\n",
               world.size, layout, t.model.n_layers, t.model.dim, c.micro_batch_size, c.seq_len, off[n / 2] * 1e3,
               on[n / 2] * 1e3, n, ratio[n / 2], ratio[0], ratio[n - 1], spans, bytes);
    }
    if (world.rank == 0)
        printf("profiling cost from its parts: a span %.1f ns recording, %.2f ns not; %d spans + the trace write "
               "(%.3f ms, fastest) = %.4f of the median step with recording off\n",
               on_ns, off_ns, spans, write_s * 1e3, (spans * on_ns * 1e-9 + write_s) / off[n / 2]);
    ct_trainer_free(&t);
    if (world.rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dump);
        if (system(cmd) != 0) fprintf(stderr, "bench_profile: could not remove %s\n", dump);
    }
    free(off);
    free(on);
    free(ratio);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    return 0;
}
