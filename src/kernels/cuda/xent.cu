// Cross-entropy row kernels of the cuda backend (contracts: ct_xent_fused's row step and the
// ct_xent_rows_* pieces in kernels/kernels.h). One block per row: max and sum of exp are block
// reductions (the cpu sums a row in one chain, so the two agree to fp32 rounding of the sum).
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/common.cuh"

enum { ROW_THREADS = 256 };

// z (V) -> exp(z - mx) in place; returns the sum of the new z to every thread.
__device__ static float exp_sum_row(float *z, long V, float mx, float *sh) {
    float s = 0.0f;
    for (long j = threadIdx.x; j < V; j += blockDim.x) {
        float e = expf(z[j] - mx);
        z[j] = e;
        s += e;
    }
    return ct_block_sum(s, sh);
}

__device__ static float max_row(const float *z, long V, float *sh) {
    float m = -INFINITY;
    for (long j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, z[j]);
    return ct_block_max(m, sh);
}

__global__ static void rows_fused_k(float *z, double *row_loss, const int32_t *targets, long V, float grad_scale,
                                    int want_grad) {
    __shared__ float sh[32];
    long r = blockIdx.x;
    float *zr = z + r * V;
    int32_t t = targets[r];
    if (t < 0) {  // ignored row: no loss, zero gradient
        if (want_grad)
            for (long j = threadIdx.x; j < V; j += blockDim.x) zr[j] = 0.0f;
        if (threadIdx.x == 0) row_loss[r] = 0.0;
        return;
    }
    float mx = max_row(zr, V, sh), zt = zr[t];
    __syncthreads();  // every thread has read z[t] before the exps overwrite it
    float sum = exp_sum_row(zr, V, mx, sh);
    if (threadIdx.x == 0) row_loss[r] = (double)mx + log((double)sum) - (double)zt;
    if (!want_grad) return;
    float inv = 1.0f / sum;
    for (long j = threadIdx.x; j < V; j += blockDim.x) zr[j] = zr[j] * inv * grad_scale;
    __syncthreads();
    if (threadIdx.x == 0) zr[t] -= grad_scale;
}

extern "C" void ct_cuda_xent_rows_fused(float *z, double *row_loss, const int32_t *targets, long R, long V,
                                        float grad_scale, int want_grad) {
    if (R <= 0) return;
    rows_fused_k<<<(unsigned)R, ROW_THREADS>>>(z, row_loss, targets, V, grad_scale, want_grad);
    ct_cuda_launched("xent_fused (rows)");
}

__global__ static void rows_max_k(float *mx, const float *z, const int32_t *targets, long V) {
    __shared__ float sh[32];
    long r = blockIdx.x;
    if (targets[r] < 0) {  // ignored rows take part in the caller's MAX with a harmless 0
        if (threadIdx.x == 0) mx[r] = 0.0f;
        return;
    }
    float m = max_row(z + r * V, V, sh);
    if (threadIdx.x == 0) mx[r] = m;
}

__global__ static void rows_exp_sum_k(float *z, float *sum, float *zt, const float *mx, const int32_t *targets,
                                      long V, long vocab_start) {
    __shared__ float sh[32];
    long r = blockIdx.x, t = targets[r], tl = t - vocab_start;
    float *zr = z + r * V;
    if (t < 0) {
        if (threadIdx.x == 0) sum[r] = zt[r] = 0.0f;
        return;
    }
    float target_logit = tl >= 0 && tl < V ? zr[tl] : 0.0f;
    __syncthreads();
    float s = exp_sum_row(zr, V, mx[r], sh);
    if (threadIdx.x == 0) {
        sum[r] = s;
        zt[r] = target_logit;
    }
}

__global__ static void rows_dlogits_k(float *z, const float *sum, const int32_t *targets, long V, long vocab_start,
                                      float grad_scale) {
    long r = blockIdx.x, t = targets[r], tl = t - vocab_start;
    float *zr = z + r * V;
    if (t < 0) {
        for (long j = threadIdx.x; j < V; j += blockDim.x) zr[j] = 0.0f;
        return;
    }
    float scale = grad_scale / sum[r];
    for (long j = threadIdx.x; j < V; j += blockDim.x) zr[j] *= scale;
    __syncthreads();
    if (threadIdx.x == 0 && tl >= 0 && tl < V) zr[tl] -= grad_scale;
}

