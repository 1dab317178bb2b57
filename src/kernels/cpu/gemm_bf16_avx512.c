// ctitan's own bf16 gemm for AVX-512 BF16 (VDPBF16PS) and AMX: the loops of the fp32 sgemm in
// gemm.c (packed A and B slivers, cache blocks MC / KC / NC, an MR x NR register tile) with k
// taken in pairs, around one of two micro-kernels: VDPBF16PS (here), or AMX tiles where the CPU
// has them and Linux grants them (gemm_bf16_amx.c: 32 x 32 of C per call, its A slivers packed
// by pack_a_amx, K blocks padded to 32 with zeros, blocks AMX_KC / AMX_MC / AMX_NC). Contract in
// gemm_bf16.h (ct_gemm_bf16_avx512); ct_gemm_bf16 routes here on CPUs with AVX-512 BF16 or AMX,
// instead of oneDNN's matmul primitive, whose every execution allocates (oneDNN 2.6 builds its
// argument map on the heap).
//
//   (AMX, where it fits: every A block of the thread's rows packed first, once)
//   for jc in N step NC:                    B panel (K block, NC) packed into NR-wide slivers,
//     for pc in K step KC:                    shared by the team (each packs a share)
//       for ic in this thread's rows step MC: A block (MC, KC) packed into MR-high slivers
//         for each NR sliver, each MR sliver: C[MR, NR] (+)= alpha A_sliver B_sliver
//
// VNNI layout: VDPBF16PS adds a[2i] b[2i] + a[2i+1] b[2i+1] into fp32 lane i, so both packed
// operands hold k in pairs. A B sliver holds, per k pair, 2 NR bf16: (b[k][j], b[k+1][j]) for
// j = 0..NR-1, two zmm; an A sliver holds, per k pair, MR 32-bit words (a[m][k], a[m][k+1]),
// each broadcast to a zmm. An odd K block ends with a pair padded with zeros (in both operands).
// Transposed operands (B^T, and A not transposed) are packed 16 rows x 16 pairs at a time,
// transposed as 32-bit words in registers.
//
// Micro-kernel: 12 rows x 32 columns, 24 zmm accumulators; each k pair: 2 loads of B, 12
// broadcasts of A, 24 VDPBF16PS (32 multiply-adds each). alpha and beta are applied at the
// store (beta == 0 never reads C); partial tiles use masked loads and stores of C. K blocks are
// long (2048): the tile of C is read and written once per K block, and measured faster than
// blocks whose B sliver fits L1 (6x64 and 8x48 tiles measured no faster on Zen 4).
//
// Numerics: products of bf16 values are exact in fp32; VDPBF16PS sums them in fp32 (with its
// own rounding, denormal inputs and outputs flushed to zero), K block by K block into C.
// Results do not depend on the thread count (K is never split between threads; each element's
// K blocks are the same whichever rows a thread has).
//
// Two variants of the loops: a B packed beforehand (ct_gemm_bf16_avx512_pack_b: every panel in
// the order the loops take them, after a header naming the shape and kernel) is read in place of
// the shared panel, with no packing and no barriers; and an epilogue (one panel, one K block):
// each A block's rows of C go to a buffer of the thread's instead of C and are handed to the
// caller's step at once, from the thread's cache.
//
// Threads: outside an OpenMP parallel region a large enough product is split by rows of C (on
// the MR grid) between the team, which packs each B panel once, into the calling thread's
// buffer, each thread a share of its slivers, between two barriers; A is packed once in all.
// Inside a parallel region it runs on the calling thread alone. Buffers: allocated once per
// thread, on its first call, at fixed sizes (an A block and a B panel: 4.6 MiB), and with AMX
// the whole-A buffer (up to AMX_WHOLE_A_BYTES), grown to the largest A a call has packed whole:
// a steady state allocates nothing.
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mathutil.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_bf16_amx.h"
#include "kernels/cpu/transpose_words.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

