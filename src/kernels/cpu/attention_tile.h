// The attention's tile products (internal to src/kernels/cpu; attention_band.c and
// attention_backward.c call them): C (M, N) from A (M, K) B (K, N), each element summed over k in
// order in one register chain, on the calling thread, with the step that follows the product done
// on the registers before they are stored.
// A(r, k) = a[r rs_a + k cs_a], read in place (one broadcast per row and k, so any strides
// do); B (K, N) row-major with leading dimension ldb, N a multiple of CT_ATT_PAD (the caller
// pads its packed tiles with zero columns); C (M, N) with leading dimension ldc.
#ifndef CT_CPU_ATTENTION_TILE_H
#define CT_CPU_ATTENTION_TILE_H

#include <stdint.h>

#include "kernels/cpu/simd.h"

#define CT_ATT_PAD CT_VL  // N (and so every packed tile's row width) is a multiple of this

typedef enum {
    CT_ATT_STORE,    // C = alpha AB
    CT_ATT_ADD,      // C = C + AB (the chain starts from C)
    CT_ATT_RESCALE,  // C = diag(vec) C + AB (the chain starts from C's rows scaled by vec[row])
    CT_ATT_DS,       // C = alpha C * (AB - vec[column]), elementwise (C holds P: dS from dP)
} ct_att_mode;

// A product's register chain for the vector of C at cp: where it starts (s: the row's scale
// for CT_ATT_RESCALE) and how it is stored (va: alpha splat, vp: the columns' vector for
// CT_ATT_DS). Shared by the fp32 products and the bf16 ones (attention_bf16_tile.c).
static inline __attribute__((always_inline)) vf ct_att_chain_start(const ct_att_mode mode, const float *cp, float s) {
    if (mode == CT_ATT_ADD) return VLOAD(cp);
    if (mode == CT_ATT_RESCALE) return VMUL(VLOAD(cp), VSET1(s));
    return VZERO();
}
static inline __attribute__((always_inline)) void ct_att_chain_end(const ct_att_mode mode, float *cp, vf acc, vf va,
                                                                   const float *vp) {
    if (mode == CT_ATT_STORE)
        VSTORE(cp, VMUL(acc, va));
    else if (mode == CT_ATT_DS)
        VSTORE(cp, VMUL(VMUL(va, VLOAD(cp)), VSUB(acc, VLOAD(vp))));
    else
        VSTORE(cp, acc);
}

void ct_att_mm(ct_att_mode mode, long M, long N, long K, const float *a, long rs_a, long cs_a, const float *b,
               long ldb, float *c, long ldc, float alpha, const float *vec);


// The bf16 products (attention_bf16_tile.c): the same C and modes from operands in bf16, taken
// in pairs along the contraction -- a 32-bit word holds elements k (low half) and k + 1 (high
// half), the layout of VDPBF16PS and AMX -- with Kp pairs, every product exact and summed in
// fp32 in one register chain. A(r, pair p) = a[r rs_a + p cs_a] (words); B (Kp, N) words
// row-major with leading dimension ldb (in words), N a multiple of CT_ATT_PAD.
void ct_att_mm_bf16(ct_att_mode mode, long M, long N, long Kp, const uint32_t *a, long rs_a, long cs_a,
                    const uint32_t *b, long ldb, float *c, long ldc, float alpha, const float *vec);

#endif
