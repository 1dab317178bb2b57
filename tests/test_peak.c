// The MFU peak (train/peak.h): the calibration file keeps the best rate ever measured per key,
// and a measured peak never yields MFU above 100%: a step that runs faster than a peak measured
// under load raises it. The peak the user gives is taken as given.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "test.h"
#include "train/trainer.h"

static char dir[] = "/tmp/ct_test_peak_XXXXXX";
static char file[300];

static void test_calibration_keeps_the_best(void) {
    CHECK(ct_peak_lookup(file, "cpu/fp32") == 0, "empty file");
    CHECK(ct_peak_store(file, "cpu/fp32", 120.5) == CT_OK, "%s", ct_last_error());
    CHECK(ct_peak_store(file, "cpu/bf16", 900) == CT_OK, "%s", ct_last_error());
    CHECK(ct_peak_store(file, "cpu/fp32", 80) == CT_OK, "%s", ct_last_error());  // lower: ignored
    CHECK(ct_peak_lookup(file, "cpu/fp32") == 120.5, "%g", ct_peak_lookup(file, "cpu/fp32"));
    CHECK(ct_peak_store(file, "cpu/fp32", 130.25) == CT_OK, "%s", ct_last_error());
    CHECK(ct_peak_lookup(file, "cpu/fp32") == 130.25 && ct_peak_lookup(file, "cpu/bf16") == 900, "values");
    CHECK(ct_peak_lookup(file, "cpu/fp3") == 0 && ct_peak_lookup(file, "cpu") == 0, "prefixes are other keys");
}

static void tiny(ct_config *c) {
    ct_config_defaults(c);
    const char *kv[][2] = {{"model.dim", "32"},        {"model.n_layers", "2"},        {"model.n_heads", "4"},
                           {"model.vocab_size", "97"}, {"model.ffn_hidden_dim", "48"}, {"training.seq_len", "16"},
                           {"micro_batch_size", "2"},  {"training.dataset", "synthetic"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (ct_config_set(c, kv[i][0], kv[i][1])) ct_fatal("test", "%s", ct_last_error());
}

// A start-up under load measured a peak far below what the machine does: the steps raise it.
static void test_measured_peak_never_gives_mfu_above_one(void) {
    ct_config c;
    tiny(&c);
    static ct_trainer t;
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_OK, "%s", ct_last_error());
    CHECK(t.peak.measured && t.peak.flops > 0, "the peak was not measured: %s", t.peak.how);
    CHECK(ct_peak_lookup(t.peak.file, t.peak.key) > 0, "the measurement was not kept in %s", t.peak.file);
    t.peak.flops = 1e3;  // as if measured while other work held the cores
    for (int i = 0; i < 3; i++) {
        ct_trainer_step(&t);
        CHECK(t.last.mfu > 0 && t.last.mfu <= 1.0, "step %d: MFU %g", i + 1, t.last.mfu);
    }
    CHECK(t.peak.raised && t.peak.flops > 1e3, "the peak was not raised");
    ct_trainer_free(&t);

    // A peak the user gives is the user's number: not raised.
    ct_config_set(&c, "metrics.peak_tflops", "1e-9");
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_OK, "%s", ct_last_error());
    ct_trainer_step(&t);
    CHECK(!t.peak.measured && !t.peak.raised && t.last.mfu > 1.0, "user peak changed: mfu %g", t.last.mfu);
    CHECK(strstr(t.peak.how, "metrics.peak_tflops") != NULL, "%s", t.peak.how);
    ct_trainer_free(&t);
}

// metrics.device names a GPU: its dense bf16 peak from the vendors' data sheets (H100 and H200
// SXM 989 TFLOP/s, A100 312), read from the hardware profiles; metrics.peak_tflops wins over it.
static void test_device_peaks(void) {
    struct {
        ct_cfg_peak_device device;
        double flops;
    } want[] = {{CT_CFG_PEAK_H100, 989e12}, {CT_CFG_PEAK_H200, 989e12}, {CT_CFG_PEAK_A100, 312e12}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ct_config c;
        ct_config_defaults(&c);
        c.device = want[i].device;
        ct_peak p;
        CHECK(ct_peak_init(&p, &c, NULL, true, NULL, 1) == CT_OK, "%s", ct_last_error());
        CHECK(p.flops == want[i].flops && !p.measured, "device %d: %g FLOP/s", (int)want[i].device, p.flops);
        c.peak_tflops = 100;
        CHECK(ct_peak_init(&p, &c, NULL, true, NULL, 1) == CT_OK && p.flops == 100e12, "metrics.peak_tflops wins");
    }
}

int main(int argc, char **argv) {
    if (!mkdtemp(dir)) return 1;
    snprintf(file, sizeof file, "%s/sub/peaks.toml", dir);
    setenv("CTITAN_CALIBRATION", file, 1);
    if (ct_comm_init(&argc, &argv)) return 1;
    CT_RUN(test_device_peaks);
    CT_RUN(test_calibration_keeps_the_best);
    CT_RUN(test_measured_peak_never_gives_mfu_above_one);
    ct_comm_finalize();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    CT_TEST_EXIT();
}
