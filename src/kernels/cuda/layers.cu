// Layer kernels of the cuda backend: embedding, RMSNorm, RoPE, SwiGLU (contracts in
// kernels/kernels.h). Simple and deterministic first: reductions over rows (embedding and
// RMSNorm weight gradients) give each thread a column and walk the rows in order, as the cpu
// does, so they need no atomics and sum in the cpu's order.
#include <stdint.h>

#include "core/float_formats.h"
#include "kernels/cuda/common.cuh"

// ---- embedding: one block per row, threads over columns
__global__ static void embedding_fwd_k(float *out, const int32_t *tokens, const float *wte, long C, long vocab_start,
                                       long V_local) {
    long n = blockIdx.x, row = (long)tokens[n] - vocab_start;
    float *o = out + n * C;
    bool in = row >= 0 && row < V_local;
    for (long c = threadIdx.x; c < C; c += blockDim.x) o[c] = in ? wte[row * C + c] : 0.0f;
}

__global__ static void embedding_fwd_bf16_k(float *out, const int32_t *tokens, const uint16_t *wte, long C,
                                            long vocab_start, long V_local) {
    long n = blockIdx.x, row = (long)tokens[n] - vocab_start;
    float *o = out + n * C;
    bool in = row >= 0 && row < V_local;
    for (long c = threadIdx.x; c < C; c += blockDim.x) o[c] = in ? __uint_as_float((unsigned)wte[row * C + c] << 16) : 0.0f;
}

// one thread per column, rows in order: no races, the cpu's summation order
__global__ static void embedding_bwd_k(float *dwte, const float *dout, const int32_t *tokens, long N, long C,
                                       long vocab_start, long V_local) {
    long c = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (long n = 0; n < N; n++) {
        long row = (long)tokens[n] - vocab_start;
        if (row >= 0 && row < V_local) dwte[row * C + c] += dout[n * C + c];
    }
}

extern "C" void ct_cuda_embedding_forward(float *out, const int32_t *tokens, const float *wte, long N, long C,
                                          long vocab_start, long V_local) {
    if (N <= 0) return;
    embedding_fwd_k<<<(unsigned)N, 256>>>(out, tokens, wte, C, vocab_start, V_local);
    ct_cuda_launched("embedding_forward");
}
extern "C" void ct_cuda_embedding_forward_bf16(float *out, const int32_t *tokens, const uint16_t *wte, long N, long C,
                                               long vocab_start, long V_local) {
    if (N <= 0) return;
    embedding_fwd_bf16_k<<<(unsigned)N, 256>>>(out, tokens, wte, C, vocab_start, V_local);
    ct_cuda_launched("embedding_forward_bf16");
}
extern "C" void ct_cuda_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, long N, long C,
                                           long vocab_start, long V_local) {
    if (N <= 0 || C <= 0) return;
    embedding_bwd_k<<<(unsigned)((C + 127) / 128), 128>>>(dwte, dout, tokens, N, C, vocab_start, V_local);
    ct_cuda_launched("embedding_backward");
}

// ---- RMSNorm: one block per row, written in fp32 or (the kept norm under bf16) as the fp32
// value rounded to bf16, nearest even.
__device__ static inline void store_as(float *p, float v) { *p = v; }
__device__ static inline void store_as(uint16_t *p, float v) { *p = ct_f32_to_bf16(v); }

