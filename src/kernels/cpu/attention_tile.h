// The attention's tile products (internal to src/kernels/cpu; attention_band.c and
// attention_backward.c call them): C (M, N) from A (M, K) B (K, N), each element summed over k in
// order in one register chain, on the calling thread, with the step that follows the product done
// on the registers before they are stored.
// A(r, k) = a[r rs_a + k cs_a], read in place (one broadcast per row and k, so any strides
// do); B (K, N) row-major with leading dimension ldb, N a multiple of CT_ATT_PAD (the caller
// pads its packed tiles with zero columns); C (M, N) with leading dimension ldc.
#ifndef CT_CPU_ATTENTION_TILE_H
#define CT_CPU_ATTENTION_TILE_H

#include "kernels/cpu/simd.h"

#define CT_ATT_PAD CT_VL  // N (and so every packed tile's row width) is a multiple of this

typedef enum {
    CT_ATT_STORE,    // C = alpha AB
    CT_ATT_ADD,      // C = C + AB (the chain starts from C)
    CT_ATT_RESCALE,  // C = diag(vec) C + AB (the chain starts from C's rows scaled by vec[row])
    CT_ATT_DS,       // C = alpha C * (AB - vec[column]), elementwise (C holds P: dS from dP)
} ct_att_mode;

void ct_att_mm(ct_att_mode mode, long M, long N, long K, const float *a, long rs_a, long cs_a, const float *b,
               long ldb, float *c, long ldc, float alpha, const float *vec);

#endif