extern "C" void ct_cuda_xent_rows_max(float *mx, const float *z, const int32_t *targets, long R, long V) {
    if (R <= 0) return;
    rows_max_k<<<(unsigned)R, ROW_THREADS>>>(mx, z, targets, V);
    ct_cuda_launched("xent_rows_max");
}
extern "C" void ct_cuda_xent_rows_exp_sum(float *z, float *sum, float *zt, const float *mx, const int32_t *targets,
                                          long R, long V, long vocab_start) {
    if (R <= 0) return;
    rows_exp_sum_k<<<(unsigned)R, ROW_THREADS>>>(z, sum, zt, mx, targets, V, vocab_start);
    ct_cuda_launched("xent_rows_exp_sum");
}
extern "C" void ct_cuda_xent_rows_dlogits(float *z, const float *sum, const int32_t *targets, long R, long V,
                                          long vocab_start, float grad_scale) {
    if (R <= 0) return;
    rows_dlogits_k<<<(unsigned)R, ROW_THREADS>>>(z, sum, targets, V, vocab_start, grad_scale);
    ct_cuda_launched("xent_rows_dlogits");
}

// One thread, in order: *acc += x[0] + x[1] + ... as a running total starting from *acc, the
// cpu's summation order (its loop adds each row's loss to the total in turn).
__global__ static void add_in_order_k(double *acc, const double *x, long n) {
    double s = *acc;
    for (long i = 0; i < n; i++) s += x[i];
    *acc = s;
}

extern "C" void ct_cuda_f64_add_in_order(double *acc, const double *x, long n) {
    add_in_order_k<<<1, 1>>>(acc, x, n);
    ct_cuda_launched("add_in_order");
}

// ct_xent_rows_loss on the device, one thread in row order (the cpu's bits from the same reduced
// numbers), its sum added to *loss_sum.
__global__ static void rows_loss_k(double *loss_sum, const float *mx, const float *sum, const float *zt,
                                   const int32_t *targets, long R) {
    double loss = 0.0;
    for (long r = 0; r < R; r++)
        if (targets[r] >= 0) loss += (double)mx[r] + log((double)sum[r]) - (double)zt[r];
    *loss_sum += loss;
}

extern "C" void ct_cuda_xent_rows_loss(double *loss_sum, const float *mx, const float *sum, const float *zt,
                                       const int32_t *targets, long R) {
    rows_loss_k<<<1, 1>>>(loss_sum, mx, sum, zt, targets, R);
    ct_cuda_launched("xent_rows_loss");
}

// ct_xent_rows_gathered, one block per row: the max over every slice, then the sum of exp(z - mx)
// slice by slice in slice order, each slice a block sum with a layout fixed by the thread
// numbering, so every rank holding the same G gets the same bits (the contract), and the cpu's
// sum to fp32 rounding of the order.
__global__ static void rows_gathered_k(float *G, float *mx, float *sum, float *zt, const int32_t *targets, long P,
                                       long R, long V, long mine, float grad_scale, int dlogits) {
    __shared__ float sh[32];
    long r = blockIdx.x, t = targets[r], slice = R * V;
    float *zr = G + mine * slice + r * V;  // (V) this rank's slice of the row -> dlogits
    if (t < 0) {
        if (dlogits)
            for (long j = threadIdx.x; j < V; j += blockDim.x) zr[j] = 0.0f;
        if (threadIdx.x == 0) mx[r] = sum[r] = zt[r] = 0.0f;
        return;
    }
    float target_logit = G[(t / V) * slice + r * V + t % V];  // read before any dlogits are written
    float m = -INFINITY;
    for (long p = 0; p < P; p++)
        for (long j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, G[p * slice + r * V + j]);
    m = ct_block_max(m, sh);
    float s = 0.0f;
    for (long p = 0; p < P; p++) {
        const float *zp = G + p * slice + r * V;
        float part = 0.0f;
        for (long j = threadIdx.x; j < V; j += blockDim.x) part += expf(zp[j] - m);
        s += ct_block_sum(part, sh);  // every thread holds the same s (syncs inside: all reads are done)
    }
    if (threadIdx.x == 0) {
        mx[r] = m;
        sum[r] = s;
        zt[r] = target_logit;
    }
    if (!dlogits) return;
    float scale = grad_scale / s;
    for (long j = threadIdx.x; j < V; j += blockDim.x) zr[j] = expf(zr[j] - m) * scale;
    __syncthreads();
    long tl = t - mine * V;
    if (threadIdx.x == 0 && tl >= 0 && tl < V) zr[tl] -= grad_scale;
}

extern "C" void ct_cuda_xent_rows_gathered(float *G, float *mx, float *sum, float *zt, const int32_t *targets, long P,
                                           long R, long V, long mine, float grad_scale, int dlogits) {
    if (R <= 0) return;
    rows_gathered_k<<<(unsigned)R, ROW_THREADS>>>(G, mx, sum, zt, targets, P, R, V, mine, grad_scale, dlogits);
    ct_cuda_launched("xent_rows_gathered");
}
