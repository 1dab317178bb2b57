// Hardware profiles (src/plan/hardware.h): every shipped profile loads with its datasheet
// figures; a broken file is refused with one line naming the file and the key.
#include <string.h>
#include <unistd.h>

#include "plan/hardware.h"
#include "plan/plan.h"
#include "expect_error.h"
#include "test.h"

static void test_shipped_profiles_load(void) {
    const char *ids[] = {"h100_sxm", "h200", "a100_80gb", "b200", "this_machine", "h100", "a100"};
    for (int i = 0; i < 7; i++) {
        ct_hw_profile hw;
        CHECK(ct_hw_profile_load(ids[i], &hw) == CT_OK, "%s: %s", ids[i], ct_last_error());
        CHECK(hw.peak_bf16 > 0 && hw.memory_bytes > 0 && hw.devices_per_node > 0, "%s", ids[i]);
    }
    ct_hw_profile h;
    ct_hw_profile_load("h100", &h);
    CHECK(!strcmp(h.id, "h100_sxm") && !h.cpu && h.devices_per_node == 8, "id %s", h.id);
    CHECK_CLOSE(h.peak_bf16, 989e12, 1e-12, 0);
    CHECK_CLOSE(h.peak_fp8, 1979e12, 1e-12, 0);
    CHECK_CLOSE(h.memory_bandwidth, 3350e9, 1e-12, 0);
    CHECK_CLOSE(h.intra_bw, 450e9, 1e-12, 0);   // 900 GB/s bidirectional
    CHECK_CLOSE(h.inter_bw, 50e9, 1e-12, 0);    // 400 Gb/s
    CHECK_CLOSE(h.intra_latency, 3e-6, 1e-12, 0);
    ct_hw_profile a;
    ct_hw_profile_load("a100", &a);
    CHECK(a.peak_fp8 == 0, "A100 has no fp8");
    CHECK_CLOSE(ct_hw_peak(&a, "fp8"), 312e12, 1e-12, 0);  // float8 falls back to bf16 there
    CHECK_CLOSE(ct_hw_peak(&h, "fp8"), 1979e12, 1e-12, 0);
    CHECK_CLOSE(ct_hw_peak(&h, "fp32"), 67e12, 1e-12, 0);
    ct_hw_profile b, me;
    ct_hw_profile_load("b200", &b);
    CHECK_CLOSE(b.peak_bf16, 2250e12, 1e-12, 0);
    CHECK_CLOSE(b.intra_bw, 900e9, 1e-12, 0);
    CHECK(ct_hw_profile_load("this_machine", &me) == CT_OK && me.cpu, "this_machine is a cpu profile");
}

static const char *good =
    "name = \"test\"\nkind = \"gpu\"\nmemory_gib = 80\ndevices_per_node = 8\npeak_tflops_fp32 = 67.0\n"
    "peak_tflops_bf16 = 989.0\npeak_tflops_fp8 = 0\nmatmul_efficiency = 0.8\nmatmul_half_size = 256\n"
    "attention_efficiency = 0.5\nmemory_bandwidth_gbs = 3350\nintra_node_bandwidth_gbs = 450\n"
    "intra_node_latency_us = 3\ninter_node_bandwidth_gbs = 50\ninter_node_latency_us = 8\n";

static char path[64];

