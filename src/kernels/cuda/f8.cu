// 8-bit quantisation kernels of the cuda backend (contracts: cuda_kernels.h, "8-bit"). The casts
// are core/float_formats.h's scalars themselves (host-and-device under nvcc): round to nearest
// even on the fp32 bit pattern, saturating, NaN kept as NaN.
// Amaxes are maxima (exact in any order); the fp32 products x * scale are single IEEE roundings
// (the build passes -fmad=false), so codes and scales are the cpu's codes and scales.
//
// Amaxes travel as the bit patterns of |x| (uint32): for values >= +0 the integer order is the
// float order, and every NaN is stored as the positive quiet NaN 0x7fc00000, above +inf, so an
// integer MAX (atomicMax, a warp's __reduce_max_sync) is the max with NaN winning (torch.amax),
// and the result is already in the form ct_f8_split's amax_max expects.
#include <math.h>
#include <stdint.h>

#include "core/float_formats.h"
#include "kernels/cuda/common.cuh"

enum { F8_THREADS = 256, COL_ROWS = 256 /* rows per block of the column amax */ };
#define POS_NAN 0x7fc00000u
#define AMAX_EPS CT_F8_AMAX_EPS

// ---- the scalar formats: core/float_formats.h's own casts (host-and-device under nvcc)
// fp32 -> e4m3 (e4m3 != 0) or e5m2, saturating; and back.
__device__ static inline uint8_t to_f8(float x, int e4m3) {
    return e4m3 ? ct_f32_to_e4m3(x, CT_F8_SATURATE) : ct_f32_to_e5m2(x, CT_F8_SATURATE);
}
__device__ static inline float from_f8(uint8_t b, int e4m3) { return e4m3 ? ct_e4m3_to_f32(b) : ct_e5m2_to_f32(b); }
__device__ static inline float e8m0_to_f32(uint8_t x) { return ct_e8m0_to_f32(x); }

// ct_f8_scale_from_amax: max_finite / max(amax, eps) in double, rounded to fp32; pow2 rounds a
// finite positive result down to a power of two. A NaN amax gives a NaN scale.
__device__ static inline float scale_from_amax(float amax, int e4m3, int pow2) {
    double a = (double)amax < AMAX_EPS ? AMAX_EPS : (double)amax;
    float s = (float)((e4m3 ? 448.0 : 57344.0) / a);
    if (pow2 && isfinite(s) && s > 0) s = __uint_as_float(__float_as_uint(s) & 0x7f800000u);
    return s;
}

// ct_mx_scale_from_amax: e8m0 bits of 2^(floor(log2 amax) - emax_elem), clamped; NaN / inf: 0xFF.
__device__ static inline uint8_t mx_scale_from_amax(float amax, int e4m3) {
    uint32_t a = __float_as_uint(amax) & 0x7fffffffu;
    if (a >= 0x7f800000u) return 0xFFu;
    if (a == 0) return 0x00;
    int fl = a >= 0x00800000u ? (int)(a >> 23) - 127 : 31 - __clz((int)a) - 149;
    int x = fl - (e4m3 ? 8 : 15);
    x = x < -127 ? -127 : (x > 127 ? 127 : x);
    return (uint8_t)(x + 127);
}

// Element i of x, fp32 or bf16 (widened exactly: the bits shifted up).
__device__ static inline float load(const void *x, int bf16, long i) {
    return bf16 ? __uint_as_float((uint32_t)((const uint16_t *)x)[i] << 16) : ((const float *)x)[i];
}
__device__ static inline uint32_t abs_bits(float v) {
    uint32_t a = __float_as_uint(v) & 0x7fffffffu;
    return a > 0x7f800000u ? POS_NAN : a;
}

// ---- amaxes
__global__ static void amax_all_k(uint32_t *amax, const void *x, int bf16, long n) {
    uint32_t m = 0;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        m = max(m, abs_bits(load(x, bf16, i)));
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31) == 0 && m) atomicMax(amax, m);
}

__global__ static void amax_rows_k(uint32_t *amax, const void *x, int bf16, long cols) {
    __shared__ uint32_t sh[32];
    long r = blockIdx.x;
    uint32_t m = 0;
    for (long c = threadIdx.x; c < cols; c += blockDim.x) m = max(m, abs_bits(load(x, bf16, r * cols + c)));
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (unsigned w = 1; w < blockDim.x / 32; w++) m = max(m, sh[w]);
        amax[r] = m;
    }
}