#ifndef BK_MR
#define BK_MR 12
#endif
#ifndef BK_TA_PAIRS
#define BK_TA_PAIRS 16
#endif
#ifndef BK_NV
#define BK_NV 2  // zmm (16 columns) per row of the tile
#endif
#define BK_PRAGMA(x) _Pragma(#x)
#define BK_UNROLL_P(n) BK_PRAGMA(GCC unroll n)
#ifndef BK_UNROLL
#define BK_UNROLL 2
#endif
#ifndef BK_PF
#define BK_PF 512
#endif
#define BK_NR (16 * BK_NV)
// The AMX kernel's blocks: 32-row A slivers, K blocks of 1024 (a 32 x 1024 A sliver, 64 KiB,
// and a 1024 x 32 B sliver stream from L2 once per 32 x 32 tile of C), B panels of 768 columns
// (1.5 MiB: they stay in the 2 MiB L2 of a core with AMX while the rows go by; on a 2-core Xeon
// with AMX, bench S and M in bf16 ran 4-9% slower with panels of 256 or 512 columns, as fast
// with 1024). A thread's A blocks are packed once for all the panels where they fit
// AMX_WHOLE_A_BYTES (the model's linear layers and the output projection's forward), and once
// per panel otherwise (the output projection's backward, A being the dlogits).
#define AMX_MR 32
#ifndef AMX_KC
#define AMX_KC 1024
#endif
#ifndef AMX_MC
#define AMX_MC 32
#endif
#ifndef AMX_NC
#define AMX_NC 768
#endif
// B panels of AMX_NC columns are sized for whole K blocks; a shorter K block (the model's K of
// 256-768) widens its panel to the same bytes, so fewer panels pass over the rows of A.
static inline long amx_panel_cols(long kc) {
    long cols = (long)AMX_NC * AMX_KC / kc / BK_NR * BK_NR;
    return cols > AMX_NC ? cols : AMX_NC;
}
#ifndef AMX_WHOLE_A_BYTES
#define AMX_WHOLE_A_BYTES (8L << 20)
#endif
#ifndef BK_KC
#define BK_KC 2048  // k values per K block (1024 pairs)
#endif
#ifndef BK_MC
#define BK_MC 144   // rows per A block (12 slivers): 144 KiB in L2
#endif
#ifndef BK_NC
#define BK_NC 1024  // columns per B panel
#endif

static inline __mmask16 lane_mask(long n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }
// the first n of 32 bf16 lanes (n clamped to [0, 32])
static inline __mmask32 lane_mask32(long n) {
    return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

typedef struct {
    int ta, tb;
    long M, N, K;
    float alpha, beta;
    const uint16_t *A, *B;
    long lda, ldb, ldc;
    float *C;
    int amx;  // the AMX tile kernel (gemm_bf16_amx.c) instead of the VDPBF16PS one
    const ct_gemm_bf16_epilogue *epi;  // NULL, or each block of rows goes to it, not to C
    const uint16_t *bpacked;           // op(B) packed whole beforehand (ct_gemm_bf16_avx512_pack_b), or NULL
} bk_args;

// ---------------------------------------------------------------- micro-kernel
// C[0:mr, 0:nr] = alpha sum_p A_p B_p + beta C (beta 0: C not read); nr <= NR, the columns past
// it masked off.
static inline __attribute__((always_inline)) void kern(const int mr, long kp, const uint32_t *restrict a,
                                                       const uint16_t *restrict b, float *restrict c, long ldc,
                                                       float alpha, float beta, long nr) {
    __m512 acc[BK_MR][BK_NV];
    __mmask16 m[BK_NV];
#pragma GCC unroll 4
    for (int v = 0; v < BK_NV; v++) m[v] = lane_mask(nr - 16 * v);
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
#pragma GCC unroll 4
        for (int v = 0; v < BK_NV; v++) {
            acc[r][v] = _mm512_setzero_ps();
            __builtin_prefetch(c + r * ldc + 16 * v, 1, 3);  // the tile of C is written at the end: fetch it now
        }
    }
BK_UNROLL_P(BK_UNROLL)
    for (long p = 0; p < kp; p++) {
        __m512bh bv[BK_NV];
#pragma GCC unroll 4
        for (int v = 0; v < BK_NV; v++) bv[v] = (__m512bh)_mm512_load_si512((const void *)(b + 32 * v));
        if (BK_PF) __builtin_prefetch(b + BK_PF, 0, 3);
        if (BK_PF && BK_NV > 2) __builtin_prefetch(b + BK_PF + 64, 0, 3);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r]);
