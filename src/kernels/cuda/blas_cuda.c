// Matmuls of the cuda backend through cuBLASLt: ct_gemm's row-major contract on column-major
// cuBLASLt by the usual identity -- a row-major X (r, c) with leading dimension ld is the
// column-major X^T -- so C^T (N, M) = op(B)^T (N, K) op(A)^T (K, M): cuBLASLt's first operand is
// our B, its second our A, with the transposes carried over. fp32 inputs use
// CUBLAS_COMPUTE_32F (true fp32 products, no TF32: the cpu parity tests compare at fp32
// accuracy); bf16 inputs the same compute type (bf16 products, fp32 accumulation and output).
// One handle and one 32 MiB workspace for the process, made on first use and kept.
// Phase 1 makes the descriptors per call (a few microseconds each); caching them per shape
// is the obvious next step once a GPU run shows the cost.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_kernels.h"

enum { LT_WORKSPACE_BYTES = 32 << 20 };

static cublasLtHandle_t lt_handle;
static void *lt_workspace;

static void lt_check(cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) ct_fatal("cuda", "cuBLASLt %s failed: status %d", what, (int)s);
}

static void lt_init(void) {
    if (lt_handle) return;
    lt_check(cublasLtCreate(&lt_handle), "cublasLtCreate");
    ct_cuda_check(cudaMalloc(&lt_workspace, LT_WORKSPACE_BYTES), "cudaMalloc (cuBLASLt workspace)");
    ct_mem_record_on(ct_cuda_device(), CT_MEM_OTHER, LT_WORKSPACE_BYTES);
}

void ct_cuda_gemm_lt(int trans_a, int trans_b, long M, long N, long K, float alpha, const void *A, long lda,
                     const void *B, long ldb, float beta, float *C, long ldc, cudaDataType_t ab) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // no products: C = beta C; only beta 0 (overwrite) and 1 (keep) occur
        if (beta == 0.0f)
            ct_cuda_check(cudaMemset2DAsync(C, (size_t)ldc * sizeof(float), 0, (size_t)N * sizeof(float), (size_t)M, 0),
                          "cudaMemset2DAsync (gemm with K = 0)");
        else if (beta != 1.0f)
            ct_fatal("cuda", "gemm with K = 0 and beta %g is not supported", (double)beta);
        return;
    }
    lt_init();
    cublasLtMatmulDesc_t op;
    lt_check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
    lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
    // stored shapes (column-major view) of cuBLASLt's operands: first = our B, second = our A
    cublasLtMatrixLayout_t la, lb, lc;
    lt_check(cublasLtMatrixLayoutCreate(&la, ab, (uint64_t)(trans_b ? K : N), (uint64_t)(trans_b ? N : K), ldb),
             "layout B");
    lt_check(cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)(trans_a ? M : K), (uint64_t)(trans_a ? K : M), lda),
             "layout A");
    lt_check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)N, (uint64_t)M, ldc), "layout C");
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    size_t ws = LT_WORKSPACE_BYTES;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "set workspace");
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    lt_check(cublasLtMatmulAlgoGetHeuristic(lt_handle, op, la, lb, lc, lc, pref, 1, &heur, &found),
             "AlgoGetHeuristic");
    if (found < 1)
        ct_fatal("cuda", "cuBLASLt has no algorithm for a %s gemm M %ld N %ld K %ld (trans %d %d, ld %ld %ld %ld)",
                 ab == CUDA_R_16BF ? "bf16" : "fp32", M, N, K, trans_a, trans_b, lda, ldb, ldc);
    lt_check(cublasLtMatmul(lt_handle, op, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &heur.algo, lt_workspace,
                            LT_WORKSPACE_BYTES, 0),
             "Matmul");
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
}

void ct_cuda_gemm(int trans_a, int trans_b, long M, long N, long K, float alpha, const float *A, long lda,
                  const float *B, long ldb, float beta, float *C, long ldc) {
    ct_cuda_gemm_lt(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F);
}

void ct_cuda_gemm_bf16(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                       const uint16_t *B, long ldb, float beta, float *C, long ldc) {
    ct_cuda_gemm_lt(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_16BF);
}

const char *ct_cuda_bf16_gemm_path(void) { return "cublaslt"; }

// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T
void ct_cuda_linear_forward(float *out, const float *inp, const float *weight, long N, long IC, long OC) {
    ct_cuda_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}

// dinp (N, IC) = dout @ weight; dweight (OC, IC) += dout^T @ inp
void ct_cuda_linear_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             long N, long IC, long OC) {
    if (dinp) ct_cuda_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
    if (dweight) ct_cuda_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
}

// Best rate of an n x n x n product over reps runs, timed with events on the compute stream.
// The operands are zeroed device buffers (cudaMalloc'd for the measurement and freed after):
// zeros do not make cuBLASLt faster, and uninitialised memory could hold NaNs.
static double peak(long n, int reps, cudaDataType_t ab) {
    size_t es = ab == CUDA_R_16BF ? 2 : 4, in_bytes = (size_t)n * (size_t)n * es, c_bytes = (size_t)n * (size_t)n * 4;
    void *a, *b;
    float *c;
    ct_cuda_check(cudaMalloc(&a, in_bytes), "cudaMalloc (peak)");
    ct_cuda_check(cudaMalloc(&b, in_bytes), "cudaMalloc (peak)");
    ct_cuda_check(cudaMalloc((void **)&c, c_bytes), "cudaMalloc (peak)");
    ct_cuda_check(cudaMemset(a, 0, in_bytes), "cudaMemset (peak)");
    ct_cuda_check(cudaMemset(b, 0, in_bytes), "cudaMemset (peak)");
    cudaEvent_t e0, e1;
    ct_cuda_check(cudaEventCreate(&e0), "cudaEventCreate");
    ct_cuda_check(cudaEventCreate(&e1), "cudaEventCreate");
    ct_cuda_gemm_lt(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, ab);  // warm-up: heuristics, clocks
    double best = 0.0;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        ct_cuda_check(cudaEventRecord(e0, 0), "cudaEventRecord");
        ct_cuda_gemm_lt(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, ab);
        ct_cuda_check(cudaEventRecord(e1, 0), "cudaEventRecord");
        ct_cuda_check(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float ms = 0.0f;
        ct_cuda_check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        double gf = ms > 0.0f ? 2.0 * (double)n * (double)n * (double)n / ((double)ms * 1e6) : 0.0;
        if (gf > best) best = gf;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return best;
}

double ct_cuda_matmul_peak_gflops(long n, int reps) { return peak(n, reps, CUDA_R_32F); }
double ct_cuda_matmul_peak_gflops_bf16(long n, int reps) { return peak(n, reps, CUDA_R_16BF); }
