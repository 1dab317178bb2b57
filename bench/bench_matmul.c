// sgemm speed through ct_gemm (ctitan's packed sgemm, kernels/cpu/gemm.c) beside oneDNN's
// dnnl_sgemm (which it replaced: oneDNN allocates inside every call), on square shapes and on the
// linear layers of benchmark M (N = 2048 rows, C = 768, FFN 2048, vocabulary 32768): forward
// (x W^T) and both backward products, each as GFLOP/s (best of several runs), as a ratio to the
// square 2048^3 peak, and as ct_gemm / oneDNN.
//
// For the record (2 cores of a Xeon, OMP/OPENBLAS threads = 2, best of runs): Debian's OpenBLAS
// cblas_sgemm reads its CPU as "Prescott" (the VM hides the model) and reaches 66 GFLOP/s at
// 2048^3; forced to OPENBLAS_CORETYPE=SkylakeX it reaches 316; oneDNN, which picks its AVX-512
// kernels from the cpuid flags with no setting, reaches ~320.
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

// Best GFLOP/s of C = op(A) op(B) (+ C when beta is 1) through ct_gemm (dnnl = 0) or dnnl_sgemm.
static double time_gemm(int ta, int tb, long M, long N, long K, float beta, int dnnl) {
    long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *A = malloc(sizeof(float) * ar * ac), *B = malloc(sizeof(float) * br * bc), *C = calloc(M * N, sizeof(float));
    for (long i = 0; i < ar * ac; i++) A[i] = (float)(i % 13) * 0.01f;
    for (long i = 0; i < br * bc; i++) B[i] = (float)(i % 11) * 0.01f;
    double best = 0;
    for (int r = 0; r < 5; r++) {  // the first is a warm-up
        double t0 = omp_get_wtime();
        if (dnnl)
            dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, ac, B, bc, beta, C, N);
        else
            ct_gemm(ta, tb, M, N, K, 1.0f, A, ac, B, bc, beta, C, N);
        double g = 2.0 * M * N * K / (omp_get_wtime() - t0) / 1e9;
        if (r > 0 && g > best) best = g;
    }
    free(A), free(B), free(C);
    return best;
}

int main(void) {
    printf("threads %d\n", omp_get_max_threads());
    double peak = ct_cpu_matmul_peak_gflops(2048, 4);
    long sq[] = {1024, 2048, 4096};
    for (int i = 0; i < 3; i++) {
        double g = time_gemm(0, 0, sq[i], sq[i], sq[i], 0.0f, 0), d = time_gemm(0, 0, sq[i], sq[i], sq[i], 0.0f, 1);
        printf("sgemm square %5ld^3            %7.1f GFLOP/s  %.2f x peak; oneDNN %7.1f (%.2f)\n", sq[i], g,
               g / peak, d, g / d);
    }
    long N = 2048, layers[][2] = {{768, 2048}, {2048, 768}, {768, 32768}};  // (IC, OC)
    for (int l = 0; l < 3; l++) {
        long IC = layers[l][0], OC = layers[l][1];
        double r[3][2];
        for (int d = 0; d < 2; d++) {
            r[0][d] = time_gemm(0, 1, N, OC, IC, 0.0f, d);  // out = x W^T
            r[1][d] = time_gemm(0, 0, N, IC, OC, 0.0f, d);  // dx = dout W
            r[2][d] = time_gemm(1, 0, OC, IC, N, 1.0f, d);  // dW += dout^T x
        }
        printf("linear N=%ld %5ld->%-5ld  fwd %7.1f (%.2f)  dinp %7.1f (%.2f)  dweight %7.1f (%.2f) GFLOP/s (x peak)\n",
               N, IC, OC, r[0][0], r[0][0] / peak, r[1][0], r[1][0] / peak, r[2][0], r[2][0] / peak);
        printf("   ct_gemm / oneDNN sgemm   fwd %.2f  dinp %.2f  dweight %.2f\n", r[0][0] / r[0][1], r[1][0] / r[1][1],
               r[2][0] / r[2][1]);
    }
    printf("peak (square 2048^3, ct_cpu_matmul_peak_gflops) %.1f GFLOP/s\n", peak);
    return 0;
}
