// The matmul peak the trainer divides by for MFU: the best rate of an n x n x n sgemm through
// ct_gemm on this machine, with the threads the run has. Set-up code: it allocates.
#include <omp.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/kernels.h"

double ct_cpu_matmul_peak_gflops(long n, int reps) {
    // Rows padded by 16 floats: a power-of-two leading dimension (2048) maps rows onto the same
    // cache sets and measured ~20% below the machine's rate, which would flatter every MFU.
    long ld = n + 16;
    float *A = ct_xmalloc((size_t)n * ld * sizeof(float));
    float *B = ct_xmalloc((size_t)n * ld * sizeof(float));
    float *C = ct_xmalloc((size_t)n * ld * sizeof(float));
    // the same huge pages as the model's buffers (ct_mem_alloc): the peak is measured like for like
    ct_mem_advise_huge_pages(A, (size_t)n * ld * sizeof(float));
    ct_mem_advise_huge_pages(B, (size_t)n * ld * sizeof(float));
    ct_mem_advise_huge_pages(C, (size_t)n * ld * sizeof(float));
    for (long i = 0; i < n * ld; i++) {  // small values: no overflow, no denormals
        A[i] = (float)((i * 7) % 13) * 0.01f;
        B[i] = (float)((i * 5) % 11) * 0.01f;
    }
    ct_gemm(0, 0, n, n, n, 1.0f, A, ld, B, ld, 0.0f, C, ld);  // warm-up (packing buffers, page faults)
    double best = 0.0;
    for (int r = 0; r < (reps < 1 ? 1 : reps); r++) {
        double t0 = omp_get_wtime();
        ct_gemm(0, 0, n, n, n, 1.0f, A, ld, B, ld, 0.0f, C, ld);
        double dt = omp_get_wtime() - t0;
        double g = 2.0 * (double)n * (double)n * (double)n / dt / 1e9;
        if (g > best) best = g;
    }
    free(A);
    free(B);
    free(C);
    return best;
}