template <typename T>
__global__ static void rmsnorm_fwd_k(T *out, float *rstd, const float *inp, const float *weight, long C, float eps) {
    __shared__ float sh[32];
    long n = blockIdx.x;
    const float *x = inp + n * C;
    float ss = 0.0f;
    for (long c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    ss = ct_block_sum(ss, sh);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    T *y = out + n * C;
    for (long c = threadIdx.x; c < C; c += blockDim.x) store_as(y + c, x[c] * r * weight[c]);
    if (threadIdx.x == 0) rstd[n] = r;
}

// dinp_c += r w_c dy_c - r^3/C x_c sum_j(dy_j w_j x_j)
__global__ static void rmsnorm_bwd_dinp_k(float *dinp, const float *dout, const float *inp, const float *weight,
                                          const float *rstd, long C) {
    __shared__ float sh[32];
    long n = blockIdx.x;
    const float *x = inp + n * C, *dy = dout + n * C;
    float r = rstd[n], dot = 0.0f;
    for (long c = threadIdx.x; c < C; c += blockDim.x) dot += dy[c] * weight[c] * x[c];
    dot = ct_block_sum(dot, sh);
    float k = r * r * r * dot / (float)C;
    float *dx = dinp + n * C;
    for (long c = threadIdx.x; c < C; c += blockDim.x) dx[c] += r * weight[c] * dy[c] - k * x[c];
}

// dweight_c += sum_n dy_nc x_nc r_n in two passes with a fixed order: block (columns, chunk)
// sums its chunk's rows in order into part[chunk][c], then a thread per column adds the chunks in
// order. One pass of a thread per column would leave all but C / 128 blocks of the GPU idle.
__global__ static void rmsnorm_bwd_dw_part_k(float *part, const float *dout, const float *inp, const float *rstd,
                                             long N, long C) {
    long c = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (c >= C) return;
    long n0 = blockIdx.y * (long)CT_CUDA_RMSNORM_DW_ROWS, n1 = n0 + CT_CUDA_RMSNORM_DW_ROWS < N ? n0 + CT_CUDA_RMSNORM_DW_ROWS : N;
    float acc = 0.0f;
    for (long n = n0; n < n1; n++) acc += dout[n * C + c] * inp[n * C + c] * rstd[n];
    part[blockIdx.y * C + c] = acc;
}
__global__ static void rmsnorm_bwd_dw_sum_k(float *dweight, const float *part, long chunks, long C) {
    long c = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (long k = 0; k < chunks; k++) acc += part[k * C + c];
    dweight[c] += acc;
}

extern "C" void ct_cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, long N,
                                        long C, float eps) {
    if (N <= 0) return;
    rmsnorm_fwd_k<float><<<(unsigned)N, 256>>>(out, rstd, inp, weight, C, eps);
    ct_cuda_launched("rmsnorm_forward");
}
extern "C" void ct_cuda_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *weight, long N,
                                             long C, float eps) {
    if (N <= 0 || C <= 0) return;
    rmsnorm_fwd_k<uint16_t><<<(unsigned)N, 256>>>(out, rstd, inp, weight, C, eps);
    ct_cuda_launched("rmsnorm_forward_bf16");
}
extern "C" void ct_cuda_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                         const float *weight, const float *rstd, long N, long C, float *part) {
    if (N <= 0) return;
    if (dinp) {
        rmsnorm_bwd_dinp_k<<<(unsigned)N, 256>>>(dinp, dout, inp, weight, rstd, C);
        ct_cuda_launched("rmsnorm_backward (dinp)");
    }
    if (dweight) {
        long chunks = (N + CT_CUDA_RMSNORM_DW_ROWS - 1) / CT_CUDA_RMSNORM_DW_ROWS;
        rmsnorm_bwd_dw_part_k<<<dim3((unsigned)((C + 127) / 128), (unsigned)chunks), 128>>>(part, dout, inp, rstd, N, C);
        ct_cuda_launched("rmsnorm_backward (dweight parts)");
        rmsnorm_bwd_dw_sum_k<<<(unsigned)((C + 127) / 128), 128>>>(dweight, part, chunks, C);
        ct_cuda_launched("rmsnorm_backward (dweight)");
    }
}

// ---- RoPE: a thread per (token, head, pair)
__global__ static void rope_k(float *x, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
                              long B, long T, long H, long HS, long ld, float dir) {
    long half = HS / 2, total = B * T * H * half;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total; e += (long)gridDim.x * blockDim.x) {
        long i = e % half, h = (e / half) % H, bt = e / (half * H), t = bt % T, b = bt / T;
        long p = pos ? (long)pos[b * pos_ld + t] : t;
        float *xh = x + bt * ld + h * HS;
        float x0 = xh[2 * i], x1 = xh[2 * i + 1];
        float c = cos_tab[p * half + i], s = dir * sin_tab[p * half + i];
        xh[2 * i] = x0 * c - x1 * s;
        xh[2 * i + 1] = x0 * s + x1 * c;
    }
}

