// One token's RoPE rotation (internal to src/kernels/cpu): shared by ct_rope_forward / backward
// (rope.c) and the fused linear + RoPE kernel (fused.c), so both run the same code and give the
// same bits.
#ifndef CT_CPU_ROPE_ROW_H
#define CT_CPU_ROPE_ROW_H
#include <stdint.h>

#include "core/float_formats.h"

// The nh heads of HS floats at row, each adjacent pair (x0, x1) = (row[2i], row[2i+1]) of a head
// rotated by the token's angle i (cosine cs[i], sine sn[i]; dir -1 rotates back). The build does
// not contract a * b + c into an FMA (-std=c11), so the bits are the expressions' as written,
// however GCC vectorises the loop (it does, with pair shuffles: an S-sized call ran within 7% of
// a hand-written 16-lane version, in cache).
static inline void ct_rope_row(float *row, long nh, long HS, const float *cs, const float *sn, float dir) {
    for (long h = 0; h < nh; h++) {
        float *xh = row + h * HS;  // (HS)
        for (long i = 0; i < HS / 2; i++) {
            float x0 = xh[2 * i], x1 = xh[2 * i + 1];
            float c = cs[i], s = dir * sn[i];
            xh[2 * i] = x0 * c - x1 * s;
            xh[2 * i + 1] = x0 * s + x1 * c;
        }
    }
}

// The same rotation of a token's nh heads read from src and written to dst rounded to bf16 (the
// same expressions, then nearest even).
static inline void ct_rope_row_to_bf16(uint16_t *dst, const float *src, long nh, long HS, const float *cs,
                                       const float *sn) {
    for (long h = 0; h < nh; h++) {
        const float *xh = src + h * HS;  // (HS)
        uint16_t *yh = dst + h * HS;
        for (long i = 0; i < HS / 2; i++) {
            float x0 = xh[2 * i], x1 = xh[2 * i + 1];
            float c = cs[i], s = sn[i];
            yh[2 * i] = ct_f32_to_bf16(x0 * c - x1 * s);
            yh[2 * i + 1] = ct_f32_to_bf16(x0 * s + x1 * c);
        }
    }
}

// One token's row of ct_qkv_rope_to_bf16: x (QKV) fp32, the NH q heads and NKV k heads rotated
// and rounded, the NKV v heads rounded, into y (QKV) bf16.
static inline void ct_qkv_rope_row_to_bf16(uint16_t *y, const float *x, long NH, long NKV, long HS, const float *cs,
                                           const float *sn) {
    const long QK = (NH + NKV) * HS, QKV = QK + NKV * HS;
    ct_rope_row_to_bf16(y, x, NH + NKV, HS, cs, sn);               // q and k heads, adjacent
    for (long d = QK; d < QKV; d++) y[d] = ct_f32_to_bf16(x[d]);  // v
}
#endif
