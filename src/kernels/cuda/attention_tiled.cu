// Causal grouped-query attention in tiles (FlashAttention-2's schedule on the CUDA cores, fp32),
// for head sizes 64 and 128: the contracts of ct_attention_forward / _backward (kernels/kernels.h),
// positions and documents included. attention.cu's one-warp-per-row kernels take every other
// head size.
//
// A block owns a 64-row tile and walks the other side's 64-row tiles through shared memory:
//   forward   block (query tile, head, sequence): S = Q K^T, the online softmax, O += P V;
//   dQ        block (query tile, head, sequence): P again from lse, dS = P (dO V^T - D),
//             dQ += dS K;
//   dK, dV    block (key tile, kv head, sequence), over the heads that share the kv head and the
//             query tiles that can see the keys: dV += P^T dO, dK += dS^T Q.
// Every output row has one owner, so no atomics: the order of addition is fixed, and the results
// are the same from run to run (they agree with the cpu to fp32 rounding). D = rowsum(dO * O) is
// computed where it is used rather than kept in scratch. The 256 threads are a 16 x 16 grid:
// thread (ty, tx) holds rows ty + 16 i and columns tx + 16 j (i, j < 4) of each 64 x 64 product,
// and columns tx + 16 c of its rows' head-sized accumulators; shared rows are padded by one float
// so the columns a warp reads fall in different banks. Products use fmaf explicitly: the build
// turns off contraction (-fmad=false) for the elementwise kernels' rounding, and here fused
// multiply-adds are both faster and the more accurate.
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/common.cuh"

namespace {

constexpr int TILE = 64;      // rows per tile, both sides
constexpr int THREADS = 256;  // 16 x 16
constexpr int R = TILE / 16;  // rows (and columns) of a product each thread holds
constexpr int PT = TILE + 1;  // padded row of a TILE x TILE product in shared memory

struct att {
    long B, Tq, Tk, NH, NKV, ldq, ldk, ldv;
    float scale;
    const int32_t *q_pos, *k_pos, *q_doc, *k_doc;
};

// Rows row0 .. row0 + TILE - 1 of a strided matrix (row r at base + r * ld) into sh (TILE x HS,
// rows HS + 1 apart); rows at or past n read as zeros.
template <int HS>
__device__ inline void load_tile(float *sh, const float *base, long row0, long n, long ld) {
    for (int e = threadIdx.x; e < TILE * HS; e += THREADS) {
        int r = e / HS, d = e % HS;
        sh[r * (HS + 1) + d] = row0 + r < n ? base[(row0 + r) * ld + d] : 0.0f;
    }
}

// What one side of the tile says about visibility: position and document of each row the thread
// holds (rows ty + 16 i or tx + 16 j of the tile starting at row0), and whether it exists.
struct rows_info {
    long pos[R];
    int32_t doc[R];
    bool in[R];
};
__device__ inline rows_info rows_of(long row0, int first, long n, const int32_t *pos, const int32_t *doc, long b) {
    rows_info ri;
#pragma unroll
    for (int i = 0; i < R; i++) {
        long row = row0 + first + 16 * i;
        ri.in[i] = row < n;
        ri.pos[i] = ri.in[i] ? (pos ? (long)pos[row] : row) : 0;
        ri.doc[i] = ri.in[i] && doc ? doc[b * n + row] : 0;
    }
    return ri;
}
__device__ inline bool visible(const rows_info &q, int i, const rows_info &k, int j, bool docs) {
    return q.in[i] && k.in[j] && k.pos[j] <= q.pos[i] && (!docs || k.doc[j] == q.doc[i]);
}

// Keys 0 .. returned - 1 are all a query tile can see when keys carry no positions (key j sits
// at position j): one past the tile's largest query position, at most Tk.
__device__ inline long keys_seen(const att &s, const rows_info &q, long long *sh) {
    if (s.k_pos) return s.Tk;
    if (threadIdx.x == 0) *sh = -1;
    __syncthreads();
    long long mx = -1;
#pragma unroll
    for (int i = 0; i < R; i++)
        if (q.in[i] && q.pos[i] > mx) mx = q.pos[i];
    atomicMax(sh, mx);
    __syncthreads();
    long end = (long)*sh + 1;
    return end < s.Tk ? end : s.Tk;
}

__device__ inline float half_warp_max(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline float half_warp_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// acc[i][j] += sum_d A[ra + 16 i][d] * B[rb + 16 j][d] over two shared tiles (rows HS + 1 apart).
template <int HS>
__device__ inline void tile_dot(float (&acc)[R][R], const float *A, int ra, const float *Bm, int rb) {
    constexpr int P = HS + 1;
#pragma unroll 4
    for (int d = 0; d < HS; d++) {
        float a[R], c[R];
#pragma unroll
        for (int i = 0; i < R; i++) a[i] = A[(ra + 16 * i) * P + d];
#pragma unroll
        for (int j = 0; j < R; j++) c[j] = Bm[(rb + 16 * j) * P + d];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < R; j++) acc[i][j] = fmaf(a[i], c[j], acc[i][j]);
    }
}

// acc[i][c] += sum_k W[ra + 16 i][k] * M[k][tx + 16 c]: a TILE x TILE product in shared memory
// (rows PT apart) times a shared tile (rows HS + 1 apart).
template <int HS>
__device__ inline void tile_mul(float (&acc)[R][HS / 16], const float *W, int ra, const float *M, int tx) {
    constexpr int P = HS + 1, C = HS / 16;
#pragma unroll 4
    for (int kk = 0; kk < TILE; kk++) {
        float w[R], m[C];
#pragma unroll
        for (int i = 0; i < R; i++) w[i] = W[(ra + 16 * i) * PT + kk];
#pragma unroll
        for (int c = 0; c < C; c++) m[c] = M[kk * P + tx + 16 * c];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int c = 0; c < C; c++) acc[i][c] = fmaf(w[i], m[c], acc[i][c]);
    }
}

