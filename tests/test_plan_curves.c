// The planner's per-term curves (src/plan/hardware.h): matmul efficiency by shape and dtype, and
// NCCL's collectives by message size, on the shipped GPU profiles. Each worked figure is computed
// here by hand from the public measurements the profiles cite (profiles/h100_sxm.toml,
// h100_hbm2e_500w.toml, a100_80gb.toml), not read back from the model.
#include <math.h>
#include <string.h>

#include "plan/hardware.h"
#include "test.h"

static ct_hw_profile profile(const char *name) {
    ct_hw_profile hw;
    if (ct_hw_profile_load(name, &hw)) {
        printf("  %s\n", ct_last_error());
        exit(1);
    }
    return hw;
}

// ------------------------------------------------------------------ matmuls

// A shape whose 128 x 256 tiles fill whole waves reaches the Maximum Achievable Matmul FLOPS
// measured for the GPU (Bekman's MAMF table): H100 SXM bf16 794.5 TFLOP/s, fp8 1402.6; A100
// bf16 271.2. H100: 12 x 11 = 132 tiles on 132 SMs; A100: 12 x 9 = 108 on 108.
static void test_matmul_full_waves_reach_mamf(void) {
    ct_hw_profile h = profile("h100_sxm"), a = profile("a100");
    double M = 12 * 128, N = 11 * 256, K = 8192;
    CHECK_CLOSE(ct_hw_matmul_waves(&h, M, N), 1.0, 1e-12, 0);
    CHECK_CLOSE(ct_hw_matmul_efficiency(&h, M, N, K, false) * 989e12, 794.5e12, 0.002, 0);
    CHECK_CLOSE(ct_hw_matmul_efficiency(&h, M, N, K, true) * 1979e12, 1402.6e12, 0.002, 0);
    double Ma = 12 * 128, Na = 9 * 256;
    CHECK_CLOSE(ct_hw_matmul_waves(&a, Ma, Na), 1.0, 1e-12, 0);
    CHECK_CLOSE(ct_hw_matmul_efficiency(&a, Ma, Na, K, false) * 312e12, 271.2e12, 0.002, 0);
    // The seconds of a large full-wave GEMM are its FLOPs at that rate (compute-bound).
    double secs = ct_hw_matmul_seconds(&h, M, N, K, 989e12, false, 2, 2, 3350e9);
    CHECK_CLOSE(secs, 2 * M * N * K / 794.5e12, 0.002, 0);
}

// The 500 W profile against the GEMM rates measured on an H100 at 500 W (pytorch/FBGEMM pull
// request 2546): bf16 585.23, 575.12, 546.31 TFLOP/s and fp8 1125.51, 1082.75, 1141.38 at
// 8192^3, 65536 x 8192 x 7168 and 65536 x 3584 x 8192. By hand: the profile's rate (585.23 and
// 1141.38, the best of each) times the shape's fill -- 8192 x 8192: 2048 tiles in 16 waves,
// 2048/2112; 65536 x 8192: 16384 tiles in 125 waves, 16384/16500; 65536 x 3584: 7168 tiles in 55
// waves, 7168/7260. Each lands within 6% of its measurement.
static void test_matmul_500w_against_fbgemm(void) {
    ct_hw_profile h = profile("h100_hbm2e_500w");
    const struct {
        double M, N, K, fill, bf16, fp8;
    } g[] = {{8192, 8192, 8192, 2048.0 / 2112, 585.23e12, 1125.51e12},
             {65536, 8192, 7168, 16384.0 / 16500, 575.12e12, 1082.75e12},
             {65536, 3584, 8192, 7168.0 / 7260, 546.31e12, 1141.38e12}};
    for (int i = 0; i < 3; i++) {
        double bf16 = ct_hw_matmul_efficiency(&h, g[i].M, g[i].N, g[i].K, false) * h.peak_bf16;
        double fp8 = ct_hw_matmul_efficiency(&h, g[i].M, g[i].N, g[i].K, true) * h.peak_fp8;
        CHECK_CLOSE(bf16, 585.23e12 * g[i].fill, 0.002, 0);
        CHECK_CLOSE(fp8, 1141.38e12 * g[i].fill, 0.002, 0);
        CHECK_CLOSE(bf16, g[i].bf16, 0.06, 0);
        CHECK_CLOSE(fp8, g[i].fp8, 0.06, 0);
    }
}

