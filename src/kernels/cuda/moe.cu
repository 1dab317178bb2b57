// Mixture-of-experts kernels of the cuda backend (contracts in kernels/kernels.h, "mixture of
// experts"). Simple and deterministic first, as layers.cu: the router gives each token one thread
// (E is at most a few hundred, k a few; the chosen ids are sorted in place); the dispatch plan gives each expert
// one thread that walks the pairs in order, so the order is the cpu's; the row moves give a row
// one block.
#include <stdint.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/moe_rows.h"

extern "C" void ct_cuda_check(cudaError_t e, const char *what);  // backend_cuda.h (a C header)

__global__ static void router_fwd_k(int32_t *ids, float *weights, float *scores, const float *logits, const float *bias,
                                    long N, long E, long k, int sigmoid, int renorm) {
    long n = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (n < N) ct_moe_route_row(ids + n * k, weights + n * k, scores + n * E, logits + n * E, bias, E, k, sigmoid, renorm);
}

__global__ static void router_bwd_k(float *dlogits, const float *dweights, const float *dscores, const float *scores,
                                    const int32_t *ids, long N, long E, long k, int sigmoid, int renorm) {
    long n = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (n < N)
        ct_moe_router_backward_row(dlogits + n * E, dweights + n * k, dscores ? dscores + n * E : NULL, scores + n * E,
                                   ids + n * k, E, k, sigmoid, renorm);
}

// One thread per group (the cpu's order within it); loss_part[g] = coef Σ f P of group g.
__global__ static void aux_loss_k(float *loss_part, float *dscores, const float *scores, const int32_t *ids, long E,
                                  long k, long G, long groups, float coef, int sigmoid, double *fP) {
    long g = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (g < groups)
        loss_part[g] = (float)ct_moe_aux_group(dscores, scores, ids, g * G, G, groups, E, k, coef, sigmoid,
                                               fP + g * 2 * E, fP + g * 2 * E + E);
}

__global__ static void mean_k(float *out, const float *part, long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s += part[i];
    *out = (float)(s / (double)n);
}

__global__ static void bias_update_k(float *bias, const int64_t *counts, long E, float rate) {
    double mean = 0;
    for (long e = 0; e < E; e++) mean += (double)counts[e];
    mean /= (double)E;
    for (long e = threadIdx.x; e < E; e += blockDim.x)
        bias[e] += (double)counts[e] < mean ? rate : (double)counts[e] > mean ? -rate : 0.0f;
}

// expert e: its count, then its pairs' rows in pair order from its first row
__global__ static void dispatch_k(int64_t *counts, int32_t *pos, const int32_t *ids, long P, long E) {
    long e = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (e >= E) return;
    int64_t first = 0, mine = 0;
    for (long p = 0; p < P; p++) {
        first += ids[p] < e;
        mine += ids[p] == e;
    }
    counts[e] = mine;
    int64_t row = first;
    for (long p = 0; p < P; p++)
        if (ids[p] == e) pos[p] = (int32_t)row++;
}

