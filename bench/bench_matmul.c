// sgemm speed through ct_gemm (oneDNN): square shapes and the linear layers of benchmark M
// (N = 2048 rows, C = 768, FFN 2048, vocabulary 32768), forward (x W^T) and both backward
// products, each as GFLOP/s (best of several runs) and as a ratio to the square 2048^3 peak.
//
// For the record (2 cores of this Xeon, OMP/OPENBLAS threads = 2, best of runs): Debian's
// OpenBLAS cblas_sgemm reads its CPU as "Prescott" (the VM hides the model) and reaches 66
// GFLOP/s at 2048^3; forced to OPENBLAS_CORETYPE=SkylakeX it reaches 316; oneDNN, which picks
// its AVX-512 kernels from the cpuid flags with no setting, reaches ~320 (this program).
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

static double time_gemm(int ta, int tb, long M, long N, long K, float beta) {
    long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *A = malloc(sizeof(float) * ar * ac), *B = malloc(sizeof(float) * br * bc), *C = calloc(M * N, sizeof(float));
    for (long i = 0; i < ar * ac; i++) A[i] = (float)(i % 13) * 0.01f;
    for (long i = 0; i < br * bc; i++) B[i] = (float)(i % 11) * 0.01f;
    ct_gemm(ta, tb, M, N, K, 1.0f, A, ac, B, bc, beta, C, N);  // warm-up
    double best = 0;
    for (int r = 0; r < 4; r++) {
        double t0 = omp_get_wtime();
        ct_gemm(ta, tb, M, N, K, 1.0f, A, ac, B, bc, beta, C, N);
        double g = 2.0 * M * N * K / (omp_get_wtime() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(A), free(B), free(C);
    return best;
}

int main(void) {
    printf("threads %d\n", omp_get_max_threads());
    double peak = ct_cpu_matmul_peak_gflops(2048, 4);
    long sq[] = {1024, 2048, 4096};
    for (int i = 0; i < 3; i++) {
        double g = i == 1 ? peak : time_gemm(0, 0, sq[i], sq[i], sq[i], 0.0f);
        printf("sgemm square %5ld^3            %7.1f GFLOP/s  %.2f x peak\n", sq[i], g, g / peak);
    }
    long N = 2048, layers[][2] = {{768, 2048}, {2048, 768}, {768, 32768}};  // (IC, OC)
    for (int l = 0; l < 3; l++) {
        long IC = layers[l][0], OC = layers[l][1];
        double f = time_gemm(0, 1, N, OC, IC, 0.0f);   // out = x W^T
        double bx = time_gemm(0, 0, N, IC, OC, 0.0f);  // dx = dout W
        double bw = time_gemm(1, 0, OC, IC, N, 1.0f);  // dW += dout^T x
        printf("linear N=%ld %5ld->%-5ld  fwd %7.1f (%.2f)  dinp %7.1f (%.2f)  dweight %7.1f (%.2f) GFLOP/s (x peak)\n",
               N, IC, OC, f, f / peak, bx, bx / peak, bw, bw / peak);
    }
    printf("peak (square 2048^3, ct_cpu_matmul_peak_gflops) %.1f GFLOP/s\n", peak);
    return 0;
}
