// The training loop's own arithmetic: the learning-rate schedule against values worked out by
// hand, gradient clipping, and that two identical runs give identical losses.
#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "device_test.h"
#include "test.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"

// lr 1, 10 steps, warm-up 2: steps 1, 2 ramp to 1/2, 2/2; then 8 decay steps.
static void test_lr_linear_decay(void) {
    ct_lr_schedule s;
    ct_lr_schedule_init(&s, 1.0, 10, 2, -1, CT_CFG_DECAY_LINEAR, 0.0);
    double want[] = {0.5, 1.0, 7.0 / 8, 6.0 / 8, 5.0 / 8, 4.0 / 8, 3.0 / 8, 2.0 / 8, 1.0 / 8, 0.0};
    for (int i = 0; i < 10; i++) CHECK_CLOSE(ct_lr_at(&s, i + 1), want[i], 1e-12, 1e-12);
}

// decay_ratio 0.5 of 10 steps: 5 decay steps at the end, stable in between, floor min_lr_factor.
static void test_lr_stable_then_cosine_to_floor(void) {
    ct_lr_schedule s;
    ct_lr_schedule_init(&s, 2.0, 10, 2, 0.5, CT_CFG_DECAY_COSINE, 0.1);
    CHECK_CLOSE(ct_lr_at(&s, 1), 1.0, 1e-12, 0);
    CHECK_CLOSE(ct_lr_at(&s, 3), 2.0, 1e-12, 0);
    CHECK_CLOSE(ct_lr_at(&s, 5), 2.0, 1e-12, 0);
    // step 6: progress 1/5, cosine factor 0.5 (1 + cos(pi/5)) = 0.904508...
    CHECK_CLOSE(ct_lr_at(&s, 6), 2.0 * (0.1 + 0.9 * 0.5 * (1 + cos(M_PI / 5))), 1e-12, 0);
    CHECK_CLOSE(ct_lr_at(&s, 10), 0.2, 1e-12, 0);  // min_lr_factor × lr
}

static void test_lr_sqrt(void) {
    ct_lr_schedule s;
    ct_lr_schedule_init(&s, 1.0, 5, 1, -1, CT_CFG_DECAY_SQRT, 0.0);
    CHECK_CLOSE(ct_lr_at(&s, 3), 1.0 - sqrt(2.0 / 4), 1e-12, 0);  // progress (3 - 1) / 4
    CHECK_CLOSE(ct_lr_at(&s, 5), 0.0, 0, 1e-12);
}

static void tiny(ct_config *c, const char *max_norm) {
    ct_config_defaults(c);
    const char *kv[][2] = {{"model.dim", "32"},          {"model.n_layers", "2"},     {"model.n_heads", "4"},
                           {"model.vocab_size", "97"},   {"model.ffn_hidden_dim", "48"}, {"training.seq_len", "16"},
                           {"micro_batch_size", "2"},    {"training.dataset", "synthetic"},
                           {"metrics.peak_tflops", "1"}, {"training.max_norm", max_norm}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (ct_config_set(c, kv[i][0], kv[i][1])) ct_fatal("test", "%s", ct_last_error());
}

static void run(const ct_config *c, int steps, double *loss, double *gnorm, float *first_param_delta) {
    // (one process: the FSDP shard is the whole block in registry order)
    static ct_trainer t;
    if (ct_trainer_init(&t, c, NULL)) ct_fatal("test", "%s", ct_last_error());
    // An element whose gradient is never zero (a norm weight): its update shows the gradient.
    long k = ct_param_find(&t.table, "norm.weight")->offset;
    float before = ct_test_read1(t.k, t.fsdp.params + k);
    for (int i = 0; i < steps; i++) {
        loss[i] = ct_trainer_step(&t);
        if (gnorm) gnorm[i] = t.last.grad_norm;
        if (i == 0 && first_param_delta) *first_param_delta = ct_test_read1(t.k, t.fsdp.params + k) - before;
    }
    ct_trainer_free(&t);
}

static void test_identical_runs(void) {
    ct_config c;
    tiny(&c, "1.0");
    double a[4], b[4];
    run(&c, 4, a, NULL, NULL);
    run(&c, 4, b, NULL, NULL);
    for (int i = 0; i < 4; i++) CHECK(a[i] == b[i], "step %d: %.17g vs %.17g", i + 1, a[i], b[i]);
}

// Clipping changes the update, not the reported (pre-clipping) norm. With Adam the first step's
// update is g / (|g| + eps) per element, so a clip factor k turns it into k·g / (k·|g| + eps):
// visible when k·|g| is near eps. Here max_norm is tiny, so clipped updates shrink.
static void test_clipping(void) {
    ct_config c;
    double loss[1], g_free[1], g_clip[1];
    float d_free, d_clip;
    tiny(&c, "0");  // <= 0 disables clipping
    run(&c, 1, loss, g_free, &d_free);
    tiny(&c, "1e-9");
    run(&c, 1, loss, g_clip, &d_clip);
    CHECK(g_free[0] == g_clip[0], "reported norm is before clipping: %g vs %g", g_free[0], g_clip[0]);
    CHECK(fabsf(d_clip) < 0.5f * fabsf(d_free), "clipped update %g not smaller than unclipped %g", d_clip, d_free);
}

// The test device (training.device cpu_sim: memory the host cannot touch outside backend calls)
// computes the cpu's bits: every buffer placed there, the tokens copied once per step.
static void test_cpu_sim_same_bits(void) {
    ct_config c;
    double a[3], b[3], ga[3], gb[3];
    tiny(&c, "1.0");
    if (ct_config_set(&c, "training.device", "cpu")) ct_fatal("test", "%s", ct_last_error());
    run(&c, 3, a, ga, NULL);
    if (ct_config_set(&c, "training.device", "cpu_sim")) ct_fatal("test", "%s", ct_last_error());
    run(&c, 3, b, gb, NULL);
    for (int i = 0; i < 3; i++)
        CHECK(a[i] == b[i] && ga[i] == gb[i], "step %d: loss %.17g / norm %.17g on cpu, %.17g / %.17g on cpu_sim", i + 1,
              a[i], ga[i], b[i], gb[i]);
}

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv)) return 1;
    CT_RUN(test_lr_linear_decay);
    CT_RUN(test_lr_stable_then_cosine_to_floor);
    CT_RUN(test_lr_sqrt);
    CT_RUN(test_identical_runs);
    CT_RUN(test_clipping);
    CT_RUN(test_cpu_sim_same_bits);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
