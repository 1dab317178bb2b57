// Causal grouped-query attention on the GPU (contracts: ct_attention_forward / _backward in
// kernels/kernels.h; with document ids q_doc / k_doc (B, T) a key is visible only within its
// document as well). Head sizes 64 and 128 go to the tiled kernels (attention_tiled.cu); these
// take every other head size up to CT_CUDA_ATT_MAX_HS: one warp per query row (b, h, i), the head
// split over the lanes (lane l holds elements l, l+32, ... of q, o and dq), keys walked one at a
// time with an online softmax (FlashAttention's recurrence without tiles in shared memory).
// Backward recomputes each probability from lse: p = exp(s - lse), dS = p (dP - D) with
// D = rowsum(dO * O); dQ stays in registers, dK and dV are added with atomics (their order of
// addition is not fixed: results agree with the cpu to fp32 rounding, not bit for bit).
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/common.cuh"

#define PER_LANE (CT_CUDA_ATT_MAX_HS / 32)

__device__ static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

typedef struct {
    long B, Tq, Tk, NH, NKV, HS, ldq, ldk, ldv;
} att_shape;

// The query row this warp owns, or false when the warp is past the last row.
__device__ static inline bool row_of(const att_shape &s, long *b, long *h, long *i) {
    long w = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5;
    if (w >= s.B * s.NH * s.Tq) return false;
    *i = w % s.Tq;
    *h = (w / s.Tq) % s.NH;
    *b = w / (s.Tq * s.NH);
    return true;
}

__global__ static void att_fwd_k(float *out, float *lse, const float *q, const float *k, const float *v,
                                 const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc,
                                 const int32_t *k_doc, att_shape s, float scale) {
    long b, h, i;
    if (!row_of(s, &b, &h, &i)) return;
    int lane = threadIdx.x & 31;
    long kvh = h / (s.NH / s.NKV), qp = q_pos ? (long)q_pos[i] : i;
    const int32_t *kd = q_doc && k_doc ? k_doc + b * s.Tk : NULL;  // this sequence's key documents
    const int32_t qd = kd ? q_doc[b * s.Tq + i] : 0;
    const float *qr = q + (b * s.Tq + i) * s.ldq + h * s.HS;
    float qv[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int r = 0; r < PER_LANE; r++) {
        long d = lane + 32 * r;
        qv[r] = d < s.HS ? qr[d] : 0.0f;
        acc[r] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    long jend = k_pos ? s.Tk : (qp + 1 < s.Tk ? qp + 1 : s.Tk);  // keys 0..Tk-1: key j visible iff j <= qp
    for (long j = 0; j < jend; j++) {
        if (k_pos && (long)k_pos[j] > qp) continue;  // the same j for the whole warp: no divergence
        if (kd && kd[j] != qd) continue;             // another document
        const float *kr = k + (b * s.Tk + j) * s.ldk + kvh * s.HS, *vr = v + (b * s.Tk + j) * s.ldv + kvh * s.HS;
        float dot = 0.0f;
#pragma unroll
        for (int r = 0; r < PER_LANE; r++) {
            long d = lane + 32 * r;
            if (d < s.HS) dot += qv[r] * kr[d];
        }
        float sc = warp_sum(dot) * scale;
        float mn = fmaxf(m, sc), corr = expf(m - mn), p = expf(sc - mn);  // m = -inf: corr = 0
        l = l * corr + p;
#pragma unroll
        for (int r = 0; r < PER_LANE; r++) {
            long d = lane + 32 * r;
            if (d < s.HS) acc[r] = acc[r] * corr + p * vr[d];
        }
        m = mn;
    }
    float *o = out + ((b * s.Tq + i) * s.NH + h) * s.HS;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int r = 0; r < PER_LANE; r++) {
        long d = lane + 32 * r;
        if (d < s.HS) o[d] = acc[r] * inv;
    }
    if (lane == 0) lse[(b * s.NH + h) * s.Tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

__global__ static void att_bwd_k(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                 const float *lse, const float *q, const float *k, const float *v,
                                 const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc,
                                 const int32_t *k_doc, att_shape s, float scale) {
    long b, h, i;
    if (!row_of(s, &b, &h, &i)) return;
    float L = lse[(b * s.NH + h) * s.Tq + i];
    if (L == -INFINITY) return;  // the row saw no key: no gradient
    int lane = threadIdx.x & 31;
    long kvh = h / (s.NH / s.NKV), qp = q_pos ? (long)q_pos[i] : i;
    const int32_t *kd = q_doc && k_doc ? k_doc + b * s.Tk : NULL;  // this sequence's key documents
    const int32_t qd = kd ? q_doc[b * s.Tq + i] : 0;
    const float *qr = q + (b * s.Tq + i) * s.ldq + h * s.HS;
    const float *dor = dout + ((b * s.Tq + i) * s.NH + h) * s.HS, *orow = out + ((b * s.Tq + i) * s.NH + h) * s.HS;
    float qv[PER_LANE], dov[PER_LANE], dqv[PER_LANE], D = 0.0f;
#pragma unroll
    for (int r = 0; r < PER_LANE; r++) {
        long d = lane + 32 * r;
        qv[r] = d < s.HS ? qr[d] : 0.0f;
        dov[r] = d < s.HS ? dor[d] : 0.0f;
        dqv[r] = 0.0f;
        if (d < s.HS) D += dov[r] * orow[d];
    }
    D = warp_sum(D);
    long jend = k_pos ? s.Tk : (qp + 1 < s.Tk ? qp + 1 : s.Tk);
    for (long j = 0; j < jend; j++) {
        if (k_pos && (long)k_pos[j] > qp) continue;
        if (kd && kd[j] != qd) continue;
        long krow = (b * s.Tk + j) * s.ldk + kvh * s.HS, vrow = (b * s.Tk + j) * s.ldv + kvh * s.HS;
        float dot = 0.0f, dp = 0.0f;
#pragma unroll
        for (int r = 0; r < PER_LANE; r++) {
            long d = lane + 32 * r;
            if (d < s.HS) {
                dot += qv[r] * k[krow + d];
                dp += dov[r] * v[vrow + d];
            }
        }
        float p = expf(warp_sum(dot) * scale - L);
        float ds = p * (warp_sum(dp) - D) * scale;
#pragma unroll
        for (int r = 0; r < PER_LANE; r++) {
            long d = lane + 32 * r;
            if (d < s.HS) {
                dqv[r] += ds * k[krow + d];
                atomicAdd(dk + krow + d, ds * qv[r]);
                atomicAdd(dv + vrow + d, p * dov[r]);
            }
        }
    }
    float *dqr = dq + (b * s.Tq + i) * s.ldq + h * s.HS;
#pragma unroll
    for (int r = 0; r < PER_LANE; r++) {
        long d = lane + 32 * r;
        if (d < s.HS) dqr[d] += dqv[r];
    }
}

static unsigned warp_blocks(long rows) { return (unsigned)((rows * 32 + 127) / 128); }

extern "C" void ct_cuda_attention_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk,
                                          const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                          const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS) {
    if (ct_cuda_attention_tiled_forward(out, lse, q, ldq, k, ldk, v, ldv, q_pos, k_pos, q_doc, k_doc, B, Tq, Tk, NH,
                                        NKV, HS))
        return;
    att_shape s = {B, Tq, Tk, NH, NKV, HS, ldq, ldk, ldv};
    long rows = B * NH * Tq;
    if (rows <= 0) return;
    att_fwd_k<<<warp_blocks(rows), 128>>>(out, lse, q, k, v, q_pos, k_pos, q_doc, k_doc, s, 1.0f / sqrtf((float)HS));
    ct_cuda_launched("attention_forward");
}

extern "C" void ct_cuda_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                           const float *lse, const float *q, long ldq, const float *k, long ldk,
                                           const float *v, long ldv, const int32_t *q_pos, const int32_t *k_pos,
                                           const int32_t *q_doc, const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV, long HS) {
    if (ct_cuda_attention_tiled_backward(dq, dk, dv, dout, out, lse, q, ldq, k, ldk, v, ldv, q_pos, k_pos, q_doc, k_doc,
                                         B, Tq, Tk, NH, NKV, HS))
        return;
    att_shape s = {B, Tq, Tk, NH, NKV, HS, ldq, ldk, ldv};
    long rows = B * NH * Tq;
    if (rows <= 0) return;
    att_bwd_k<<<warp_blocks(rows), 128>>>(dq, dk, dv, dout, out, lse, q, k, v, q_pos, k_pos, q_doc, k_doc, s,
                                          1.0f / sqrtf((float)HS));
    ct_cuda_launched("attention_backward");
}