static void write_profile(const char *text) {
    snprintf(path, sizeof path, "/tmp/ct_hwprof_%d.toml", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

// `good` with the line starting with `key` replaced by `line` ("" drops it).
static void write_with(const char *key, const char *line) {
    char text[2048] = "";
    const char *p = good;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = (size_t)(e - p) + 1;
        if (!strncmp(p, key, strlen(key)) && p[strlen(key)] == ' ') strcat(text, line);
        else strncat(text, p, n);
        p += n;
    }
    write_profile(text);
}

// Loading fails with one line that names the file and `word` (the key).
static void expect_error(const char *what, const char *word) {
    ct_hw_profile hw;
    ct_status st = ct_hw_profile_load(path, &hw);
    const char *e = ct_last_error();
    CHECK(st == CT_ERR, "%s accepted", what);
    CHECK(strstr(e, path) && strstr(e, word) && !strchr(e, '\n'), "%s: message '%s'", what, e);
}

static void test_round_trip(void) {
    write_profile(good);
    ct_hw_profile hw, again;
    CHECK(ct_hw_profile_load(path, &hw) == CT_OK, "%s", ct_last_error());
    CHECK(hw.kernel_launch == 0, "kernel_launch_us is optional (0)");
    CHECK(hw.attention_half_head_dim == 0, "attention_half_head_dim is optional (0)");
    // Without a half point attention runs at its efficiency whatever the head dimension.
    CHECK_CLOSE(ct_hw_attention_efficiency(&hw, 16), 0.5, 1e-12, 0);
    CHECK_CLOSE(ct_hw_attention_efficiency(&hw, 128), 0.5, 1e-12, 0);
    hw.kernel_launch = 4e-6;
    hw.attention_half_head_dim = 48;
    CHECK(ct_hw_profile_write(path, &hw) == CT_OK, "%s", ct_last_error());
    CHECK(ct_hw_profile_load(path, &again) == CT_OK, "%s", ct_last_error());
    CHECK_CLOSE(again.peak_bf16, 989e12, 1e-9, 0);
    CHECK_CLOSE(again.memory_bytes, 80.0 * 1073741824.0, 1e-6, 0);
    CHECK_CLOSE(again.kernel_launch, 4e-6, 1e-6, 0);
    CHECK_CLOSE(again.attention_half_head_dim, 48, 1e-9, 0);
    // With one, eff * HS / (HS + half): heads of 16 at a quarter of the plateau, 48 at half.
    CHECK_CLOSE(ct_hw_attention_efficiency(&again, 16), 0.5 * 16 / 64, 1e-12, 0);
    CHECK_CLOSE(ct_hw_attention_efficiency(&again, 48), 0.25, 1e-12, 0);
    CHECK_CLOSE(again.intra_latency, 3e-6, 1e-6, 0);
    CHECK(!strcmp(again.name, "test") && again.devices_per_node == 8, "name %s", again.name);
    unlink(path);
}

// Every number a profile holds reads back as written. The calibrated efficiencies are small or
// long fractions; written with four decimals 3.3e-5 came back as 0 (refused: not positive) and
// 0.61803398874989 as 0.6180. Numbers stored as they are read back exactly; those the file holds
// in other units (TFLOP/s, GB/s, us, GiB) go through one division when written and one
// multiplication when read, each rounded once: at most 2 units in the last place apart.
static void test_round_trip_keeps_every_digit(void) {
    write_profile(good);
    ct_hw_profile hw, again;
    CHECK(ct_hw_profile_load(path, &hw) == CT_OK, "%s", ct_last_error());
    hw.matmul_efficiency = 3.3e-5;
    hw.attention_efficiency = 0.61803398874989485;
    hw.matmul_half_size = 1234.5678901234567;
    hw.attention_half_head_dim = 47.123456789012345;
    hw.peak_fp32 = 1.2345678901234567e13;
    hw.peak_bf16 = 9.8765432109876543e14;
    hw.peak_fp8 = 0;
    hw.memory_bytes = 81559831552.0 + 0.5;
    hw.memory_bandwidth = 3.35e12 / 7;
    hw.intra_bw = 4.5e11 / 3;
    hw.inter_bw = 5e10 / 7;
    hw.intra_latency = 1.1e-6 / 3;
    hw.inter_latency = 7.7e-6 / 3;
    hw.kernel_launch = 4.4e-6 / 7;
    hw.matmul_efficiency_fp8 = 0.70912345678901234;
    hw.sm_count = 132;
    hw.mm_tile_m = 128, hw.mm_tile_n = 256;
    hw.intra_busbw = 3.7e11 / 3 * 0.9, hw.intra_ar_busbw = 4.8e11 / 7, hw.inter_busbw = 4.7e10 / 11;
    CHECK(ct_hw_profile_write(path, &hw) == CT_OK, "%s", ct_last_error());
    CHECK(ct_hw_profile_load(path, &again) == CT_OK, "reading back: %s", ct_last_error());
    CHECK(again.matmul_efficiency == hw.matmul_efficiency, "matmul_efficiency %.17g -> %.17g", hw.matmul_efficiency,
          again.matmul_efficiency);
    CHECK(again.attention_efficiency == hw.attention_efficiency, "attention_efficiency %.17g -> %.17g",
          hw.attention_efficiency, again.attention_efficiency);
    CHECK(again.matmul_half_size == hw.matmul_half_size, "matmul_half_size %.17g -> %.17g", hw.matmul_half_size,
          again.matmul_half_size);
    CHECK(again.attention_half_head_dim == hw.attention_half_head_dim, "attention_half_head_dim %.17g -> %.17g",
          hw.attention_half_head_dim, again.attention_half_head_dim);
    CHECK(again.peak_fp8 == 0, "peak_fp8 %.17g", again.peak_fp8);
    const double ulp2 = 2 * 2.220446049250313e-16;  // 2 units in the last place, relative
    const struct {
        const char *key;
        double wrote, read;
    } scaled[] = {
        {"peak_tflops_fp32", hw.peak_fp32, again.peak_fp32},
        {"peak_tflops_bf16", hw.peak_bf16, again.peak_bf16},
        {"memory_gib", hw.memory_bytes, again.memory_bytes},
        {"memory_headroom_gib", hw.memory_headroom, again.memory_headroom},
        {"memory_bandwidth_gbs", hw.memory_bandwidth, again.memory_bandwidth},
        {"intra_node_bandwidth_gbs", hw.intra_bw, again.intra_bw},
        {"inter_node_bandwidth_gbs", hw.inter_bw, again.inter_bw},
        {"intra_node_latency_us", hw.intra_latency, again.intra_latency},
        {"inter_node_latency_us", hw.inter_latency, again.inter_latency},
        {"kernel_launch_us", hw.kernel_launch, again.kernel_launch},
        {"intra_node_busbw_gbs", hw.intra_busbw, again.intra_busbw},
        {"intra_node_allreduce_busbw_gbs", hw.intra_ar_busbw, again.intra_ar_busbw},
        {"inter_node_busbw_gbs", hw.inter_busbw, again.inter_busbw},
    };
    CHECK(again.matmul_efficiency_fp8 == hw.matmul_efficiency_fp8 && again.sm_count == 132 && again.mm_tile_m == 128 &&
              again.mm_tile_n == 256,
          "matmul model %.17g %g %g %g", again.matmul_efficiency_fp8, again.sm_count, again.mm_tile_m, again.mm_tile_n);
    for (size_t k = 0; k < sizeof scaled / sizeof scaled[0]; k++)
        CHECK(fabs(scaled[k].read - scaled[k].wrote) <= ulp2 * fabs(scaled[k].wrote), "%s %.17g -> %.17g",
              scaled[k].key, scaled[k].wrote, scaled[k].read);
    unlink(path);
}

static void test_bad_profiles(void) {
    write_with("peak_tflops_bf16", "");
    expect_error("missing key", "peak_tflops_bf16");
    write_with("name", "name = \"x\"\npeak_tflops_fp16 = 3\n");
    expect_error("unknown key", "peak_tflops_fp16");
    write_with("memory_gib", "memory_gib = \"lots\"\n");
    expect_error("string for a number", "memory_gib");
    write_with("inter_node_bandwidth_gbs", "inter_node_bandwidth_gbs = 0\n");
    expect_error("zero bandwidth", "inter_node_bandwidth_gbs");
    write_with("peak_tflops_fp32", "peak_tflops_fp32 = -1.0\n");
    expect_error("negative peak", "peak_tflops_fp32");
    write_with("devices_per_node", "devices_per_node = 8.5\n");
    expect_error("fractional devices", "devices_per_node");
    write_with("kind", "kind = \"tpu\"\n");
    expect_error("unknown kind", "kind");
    write_with("matmul_efficiency", "matmul_efficiency = 1.5\n");
    expect_error("efficiency above 1", "matmul_efficiency");
    write_with("attention_efficiency", "attention_efficiency = 0.5\nattention_half_head_dim = -4\n");
    expect_error("negative half head dimension", "attention_half_head_dim");
    // Positive yet too small to divide by: subnormal (every planned time came out inf) or tiny.
    write_with("matmul_efficiency", "matmul_efficiency = 1e-320\n");
    expect_error("subnormal efficiency", "matmul_efficiency");
    write_with("inter_node_latency_us", "inter_node_latency_us = 1e-310\n");
    expect_error("subnormal latency", "inter_node_latency_us");
    write_with("memory_bandwidth_gbs", "memory_bandwidth_gbs = 1e-12\n");
    expect_error("tiny bandwidth", "memory_bandwidth_gbs");
    write_with("memory_gib", "memory_gib = 80\nmemory_headroom_gib = 80\n");
    expect_error("headroom of all the memory", "memory_headroom_gib");
    write_with("memory_gib", "memory_gib = 80\nmemory_headroom_gib = -1\n");
    expect_error("negative headroom", "memory_headroom_gib");
    // The matmul model and NCCL's bus bandwidths: an fp8 efficiency above 1, a fractional SM
    // count, a ring busbw above the line rate (only SHARP's all-reduce may pass it).
    write_with("matmul_efficiency", "matmul_efficiency = 0.8\nmatmul_efficiency_fp8 = 1.2\n");
    expect_error("fp8 efficiency above 1", "matmul_efficiency_fp8");
    write_with("matmul_efficiency", "matmul_efficiency = 0.8\nsm_count = 131.5\n");
    expect_error("fractional SMs", "sm_count");
    write_with("intra_node_bandwidth_gbs", "intra_node_bandwidth_gbs = 450\nintra_node_busbw_gbs = 500\n");
    expect_error("ring busbw above the line rate", "intra_node_busbw_gbs");
    write_with("inter_node_bandwidth_gbs", "inter_node_bandwidth_gbs = 50\ninter_node_busbw_gbs = 51\n");
    expect_error("inter-node busbw above the line rate", "inter_node_busbw_gbs");
    write_with("intra_node_bandwidth_gbs", "intra_node_bandwidth_gbs = 450\nintra_node_allreduce_busbw_gbs = 480\n");
    ct_hw_profile sharp;
    CHECK(ct_hw_profile_load(path, &sharp) == CT_OK, "SHARP all-reduce above the line rate refused: %s", ct_last_error());
    unlink(path);
    // A missing file, by path and by name.
    ct_hw_profile hw;
    EXPECT_ERROR(ct_hw_profile_load("/nonexistent/x.toml", &hw), CT_E_IO, "/nonexistent/x.toml", "/nonexistent/x.toml");
    CHECK(ct_hw_profile_load("tpu_v9", &hw) == CT_ERR && strstr(ct_last_error(), "tpu_v9.toml") &&
              !strchr(ct_last_error(), '\n'),
          "%s", ct_last_error());
}

// The headroom: a profile's own, else 0 on a cpu and 5% (at least 2 GiB) on a gpu; the planner's
// budget is the memory less it.
static void test_memory_headroom(void) {
    const double gib = 1073741824.0;
    ct_hw_profile h;
    CHECK(ct_hw_profile_load("h100", &h) == CT_OK && h.memory_headroom == 4 * gib, "h100 headroom %g", h.memory_headroom / gib);
    CHECK(ct_plan_budget(&h, 8) == h.memory_bytes - 4 * gib, "gpu budget");
    write_profile(good);  // no headroom key: 5% of 80 GiB
    CHECK(ct_hw_profile_load(path, &h) == CT_OK && fabs(h.memory_headroom - 4 * gib) < 1, "default %g", h.memory_headroom / gib);
    write_with("memory_gib", "memory_gib = 16\n");  // 5% is 0.8: at least 2
    CHECK(ct_hw_profile_load(path, &h) == CT_OK && h.memory_headroom == 2 * gib, "small gpu %g", h.memory_headroom / gib);
    write_with("kind", "kind = \"cpu\"\n");
    CHECK(ct_hw_profile_load(path, &h) == CT_OK && h.memory_headroom == 0, "cpu %g", h.memory_headroom / gib);
    write_with("memory_gib", "memory_gib = 20\nmemory_headroom_gib = 0.5\n");
    CHECK(ct_hw_profile_load(path, &h) == CT_OK && h.memory_headroom == 0.5 * gib, "given %g", h.memory_headroom / gib);
    CHECK(ct_plan_budget(&h, 4) == 19.5 * gib, "gpu budget with headroom");
    h.cpu = true;
    CHECK(ct_plan_budget(&h, 4) == 19.5 * gib / 4, "cpu: the node's memory less the headroom, over the ranks");
    unlink(path);
}

int main(void) {
    CT_RUN(test_shipped_profiles_load);
    CT_RUN(test_round_trip);
    CT_RUN(test_round_trip_keeps_every_digit);
    CT_RUN(test_bad_profiles);
    CT_RUN(test_memory_headroom);
    CT_TEST_EXIT();
}
