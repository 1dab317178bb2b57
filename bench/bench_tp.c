// Tensor-parallel communication and memory. Run under MPI with 4 ranks:
//   mpirun -np 4 build/bench/bench_tp
// For tp = 4 (without and with sequence parallel, and with gathered logits for comparison) it
// prints the bytes one training step moves on the tp group per rank, beside the analytic
// figure of the schedule, as a ratio:
//   per layer and micro-batch, forward two all-reduces of N·C elements (after wo and w2) and
//   backward two more (the input gradients of wqkv and w13); plus one for the vocabulary-split
//   embedding (forward) and one for the output layer's input gradient (backward); plus the loss
//   statistics, 3 floats per row (row max; sum-exp and target logit). An all-reduce of E
//   elements moves 2·(T−1)/T·E per rank; under sequence parallel each becomes an all-gather and
//   a reduce-scatter of (T−1)/T·E each — the same bytes — and the norm weights' gradients are
//   summed over tp once per step ((2L+1)·C elements).
// It also prints activation memory and parameters per rank against one process (tp = 1).
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "core/memory.h"
#include "train/trainer.h"

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) ct_fatal("bench_tp", "%s", ct_last_error());
}

static void base(ct_config *c) {
    ct_config_defaults(c);
    set(c, "model.n_layers", "4");  // debugmodel otherwise: dim 256, 16 heads, FFN 768, vocab 2048
    set(c, "training.seq_len", "128");
    set(c, "micro_batch_size", "4");
    set(c, "training.dataset", "synthetic");
    set(c, "metrics.peak_tflops", "1");
}

typedef struct {
    double bytes;            // tp group, one step
    size_t activations;      // bytes
    long params;             // elements held by this rank
} measured;

static measured run(const ct_config *c, ct_group *parent, ct_trainer *t) {
    measured m;
    size_t a0 = ct_mem_current(CT_MEM_ACTIVATIONS);
    if (ct_trainer_init(t, c, parent)) ct_fatal("bench_tp", "%s", ct_last_error());
    m.activations = ct_mem_current(CT_MEM_ACTIVATIONS) - a0;
    m.params = t->fsdp.local_numel;
    ct_trainer_step(t);  // warm-up
    ct_group *tp = &t->mesh.dim[CT_MESH_TP];
    ct_comm_stats_reset(tp);
    ct_trainer_step(t);
    m.bytes = ct_comm_stats_total_bytes(tp);
    return m;
}

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv)) return 1;
    ct_group world, self;
    ct_comm_group_world(&world, 300);
    ct_comm_group_split(&world, world.rank, 0, "self", &self);
    static ct_trainer t;

    ct_config c;
    base(&c);
    set(&c, "parallelism.data_shard_degree", "1");
    measured one = run(&c, &self, &t);
    ct_trainer_free(&t);

    const char *names[] = {"tp 4", "tp 4 + sequence parallel", "tp 4 + sp, gathered logits"};
    for (int k = 0; k < 3; k++) {
        base(&c);
        set(&c, "parallelism.data_shard_degree", "1");
        set(&c, "parallelism.compute_parallel_degree", "4");
        set(&c, "sequence_parallel.enable", k >= 1 ? "true" : "false");
        set(&c, "parallelism.disable_loss_parallel", k == 2 ? "true" : "false");
        measured m = run(&c, NULL, &t);
        double T = 4, N = (double)c.micro_batch_size * c.seq_len, C = t.model.dim, L = t.model.n_layers;
        double V = t.model.vocab_size, ring = (T - 1) / T;
        double main_elems = (4 * L + 2) * N * C;                   // all-reduce-equivalents of (N, C)
        double analytic = 2 * ring * main_elems * 4                // f / g operators
                          + 2 * ring * 3 * N * 4;                  // loss statistics
        if (k >= 1) analytic += 2 * ring * (2 * L + 1) * C * 4;    // norm gradients summed over tp
        if (k == 2) analytic += ring * N * V * 4 - 2 * ring * 3 * N * 4;  // logits gathered instead
        analytic += 2 * ring * 8;                                  // the gradient norm (one double)
        if (world.rank == 0) {
            printf("%-28s tp bytes/step/rank %12.0f  analytic %12.0f  ratio %.4f   (4 all-reduces per layer "
                   "alone: %.0f)\n",
                   names[k], m.bytes, analytic, m.bytes / analytic, 2 * ring * 4 * L * N * C * 4);
            printf("%-28s activations/rank %.1f MiB vs %.1f MiB in one process (%.2fx); parameters/rank %ld vs %ld "
                   "(%.3f)\n",
                   "", m.activations / 1048576.0, one.activations / 1048576.0,
                   (double)m.activations / one.activations, m.params, one.params, (double)m.params / one.params);
        }
        ct_trainer_free(&t);
    }
    ct_comm_group_free(&self);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    return 0;
}
