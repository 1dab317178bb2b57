// Fuzz target: a planner hardware profile (ct_hw_profile_load, plan/hardware.c, through
// core/toml.c), the TOML file `ctitan plan --hardware` reads and the time model divides by.
// The input is written as <folder>/profile.toml.
//
// Properties beyond "no crash, no leak, no UB": what hardware.c promises of a profile that loads
// -- every number finite, the ones the time model divides by positive, efficiencies in (0, 1] --
// and the peaks and attention efficiency it derives from them the same.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_util.h"
#include "plan/hardware.h"

static int pos(double x) { return isfinite(x) && x > 0; }
static int nonneg(double x) { return isfinite(x) && x >= 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[1024];
    ct_fuzz_write("profile.toml", data, size, path, sizeof path);
    ct_hw_profile hw;
    if (ct_hw_profile_load(path, &hw) != CT_OK) return 0;
    ct_fuzz_check(hw.name[0] && strlen(hw.name) < sizeof hw.name && !strcmp(hw.id, "profile"), "name '%s' id '%s'",
                  hw.name, hw.id);
    ct_fuzz_check(pos(hw.memory_bytes) && hw.devices_per_node > 0 && pos(hw.peak_fp32) && pos(hw.peak_bf16) &&
                      nonneg(hw.peak_fp8) && pos(hw.memory_bandwidth) && pos(hw.intra_bw) && pos(hw.inter_bw),
                  "a size, peak or bandwidth not positive");
    ct_fuzz_check(pos(hw.matmul_efficiency) && hw.matmul_efficiency <= 1 && pos(hw.attention_efficiency) &&
                      hw.attention_efficiency <= 1,
                  "efficiencies %g %g", hw.matmul_efficiency, hw.attention_efficiency);
    ct_fuzz_check(nonneg(hw.matmul_half_size) && nonneg(hw.attention_half_head_dim) && nonneg(hw.intra_latency) &&
                      nonneg(hw.inter_latency) && nonneg(hw.kernel_launch),
                  "a latency or half size negative");
    static const char *const dtypes[] = {"fp32", "bf16", "fp8"};
    for (int i = 0; i < 3; i++) ct_fuzz_check(pos(ct_hw_peak(&hw, dtypes[i])), "peak %s", dtypes[i]);
    for (double hs = 1; hs <= 1024; hs *= 4) {
        double e = ct_hw_attention_efficiency(&hw, hs);
        ct_fuzz_check(pos(e) && e <= 1, "attention efficiency %g at head dim %g", e, hs);
    }
    return 0;
}