#pragma GCC unroll 4
            for (int v = 0; v < BK_NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]);
        }
        a += BK_MR;
        b += 2 * BK_NR;
    }
    if (alpha != 1.0f) {
        __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
            for (int v = 0; v < BK_NV; v++) acc[r][v] = _mm512_mul_ps(acc[r][v], va);
    }
    if (beta == 0.0f) {
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
            for (int v = 0; v < BK_NV; v++) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, m[v], acc[r][v]);
    } else if (beta == 1.0f) {
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
            for (int v = 0; v < BK_NV; v++) {
                float *cv = c + r * ldc + 16 * v;
                _mm512_mask_storeu_ps(cv, m[v], _mm512_add_ps(_mm512_maskz_loadu_ps(m[v], cv), acc[r][v]));
            }
    } else {
        __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
            for (int v = 0; v < BK_NV; v++) {
                float *cv = c + r * ldc + 16 * v;
                _mm512_mask_storeu_ps(cv, m[v], _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[v], cv), acc[r][v]));
            }
    }
}

static void ukernel(long mr, long kp, const uint32_t *a, const uint16_t *b, float *c, long ldc, float alpha,
                    float beta, long nr) {
    switch (mr) {
#define BK_CASE(n) \
    case n: kern(n, kp, a, b, c, ldc, alpha, beta, nr); break;
        BK_CASE(1)
        BK_CASE(2)
        BK_CASE(3)
        BK_CASE(4)
        BK_CASE(5)
        BK_CASE(6)
#if BK_MR > 6
        BK_CASE(7)
        BK_CASE(8)
#endif
#if BK_MR > 8
        BK_CASE(9)
        BK_CASE(10)
        BK_CASE(11)
        BK_CASE(12)
#endif
#undef BK_CASE
    }
}

// ---------------------------------------------------------------- packing
// op(B)[k0 : k0+kc, n0 : n0+nc] into NR-wide slivers, sliver s at dst + s kps 2NR (kps >= kp,
// the k pairs, (kc + 1) / 2), laid out [pair][2 NR] interleaved; columns past nc, the odd pad and
// the pairs from kp to kps zero.
static void pack_b(uint16_t *restrict dst, const bk_args *g, long k0, long kc, long n0, long nc, long kps) {
    const long ldb = g->ldb, kp = (kc + 1) / 2;
    for (long s = 0; s < (nc + BK_NR - 1) / BK_NR && kps > kp; s++)
        memset(dst + s * kps * 2 * BK_NR + kp * 2 * BK_NR, 0, sizeof(uint16_t) * (kps - kp) * 2 * BK_NR);
    if (!g->tb) {  // op(B)[k][n] = B[k ldb + n]: rows k, k+1 contiguous, widened and merged
        for (long p = 0; p < kp; p++) {
            const uint16_t *r0 = g->B + (k0 + 2 * p) * ldb + n0, *r1 = r0 + ldb;
            int two = 2 * p + 1 < kc;
            if (p + 4 < kp)
                for (long j = 0; j < nc; j += 32) __builtin_prefetch(r0 + 8 * ldb + j), __builtin_prefetch(r1 + 8 * ldb + j);
            for (long j = 0; j < nc; j += 16) {
                __mmask16 m = lane_mask(nc - j);
                __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + j));
                __m512i hi = two ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1 + j)) : _mm512_setzero_si512();
                long s = j / BK_NR, h = j % BK_NR;
                _mm512_store_si512((void *)(dst + s * kps * 2 * BK_NR + p * 2 * BK_NR + 2 * h),
                                   _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
            for (long j = (nc + 15) / 16 * 16; j % BK_NR; j += 16)  // the last sliver's columns past nc
                _mm512_store_si512((void *)(dst + (j / BK_NR) * kps * 2 * BK_NR + p * 2 * BK_NR + 2 * (j % BK_NR)),
                                   _mm512_setzero_si512());
        }
        return;
    }
    // op(B)[k][n] = B[n ldb + k]: the pair (k, k+1) of column n is one word of row n of B;
    // 16 rows x 16 words at a time, transposed in registers
    for (long n = 0; n < nc; n += BK_NR) {
        uint32_t *d = (uint32_t *)(dst + n * kps * 2);
        for (long h = 0; h < BK_NR; h += 16) {
            const uint16_t *src = g->B + (n0 + n + h) * ldb + k0;
            long rows = ct_min_l(16, nc - n - h);
            for (long p0 = 0; p0 < kp; p0 += 16) {
                __m512i v[16];
                ct_load_tr16_words(v, src + 2 * p0, ldb, rows, kc - 2 * p0);
                long q1 = ct_min_l(16, kp - p0);
                for (long q = 0; q < q1; q++) _mm512_store_si512((void *)(d + (p0 + q) * BK_NR + h), v[q]);
            }
        }
    }
}

