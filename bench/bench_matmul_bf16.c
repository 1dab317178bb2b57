// bf16 gemm speed through ct_gemm_bf16 (ctitan's AMX or VDPBF16PS kernel where the CPU has bf16
// units, else the fp32 fallback): square 2048 and the linear layers of benchmark M (N = 2048
// rows, C = 768, fused qkv 768 -> 2304, FFN 4096 as 768 -> 4096 and 2048 -> 768), forward
// (x W^T) and both backward products, each as GFLOP/s (best of runs) and as ratios to the fp32
// sgemm peak and to the bf16 peak (square 2048^3). Where the CPU has bf16 units, the same again
// through oneDNN's matmul primitive (the path ctitan's kernels replaced), with ctitan's rate over
// oneDNN's per product, and square 2048 with oneDNN's scratchpad managed by oneDNN (library mode)
// against ours (user mode). DNNL_VERBOSE=1 shows which oneDNN kernel each shape gets.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/kernels.h"

static double time_gemm(int ta, int tb, long M, long N, long K, float beta) {
    long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *tmp = malloc(sizeof(float) * (ar * ac > br * bc ? ar * ac : br * bc));
    uint16_t *A = malloc(sizeof(uint16_t) * ar * ac), *B = malloc(sizeof(uint16_t) * br * bc);
    float *C = calloc(M * N, sizeof(float));
    for (long i = 0; i < ar * ac; i++) tmp[i] = (float)(i % 13) * 0.01f;
    ct_f32_to_bf16_array(A, tmp, ar * ac);
    for (long i = 0; i < br * bc; i++) tmp[i] = (float)(i % 11) * 0.01f;
    ct_f32_to_bf16_array(B, tmp, br * bc);
    ct_gemm_bf16(ta, tb, M, N, K, 1.0f, A, ac, B, bc, beta, C, N);  // warm-up: primitive creation
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = omp_get_wtime();
        ct_gemm_bf16(ta, tb, M, N, K, 1.0f, A, ac, B, bc, beta, C, N);
        double g = 2.0 * M * N * K / (omp_get_wtime() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(tmp), free(A), free(B), free(C);
    return best;
}

static const long N_ROWS = 2048, layers[][2] = {{768, 2304}, {768, 768}, {768, 4096}, {2048, 768}};  // (IC, OC)

// rate[l][0..2]: forward, dinp, dweight of layer l
static void linears(double rate[4][3], double peak32, double peak16) {
    const long N = N_ROWS;
    for (int l = 0; l < 4; l++) {
        long IC = layers[l][0], OC = layers[l][1];
        double f = rate[l][0] = time_gemm(0, 1, N, OC, IC, 0.0f);   // out = x W^T
        double bx = rate[l][1] = time_gemm(0, 0, N, IC, OC, 0.0f);  // dx = dout W
        double bw = rate[l][2] = time_gemm(1, 0, OC, IC, N, 1.0f);  // dW += dout^T x
        printf("linear N=%ld %5ld->%-5ld fwd %7.1f (%.2f|%.2f)  dinp %7.1f (%.2f|%.2f)  dweight %7.1f (%.2f|%.2f)"
               " GFLOP/s (x fp32 peak|x bf16 peak)\n",
               N, IC, OC, f, f / peak32, f / peak16, bx, bx / peak32, bx / peak16, bw, bw / peak32, bw / peak16);
    }
}

int main(void) {
    ct_kernels_get("cpu");  // installs the kernel set this CPU runs best (CTITAN_KERNEL_SET: another)
    const char *path = ct_bf16_gemm_path();
    int units = strcmp(path, "fallback") != 0;
    printf("threads %d, bf16 gemm path: %s (%s)\n", omp_get_max_threads(), path,
           !units ? "fp32 fallback" : ct_gemm_bf16_avx512_uses_amx() ? "ctitan's AMX kernel" : "ctitan's VDPBF16PS kernel or oneDNN");
    double peak32 = ct_cpu_matmul_peak_gflops(2048, 4);
    double peak16 = ct_cpu_matmul_peak_gflops_bf16(2048, 5);
    printf("fp32 sgemm peak (2048^3)  %8.1f GFLOP/s\n", peak32);
    printf("bf16 gemm  peak (2048^3)  %8.1f GFLOP/s  %.2f x fp32 peak\n", peak16, peak16 / peak32);
    double ours[4][3], dnnl[4][3];
    linears(ours, peak32, peak16);
    if (!units) return 0;
    ct_gemm_bf16_prefer_onednn(1);
    double peak_dnnl = ct_cpu_matmul_peak_gflops_bf16(2048, 5);
    printf("oneDNN's matmul primitive: bf16 peak (2048^3) %.1f GFLOP/s; ctitan's / oneDNN's %.2f\n", peak_dnnl,
           peak16 / peak_dnnl);
    linears(dnnl, peak32, peak16);
    for (int l = 0; l < 4; l++)
        printf("   ctitan / oneDNN  %5ld->%-5ld fwd %.2f  dinp %.2f  dweight %.2f\n", layers[l][0], layers[l][1],
               ours[l][0] / dnnl[l][0], ours[l][1] / dnnl[l][1], ours[l][2] / dnnl[l][2]);
    ct_gemm_bf16_set_user_scratchpad(0);
    double lib = ct_cpu_matmul_peak_gflops_bf16(2048, 5);
    ct_gemm_bf16_set_user_scratchpad(1);
    double usr = ct_cpu_matmul_peak_gflops_bf16(2048, 5);
    printf("oneDNN scratchpad 2048^3: oneDNN-managed %.1f, ours %.1f GFLOP/s\n", lib, usr);
    ct_gemm_bf16_prefer_onednn(0);
    return 0;
}