// Tile and wave quantisation worked by hand. TorchTitan's 8B wo output, 16384 tokens x 4096:
// 128 x 16 = 2048 tiles of 128 x 256 (64 x 32 the other way, the same), 16 waves of 132 slots,
// so 2048 / 2112 of the waves' area is output. One tile past a wave: 133 tiles of 128 x 256
// (M = 133 x 128, N = 256) need two waves, 133 / 264 of their area; cut 256 x 128 they are
// 67 x 2 = 134 tiles, also two waves, the same 133 / 264. A 128 x 384 output: 1 x 2 tiles of
// 128 x 256 (half of the second past the edge) in one wave, 128 x 384 / (132 x 128 x 256);
// 256 x 128 tiles: 1 x 3, one wave, 128 x 384 / (132 x 256 x 128), the same area.
static void test_matmul_wave_quantisation(void) {
    ct_hw_profile h = profile("h100_sxm");
    CHECK_CLOSE(ct_hw_matmul_waves(&h, 16384, 4096), 2048.0 / 2112.0, 1e-12, 0);
    CHECK_CLOSE(ct_hw_matmul_efficiency(&h, 16384, 4096, 4096, false), 0.803 * 2048.0 / 2112.0, 1e-12, 0);
    CHECK_CLOSE(ct_hw_matmul_waves(&h, 133 * 128, 256), 133.0 / 264.0, 1e-12, 0);
    CHECK_CLOSE(ct_hw_matmul_waves(&h, 128, 384), 128.0 * 384 / (132.0 * 128 * 256), 1e-12, 0);
    // Skinny outputs: a 256 x 2816 output is 2 x 11 = 22 tiles, one wave, 22 / 132 of its area.
    CHECK_CLOSE(ct_hw_matmul_waves(&h, 256, 2816), 22.0 / 132.0, 1e-12, 0);
    // A profile without SMs (a CPU's, calibrated) has no waves.
    ct_hw_profile cpu = profile("this_machine");
    CHECK(ct_hw_matmul_waves(&cpu, 133 * 128, 256) == 1.0, "cpu profile quantised");
}

// A grouped kernel's tiles share the waves. DeepSeek-V3-like experts under tp 8 and no expert
// parallelism, 8192 tokens: 256 experts of 256 rows each, w1|w3 output 2 x 2048 / 8 = 512 wide.
// One expert alone: 2 x 2 = 4 tiles of 128 x 256 in one wave of 132, 256 x 512 / (132 x 128 x
// 256) of its area. All 256 in one kernel: 1024 tiles in 8 waves, 256 x 256 x 512 / (8 x 132 x
// 128 x 256). The grouped kernel's arithmetic is 256 experts' at that fill; its traffic is every
// expert's weights and rows, 256 x ((256 x 7168 + 7168 x 512 + 256 x 512) x 2 bytes) = 2.89 GB,
// 861 us at 3.35 TB/s, more than the arithmetic (625 us): 256-row experts are memory-bound.
static void test_matmul_grouped_share_waves(void) {
    ct_hw_profile h = profile("h100_sxm");
    CHECK_CLOSE(ct_hw_matmul_waves(&h, 256, 512), 256.0 * 512 / (132.0 * 128 * 256), 1e-12, 0);
    double fill = 256.0 * 256 * 512 / (8.0 * 132 * 128 * 256);
    CHECK_CLOSE(ct_hw_grouped_matmul_waves(&h, 256, 256, 512), fill, 1e-12, 0);
    double s = ct_hw_grouped_matmul_seconds(&h, 256, 256, 512, 7168, 989e12, false, 2, 2, 3350e9);
    double arithmetic = 256 * 2.0 * 256 * 512 * 7168 / (989e12 * 0.803 * fill);
    double traffic = 256 * ((256.0 * 7168 + 7168.0 * 512 + 256.0 * 512) * 2) / 3350e9;
    CHECK(traffic > arithmetic, "traffic %g, arithmetic %g", traffic, arithmetic);
    CHECK_CLOSE(s, traffic, 1e-9, 0);
    CHECK(s < 256 * ct_hw_matmul_seconds(&h, 256, 512, 7168, 989e12, false, 2, 2, 3350e9) / 10,
          "256 experts in one kernel not faster than one at a time");
    // One group is the plain GEMM.
    CHECK_CLOSE(ct_hw_grouped_matmul_seconds(&h, 1, 16384, 4096, 4096, 989e12, false, 2, 2, 3350e9),
                ct_hw_matmul_seconds(&h, 16384, 4096, 4096, 989e12, false, 2, 2, 3350e9), 1e-15, 0);
}