template <int HS>
constexpr size_t fwd_smem() { return (3 * TILE * (HS + 1) + TILE * PT) * sizeof(float); }
template <int HS>
constexpr size_t dq_smem() { return (4 * TILE * (HS + 1) + TILE * PT) * sizeof(float); }
template <int HS>
constexpr size_t dkv_smem() { return (4 * TILE * (HS + 1) + 2 * TILE * PT + 2 * TILE) * sizeof(float); }

template <int HS>
__global__ void __launch_bounds__(THREADS) fwd_k(float *out, float *lse, const float *q, const float *k,
                                                 const float *v, att s) {
    constexpr int P = HS + 1, C = HS / 16;
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + TILE * P, *Vs = Ks + TILE * P, *Ps = Vs + TILE * P;
    __shared__ long long kmax;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const long i0 = (long)blockIdx.x * TILE, h = blockIdx.y, b = blockIdx.z, kvh = h / (s.NH / s.NKV);
    const bool docs = s.q_doc && s.k_doc;
    const float *kb = k + b * s.Tk * s.ldk + kvh * HS, *vb = v + b * s.Tk * s.ldv + kvh * HS;
    load_tile<HS>(Qs, q + b * s.Tq * s.ldq + h * HS, i0, s.Tq, s.ldq);
    const rows_info qr = rows_of(i0, ty, s.Tq, s.q_pos, docs ? s.q_doc : NULL, b);
    const long jend = keys_seen(s, qr, &kmax);
    float m[R], l[R], acc[R][C];
#pragma unroll
    for (int i = 0; i < R; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < C; c++) acc[i][c] = 0.0f;
    }
    for (long j0 = 0; j0 < jend; j0 += TILE) {
        __syncthreads();  // the last tile's K, V and P are read
        load_tile<HS>(Ks, kb, j0, s.Tk, s.ldk);
        load_tile<HS>(Vs, vb, j0, s.Tk, s.ldv);
        __syncthreads();
        float sc[R][R] = {};
        tile_dot<HS>(sc, Qs, ty, Ks, tx);
        const rows_info kr = rows_of(j0, tx, s.Tk, s.k_pos, docs ? s.k_doc : NULL, b);
#pragma unroll
        for (int i = 0; i < R; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < R; j++) {
                sc[i][j] = visible(qr, i, kr, j, docs) ? sc[i][j] * s.scale : -INFINITY;
                mx = fmaxf(mx, sc[i][j]);
            }
            const float mn = fmaxf(m[i], half_warp_max(mx));
            const float corr = mn == -INFINITY ? 1.0f : expf(m[i] - mn);  // nothing seen yet: acc is 0
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < R; j++) {
                const float p = sc[i][j] == -INFINITY ? 0.0f : expf(sc[i][j] - mn);
                Ps[(ty + 16 * i) * PT + tx + 16 * j] = p;
                rs += p;
            }
            l[i] = l[i] * corr + half_warp_sum(rs);
            m[i] = mn;
