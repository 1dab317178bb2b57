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

// ---- fp8 products (float8 linears): cuBLASLt's fp8 kernels on sm_89 / sm_90 and later.
// Their requirements (cuBLAS documentation, cublasLtMatmul, "FP8"): the "TN" layout -- cuBLASLt's
// A transposed and B not, i.e. both operands stored with K contiguous -- compute type 32F, scale
// type 32F, and e5m2 x e5m2 unsupported; operands 16-byte aligned with leading dimensions a
// multiple of 16 bytes. The caller lays the codes out so (kernels/cuda/linear_f8_cuda.c: K padded
// to a multiple of 16 with zero codes, regions 256-byte aligned, which is also the alignment the
// heuristic assumes by default). The scales are not handed to cuBLASLt: the product is taken
// with unit scales in fp32 and the scales applied after by ct_cuda_f8_epilogue, the cpu's
// epilogue operation for operation, which covers rowwise scales on sm_90 (its cuBLASLt has
// tensorwise scale pointers only; the outer-vector mode is newer hardware's) and leaves
// accumulation order as the only difference from the cpu. Fast accumulation stays off: on
// Hopper it keeps partial sums in lower precision than fp32, and the cpu's arithmetic sums in fp32.
static cudaDataType_t f8_type(ct_dtype f) { return f == CT_F8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

static void f8_check(cublasStatus_t s, const char *call, long M, long N, long Kp) {
    if (s != CUBLAS_STATUS_SUCCESS)
        ct_fatal("cuda", "cuBLASLt %s failed for the fp8 product M %ld N %ld K %ld: status %d", call, M, N, Kp,
                 (int)s);
}

void ct_cuda_gemm_f8_tn(long M, long N, long Kp, const uint8_t *A, ct_dtype fmt_a, const uint8_t *B, ct_dtype fmt_b,
                        float *D, long ldd) {
    if (M <= 0 || N <= 0) return;
    if (Kp <= 0) {  // no products: zeros
        ct_cuda_check(cudaMemset2DAsync(D, (size_t)ldd * sizeof(float), 0, (size_t)N * sizeof(float), (size_t)M, 0),
                      "cudaMemset2DAsync (fp8 product with K = 0)");
        return;
    }
    if (Kp % 16 || ldd % 4 || ((uintptr_t)A | (uintptr_t)B | (uintptr_t)D) % 16)
        ct_fatal("cuda", "fp8 product M %ld N %ld K %ld: K must be a multiple of 16, ld %ld of 4, pointers 16-byte "
                 "aligned (the caller pads)", M, N, Kp, ldd);
    if (fmt_a == CT_F8_E5M2 && fmt_b == CT_F8_E5M2)
        ct_fatal("cuda", "fp8 product M %ld N %ld K %ld: e5m2 x e5m2 has no cuBLASLt kernel (one side must be e4m3)",
                 M, N, Kp);
    lt_init();
    cublasLtMatmulDesc_t op;
    f8_check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate", M, N, Kp);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int8_t fast = 0;
    f8_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA", M, N, Kp);
    f8_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB", M, N, Kp);
    f8_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast), "set FAST_ACCUM",
             M, N, Kp);
    // Column-major view: D^T (N, M) = B (N, Kp as stored: Kp x N column-major, transposed) times
    // A (Kp x M column-major, as is). cuBLASLt's A is our B.
    cublasLtMatrixLayout_t la, lb, lc;
    f8_check(cublasLtMatrixLayoutCreate(&la, f8_type(fmt_b), (uint64_t)Kp, (uint64_t)N, Kp), "layout B", M, N, Kp);
    f8_check(cublasLtMatrixLayoutCreate(&lb, f8_type(fmt_a), (uint64_t)Kp, (uint64_t)M, Kp), "layout A", M, N, Kp);
    f8_check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)N, (uint64_t)M, ldd), "layout D", M, N, Kp);
    cublasLtMatmulPreference_t pref;
    f8_check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate", M, N, Kp);
    size_t ws = LT_WORKSPACE_BYTES;
    f8_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "set workspace", M, N, Kp);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    f8_check(cublasLtMatmulAlgoGetHeuristic(lt_handle, op, la, lb, lc, lc, pref, 1, &heur, &found), "AlgoGetHeuristic",
             M, N, Kp);
    if (found < 1)
        ct_fatal("cuda", "cuBLASLt has no fp8 algorithm for M %ld N %ld K %ld (%s x %s; needs sm_89 or newer)", M, N,
                 Kp, fmt_a == CT_F8_E4M3 ? "e4m3" : "e5m2", fmt_b == CT_F8_E4M3 ? "e4m3" : "e5m2");
    float one = 1.0f, zero = 0.0f;
    f8_check(cublasLtMatmul(lt_handle, op, &one, B, la, A, lb, &zero, D, lc, D, lc, &heur.algo, lt_workspace,
                            LT_WORKSPACE_BYTES, 0),
             "Matmul", M, N, Kp);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
}
