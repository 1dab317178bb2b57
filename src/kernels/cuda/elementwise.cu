// Elementwise and reduction kernels of the cuda backend: vector add / scale, AdamW, the sum of
// squares behind the gradient norm, bf16 casts. Each element does the cpu's float operations in
// the cpu's order (the build passes -fmad=false, so nothing is contracted into an FMA): AdamW
// and the casts give the cpu's bits; the sum of squares sums in another order (in double).
#include <stdint.h>

#include "kernels/cuda/common.cuh"

#define GRID_STRIDE(i, n) for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)

__global__ static void add_k(float *y, const float *x, long n) {
    GRID_STRIDE(i, n) y[i] += x[i];
}
__global__ static void add_to_k(float *out, const float *a, const float *b, long n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ static void scale_k(float *y, float a, long n) {
    GRID_STRIDE(i, n) y[i] *= a;
}

extern "C" void ct_cuda_add(float *y, const float *x, long n) {
    if (n <= 0) return;
    add_k<<<ct_cuda_blocks(n, 256), 256>>>(y, x, n);
    ct_cuda_launched("add_inplace");
}
extern "C" void ct_cuda_add_to(float *out, const float *a, const float *b, long n) {
    if (n <= 0) return;
    add_to_k<<<ct_cuda_blocks(n, 256), 256>>>(out, a, b, n);
    ct_cuda_launched("add");
}
extern "C" void ct_cuda_scale(float *y, float a, long n) {
    if (n <= 0) return;
    scale_k<<<ct_cuda_blocks(n, 256), 256>>>(y, a, n);
    ct_cuda_launched("scale_inplace");
}

// The cpu's scalar loop (kernels/cpu/adamw.c), operation for operation.
__global__ static void adamw_k(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1,
                               float beta2, float eps, float wd, float bc1, float bc2, const float *grad_scale_at) {
    float grad_scale = *grad_scale_at;
    if (grad_scale == 0.0f) return;  // a skipped step
    GRID_STRIDE(i, n) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float p = param[i];
        param[i] = p - lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
    }
}

extern "C" void ct_cuda_adamw(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1,
                              float beta2, float eps, float weight_decay, float bc1, float bc2,
                              const float *grad_scale) {
    if (n <= 0) return;
    adamw_k<<<ct_cuda_blocks(n, 256), 256>>>(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2,
                                             grad_scale);
    ct_cuda_launched("adamw_update");
}

// ct_clip_factor on the device (one thread), so the factor never goes through the host.
__global__ static void clip_factor_k(float *scale, const double *scalars, double max_norm) {
    double loss_sum = scalars[0], norm = sqrt(scalars[1]);
    double clip = (max_norm > 0 && norm > max_norm) ? max_norm / (norm + 1e-6) : 1.0;
    *scale = isfinite(loss_sum) && isfinite(norm) ? (float)clip : 0.0f;
}

extern "C" void ct_cuda_clip_factor(float *scale, const double *scalars, double max_norm) {
    clip_factor_k<<<1, 1>>>(scale, scalars, max_norm);
    ct_cuda_launched("clip_factor");
}

// One block per part: block p sums x^2 over its slice [p*slice, (p+1)*slice) in double, tree-
// reduced in shared memory (a fixed order: the same result on every run).
__global__ static void sumsq_k(double *parts, const float *x, long n, long slice) {
    __shared__ double sh[256];
    long i0 = blockIdx.x * slice, i1 = i0 + slice < n ? i0 + slice : n;
    double s = 0.0;
    for (long i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)x[i] * (double)x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) parts[blockIdx.x] = sh[0];
}

extern "C" void ct_cuda_sumsq_parts(double *parts, const float *x, long n) {
    long slice = (n + CT_CUDA_SUMSQ_PARTS - 1) / CT_CUDA_SUMSQ_PARTS;
    sumsq_k<<<CT_CUDA_SUMSQ_PARTS, 256>>>(parts, x, n, slice);
    ct_cuda_launched("sum_squares");
}

// core/float_formats.h's ct_f32_to_bf16: NaN keeps sign and top payload with the quiet bit set;
// everything else rounds to nearest, ties to even, by adding 0x7fff plus the lowest kept bit.
__global__ static void f32_to_bf16_k(uint16_t *dst, const float *src, long n) {
    GRID_STRIDE(i, n) {
        uint32_t u = __float_as_uint(src[i]);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            dst[i] = (uint16_t)((u >> 16) | 0x40u);
        } else {
            u += 0x7fffu + ((u >> 16) & 1u);
            dst[i] = (uint16_t)(u >> 16);
        }
    }
}
__global__ static void bf16_to_f32_k(float *dst, const uint16_t *src, long n) {
    GRID_STRIDE(i, n) dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

extern "C" void ct_cuda_f32_to_bf16(uint16_t *dst, const float *src, long n) {
    if (n <= 0) return;
    f32_to_bf16_k<<<ct_cuda_blocks(n, 256), 256>>>(dst, src, n);
    ct_cuda_launched("f32_to_bf16");
}
extern "C" void ct_cuda_bf16_to_f32(float *dst, const uint16_t *src, long n) {
    if (n <= 0) return;
    bf16_to_f32_k<<<ct_cuda_blocks(n, 256), 256>>>(dst, src, n);
    ct_cuda_launched("bf16_to_f32");
}
