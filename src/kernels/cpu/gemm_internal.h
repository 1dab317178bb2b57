// ct_gemm's internals shared by its files (internal to src/kernels/cpu): the register tile and
// cache blocks, a product's arguments, and the packing of its operands (gemm_pack.c) that the
// blocked loops (gemm.c) call once per block.
#ifndef CT_CPU_GEMM_INTERNAL_H
#define CT_CPU_GEMM_INTERNAL_H
#include "core/mathutil.h"
#include "kernels/cpu/simd.h"
#include "kernels/kernels.h"


// MR x NR register tile: MR rows of C, NR = NV vectors wide; every k: NV vector loads of B, MR
// broadcasts of A, MR NV FMAs into MR NV accumulators.
//
// AVX-512: 6 x 64 (24 accumulators, 4 loads of B and 6 broadcasts per 24 FMAs) rather than 12 x 32
// (2 + 12 per 24). On a Xeon with AMX whose FMA peak read about half its usual -- a host sharing
// the core -- the kernel with fewer loads per FMA ran 7-12% faster with A
// streamed from L2 (medians of 20-30 rounds against an FMA-only loop: 12 x 32 0.71-0.85 of it,
// 6 x 64 0.77-0.92, 8 x 48 about the same; 14 x 32 in between), and in ct_gemm, with NC 1024
// (below), products of a bench S step ran 1-11% faster (median time ratios of 21 interleaved
// rounds, two threads; the loss's logits, 1024 x 8192 x 256, 0.94-1.03). 8 x 48 would leave a
// partial tile on every N = 256. A tile's shape never changes a result: every element is summed in
// the same order whatever tile it falls in.
#if CT_VL == 16
#define CT_MR 6
#define CT_NV 4
#elif CT_VL == 8
#define CT_MR 6
#define CT_NV 2
#else
#define CT_MR 4
#define CT_NV 2
#endif
#define CT_NR (CT_NV * CT_VL)

// Cache blocking: a B sliver (KC x NR) is read by every A sliver of a block (from L1 on AVX2; the
// AVX-512 sliver, 64 KiB, from L1 and L2), the A block (MC x KC) in L2, the B panel (KC x NC, 1 MiB)
// in L2 where it is 2 MiB a core (Intel) and L3 elsewhere. NC is 1024, not 2048: on a
// Xeon with AMX a panel of 2 MiB came from L3, and 1024 ran the loss's logits and 2048^3 3-5%
// faster (median time ratios, 21 interleaved rounds, one and two threads; other S products within
// 2%). Not measured on AMD since (Zen 4: L2 1 MiB a core).
// (Each can be set with -D for bench/gemm_variants, which builds ct_gemm several ways side by side.)
#ifndef CT_KC
#define CT_KC 256
#endif
#ifndef CT_MC
#define CT_MC (CT_MR * (CT_MR == 6 ? 20 : 10))  // 120 (AVX2, AVX-512), 40 (portable)
#endif
#ifndef CT_NC
#define CT_NC 1024
#endif
#ifndef CT_BPACK_FLOATS
#define CT_BPACK_FLOATS ((long)CT_KC * CT_NC)  // a thread's B buffer: one KC x NC panel
#endif

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

// A thread's packing buffers (gemm_buffers.c): made on its first call, freed when it ends.
typedef struct {
    float *apack;  // (MC, KC) + CT_APACK_SLACK
    float *bpack;  // CT_BPACK_FLOATS: one KC x NC panel
} ct_gemm_buffers;
ct_gemm_buffers *ct_gemm_thread_buffers(void);
#endif
