// The trainer against computations made outside it, so that a bug every layout shares (parity
// tests compare layouts that all run the same code) still shows:
//   - the reported gradient norm is the square root of an independent sum of squares of the
//     step's gradients, and the clip factor AdamW received is exactly max_norm / (norm + 1e-6),
//     read back from the first moment (m = (1 - beta1) * g * clip, the same float operations);
//   - the loss of a step whose batch holds token id 0 (as inputs and as targets) and ignored
//     targets (-1) equals a separate forward pass of the model (model/runner.h) summed over the
//     valid targets and divided by their true count, which the test counts itself.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "device_test.h"
#include "model/runner.h"
#include "test.h"
#include "test_rand.h"
#include "train/trainer.h"

static void tiny(ct_config *c, const char *max_norm) {
    ct_config_defaults(c);
    const char *kv[][2] = {{"model.dim", "32"},          {"model.n_layers", "2"},         {"model.n_heads", "4"},
                           {"model.vocab_size", "97"},   {"model.ffn_hidden_dim", "48"},  {"training.seq_len", "16"},
                           {"micro_batch_size", "2"},    {"training.dataset", "synthetic"},
                           {"metrics.peak_tflops", "1"}, {"training.max_norm", max_norm}, {"optimizer.weight_decay", "0"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (ct_config_set(c, kv[i][0], kv[i][1])) ct_fatal("test", "%s", ct_last_error());
}

static void test_grad_norm_and_clip_factor(void) {
    const char *max_norms[] = {"0.05", "1e6"};  // one clips hard, one not at all
    for (int k = 0; k < 2; k++) {
        ct_config c;
        tiny(&c, max_norms[k]);
        static ct_trainer t;
        CHECK(ct_trainer_init(&t, &c, NULL) == CT_OK, "%s", ct_last_error());
        ct_trainer_step(&t);
        // One process: the gradient buffer holds every element once (no padding, no copies).
        long n = t.fsdp.local_numel;
        float *grads = malloc(sizeof(float) * n), *m1 = malloc(sizeof(float) * n);
        ct_test_read(t.k, grads, t.fsdp.grads, n);
        ct_test_read(t.k, m1, t.adam.m, n);
        double ss = 0;
        for (long i = 0; i < n; i++) ss += (double)grads[i] * grads[i];
        double norm = sqrt(ss);
        CHECK(ss > 0, "no gradient");
        CHECK_CLOSE(t.last.grad_norm, norm, 1e-6, 0);
        double max_norm = atof(max_norms[k]);
        double clip = norm > max_norm ? max_norm / (t.last.grad_norm + 1e-6) : 1.0;
        float b1 = (float)c.beta1;
        long mismatched = 0;
        for (long i = 0; i < t.fsdp.local_numel; i++) {
            float g = grads[i] * (float)clip;
            mismatched += m1[i] != (1.0f - b1) * g;
        }
        free(grads);
        free(m1);
        CHECK(mismatched == 0, "max_norm %s: %ld of %ld first moments are not (1 - beta1) g x %.9g", max_norms[k],
              mismatched, t.fsdp.local_numel, clip);
        ct_trainer_free(&t);
    }
}

static void test_loss_counts_token_zero_and_skips_ignored(void) {
    ct_config c;
    tiny(&c, "1.0");
    static ct_trainer t;
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_OK, "%s", ct_last_error());
    enum { B = 2, T = 16 };
    int32_t in[B * T], tg[B * T];
    long valid = 0, zeros = 0;
    for (int i = 0; i < B * T; i++) {
        in[i] = urand() < 0.3 ? 0 : (int32_t)(urand() * 97);
        double u = urand();
        tg[i] = u < 0.25 ? 0 : u < 0.45 ? -1 : (int32_t)(urand() * 97);  // id 0, ignored, others
        valid += tg[i] >= 0;
        zeros += tg[i] == 0;
    }
    CHECK(zeros > 3 && valid < B * T, "the batch must hold both cases (%ld zeros, %ld valid)", zeros, valid);

    // The reference: the initial weights, one forward pass of the whole model, sum / count.
    float *full = ct_xmalloc((size_t)t.global_table.total * sizeof(float));  // (P)
    ct_trainer_gather_model(&t, full);
    ct_model_weights w;
    ct_model_weights_init(&w, &t.global_table, &t.model, full);
    ct_model_acts a;
    ct_model_acts_init(&a, &t.model, B, T);
    double sum = ct_model_step(&a, &w, NULL, in, tg, 0.0f);
    double want = sum / (double)valid;

    double got = ct_trainer_step_on(&t, in, tg);
    CHECK_CLOSE(got, want, 1e-6, 0);
    CHECK(t.last.loss == got, "reported %.9g vs returned %.9g", t.last.loss, got);
    ct_model_acts_free(&a);
    ct_model_weights_free(&w);
    free(full);
    ct_trainer_free(&t);
}

int main(int argc, char **argv) {
    rng_state = 0x7e57ab1eULL;
    if (ct_comm_init(&argc, &argv)) return 1;
    CT_RUN(test_grad_norm_and_clip_factor);
    CT_RUN(test_loss_counts_token_zero_and_skips_ignored);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
