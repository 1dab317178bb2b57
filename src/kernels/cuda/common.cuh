// Launch geometry shared by the .cu files (internal to src/kernels/cuda).
#ifndef CT_CUDA_COMMON_CUH
#define CT_CUDA_COMMON_CUH
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

// Grid-stride loops: enough blocks to fill a large GPU, never more than the work needs.
static inline unsigned ct_cuda_blocks(long n, int threads) {
    long b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b < 65535L * 16 ? b : 65535L * 16);
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `sh` holds 32 floats of shared memory. Summation order is fixed by the thread layout.
__device__ static inline float ct_block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();  // sh may still be read by a previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float ct_block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#endif