// More work never takes less time: at fixed N and K the seconds grow with M (in steps, one per
// wave), and the efficiency never exceeds the measured plateau nor drops to 0.
static void test_matmul_monotonic_and_bounded(void) {
    const char *ids[] = {"h100_sxm", "a100", "h200", "b200", "h100_hbm2e_500w"};
    for (int p = 0; p < 5; p++) {
        ct_hw_profile hw = profile(ids[p]);
        for (int fp8 = 0; fp8 < 2; fp8++) {
            double plateau = fp8 && hw.matmul_efficiency_fp8 > 0 ? hw.matmul_efficiency_fp8 : hw.matmul_efficiency;
            double prev = 0;
            for (double M = 16; M <= 40000; M += 16) {
                double s = ct_hw_matmul_seconds(&hw, M, 4096, 4096, hw.peak_bf16, fp8, fp8 ? 1 : 2, 2,
                                                hw.memory_bandwidth);
                double e = ct_hw_matmul_efficiency(&hw, M, 4096, 4096, fp8);
                CHECK(s >= prev * (1 - 1e-12), "%s fp8 %d: M %g takes %g s, M - 16 took %g", ids[p], fp8, M, s, prev);
                CHECK(e > 0 && e <= plateau * (1 + 1e-12), "%s fp8 %d: M %g efficiency %g (plateau %g)", ids[p], fp8, M,
                      e, plateau);
                prev = s;
            }
        }
    }
}

// Small K is memory-bound: an (8192 x 64) by (64 x 8192) bf16 GEMM reads 2 x 8192 x 64 x 2 bytes
// and writes 8192 x 8192 x 2: 136.3 MB at 3.35 TB/s = 40.7 us, against 8.6 GFLOP at 0.803 x
// 989 TFLOP/s x 2048/2112 (16 waves of 2048 tiles) = 11.2 us. At large K the arithmetic
// dominates and the traffic term fades: seconds / arithmetic -> 1.
static void test_matmul_roofline(void) {
    ct_hw_profile h = profile("h100_sxm");
    double bytes = 2.0 * 8192 * 64 * 2 + 8192.0 * 8192 * 2;
    double s = ct_hw_matmul_seconds(&h, 8192, 8192, 64, 989e12, false, 2, 2, 3350e9);
    CHECK_CLOSE(s, bytes / 3350e9, 1e-9, 0);
    double compute = 2.0 * 8192 * 8192 * 64 / (989e12 * 0.803 * 2048.0 / 2112.0);
    CHECK(s > 3 * compute, "small K: %g s not memory-bound (arithmetic %g s)", s, compute);
    double K = 65536;
    double big = ct_hw_matmul_seconds(&h, 8192, 8192, K, 989e12, false, 2, 2, 3350e9);
    CHECK_CLOSE(big, 2.0 * 8192 * 8192 * K / (989e12 * 0.803 * 2048.0 / 2112.0), 1e-9, 0);
    // fp8 operands are half the bytes: the same small-K shape moves less.
    double s8 = ct_hw_matmul_seconds(&h, 8192, 8192, 64, 1979e12, true, 1, 2, 3350e9);
    CHECK(s8 < s, "fp8 small-K %g not below bf16 %g", s8, s);
}

