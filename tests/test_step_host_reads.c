// The step's scalars stay on the device: a training step on the test device (cpu_sim) reads
// device memory back exactly once (the block of loss sum and gradient sum of squares), however
// many micro-batches it runs, and a validation pass once however many batches it evaluates.
// Counted by the device itself (ct_sim_host_reads: every copy_to_host of its table). The loss
// returned agrees with the cpu device's, bit for bit (the same kernels, summed in the same order).
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/sim/device_sim.h"
#include "test.h"
#include "train/trainer.h"

#define STEPS 3

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) ct_fatal("test", "%s", ct_last_error());
}

static void config(ct_config *c, const char *device, const char *accum) {
    ct_config_defaults(c);
    const char *kv[][2] = {
        {"model.n_layers", "2"},      {"model.dim", "64"},          {"model.n_heads", "4"},
        {"model.n_kv_heads", "2"},    {"model.ffn_hidden_dim", "128"}, {"model.vocab_size", "256"},
        {"micro_batch_size", "2"},    {"training.seq_len", "32"},   {"training.dataset", "synthetic"},
        {"training.steps", "100"},    {"lr_scheduler.warmup_steps", "2"}, {"metrics.peak_tflops", "1"},
        {"training.seed", "11"},      {"training.device", device},  {"gradient_accumulation_steps", accum},
        {"validation.enable", "true"}, {"validation.steps", "2"},   {"validation.dataset", "synthetic"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) set(c, kv[i][0], kv[i][1]);
}

// Runs STEPS steps and a validation pass; losses into loss (STEPS + 1: the last is validation's).
// reads: device-to-host copies per step, and of the validation pass (cpu_sim only).
static int run(const char *device, const char *accum, double *loss, long *reads) {
    ct_config c;
    config(&c, device, accum);
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) {
        CHECK(0, "%s accumulation %s: init: %s", device, accum, ct_last_error());
        return 1;
    }
    for (int s = 0; s < STEPS; s++) {
        long r0 = ct_sim_host_reads();
        loss[s] = ct_trainer_step(&t);
        reads[s] = ct_sim_host_reads() - r0;
    }
    long r0 = ct_sim_host_reads();
    loss[STEPS] = ct_trainer_validate(&t);
    reads[STEPS] = ct_sim_host_reads() - r0;
    ct_trainer_free(&t);
    return 0;
}

static void case_accum(const char *accum) {
    double sim[STEPS + 1], cpu[STEPS + 1];
    long reads[STEPS + 1], cpu_reads[STEPS + 1];
    if (run("cpu_sim", accum, sim, reads) || run("cpu", accum, cpu, cpu_reads)) return;
    for (int s = 0; s < STEPS; s++) {
        CHECK(reads[s] == 1, "accumulation %s step %d: %ld device-to-host reads, want 1 (the step's scalars)", accum,
              s + 1, reads[s]);
        CHECK(sim[s] == cpu[s], "accumulation %s step %d: loss %.17g on cpu_sim, %.17g on cpu", accum, s + 1, sim[s],
              cpu[s]);
        CHECK(sim[s] > 1 && sim[s] < 10, "accumulation %s step %d: loss %g (vocabulary 256: about ln 256 = 5.5)",
              accum, s + 1, sim[s]);
    }
    CHECK(reads[STEPS] == 1, "accumulation %s validation: %ld device-to-host reads, want 1", accum, reads[STEPS]);
    CHECK(sim[STEPS] == cpu[STEPS], "accumulation %s validation loss %.17g on cpu_sim, %.17g on cpu", accum,
          sim[STEPS], cpu[STEPS]);
    for (int s = 0; s < STEPS; s++)
        CHECK(cpu_reads[s] == 0, "the cpu device counted %ld reads: the counter is not cpu_sim's alone", cpu_reads[s]);
}

static void test_one_micro_batch(void) { case_accum("1"); }
static void test_two_micro_batches(void) { case_accum("2"); }
static void test_three_micro_batches(void) { case_accum("3"); }

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv)) return 1;
    CT_RUN(test_one_micro_batch);
    CT_RUN(test_two_micro_batches);
    CT_RUN(test_three_micro_batches);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