// op(A)[m0 : m0+mc, k0 : k0+kc] into MR-high slivers of words, sliver i at dst + i kp MR, laid
// out [pair][MR]; rows past mc and the odd pad zero.
static void pack_a(uint32_t *restrict dst, const bk_args *g, long m0, long mc, long k0, long kc) {
    const long lda = g->lda, kp = (kc + 1) / 2;
    if (g->ta) {  // op(A)[m][k] = A[k lda + m]: rows k, k+1 contiguous in m; BK_TA_PAIRS pairs
        // at a time across the whole block (the rows are a leading dimension apart, often each in
        // its own page: each is read once while its page is still in the TLB)
        for (long p0 = 0; p0 < kp; p0 += BK_TA_PAIRS) {
            long p1 = ct_min_l(p0 + BK_TA_PAIRS, kp);
            for (long i = 0; i < mc; i += BK_MR) {
                __mmask16 m = lane_mask(ct_min_l(BK_MR, mc - i));
                uint32_t *d = dst + i * kp;
                for (long p = p0; p < p1; p++) {
                    const uint16_t *r0 = g->A + (k0 + 2 * p) * lda + m0 + i;
                    __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0));
                    __m512i hi = 2 * p + 1 < kc ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + lda))
                                                : _mm512_setzero_si512();
                    _mm512_mask_storeu_epi32(d + p * BK_MR, (__mmask16)((1u << BK_MR) - 1),
                                             _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
                }
            }
        }
        return;
    }
    // op(A)[m][k] = A[m lda + k]: the pair is one word of row m; 12 rows x 16 words at a time,
    // transposed in registers
    for (long i = 0; i < mc; i += BK_MR) {
        long mr = ct_min_l(BK_MR, mc - i);
        const uint16_t *src = g->A + (m0 + i) * lda + k0;
        uint32_t *d = dst + i * kp;
        for (long p0 = 0; p0 < kp; p0 += 16) {
            __m512i v[16];
            ct_load_tr16_words(v, src + 2 * p0, lda, mr, kc - 2 * p0);
            long q1 = ct_min_l(16, kp - p0);
            for (long q = 0; q < q1; q++) _mm512_mask_storeu_epi32(d + (p0 + q) * BK_MR, (__mmask16)((1u << BK_MR) - 1), v[q]);
        }
    }
}

// op(A)[m0 : m0+mc, k0 : k0+kc] for the AMX kernel (gemm_bf16_amx.h): 32-row slivers, sliver i
// at dst + i 2 kps bf16, each [kps / 16 chunks][32 rows][32 k]: a chunk's rows 0-15 and 16-31
// are its two A tiles. Rows past mc and k past kc zero.
static void pack_a_amx(uint16_t *restrict dst, const bk_args *g, long m0, long mc, long k0, long kc, long kps) {
    const long lda = g->lda, nch = kps / 16;
    for (long i = 0; i < mc; i += AMX_MR) {
        uint16_t *sl = dst + i * 2 * kps;
        if (!g->ta) {  // op(A)[m][k] = A[m lda + k]: each tile row is 32 consecutive k of a row
            for (long r = 0; r < AMX_MR; r++) {
                const uint16_t *src = g->A + (m0 + i + r) * lda + k0;
                for (long q = 0; q < nch; q++) {
                    __mmask32 m = lane_mask32(i + r < mc ? kc - 32 * q : 0);
                    _mm512_store_si512((void *)(sl + q * 1024 + r * 32), _mm512_maskz_loadu_epi16(m, src + 32 * q));
                }
            }
            continue;
        }
        // op(A)[m][k] = A[k lda + m]: 32 rows of A (32 k) x its 32 columns of the sliver (32 m)
        // at a time, each row one 64-byte line: rows k, k+1 interleaved into pair words (their
        // lanes hold m = 8L + 0..3 for the low unpack, 8L + 4..7 for the high, L the 128-bit
        // lane), then 16 pairs x 16 columns transposed as 32-bit words, so that each m gets its
        // 16 pairs in a row
        __mmask32 m = lane_mask32(mc - i);
        for (long q = 0; q < nch; q++) {
            uint32_t words[16 * 32] __attribute__((aligned(64)));  // [pair][32 columns as unpacked]
            for (long p = 0; p < 16; p++) {
                long k = 32 * q + 2 * p;
                const uint16_t *r0 = g->A + (k0 + k) * lda + m0 + i;
                __m512i lo = k < kc ? _mm512_maskz_loadu_epi16(m, r0) : _mm512_setzero_si512();
                __m512i hi = k + 1 < kc ? _mm512_maskz_loadu_epi16(m, r0 + lda) : _mm512_setzero_si512();
                _mm512_store_si512((void *)(words + 32 * p), _mm512_unpacklo_epi16(lo, hi));
                _mm512_store_si512((void *)(words + 32 * p + 16), _mm512_unpackhi_epi16(lo, hi));
            }
            for (long half = 0; half < 2; half++) {
                __m512i rows[16];
                ct_load_tr16_words(rows, (const uint16_t *)(words + 16 * half), 64, 16, 32);
                for (long t = 0; t < 16; t++)  // position t of the unpack: column 8 (t / 4) + 4 half + t % 4
                    _mm512_store_si512((void *)(sl + q * 1024 + (8 * (t / 4) + 4 * half + t % 4) * 32), rows[t]);
            }
        }
    }
}

