// FSDP communication volume: elements moved per step per rank on the fsdp group (all-gathers
// and reduce-scatters, as counted by the comm layer) against the analytic figure of the
// schedule each reshard policy runs:
//   forward:  all-gather of every group
//   backward: all-gather again of every group freed after forward (not the embedding, whose
//             backward needs no weights, nor the head, whose forward and backward are fused)
//   reduce-scatter of every group's gradient
// each moving (N−1)/N of the group's elements per rank. The textbook 3·Ψ·(N−1)/N is printed
// beside it. Then the same step under bf16 mixed precision: all-gather bytes against fp32's
// (the bf16 compute copy: 0.5), reduce-scatter bytes with fp32 and with bf16 reductions.
// Run under MPI: mpirun -np 4 build/bench/bench_fsdp_comm [debugmodel dims]
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "train/trainer.h"

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) ct_fatal("bench_fsdp_comm", "%s", ct_last_error());
}

static double fsdp_elements(const ct_group *g) {
    return (g->stats[CT_COMM_ALL_GATHER].bytes + g->stats[CT_COMM_REDUCE_SCATTER].bytes) / sizeof(float);
}

// The benched model: the debug model with 4 layers, one 64-token sequence per micro-batch.
static ct_config bench_config(void) {
    ct_config c;
    ct_config_defaults(&c);
    set(&c, "model.n_layers", "4");
    set(&c, "training.seq_len", "64");
    set(&c, "micro_batch_size", "1");
    set(&c, "training.dataset", "synthetic");
    set(&c, "metrics.peak_tflops", "1");
    return c;
}

// Bytes of all-gathers and reduce-scatters in one step (after a warm-up) over every rank, with
// these precision settings.
static void step_bytes(const char *precision, const char *reduce, double *gather, double *scatter) {
    ct_config c = bench_config();
    set(&c, "mixed_precision", precision);
    set(&c, "mixed_precision_reduce", reduce);
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) ct_fatal("bench_fsdp_comm", "%s", ct_last_error());
    ct_trainer_step(&t);
    ct_comm_stats_reset(&t.mesh.fsdp);
    ct_trainer_step(&t);
    *gather = t.mesh.fsdp.stats[CT_COMM_ALL_GATHER].bytes;
    *scatter = t.mesh.fsdp.stats[CT_COMM_REDUCE_SCATTER].bytes;
    ct_trainer_free(&t);
}

static void precision_bytes(int rank) {
    double g32, s32, g16, s16, gr, sr;
    step_bytes("fp32", "fp32", &g32, &s32);
    step_bytes("bf16", "fp32", &g16, &s16);
    step_bytes("bf16", "bf16", &gr, &sr);
    if (rank == 0) {
        printf("fsdp bf16 compute copy: all-gather %.0f bytes/step/rank vs fp32 %.0f: ratio %.3f (expected 0.5); "
               "reduce-scatter fp32 %.0f (ratio %.3f)\n", g16, g32, g16 / g32, s16, s16 / s32);
        printf("fsdp bf16 reduce (mixed_precision_reduce = bf16): reduce-scatter %.0f vs fp32 %.0f: ratio %.3f "
               "(expected 0.5)\n", sr, s32, sr / s32);
    }
}

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv)) return 1;
    const char *policies[] = {"always", "default", "never"};
    for (int p = 0; p < 3; p++) {
        ct_config c = bench_config();
        set(&c, "gradient_accumulation_steps", "2");
        set(&c, "parallelism.fsdp_reshard_after_forward", policies[p]);
        static ct_trainer t;
        if (ct_trainer_init(&t, &c, NULL)) ct_fatal("bench_fsdp_comm", "%s", ct_last_error());
        ct_trainer_step(&t);  // warm-up
        ct_comm_stats_reset(&t.mesh.fsdp);
        ct_trainer_step(&t);
        int N = t.mesh.fsdp.size, accum = c.gradient_accumulation_steps;
        double measured = fsdp_elements(&t.mesh.fsdp);
        double expected = accum * ct_fsdp_expected_elements(&t.fsdp);
        double psi = (double)t.table.total, textbook = accum * 3.0 * psi * (N - 1) / N;
        if (t.world.rank == 0) {
            printf("fsdp N=%d reshard %-7s: %.0f elements/step/rank moved, schedule's analytic %.0f: ratio %.4f"
                   "   (3·Ψ·(N−1)/N = %.0f, ratio %.3f; Ψ = %.0f, %d micro-batches)\n",
                   N, policies[p], measured, expected, measured / expected, textbook, measured / textbook, psi, accum);
        }
        ct_trainer_free(&t);
    }
    int rank;
    ct_group world;
    ct_comm_group_world(&world, 0);
    rank = world.rank;
    ct_comm_group_free(&world);
    precision_bytes(rank);
    ct_comm_finalize();
    return 0;
}