// Thread per column over COL_ROWS rows (adjacent threads read adjacent columns), blocks of rows
// combined by atomicMax into a zeroed amax.
__global__ static void amax_cols_k(uint32_t *amax, const void *x, int bf16, long rows, long cols) {
    long c = blockIdx.x * (long)blockDim.x + threadIdx.x, r0 = (long)blockIdx.y * COL_ROWS;
    if (c >= cols) return;
    long r1 = r0 + COL_ROWS < rows ? r0 + COL_ROWS : rows;
    uint32_t m = 0;
    for (long r = r0; r < r1; r++) m = max(m, abs_bits(load(x, bf16, r * cols + c)));
    if (m) atomicMax(amax + c, m);
}

extern "C" void ct_cuda_f8_amax(float *amax, const void *x, bool bf16, long n) {
    cudaMemsetAsync(amax, 0, sizeof(float), 0);  // its error, if any, is the one ct_cuda_launched reports
    unsigned blocks = ct_cuda_blocks(n, F8_THREADS);
    if (n > 0) amax_all_k<<<blocks < 1024 ? blocks : 1024, F8_THREADS>>>((uint32_t *)amax, x, bf16, n);
    ct_cuda_launched("f8 amax");
}

extern "C" void ct_cuda_f8_amax_rows(float *amax, const void *x, bool bf16, long rows, long cols) {
    if (rows <= 0) return;
    amax_rows_k<<<(unsigned)rows, F8_THREADS>>>((uint32_t *)amax, x, bf16, cols);
    ct_cuda_launched("f8 amax rows");
}

extern "C" void ct_cuda_f8_amax_cols(float *amax, const void *x, bool bf16, long rows, long cols) {
    if (cols <= 0) return;
    cudaMemsetAsync(amax, 0, (size_t)cols * sizeof(float), 0);  // checked by ct_cuda_launched
    dim3 grid((unsigned)((cols + F8_THREADS - 1) / F8_THREADS), (unsigned)((rows + COL_ROWS - 1) / COL_ROWS));
    if (rows > 0) amax_cols_k<<<grid, F8_THREADS>>>((uint32_t *)amax, x, bf16, rows, cols);
    ct_cuda_launched("f8 amax cols");
}

// ---- scales and casts
__global__ static void scales_k(float *s, long n, int e4m3, int pow2) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        s[i] = scale_from_amax(s[i], e4m3, pow2);
}

extern "C" void ct_cuda_f8_scales(float *s, long n, bool e4m3, bool pow2) {
    if (n <= 0) return;
    scales_k<<<ct_cuda_blocks(n, F8_THREADS), F8_THREADS>>>(s, n, e4m3, pow2);
    ct_cuda_launched("f8 scales");
}

// Output (i, j) of q (out_rows, ld): the cast of x' = x or x^T (x is (rows, cols) as stored),
// scaled by s[0], s[row of x] or s[column of x]; columns [out_cols, ld) are zero codes (+0).
__global__ static void cast_k(uint8_t *q, long ld, long out_rows, long out_cols, const void *x, int bf16, long cols,
                              int transpose, const float *s, int smode, int e4m3) {
    long n = out_rows * ld;
    for (long o = blockIdx.x * (long)blockDim.x + threadIdx.x; o < n; o += (long)gridDim.x * blockDim.x) {
        long i = o / ld, j = o % ld;
        if (j >= out_cols) {
            q[o] = 0;
            continue;
        }
        long xr = transpose ? j : i, xc = transpose ? i : j;
        float sc = s[smode == CT_CUDA_F8_SCALE_ROW ? xr : (smode == CT_CUDA_F8_SCALE_COL ? xc : 0)];
        q[o] = to_f8(load(x, bf16, xr * cols + xc) * sc, e4m3);
    }
}

extern "C" void ct_cuda_f8_cast(uint8_t *q, long ld, const void *x, bool bf16, long rows, long cols, bool transpose,
                                const float *s, int smode, bool e4m3) {
    long out_rows = transpose ? cols : rows, out_cols = transpose ? rows : cols;
    if (out_rows <= 0 || ld <= 0) return;
    cast_k<<<ct_cuda_blocks(out_rows * ld, F8_THREADS), F8_THREADS>>>(q, ld, out_rows, out_cols, x, bf16, cols,
                                                                     transpose, s, smode, e4m3);
    ct_cuda_launched("f8 cast");
}