// One thread per (b, t, h) row: the cpu's merge (kernels/cpu/attention_merge.c), in double as it is.
__global__ static void att_merge_k(float *o, float *l, const float *o_part, const float *l_part, long B, long C,
                                   long NH, long HS) {
    long r = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (r >= B * C * NH) return;
    long h = r % NH, t = (r / NH) % C, b = r / (NH * C);
    float *L = l + (b * NH + h) * C + t;
    const float Lp = l_part[(b * NH + h) * C + t];
    float *O = o + r * HS;  // (b, t, h) rows are r-th in (B, C, NH, HS)
    const float *Op = o_part + r * HS;
    if (Lp == -INFINITY) return;
    if (*L == -INFINITY) {
        *L = Lp;
        for (long d = 0; d < HS; d++) O[d] = Op[d];
        return;
    }
    const double m = *L > Lp ? *L : Lp;
    const double wa = exp((double)*L - m), wb = exp((double)Lp - m), s = wa + wb;
    const double ca = wa / s, cb = wb / s;
    for (long d = 0; d < HS; d++) O[d] = (float)(ca * O[d] + cb * Op[d]);
    *L = (float)(m + log(s));
}

extern "C" void ct_cuda_attention_merge(float *o, float *l, const float *o_part, const float *l_part, long B, long C,
                                        long NH, long HS) {
    long rows = B * C * NH;
    if (rows <= 0) return;
    att_merge_k<<<(unsigned)((rows + 127) / 128), 128>>>(o, l, o_part, l_part, B, C, NH, HS);
    ct_cuda_launched("attention_merge");
}