extern "C" void ct_cuda_rope(float *x, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
                             long B, long T, long H, long HS, long ld, float dir) {
    long total = B * T * H * (HS / 2);
    if (total <= 0) return;
    rope_k<<<ct_cuda_blocks(total, 256), 256>>>(x, cos_tab, sin_tab, pos, pos_ld, B, T, H, HS, ld, dir);
    ct_cuda_launched(dir > 0 ? "rope_forward" : "rope_backward");
}

// ---- SwiGLU: out = silu(gate) * up. expf here, the cpu's polynomial exp there (< 1.5 ulp apart).
__device__ static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ static void swiglu_fwd_k(float *out, const float *inp, long N, long F) {
    long total = N * F;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total; e += (long)gridDim.x * blockDim.x) {
        long n = e / F, f = e % F;
        float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
        out[e] = g * sigmoidf_(g) * u;
    }
}

__global__ static void swiglu_bwd_k(float *dinp, const float *dout, const float *inp, long N, long F) {
    long total = N * F;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total; e += (long)gridDim.x * blockDim.x) {
        long n = e / F, f = e % F;
        float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], d = dout[e], s = sigmoidf_(g);
        dinp[n * 2 * F + F + f] = d * g * s;
        dinp[n * 2 * F + f] = d * u * s * (1.0f + g * (1.0f - s));
    }
}

// [gate | up] kept in bf16: the forward narrows h13 (NULL: h13_kept is already the input) and
// computes from the narrowed values, the backward reads them.
__global__ static void swiglu_fwd_bf16_k(uint16_t *out, uint16_t *h13_kept, const float *h13, long N, long F) {
    long total = N * F;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total; e += (long)gridDim.x * blockDim.x) {
        long n = e / F, f = e % F, ig = n * 2 * F + f, iu = ig + F;
        if (h13) h13_kept[ig] = ct_f32_to_bf16(h13[ig]), h13_kept[iu] = ct_f32_to_bf16(h13[iu]);
        float g = ct_bf16_to_f32(h13_kept[ig]), u = ct_bf16_to_f32(h13_kept[iu]);
        out[e] = ct_f32_to_bf16(g * sigmoidf_(g) * u);
    }
}

__global__ static void swiglu_bwd_bf16_k(float *dinp, const float *dout, const uint16_t *inp, long N, long F) {
    long total = N * F;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total; e += (long)gridDim.x * blockDim.x) {
        long n = e / F, f = e % F;
        float g = ct_bf16_to_f32(inp[n * 2 * F + f]), u = ct_bf16_to_f32(inp[n * 2 * F + F + f]), d = dout[e];
        float s = sigmoidf_(g);
        dinp[n * 2 * F + F + f] = d * g * s;
        dinp[n * 2 * F + f] = d * u * s * (1.0f + g * (1.0f - s));
    }
}

extern "C" void ct_cuda_swiglu_forward_bf16(uint16_t *out, uint16_t *h13_kept, const float *h13, long N, long F) {
    if (N * F <= 0) return;
    swiglu_fwd_bf16_k<<<ct_cuda_blocks(N * F, 256), 256>>>(out, h13_kept, h13, N, F);
    ct_cuda_launched("swiglu_forward_bf16");
}
extern "C" void ct_cuda_swiglu_backward_bf16(float *dinp, const float *dout, const uint16_t *h13_kept, long N, long F) {
    if (N * F <= 0) return;
    swiglu_bwd_bf16_k<<<ct_cuda_blocks(N * F, 256), 256>>>(dinp, dout, h13_kept, N, F);
    ct_cuda_launched("swiglu_backward_bf16");
}

extern "C" void ct_cuda_swiglu_forward(float *out, const float *inp, long N, long F) {
    if (N * F <= 0) return;
    swiglu_fwd_k<<<ct_cuda_blocks(N * F, 256), 256>>>(out, inp, N, F);
    ct_cuda_launched("swiglu_forward");
}
extern "C" void ct_cuda_swiglu_backward(float *dinp, const float *dout, const float *inp, long N, long F) {
    if (N * F <= 0) return;
    swiglu_bwd_k<<<ct_cuda_blocks(N * F, 256), 256>>>(dinp, dout, inp, N, F);
    ct_cuda_launched("swiglu_backward");
}