#pragma unroll
            for (int c = 0; c < C; c++) acc[i][c] *= corr;
        }
        __syncthreads();
        tile_mul<HS>(acc, Ps, ty, Vs, tx);
    }
#pragma unroll
    for (int i = 0; i < R; i++) {
        if (!qr.in[i]) continue;
        const long row = i0 + ty + 16 * i;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *o = out + ((b * s.Tq + row) * s.NH + h) * HS;
#pragma unroll
        for (int c = 0; c < C; c++) o[tx + 16 * c] = acc[i][c] * inv;
        if (tx == 0) lse[(b * s.NH + h) * s.Tq + row] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
}

template <int HS>
__global__ void __launch_bounds__(THREADS) dq_k(float *dq, const float *dout, const float *out, const float *lse,
                                                const float *q, const float *k, const float *v, att s) {
    constexpr int P = HS + 1, C = HS / 16;
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + TILE * P, *Ks = dOs + TILE * P, *Vs = Ks + TILE * P, *dSs = Vs + TILE * P;
    __shared__ long long kmax;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const long i0 = (long)blockIdx.x * TILE, h = blockIdx.y, b = blockIdx.z, kvh = h / (s.NH / s.NKV);
    const bool docs = s.q_doc && s.k_doc;
    const float *kb = k + b * s.Tk * s.ldk + kvh * HS, *vb = v + b * s.Tk * s.ldv + kvh * HS;
    load_tile<HS>(Qs, q + b * s.Tq * s.ldq + h * HS, i0, s.Tq, s.ldq);
    load_tile<HS>(dOs, dout + (b * s.Tq * s.NH + h) * HS, i0, s.Tq, s.NH * HS);
    __syncthreads();
    const rows_info qr = rows_of(i0, ty, s.Tq, s.q_pos, docs ? s.q_doc : NULL, b);
    const long jend = keys_seen(s, qr, &kmax);
    float L[R], D[R], acc[R][C];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const long row = i0 + ty + 16 * i;
        L[i] = qr.in[i] ? lse[(b * s.NH + h) * s.Tq + row] : -INFINITY;
        const float *o = out + ((b * s.Tq + (qr.in[i] ? row : 0)) * s.NH + h) * HS;
        float d = 0.0f;
#pragma unroll
        for (int c = 0; c < C; c++) d = fmaf(dOs[(ty + 16 * i) * P + tx + 16 * c], qr.in[i] ? o[tx + 16 * c] : 0.0f, d);
        D[i] = half_warp_sum(d);
#pragma unroll
        for (int c = 0; c < C; c++) acc[i][c] = 0.0f;
    }
    for (long j0 = 0; j0 < jend; j0 += TILE) {
        __syncthreads();
        load_tile<HS>(Ks, kb, j0, s.Tk, s.ldk);
        load_tile<HS>(Vs, vb, j0, s.Tk, s.ldv);
        __syncthreads();
        float sc[R][R] = {}, dp[R][R] = {};
        tile_dot<HS>(sc, Qs, ty, Ks, tx);
        tile_dot<HS>(dp, dOs, ty, Vs, tx);
        const rows_info kr = rows_of(j0, tx, s.Tk, s.k_pos, docs ? s.k_doc : NULL, b);
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < R; j++) {
                const bool vis = L[i] != -INFINITY && visible(qr, i, kr, j, docs);
                const float p = vis ? expf(sc[i][j] * s.scale - L[i]) : 0.0f;
                dSs[(ty + 16 * i) * PT + tx + 16 * j] = p * (dp[i][j] - D[i]) * s.scale;
            }
        __syncthreads();
        tile_mul<HS>(acc, dSs, ty, Ks, tx);
    }