// ------------------------------------------------------------------ collectives

// NCCL's bus bandwidth by collective and link on the shipped profiles: H100 ring collectives
// 370 GB/s and NVLink SHARP all-reduce 480 within a node (nccl-tests issue 212), 47 across
// (issue 290); A100 has no NVLink SHARP, so its all-reduce runs at its ring figure (200, issue 149).
static void test_busbw_by_collective(void) {
    ct_hw_profile h = profile("h100_sxm"), a = profile("a100");
    CHECK_CLOSE(ct_hw_busbw(&h, false, CT_HW_ALL_GATHER), 370e9, 1e-12, 0);
    CHECK_CLOSE(ct_hw_busbw(&h, false, CT_HW_REDUCE_SCATTER), 370e9, 1e-12, 0);
    CHECK_CLOSE(ct_hw_busbw(&h, false, CT_HW_SEND_RECV), 370e9, 1e-12, 0);
    CHECK_CLOSE(ct_hw_busbw(&h, false, CT_HW_ALL_TO_ALL), 370e9, 1e-12, 0);
    CHECK_CLOSE(ct_hw_busbw(&h, false, CT_HW_ALL_REDUCE), 480e9, 1e-12, 0);
    for (int c = CT_HW_ALL_GATHER; c <= CT_HW_ALL_TO_ALL; c++)
        CHECK_CLOSE(ct_hw_busbw(&h, true, (ct_hw_coll)c), 47e9, 1e-12, 0);
    CHECK_CLOSE(ct_hw_busbw(&a, false, CT_HW_ALL_REDUCE), 200e9, 1e-12, 0);
    // Every achieved figure is under the line rate but SHARP's all-reduce (the switch reduces).
    CHECK(ct_hw_busbw(&h, false, CT_HW_ALL_GATHER) < h.intra_bw && ct_hw_busbw(&h, true, CT_HW_ALL_GATHER) < h.inter_bw,
          "busbw above the line rate");
    // A profile without bus bandwidths (a CPU's) runs at its measured line rate.
    ct_hw_profile cpu = profile("this_machine");
    CHECK(ct_hw_busbw(&cpu, false, CT_HW_ALL_REDUCE) == cpu.intra_bw, "cpu busbw %g", cpu.intra_bw);
}

// A ring all-reduce on 8 GPUs of one NVLink 4 node (NCCL_ALGO=Ring: the profile without its SHARP
// figure), against nccl-tests on 8 H20 (kvcache-ai/Mooncake pull request 3484, NCCL baseline):
// 16 MiB in 121.33 us (busbw 242 GB/s), 1 GiB in 5252.64 us (357.7 GB/s). By hand: 14 steps of
// 3 us plus 2 x 7/8 of the message at 370 GB/s.
static void test_allreduce_against_nccl_tests(void) {
    ct_hw_profile h = profile("h100_sxm");
    h.intra_ar_busbw = 0;  // ring
    double mib16 = 16777216, gib = 1073741824;
    double by_hand16 = 14 * 3e-6 + 1.75 * mib16 / 370e9, by_hand1g = 14 * 3e-6 + 1.75 * gib / 370e9;
    CHECK_CLOSE(ct_hw_coll_seconds(&h, CT_HW_ALL_REDUCE, 8, mib16, false), by_hand16, 1e-12, 0);
    CHECK_CLOSE(ct_hw_coll_seconds(&h, CT_HW_ALL_REDUCE, 8, gib, false), by_hand1g, 1e-12, 0);
    CHECK_CLOSE(by_hand16, 121.33e-6, 0.05, 0);
    CHECK_CLOSE(by_hand1g, 5252.64e-6, 0.05, 0);
    CHECK_CLOSE(ct_hw_coll_bus_bytes(CT_HW_ALL_REDUCE, 8, mib16) / by_hand16, 242e9, 0.05, 0);
}