// ---------------------------------------------------------------- per-thread buffers
// A buffer that grows (never shrinks) on the first call that needs more, so a steady state
// reuses it.
typedef struct {
    void *p;
    size_t bytes;
} grown_buffer;

typedef struct {
    uint32_t *apack;  // MC x KC bf16
    uint16_t *bpack;  // KC x NC bf16
    grown_buffer awhole;  // every A block of a thread's rows, packed once (AMX)
    grown_buffer crows;   // an A block's rows of C for an epilogue
} bk_buffers;

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static _Thread_local bk_buffers *tl_buf;

static void free_buffers(void *p) {
    bk_buffers *b = p;
    free(b->apack);
    free(b->bpack);
    free(b->awhole.p);
    free(b->crows.p);
    free(b);
}
static void make_key(void) {
    if (pthread_key_create(&g_key, free_buffers)) ct_fatal("ct_gemm_bf16", "pthread_key_create failed");
}
static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes)) ct_fatal("ct_gemm_bf16", "out of memory (%zu bytes of packing buffers)", bytes);
    return p;
}
static bk_buffers *thread_buffers(void) {
    if (tl_buf) return tl_buf;
    pthread_once(&g_key_once, make_key);
    bk_buffers *b = alloc64(sizeof *b);
    b->apack = alloc64(sizeof(uint16_t) * BK_MC * BK_KC + 64);
    b->bpack = alloc64(sizeof(uint16_t) * BK_KC * BK_NC);
    b->awhole = b->crows = (grown_buffer){NULL, 0};
    pthread_setspecific(g_key, b);
    tl_buf = b;
    return b;
}

// b's memory, at least `bytes` of it.
static void *grow(grown_buffer *b, size_t bytes) {
    if (bytes > b->bytes) {
        free(b->p);
        b->p = alloc64(bytes);
        b->bytes = bytes;
    }
    return b->p;
}

// ---------------------------------------------------------------- one thread
// Block sizes: n into as few blocks of at most max as it takes, of equal size up to a multiple
// of q (so that no block is a short remainder).
static inline long even_block(long n, long max, long q) {
    long nb = (n + max - 1) / max, b = (n + nb - 1) / nb;
    return (b + q - 1) / q * q;
}

// The K blocks and B panels of a product: (a short K leaves the B buffer room for a wider panel:
// A is then packed fewer times; the AMX kernel's panel stays small enough for L2, its K blocks
// whole chunks of 32).
static long k_block(const bk_args *g) { return g->amx ? even_block(g->K, AMX_KC, 32) : even_block(g->K, BK_KC, 2); }
static long n_panel(const bk_args *g, long KCb) {
    return even_block(g->N, g->amx ? amx_panel_cols(KCb) : (long)BK_KC * BK_NC / KCb / BK_NR * BK_NR, BK_NR);
}