#pragma unroll
    for (int i = 0; i < R; i++) {
        if (!qr.in[i]) continue;
        float *g = dq + (b * s.Tq + i0 + ty + 16 * i) * s.ldq + h * HS;
#pragma unroll
        for (int c = 0; c < C; c++) g[tx + 16 * c] += acc[i][c];
    }
}

template <int HS>
__global__ void __launch_bounds__(THREADS) dkv_k(float *dk, float *dv, const float *dout, const float *out,
                                                 const float *lse, const float *q, const float *k, const float *v,
                                                 att s) {
    constexpr int P = HS + 1, C = HS / 16;
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + TILE * P, *Qs = Vs + TILE * P, *dOs = Qs + TILE * P;
    float *Pt = dOs + TILE * P, *dSt = Pt + TILE * PT, *Ls = dSt + TILE * PT, *Ds = Ls + TILE;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const long j0 = (long)blockIdx.x * TILE, kvh = blockIdx.y, b = blockIdx.z, group = s.NH / s.NKV;
    const bool docs = s.q_doc && s.k_doc;
    load_tile<HS>(Ks, k + b * s.Tk * s.ldk + kvh * HS, j0, s.Tk, s.ldk);
    load_tile<HS>(Vs, v + b * s.Tk * s.ldv + kvh * HS, j0, s.Tk, s.ldv);
    // This thread's key rows of the products below (rows ty + 16 i of S^T).
    const rows_info kr = rows_of(j0, ty, s.Tk, s.k_pos, docs ? s.k_doc : NULL, b);
    // Queries before the tile's first key see none of it when neither side carries positions.
    const long ifirst = s.q_pos || s.k_pos ? 0 : (j0 / TILE) * TILE;
    float dka[R][C], dva[R][C];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int c = 0; c < C; c++) dka[i][c] = dva[i][c] = 0.0f;
    for (long h = kvh * group; h < (kvh + 1) * group; h++) {
        const float *qb = q + b * s.Tq * s.ldq + h * HS, *ob = dout + (b * s.Tq * s.NH + h) * HS;
        for (long i0 = ifirst; i0 < s.Tq; i0 += TILE) {
            __syncthreads();  // the last query tile's Q, dO, P^T, dS^T, L and D are read
            load_tile<HS>(Qs, qb, i0, s.Tq, s.ldq);
            load_tile<HS>(dOs, ob, i0, s.Tq, s.NH * HS);
            __syncthreads();
            if (threadIdx.x < TILE) {  // the tile's rows' lse and D = rowsum(dO * O)
                const long row = i0 + threadIdx.x;
                float L = -INFINITY, d = 0.0f;
                if (row < s.Tq) {
                    L = lse[(b * s.NH + h) * s.Tq + row];
                    const float *o = out + ((b * s.Tq + row) * s.NH + h) * HS;
                    for (int e = 0; e < HS; e++) d = fmaf(dOs[threadIdx.x * P + e], o[e], d);
                }
                Ls[threadIdx.x] = L, Ds[threadIdx.x] = d;
            }
            __syncthreads();
            const rows_info qr = rows_of(i0, tx, s.Tq, s.q_pos, docs ? s.q_doc : NULL, b);
            float st[R][R] = {}, dpt[R][R] = {};
            tile_dot<HS>(st, Ks, ty, Qs, tx);   // S^T: key rows, query columns
            tile_dot<HS>(dpt, Vs, ty, dOs, tx);  // dP^T
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int j = 0; j < R; j++) {
                    const float L = Ls[tx + 16 * j];
                    const bool vis = L != -INFINITY && visible(qr, j, kr, i, docs);
                    const float p = vis ? expf(st[i][j] * s.scale - L) : 0.0f;
                    Pt[(ty + 16 * i) * PT + tx + 16 * j] = p;
                    dSt[(ty + 16 * i) * PT + tx + 16 * j] = p * (dpt[i][j] - Ds[tx + 16 * j]) * s.scale;
                }
            __syncthreads();
            tile_mul<HS>(dva, Pt, ty, dOs, tx);
            tile_mul<HS>(dka, dSt, ty, Qs, tx);
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++) {
        if (!kr.in[i]) continue;
        const long row = b * s.Tk + j0 + ty + 16 * i;
#pragma unroll
        for (int c = 0; c < C; c++) {
            dk[row * s.ldk + kvh * HS + tx + 16 * c] += dka[i][c];
            dv[row * s.ldv + kvh * HS + tx + 16 * c] += dva[i][c];
        }
    }
}

