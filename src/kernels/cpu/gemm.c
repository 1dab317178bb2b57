// Matrix multiply through oneDNN's sgemm (row-major, like the rest of ctitan). oneDNN was chosen
// over the system OpenBLAS by measurement (bench/bench_matmul and the report of milestone 1).
// Inside an OpenMP parallel region oneDNN runs the gemm on the calling thread only, which is
// what the attention kernel relies on (each thread multiplies its own tiles).
#include <dnnl.h>

#include "core/error.h"
#include "kernels/kernels.h"

void ct_gemm(int trans_a, int trans_b, long M, long N, long K, float alpha, const float *A, long lda,
             const float *B, long ldb, float beta, float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // nothing to multiply: C = beta * C (beta == 0 clears, even NaN garbage)
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                                  C, ldc);
    if (st != dnnl_success)
        ct_fatal("ct_gemm", "dnnl_sgemm failed (status %d) for M=%ld N=%ld K=%ld lda=%ld ldb=%ld ldc=%ld", (int)st, M,
                 N, K, lda, ldb, ldc);
}

void ct_linear_forward(float *out, const float *inp, const float *weight, long N, long IC, long OC) {
    // out (N, OC) = inp (N, IC) @ weight (OC, IC)^T
    ct_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}

void ct_linear_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                        long N, long IC, long OC) {
    // dinp (N, IC) = dout (N, OC) @ weight (OC, IC)
    if (dinp) ct_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
    // dweight (OC, IC) += dout (N, OC)^T @ inp (N, IC)
    if (dweight) ct_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
}
