// ct_gemm's internals shared by its files (internal to src/kernels/cpu): the register tile and
// cache blocks, a product's arguments, and the packing of its operands (gemm_pack.c) that the
// blocked loops (gemm.c) call once per block.
#ifndef CT_CPU_GEMM_INTERNAL_H
#define CT_CPU_GEMM_INTERNAL_H
#include "kernels/cpu/simd.h"
#include "kernels/kernels.h"

static inline long min_l(long a, long b) { return a < b ? a : b; }

// MR x NR register tile: MR rows of C, NR = 2 vectors wide; every k: 2 vector loads of B, MR
// broadcasts of A, 2 MR FMAs into 2 MR accumulators.
#if CT_VL == 16
#define CT_MR 12
#elif CT_VL == 8
#define CT_MR 6
#else
#define CT_MR 4
#endif
#define CT_NR (2 * CT_VL)

// Cache blocking: a B sliver (KC x NR) stays in L1 during a micro-kernel, the A block (MC x KC)
// in L2, the B panel (KC x NC) in L3.
#define CT_KC 256
#define CT_MC (CT_MR * (CT_MR == 6 ? 20 : 10))  // 120 (AVX2), 120 (AVX-512), 40 (portable)
#define CT_NC 2048

// One product, C = alpha op(A) op(B) + beta C, row-major (op: transposed when ta / tb).
typedef struct {
    int ta, tb;
    long M, N, K;
    float alpha, beta;
    const float *A, *B;
    long lda, ldb, ldc;
    float *C;
    const ct_gemm_row_hooks *hooks;  // NULL, or run around each block of rows (one-pass products only)
} gemm_args;

// op(B)[k0 : k0+kc, n0 : n0+nc] into NR-wide slivers, sliver s at dst + s kc NR laid out
// [k][NR], columns past nc zero.
void ct_gemm_pack_b(float *restrict dst, const gemm_args *g, long k0, long kc, long n0, long nc);

// op(A)[m0 : m0+mc, k0 : k0+kc] into MR-high slivers, sliver i at dst + i kc MR laid out
// [k][MR], rows past mc zero. dst needs CT_APACK_SLACK floats after the block (see gemm_pack.c).
#define CT_APACK_SLACK 16
void ct_gemm_pack_a(float *restrict dst, const gemm_args *g, long m0, long mc, long k0, long kc);
#endif