// ---- MX blocks: one warp per 32-element block of a row of x' (x or x^T)
// ct_mx_quantize_block then ct_mx_dequantize_block: y = the fp32 value each element's MX code
// stands for, element code * 2^X, exact in fp32 (kernels/cpu/gemm_f8.h).
__global__ static void mx_dequant_k(float *y, long out_rows, long K, const void *x, int bf16, long cols,
                                    int transpose, int e4m3) {
    long nb = (K + 31) / 32, warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= out_rows * nb) return;  // whole warps leave together
    long r = warp / nb, k = (warp % nb) * 32 + lane;
    bool in = k < K;
    float v = 0.0f;
    if (in) v = load(x, bf16, transpose ? k * cols + r : r * cols + k);
    uint32_t m = __reduce_max_sync(0xffffffffu, abs_bits(v));
    // the cpu's amax loop: NaN -> the NaN scale; else the largest |x| (inf -> the NaN scale too)
    uint8_t sc = m == POS_NAN ? (uint8_t)0xFFu : mx_scale_from_amax(__uint_as_float(m), e4m3);
    if (!in) return;
    uint8_t qc = sc == 0xFFu ? (uint8_t)(e4m3 ? 0x7Fu : 0x7Eu) : to_f8(v * e8m0_to_f32((uint8_t)(254 - sc)), e4m3);
    y[r * K + k] = from_f8(qc, e4m3) * e8m0_to_f32(sc);
}

extern "C" void ct_cuda_mx_dequant(float *y, const void *x, bool bf16, long rows, long cols, bool transpose,
                                   bool e4m3) {
    long out_rows = transpose ? cols : rows, K = transpose ? rows : cols;
    if (out_rows <= 0 || K <= 0) return;
    long threads = out_rows * ((K + 31) / 32) * 32;
    mx_dequant_k<<<ct_cuda_blocks(threads, F8_THREADS), F8_THREADS>>>(y, out_rows, K, x, bf16, cols, transpose, e4m3);
    ct_cuda_launched("mx quantise-dequantise");
}

// y (rows, K) = MX codes q (rows, K) times their blocks' e8m0 scales (rows, nblocks(K)).
__global__ static void mx_decode_k(float *y, const uint8_t *q, const uint8_t *scales, long rows, long K, int e4m3) {
    long nb = (K + 31) / 32, n = rows * K;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        long r = i / K, k = i % K;
        y[i] = from_f8(q[i], e4m3) * e8m0_to_f32(scales[r * nb + k / 32]);
    }
}

extern "C" void ct_cuda_mx_decode(float *y, const uint8_t *q, const uint8_t *scales, long rows, long K, bool e4m3) {
    if (rows <= 0 || K <= 0) return;
    mx_decode_k<<<ct_cuda_blocks(rows * K, F8_THREADS), F8_THREADS>>>(y, q, scales, rows, K, e4m3);
    ct_cuda_launched("mx decode");
}

// ---- the layout cuBLASLt's fp8 kernels take, and the scales after the sum
__global__ static void repack_k(uint8_t *dst, long ld_dst, long rows, long K, const uint8_t *src, long ld_src,
                                int trans) {
    long n = rows * ld_dst;
    for (long o = blockIdx.x * (long)blockDim.x + threadIdx.x; o < n; o += (long)gridDim.x * blockDim.x) {
        long r = o / ld_dst, k = o % ld_dst;
        dst[o] = k < K ? src[trans ? k * ld_src + r : r * ld_src + k] : (uint8_t)0;
    }
}

extern "C" void ct_cuda_f8_repack(uint8_t *dst, long ld_dst, const uint8_t *src, long ld_src, long rows, long K,
                                  bool trans) {
    if (rows <= 0 || ld_dst <= 0) return;
    repack_k<<<ct_cuda_blocks(rows * ld_dst, F8_THREADS), F8_THREADS>>>(dst, ld_dst, rows, K, src, ld_src, trans);
    ct_cuda_launched("f8 repack");
}

// kernels/cpu/gemm_f8.c's scale_row, element by element: the same float operations in the same
// order, so C is the cpu's bits given the same acc.
__global__ static void epilogue_k(float *C, long ldc, const float *acc, long ld_acc, long M, long N,
                                  const float *scale_a, const float *scale_b, int rowwise, float beta) {
    long n_all = M * N;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n_all; i += (long)gridDim.x * blockDim.x) {
        long m = i / N, n = i % N;
        float ia = 1.0f / scale_a[rowwise ? m : 0], ib = rowwise ? 1.0f / scale_b[n] : 1.0f / scale_b[0];
        float v = acc[m * ld_acc + n] * (ia * ib);
        float *c = C + m * ldc + n;
        *c = beta == 0.0f ? v : v + beta * *c;
    }
}

extern "C" void ct_cuda_f8_epilogue(float *C, long ldc, const float *acc, long ld_acc, long M, long N,
                                    const float *scale_a, const float *scale_b, bool rowwise, float beta) {
    if (M <= 0 || N <= 0) return;
    epilogue_k<<<ct_cuda_blocks(M * N, F8_THREADS), F8_THREADS>>>(C, ldc, acc, ld_acc, M, N, scale_a, scale_b,
                                                                  rowwise, beta);
    ct_cuda_launched("f8 epilogue");
}