// The blocked loops for rows [m0, m1) of C on the calling thread, one of the nt threads of a
// team (me its number; nt 1: alone) that share the B panels in bpack: each panel is packed by
// all of them, a share of its slivers each, between two barriers. Every element of C is summed
// over the same K blocks in the same order whatever the rows a thread has.
static void gemm_rows(const bk_args *g, uint16_t *bpack, long m0, long m1, int me, int nt) {
    bk_buffers *buf = thread_buffers();
    const long M = m1 - m0, N = g->N, K = g->K;
    const long mr_grid = g->amx ? AMX_MR : BK_MR;
    const long KCb = k_block(g), NCb = n_panel(g, KCb);
    const long MCb = even_block(M > 0 ? M : 1, g->amx ? AMX_MC : BK_MC, mr_grid);
    // an epilogue (one panel, one K block): each A block's rows of C go to the thread's own
    // buffer, read by the epilogue while in cache, and never to C
    float *crows = g->epi ? grow(&buf->crows, sizeof(float) * (size_t)(MCb * N)) : NULL;
    // AMX: where B comes in several panels, A's blocks would be packed again for each; a thread
    // whose rows' blocks fit AMX_WHOLE_A_BYTES packs them all once, first (the same packed values)
    const long kps_max = (KCb / 2 + 15) / 16 * 16, slot = MCb * kps_max;  // words of one A block
    const long nkb = (K + KCb - 1) / KCb, nib = (M + MCb - 1) / MCb;
    uint32_t *awhole = NULL;
    if (g->amx && N > NCb && M > 0 && (double)nkb * nib * slot * 4 <= AMX_WHOLE_A_BYTES) {
        awhole = grow(&buf->awhole, 4 * (size_t)(nkb * nib * slot));
        for (long pc = 0, kb = 0; pc < K; pc += KCb, kb++) {
            long kc = ct_min_l(KCb, K - pc), kps = ((kc + 1) / 2 + 15) / 16 * 16;
            for (long ic = m0, ib = 0; ic < m1; ic += MCb, ib++)
                pack_a_amx((uint16_t *)(awhole + (kb * nib + ib) * slot), g, ic, ct_min_l(MCb, m1 - ic), pc, kc, kps);
        }
    }
    const long ldc = crows ? N : g->ldc;
    if (g->amx) ct_bf16_amx_begin();
    const uint16_t *packed = g->bpacked;  // the next panel of a B packed beforehand
    for (long jc = 0; jc < N; jc += NCb) {
        long nc = ct_min_l(NCb, N - jc), nsl = (nc + BK_NR - 1) / BK_NR;
        for (long pc = 0; pc < K; pc += KCb) {
            long kc = ct_min_l(KCb, K - pc), kp = (kc + 1) / 2, kps = g->amx ? (kp + 15) / 16 * 16 : kp;
            float beta = pc == 0 ? g->beta : 1.0f;
            const uint16_t *panel = packed ? packed : bpack;
            if (packed) {
                packed += nsl * kps * 2 * BK_NR;
            } else {
                long s0 = me * nsl / nt, s1 = (me + 1) * nsl / nt;  // this thread's slivers to pack
                if (s0 < s1)
                    pack_b(bpack + s0 * kps * 2 * BK_NR, g, pc, kc, jc + s0 * BK_NR,
                           ct_min_l(nc - s0 * BK_NR, (s1 - s0) * BK_NR), kps);
                if (nt > 1) {
#pragma omp barrier
                }
            }
            for (long ic = m0; ic < m1; ic += MCb) {
                long mc = ct_min_l(MCb, m1 - ic);
                uint32_t *apack = awhole ? awhole + (pc / KCb * nib + (ic - m0) / MCb) * slot : buf->apack;
                if (g->amx && !awhole)  // (else packed above)
                    pack_a_amx((uint16_t *)apack, g, ic, mc, pc, kc, kps);
                else if (!g->amx)
                    pack_a(apack, g, ic, mc, pc, kc);
                for (long s = 0; s < nsl; s++) {
                    long j = jc + s * BK_NR, nr = ct_min_l(BK_NR, N - j);
                    const uint16_t *bs = panel + s * kps * 2 * BK_NR;
                    for (long ir = 0; ir < mc; ir += mr_grid) {
                        float *c = crows ? crows + ir * N + j : g->C + (ic + ir) * g->ldc + j;
                        if (g->amx)
                            ct_bf16_amx_kernel(ct_min_l(AMX_MR, mc - ir), kps, (const uint16_t *)(apack + ir * kps), bs, c,
                                               ldc, g->alpha, beta, nr);
                        else
                            ukernel(ct_min_l(BK_MR, mc - ir), kp, apack + ir * kp, bs, c, ldc, g->alpha, beta, nr);
                    }
                }
                if (crows) g->epi->rows(g->epi->ctx, ic, mc, crows, ldc);  // the block's rows of C are final
            }
            if (nt > 1 && !g->bpacked) {  // the panel stays until every thread is done with it
#pragma omp barrier
            }
        }
    }
    if (g->amx) ct_bf16_amx_end();
}