// The achieved bus bandwidth (bus bytes / seconds) grows with the message, towards the profile's
// busbw for large messages; small messages cost the steps' latency. Half of the busbw is reached
// at steps x latency x busbw bytes on the bus: all-gather on 8 GPUs in a node, 7 x 3 us x 370 GB/s
// = 7.77 MB; across 16 nodes' worth of 128 ranks, 127 x 8 us x 47 GB/s = 47.8 MB.
static void test_busbw_grows_with_size(void) {
    ct_hw_profile h = profile("h100_sxm");
    const struct {
        ct_hw_coll coll;
        int n;
        bool inter;
    } cases[] = {{CT_HW_ALL_GATHER, 8, false}, {CT_HW_REDUCE_SCATTER, 8, false}, {CT_HW_ALL_REDUCE, 8, false},
                 {CT_HW_ALL_GATHER, 128, true}, {CT_HW_ALL_REDUCE, 16, true}, {CT_HW_SEND_RECV, 2, true},
                 {CT_HW_ALL_TO_ALL, 8, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double prev = 0, peak = ct_hw_busbw(&h, cases[i].inter, cases[i].coll);
        for (double bytes = 1024; bytes <= 64.0 * 1073741824; bytes *= 2) {
            double s = ct_hw_coll_seconds(&h, cases[i].coll, cases[i].n, bytes, cases[i].inter);
            double bw = ct_hw_coll_bus_bytes(cases[i].coll, cases[i].n, bytes) / s;
            CHECK(bw > prev && bw < peak, "case %zu: %g bytes at %g GB/s (before %g, busbw %g)", i, bytes, bw / 1e9,
                  prev / 1e9, peak / 1e9);
            prev = bw;
        }
        CHECK(prev > 0.95 * peak, "case %zu: 64 GiB reaches only %g of %g GB/s", i, prev / 1e9, peak / 1e9);
    }
    double half = 7 * 3e-6 * 370e9;  // bus bytes
    double s = ct_hw_coll_seconds(&h, CT_HW_ALL_GATHER, 8, half * 8 / 7, false);
    CHECK_CLOSE(half / s, 185e9, 1e-9, 0);
    double half_inter = 127 * 8e-6 * 47e9;
    double si = ct_hw_coll_seconds(&h, CT_HW_ALL_GATHER, 128, half_inter * 128 / 127, true);
    CHECK_CLOSE(half_inter / si, 23.5e9, 1e-9, 0);
    // Nothing to send, or one rank: no collective.
    CHECK(ct_hw_coll_seconds(&h, CT_HW_ALL_REDUCE, 1, 1e9, false) == 0, "one rank");
    CHECK(ct_hw_coll_seconds(&h, CT_HW_ALL_GATHER, 8, 0, false) == 0, "no bytes");
    // A send of 1 byte is one step's latency.
    CHECK_CLOSE(ct_hw_coll_seconds(&h, CT_HW_SEND_RECV, 2, 1, true), 8e-6 + 1 / 47e9, 1e-12, 0);
}

int main(void) {
    CT_RUN(test_matmul_full_waves_reach_mamf);
    CT_RUN(test_matmul_500w_against_fbgemm);
    CT_RUN(test_matmul_wave_quantisation);
    CT_RUN(test_matmul_grouped_share_waves);
    CT_RUN(test_matmul_monotonic_and_bounded);
    CT_RUN(test_matmul_roofline);
    CT_RUN(test_busbw_by_collective);
    CT_RUN(test_allreduce_against_nccl_tests);
    CT_RUN(test_busbw_grows_with_size);
    return ct_test_failures ? 1 : 0;
}