// Lets a kernel take more than the default 48 KB of dynamic shared memory (once per kernel).
template <typename K>
void allow_smem(K kernel, size_t bytes, bool *done) {
    if (*done) return;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    ct_cuda_launched("cudaFuncSetAttribute (attention shared memory)");  // its error is the last error
    *done = true;
}

template <int HS>
void forward(float *out, float *lse, const float *q, const float *k, const float *v, const att &s) {
    static bool ready;
    allow_smem(fwd_k<HS>, fwd_smem<HS>(), &ready);
    dim3 grid((unsigned)((s.Tq + TILE - 1) / TILE), (unsigned)s.NH, (unsigned)s.B);
    fwd_k<HS><<<grid, THREADS, fwd_smem<HS>()>>>(out, lse, q, k, v, s);
    ct_cuda_launched("attention_forward (tiled)");
}

template <int HS>
void backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q,
              const float *k, const float *v, const att &s) {
    static bool ready_dq, ready_dkv;
    allow_smem(dq_k<HS>, dq_smem<HS>(), &ready_dq);
    allow_smem(dkv_k<HS>, dkv_smem<HS>(), &ready_dkv);
    dim3 gq((unsigned)((s.Tq + TILE - 1) / TILE), (unsigned)s.NH, (unsigned)s.B);
    dq_k<HS><<<gq, THREADS, dq_smem<HS>()>>>(dq, dout, out, lse, q, k, v, s);
    ct_cuda_launched("attention_backward dq (tiled)");
    dim3 gk((unsigned)((s.Tk + TILE - 1) / TILE), (unsigned)s.NKV, (unsigned)s.B);
    dkv_k<HS><<<gk, THREADS, dkv_smem<HS>()>>>(dk, dv, dout, out, lse, q, k, v, s);
    ct_cuda_launched("attention_backward dk dv (tiled)");
}

}  // namespace

extern "C" bool ct_cuda_attention_tiled_forward(float *out, float *lse, const float *q, long ldq, const float *k,
                                                long ldk, const float *v, long ldv, const int32_t *q_pos,
                                                const int32_t *k_pos, const int32_t *q_doc, const int32_t *k_doc,
                                                long B, long Tq, long Tk, long NH, long NKV, long HS) {
    if (HS != 64 && HS != 128) return false;
    if (B <= 0 || Tq <= 0 || NH <= 0) return true;
    att s = {B, Tq, Tk, NH, NKV, ldq, ldk, ldv, 1.0f / sqrtf((float)HS), q_pos, k_pos, q_doc, k_doc};
    if (HS == 64) forward<64>(out, lse, q, k, v, s);
    else forward<128>(out, lse, q, k, v, s);
    return true;
}

extern "C" bool ct_cuda_attention_tiled_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                                 const float *lse, const float *q, long ldq, const float *k, long ldk,
                                                 const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                                 const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk,
                                                 long NH, long NKV, long HS) {
    if (HS != 64 && HS != 128) return false;
    if (B <= 0 || Tq <= 0 || Tk <= 0 || NH <= 0) return true;
    att s = {B, Tq, Tk, NH, NKV, ldq, ldk, ldv, 1.0f / sqrtf((float)HS), q_pos, k_pos, q_doc, k_doc};
    if (HS == 64) backward<64>(dq, dk, dv, dout, out, lse, q, k, v, s);
    else backward<128>(dq, dk, dv, dout, out, lse, q, k, v, s);
    return true;
}
