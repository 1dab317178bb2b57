// Attention forward and backward speed at the benchmark shapes, on the fused qkv layout the model
// uses. FLOPs counted as the causal matmul work: forward 2 * 2 * B * NH * T * T * HS / 2,
// backward 2.5 x forward. Prints GFLOP/s (best of several runs) and the ratio to the square
// sgemm peak of this machine.
// `bench_attention bf16`: the bf16 attention (ct_attention_forward_bf16 / _backward_bf16) at the
// same shapes, its forward + backward GFLOP/s beside the fp32 kernel's and the bf16 matmul peak
// (matmul_peak_gflops_bf16) measured in the same run, as ratios.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/kernels.h"

// Returns the fp32 forward + backward GFLOP/s.
static double bench(const char *name, long B, long T, long NH, long NKV, long HS, double peak) {
    long ld = (NH + 2 * NKV) * HS, n = B * T * ld, no = B * T * NH * HS;
    float *qkv = malloc(sizeof(float) * n), *dqkv = calloc(n, sizeof(float));
    float *out = malloc(sizeof(float) * no), *dout = malloc(sizeof(float) * no);
    float *lse = malloc(sizeof(float) * B * NH * T);
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(T, T, HS));
    for (long i = 0; i < n; i++) qkv[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (long i = 0; i < no; i++) dout[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
    const float *q = qkv, *k = qkv + NH * HS, *v = qkv + (NH + NKV) * HS;
    double fwd_flops = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0, best_f = 1e30, best_b = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = omp_get_wtime();
        ct_attention_forward(out, lse, q, ld, k, ld, v, ld, NULL, NULL, NULL, NULL, B, T, T, NH, NKV, HS, scratch);
        double t1 = omp_get_wtime();
        ct_attention_backward(dqkv, dqkv + NH * HS, dqkv + (NH + NKV) * HS, dout, out, lse, q, ld, k, ld, v, ld,
                              NULL, NULL, NULL, NULL, B, T, T, NH, NKV, HS, scratch);
        double t2 = omp_get_wtime();
        if (t1 - t0 < best_f) best_f = t1 - t0;
        if (t2 - t1 < best_b) best_b = t2 - t1;
    }
    double gf = fwd_flops / best_f / 1e9, gb = 2.5 * fwd_flops / best_b / 1e9;
    double gfb = 3.5 * fwd_flops / (best_f + best_b) / 1e9;
    printf("attention %-2s B=%ld T=%ld NH=%ld NKV=%ld HS=%ld: fwd %6.1f GFLOP/s (%.2f ms)  bwd %6.1f GFLOP/s (%.2f ms)"
           "  fwd+bwd %6.1f GFLOP/s = %.2f x sgemm peak\n",
           name, B, T, NH, NKV, HS, gf, best_f * 1e3, gb, best_b * 1e3, gfb, gfb / peak);
    free(qkv), free(dqkv), free(out), free(dout), free(lse), free(scratch);
    return gfb;
}

static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The bf16 attention at one shape, beside the fp32 kernel's GFLOP/s (gf32) and the bf16 peak.
static void bench_bf16(const char *name, long B, long T, long NH, long NKV, long HS, double gf32, double peak) {
    long ld = (NH + 2 * NKV) * HS, n = B * T * ld, no = B * T * NH * HS;
    uint16_t *qkv = malloc(sizeof(uint16_t) * n), *out = malloc(sizeof(uint16_t) * no);
    float *dqkv = calloc(n, sizeof(float)), *dout = malloc(sizeof(float) * no);
    float *lse = malloc(sizeof(float) * B * NH * T);
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(T, T, HS));
    for (long i = 0; i < n; i++) qkv[i] = to_bf16((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
    for (long i = 0; i < no; i++) dout[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
    const uint16_t *q = qkv, *k = qkv + NH * HS, *v = qkv + (NH + NKV) * HS;
    double fwd_flops = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0, best_f = 1e30, best_b = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = omp_get_wtime();
        ct_attention_forward_bf16(out, lse, q, ld, k, ld, v, ld, NULL, NULL, NULL, NULL, B, T, T, NH, NKV, HS, scratch);
        double t1 = omp_get_wtime();
        ct_attention_backward_bf16(dqkv, dqkv + NH * HS, dqkv + (NH + NKV) * HS, dout, out, lse, q, ld, k, ld, v, ld,
                                   NULL, NULL, NULL, NULL, B, T, T, NH, NKV, HS, scratch);
        double t2 = omp_get_wtime();
        if (t1 - t0 < best_f) best_f = t1 - t0;
        if (t2 - t1 < best_b) best_b = t2 - t1;
    }
    double gfb = 3.5 * fwd_flops / (best_f + best_b) / 1e9;
    printf("attention bf16 %-2s B=%ld T=%ld NH=%ld NKV=%ld HS=%ld: fwd %.2f ms  bwd %.2f ms  fwd+bwd %6.1f GFLOP/s"
           " = %.2f x the fp32 kernel, %.2f x bf16 matmul peak\n",
           name, B, T, NH, NKV, HS, best_f * 1e3, best_b * 1e3, gfb, gfb / gf32, gfb / peak);
    free(qkv), free(dqkv), free(out), free(dout), free(lse), free(scratch);
}

int main(int argc, char **argv) {
    double peak = ct_cpu_matmul_peak_gflops(2048, 3);
    printf("threads %d, sgemm peak (2048^3) %.1f GFLOP/s\n", omp_get_max_threads(), peak);
    if (argc > 1 && !strcmp(argv[1], "bf16")) {
        double peak16 = ct_kernels_get("cpu")->matmul_peak_gflops_bf16(2048, 3);
        printf("bf16 matmul peak (2048^3) %.1f GFLOP/s\n", peak16);
        static const long shapes[4][5] = {
            {8, 256, 4, 4, 64}, {8, 256, 4, 1, 64}, {4, 512, 12, 12, 64}, {4, 512, 12, 4, 64}};
        for (int i = 0; i < 4; i++) {
            const long *x = shapes[i];
            const char *name = i < 2 ? "S" : "M";
            double gf32 = bench(name, x[0], x[1], x[2], x[3], x[4], peak);
            bench_bf16(name, x[0], x[1], x[2], x[3], x[4], gf32, peak16);
        }
        return 0;
    }
    bench("S", 8, 256, 4, 4, 64, peak);
    bench("S", 8, 256, 4, 1, 64, peak);
    bench("M", 4, 512, 12, 12, 64, peak);
    bench("M", 4, 512, 12, 4, 64, peak);
    return 0;
}