// ---------------------------------------------------------------- threads
// The team splits C by rows (on the MR grid), evenly, and shares each B panel (packed once, in
// the calling thread's buffer): A and B are each packed once in all.
#define BK_PARALLEL_MIN (1L << 21)
#define BK_MAX_THREADS 256

static int g_allow_amx = 1;

int ct_gemm_bf16_avx512_available(void) { return __builtin_cpu_supports("avx512bf16"); }

void ct_gemm_bf16_avx512_allow_amx(int on) { g_allow_amx = !!on; }

int ct_gemm_bf16_avx512_uses_amx(void) { return g_allow_amx && ct_bf16_amx_usable(); }

// The product into C, or with an epilogue (one panel, one K block, beta 0; C unused) into the
// threads' own buffers.
static void run(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                const uint16_t *B, long ldb, float beta, float *C, long ldc, const ct_gemm_bf16_epilogue *epi,
                const uint16_t *bpacked) {
    bk_args g = {.ta = !!trans_a, .tb = !!trans_b, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                 .A = A, .B = B, .lda = lda, .ldb = ldb, .ldc = ldc, .C = C, .amx = ct_gemm_bf16_avx512_uses_amx(),
                 .epi = epi, .bpacked = bpacked};
    const long mr_grid = g.amx ? AMX_MR : BK_MR;
    int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nthr > BK_MAX_THREADS) nthr = BK_MAX_THREADS;
    long mu = (M + mr_grid - 1) / mr_grid;
    if (nthr > mu) nthr = (int)mu;
    uint16_t *bpack = thread_buffers()->bpack;
    if (nthr <= 1 || (double)M * N * K < (double)BK_PARALLEL_MIN) {
        gemm_rows(&g, bpack, 0, M, 0, 1);
        return;
    }
#pragma omp parallel num_threads(nthr)
    {
        int me = omp_get_thread_num(), nt = omp_get_num_threads();  // (nt may be fewer than asked)
        gemm_rows(&g, bpack, ct_min_l(me * mu / nt * mr_grid, M), ct_min_l((me + 1) * mu / nt * mr_grid, M), me, nt);
    }
}

void ct_gemm_bf16_avx512(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                         const uint16_t *B, long ldb, float beta, float *C, long ldc) {
    run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}

// ---------------------------------------------------------------- B packed beforehand
// The panels in the order the loops take them (jc outer, pc inner), each as pack_b lays out the
// shared panel, after a header naming the shape and kernel they were packed for.
typedef struct {
    long K, N;
    int amx;
} packed_header;
#define PACKED_HEADER_BYTES 64

static size_t packed_elements(const bk_args *g) {
    long KCb = k_block(g), NCb = n_panel(g, KCb);
    size_t n = 0;
    for (long jc = 0; jc < g->N; jc += NCb) {
        long nsl = (ct_min_l(NCb, g->N - jc) + BK_NR - 1) / BK_NR;
        for (long pc = 0; pc < g->K; pc += KCb) {
            long kp = (ct_min_l(KCb, g->K - pc) + 1) / 2, kps = g->amx ? (kp + 15) / 16 * 16 : kp;
            n += (size_t)(nsl * kps * 2 * BK_NR);
        }
    }
    return n;
}

// The panels of a packing made for K, N on this kernel (else the process ends, naming both).
static const uint16_t *checked_packing(const void *packed, long K, long N) {
    const packed_header *h = packed;
    if (h->K != K || h->N != N || h->amx != ct_gemm_bf16_avx512_uses_amx())
        ct_fatal("ct_gemm_bf16", "a B packed for K %ld, N %ld (%s) used for K %ld, N %ld (%s)", h->K, h->N,
                 h->amx ? "amx" : "avx512_bf16", K, N, ct_gemm_bf16_avx512_uses_amx() ? "amx" : "avx512_bf16");
    return (const uint16_t *)((const char *)packed + PACKED_HEADER_BYTES);
}