__global__ static void permute_k(float *x_sorted, const float *x, const int32_t *pos, long k, long C) {
    long p = blockIdx.x;
    const float *src = x + (p / k) * C;
    float *dst = x_sorted + (long)pos[p] * C;
    for (long c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

__global__ static void permute_bwd_k(float *dx, const float *dx_sorted, const int32_t *pos, long k, long C) {
    long n = blockIdx.x;
    for (long c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dx_sorted[(long)pos[n * k] * C + c];
        for (long j = 1; j < k; j++) acc += dx_sorted[(long)pos[n * k + j] * C + c];
        dx[n * C + c] = acc;
    }
}

__global__ static void combine_k(float *y, const float *y_sorted, const float *weights, const int32_t *pos, long k,
                                 long C) {
    long n = blockIdx.x;
    for (long c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (long j = 0; j < k; j++) acc += weights[n * k + j] * y_sorted[(long)pos[n * k + j] * C + c];
        y[n * C + c] = acc;
    }
}

__global__ static void combine_bwd_k(float *dy_sorted, float *dweights, const float *dy, const float *y_sorted,
                                     const float *weights, const int32_t *pos, long k, long C) {
    __shared__ float sh[32];
    long p = blockIdx.x, n = p / k, row = pos[p];
    float w = weights[p], dot = 0.0f;
    for (long c = threadIdx.x; c < C; c += blockDim.x) {
        float g = dy[n * C + c];
        dy_sorted[row * C + c] = w * g;
        dot += g * y_sorted[row * C + c];
    }
    dot = ct_block_sum(dot, sh);
    if (threadIdx.x == 0) dweights[p] = dot;
}

extern "C" void ct_cuda_moe_router_forward(int32_t *ids, float *weights, float *scores, const float *logits,
                                           const float *bias, long N, long E, long k, int sigmoid, int renorm) {
    if (N <= 0) return;
    router_fwd_k<<<ct_cuda_blocks(N, 128), 128>>>(ids, weights, scores, logits, bias, N, E, k, sigmoid, renorm);
    ct_cuda_launched("moe_router_forward");
}
extern "C" void ct_cuda_moe_router_backward(float *dlogits, const float *dweights, const float *dscores,
                                            const float *scores, const int32_t *ids, long N, long E, long k, int sigmoid,
                                            int renorm) {
    if (N <= 0) return;
    router_bwd_k<<<ct_cuda_blocks(N, 128), 128>>>(dlogits, dweights, dscores, scores, ids, N, E, k, sigmoid, renorm);
    ct_cuda_launched("moe_router_backward");
}
// Per-group partial losses and the f, P work rows in memory of its own (cudaMalloc per call:
// the layer calls it once per step).
extern "C" void ct_cuda_moe_aux_loss(float *loss, float *dscores, const float *scores, const int32_t *ids, long N,
                                     long E, long k, long group, float coef, int sigmoid) {
    long G = group > 0 && group <= N ? group : N, groups = N / G;
    if (groups <= 0) return;
    float *part;
    double *fP;
    ct_cuda_check(cudaMalloc((void **)&part, (size_t)groups * sizeof(float)), "cudaMalloc (moe_aux_loss)");
    ct_cuda_check(cudaMalloc((void **)&fP, (size_t)(groups * 2 * E) * sizeof(double)), "cudaMalloc (moe_aux_loss)");
    aux_loss_k<<<ct_cuda_blocks(groups, 64), 64>>>(part, dscores, scores, ids, E, k, G, groups, coef, sigmoid, fP);
    mean_k<<<1, 1>>>(loss, part, groups);
    ct_cuda_launched("moe_aux_loss");
    cudaFree(part);
    cudaFree(fP);
}
extern "C" void ct_cuda_moe_bias_update(float *bias, const int64_t *counts, long E, float rate) {
    if (E <= 0) return;
    bias_update_k<<<1, 128>>>(bias, counts, E, rate);
    ct_cuda_launched("moe_bias_update");
}
extern "C" void ct_cuda_moe_dispatch_plan(int64_t *counts, int32_t *pos, const int32_t *ids, long N, long E, long k) {
    if (E <= 0) return;
    dispatch_k<<<ct_cuda_blocks(E, 64), 64>>>(counts, pos, ids, N * k, E);
    ct_cuda_launched("moe_dispatch_plan");
}
extern "C" void ct_cuda_moe_permute(float *x_sorted, const float *x, const int32_t *pos, long N, long k, long C) {
    if (N * k <= 0) return;
    permute_k<<<(unsigned)(N * k), 128>>>(x_sorted, x, pos, k, C);
    ct_cuda_launched("moe_permute");
}
extern "C" void ct_cuda_moe_permute_backward(float *dx, const float *dx_sorted, const int32_t *pos, long N, long k,
                                             long C) {
    if (N <= 0) return;
    permute_bwd_k<<<(unsigned)N, 128>>>(dx, dx_sorted, pos, k, C);
    ct_cuda_launched("moe_permute_backward");
}
extern "C" void ct_cuda_moe_combine(float *y, const float *y_sorted, const float *weights, const int32_t *pos, long N,
                                    long k, long C) {
    if (N <= 0) return;
    combine_k<<<(unsigned)N, 128>>>(y, y_sorted, weights, pos, k, C);
    ct_cuda_launched("moe_combine");
}
extern "C" void ct_cuda_moe_combine_backward(float *dy_sorted, float *dweights, const float *dy, const float *y_sorted,
                                             const float *weights, const int32_t *pos, long N, long k, long C) {
    if (N * k <= 0) return;
    combine_bwd_k<<<(unsigned)(N * k), 128>>>(dy_sorted, dweights, dy, y_sorted, weights, pos, k, C);
    ct_cuda_launched("moe_combine_backward");
}
