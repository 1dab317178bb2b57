// The cuda backend's host side (internal to src/kernels/cuda): its table, for ct_kernels_get, and
// the pieces its files share. All work goes to the compute stream, the legacy default stream 0
// (cuda_kernels.h says why); copies to the host synchronise with it.
#ifndef CT_CUDA_BACKEND_CUDA_H
#define CT_CUDA_BACKEND_CUDA_H
#include <cuda_runtime_api.h>
#include <library_types.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

extern const ct_kernels ct_kernels_cuda;

// Installs the device allocator in core/memory (idempotent); ct_kernels_get("cuda") calls it.
void ct_cuda_backend_init(void);

// Fatal "cuda: <what>: <error string>" unless e == cudaSuccess.
void ct_cuda_check(cudaError_t e, const char *what);
// This process's current device (its ct_device for the memory tables).
ct_device ct_cuda_device(void);

// ---- memory (backend_cuda.c)
void ct_cuda_zero(void *dst, size_t bytes);
void ct_cuda_copy(void *dst, const void *src, size_t bytes);
void ct_cuda_synchronize(void);  // the whole device: every stream
void ct_cuda_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t row_bytes, long rows);
void ct_cuda_to_host(void *host_dst, const void *src, size_t bytes);
void ct_cuda_from_host(void *dst, const void *host_src, size_t bytes);
// A device buffer of at least `bytes` owned by the backend (grown, never shrunk; accounted as
// "other"), for small results read back at once (sum of squares parts, the bad-target row).
void *ct_cuda_small_buffer(size_t bytes);

// ---- matmuls through cuBLASLt (blas_cuda.c): ct_gemm's row-major contract; A and B of type ab
// (CUDA_R_32F: fp32 products, no TF32; CUDA_R_16BF: bf16 products), C fp32, fp32 accumulation.
void ct_cuda_gemm_lt(int trans_a, int trans_b, long M, long N, long K, float alpha, const void *A, long lda,
                     const void *B, long ldb, float beta, float *C, long ldc, cudaDataType_t ab);
void ct_cuda_gemm(int trans_a, int trans_b, long M, long N, long K, float alpha, const float *A, long lda,
                  const float *B, long ldb, float beta, float *C, long ldc);
void ct_cuda_gemm_bf16(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                       const uint16_t *B, long ldb, float beta, float *C, long ldc);
double ct_cuda_matmul_peak_gflops(long n, int reps);
double ct_cuda_matmul_peak_gflops_bf16(long n, int reps);
const char *ct_cuda_bf16_gemm_path(void);
void ct_cuda_linear_forward(float *out, const float *inp, const float *weight, long N, long IC, long OC);
void ct_cuda_linear_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             long N, long IC, long OC);

// ---- fp8 product through cuBLASLt (blas_cuda.c): D (M, N) fp32, row-major with ld ldd (a
// multiple of 4) = A (M, Kp) B (N, Kp)^T of fp8 codes (row stride Kp, a multiple of 16; pointers
// 16-byte aligned), unit scales, fp32 accumulation. Not both e5m2.
void ct_cuda_gemm_f8_tn(long M, long N, long Kp, const uint8_t *A, ct_dtype fmt_a, const uint8_t *B, ct_dtype fmt_b,
                        float *D, long ldd);

// ---- float8 / MXFP8 members (linear_f8_cuda.c)
long ct_cuda_gemm_f8_scratch_floats(long M, long N, long K, int with_beta);
void ct_cuda_gemm_f8(int trans_a, int trans_b, long M, long N, long K, const uint8_t *A, long lda, ct_dtype fmt_a,
                     const float *scale_a, const uint8_t *B, long ldb, ct_dtype fmt_b, const float *scale_b,
                     int rowwise, float beta, float *C, long ldc, float *scratch);
void ct_cuda_gemm_mxfp8(long M, long N, long K, const uint8_t *A, const uint8_t *scale_a, ct_dtype fmt_a,
                        const uint8_t *B, const uint8_t *scale_b, ct_dtype fmt_b, float beta, float *C,
                        float *scratch);
long ct_cuda_f8_scratch_floats(long N, long IC, long OC);
void ct_cuda_linear_forward_f8(float *out, const void *inp, ct_dtype inp_dtype, const float *weight, long N,
                               long IC, long OC, ct_f8_recipe recipe, const ct_f8_split *split, float *scratch);
long ct_cuda_f8_backward_scratch_floats(long N, long IC, long OC);
void ct_cuda_linear_backward_f8(float *dinp, float *dweight, const float *dout, const void *inp,
                                ct_dtype inp_dtype, const float *weight, long N, long IC, long OC,
                                ct_f8_recipe recipe, const ct_f8_split *split, float *scratch);
#endif