size_t ct_gemm_bf16_avx512_packed_bytes(long K, long N) {
    bk_args g = {.K = K, .N = N, .amx = ct_gemm_bf16_avx512_uses_amx()};
    return K > 0 && N > 0 ? PACKED_HEADER_BYTES + packed_elements(&g) * sizeof(uint16_t) : 0;
}

void ct_gemm_bf16_avx512_pack_b(int trans_b, long K, long N, const uint16_t *B, long ldb, void *dst) {
    bk_args g = {.tb = !!trans_b, .K = K, .N = N, .B = B, .ldb = ldb, .amx = ct_gemm_bf16_avx512_uses_amx()};
    *(packed_header *)dst = (packed_header){K, N, g.amx};
    uint16_t *out = (uint16_t *)((char *)dst + PACKED_HEADER_BYTES);
    long KCb = k_block(&g), NCb = n_panel(&g, KCb);
    for (long jc = 0; jc < N; jc += NCb) {
        long nc = ct_min_l(NCb, N - jc), nsl = (nc + BK_NR - 1) / BK_NR;
        for (long pc = 0; pc < K; pc += KCb) {
            long kc = ct_min_l(KCb, K - pc), kp = (kc + 1) / 2, kps = g.amx ? (kp + 15) / 16 * 16 : kp;
            // slivers over the threads (pack_b writes sliver s at s kps 2 NR whatever n0 is); not
            // `parallel for if`: a region the clause makes serial still makes a team of one
            if (nsl > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
                for (long s = 0; s < nsl; s++)
                    pack_b(out + s * kps * 2 * BK_NR, &g, pc, kc, jc + s * BK_NR, ct_min_l(BK_NR, nc - s * BK_NR), kps);
            } else {
                pack_b(out, &g, pc, kc, jc, nc, kps);
            }
            out += nsl * kps * 2 * BK_NR;
        }
    }
}

void ct_gemm_bf16_avx512_packed(int trans_a, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                                const void *packed, float beta, float *C, long ldc) {
    run(trans_a, 0, M, N, K, alpha, A, lda, NULL, 0, beta, C, ldc, NULL, checked_packing(packed, K, N));
}

int ct_gemm_bf16_avx512_epilogue(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A,
                                 long lda, const uint16_t *B, long ldb, const void *packed_b,
                                 const ct_gemm_bf16_epilogue *epi) {
    bk_args g = {.K = K, .N = N, .amx = ct_gemm_bf16_avx512_uses_amx()};
    long KCb = k_block(&g);
    if (K > KCb || N > n_panel(&g, KCb)) return 0;
    run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, NULL, N, epi,
        packed_b ? checked_packing(packed_b, K, N) : NULL);
    return 1;
}


#else  // no AVX-512 BF16 in this build: ct_gemm_bf16 keeps oneDNN / the fallback
int ct_gemm_bf16_avx512_available(void) { return 0; }
void ct_gemm_bf16_avx512_allow_amx(int on) { (void)on; }
int ct_gemm_bf16_avx512_uses_amx(void) { return 0; }
void ct_gemm_bf16_avx512(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                         const uint16_t *B, long ldb, float beta, float *C, long ldc) {
    ct_fatal("ct_gemm_bf16", "built without AVX-512 BF16");
}
int ct_gemm_bf16_avx512_epilogue(int trans_a, int trans_b, long M, long N, long K, float alpha, const uint16_t *A,
                                 long lda, const uint16_t *B, long ldb, const void *packed_b,
                                 const ct_gemm_bf16_epilogue *epi) {
    ct_fatal("ct_gemm_bf16", "built without AVX-512 BF16");
}
size_t ct_gemm_bf16_avx512_packed_bytes(long K, long N) { return 0; }
void ct_gemm_bf16_avx512_pack_b(int trans_b, long K, long N, const uint16_t *B, long ldb, void *dst) {
    ct_fatal("ct_gemm_bf16", "built without AVX-512 BF16");
}
void ct_gemm_bf16_avx512_packed(int trans_a, long M, long N, long K, float alpha, const uint16_t *A, long lda,
                                const void *packed, float beta, float *C, long ldc) {
    ct_fatal("ct_gemm_bf16", "built without AVX-512 BF16");
}
#endif
