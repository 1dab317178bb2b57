// Matrix multiply (row-major, like the rest of ctitan): ctitan's own packed sgemm, the loops of
// BLIS (Van Zee & van de Geijn 2015) around an FMA register-tile micro-kernel (6 x 16 on AVX2,
// 6 x 64 on AVX-512, 4 x 8 portable C elsewhere; gemm_internal.h says why).
//
// Why not oneDNN's sgemm: Debian's oneDNN 2.6 allocates inside every sgemm call (its gemm
// driver mallocs packing buffers and per-thread state). A matmul primitive with a user
// scratchpad does not help where there is no AVX-512: it is then "gemm:jit", the same driver,
// measured at 7-8 allocations per execute and a scratchpad of 0 bytes. Here every buffer is
// allocated once per thread, on its first call, with a fixed size, so a steady training step
// makes no allocation.
//
//   for jc in N step NC:                   B panel (K block, NC) packed into NR-wide slivers
//     for pc in K step KC:                   (all of K at once when it fits the buffer; then
//       for ic in M step MC:                  ic runs outside pc, keeping C's rows in cache)
//         A block (MC, KC) packed into MR-high slivers
//         for each NR sliver, each MR sliver: C[MR, NR] (+)= alpha A_sliver B_sliver
//
// Small products (K <= KC, B small) skip the packing of A and read it in place: the attention's
// (64, 64, 64) tiles.
//
// Threads: outside an OpenMP parallel region a large enough product is cut into block columns of C
// (on the NR tile grid), each shared by one or more threads that take its blocks of rows from
// contiguous ranges (relieving one another at the end of each packing of B), each thread running
// the loops above with its own A buffer; the threads of a block column pack each panel (or a span
// of its K blocks) together into one buffer and wait for one another's shares, and a thread whose
// column is done waits for another column's last panel to help with its rows (the only waits
// inside). Called inside a parallel region (attention, the fused kernels) it runs on the calling
// thread alone. The packing itself is gemm_pack.c. ct_gemm_with_row_hooks runs a caller's step on
// each block of rows right before or after the thread that takes it multiplies it (the fused
// chains, fused.c): a product of one pass, as a row split.
//
// Reproducibility: every element of C is summed over K in the same steps, in the same order,
// by the same operations, whatever the thread count, the block or tile it falls in or the path
// (K is never split between threads): results are bitwise the same for any number of threads,
// and a product over a block of rows or columns gives that part of the whole product bit for bit.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/spin.h"
#include "kernels/kernels.h"

// ---------------------------------------------------------------- micro-kernel per ISA
// (the tile, MR x NR, and the cache blocks: gemm_internal.h)

// C[0:mr, 0:NR] = alpha * sum_k A(r, k) B(k, 0:NR) + beta * C (beta 0: C not read), with
// A(r, k) = a[r rs_a + k cs_a] and B(k, :) = b[k ldb + 0:NR]: packed slivers (rs_a 1, cs_a MR,
// ldb NR) or, for small products, the caller's matrices read in place. Inlined with constant mr
// (and strides, when packed), so that the accumulators stay in registers.
//
// The sum runs in steps of ks products: the registers sum one step, then go into C (the first
// step as C = beta C + alpha s, the others as C += alpha s), so C = ((beta C + s_0) + s_1) + ...
// Products with a long K take one step per K block (ks >= kc: the C tile is read once, at the
// end). Products with a short K (<= CT_SHORT_K: tiny models, the parity tests' layouts) take
// steps of CT_SHORT_KS = 16: then a product split along K at multiples of 16 (sequences of 16
// tokens, micro-batches, tensor-parallel shards) and accumulated into C in order gives the
// whole product's bits, and the others agree with it far more closely than one long chain
// would. (Steps of 16 on every product would cost ~8% of the speed: the C tile is read and
// written after every 16 products.)
//
#define CT_SHORT_K 128
#define CT_SHORT_KS 16
// B's rows are asked for CT_B_AHEAD k-steps ahead (into L1). On AVX-512 a sliver of B (KC x 64
// floats, 64 KiB) does not fit L1 beside A's, so every A sliver reads it from L2 again, 256 bytes a
// step for 24 FMAs. Measured on a 2-core Xeon with AMX (bench/gemm_variants, two
// threads, 41 rounds): 17 of 19 shapes of benches S and M faster, median 0.987 of the time
// (0.972-0.996; the loss's dx 0.974, logits 0.981), 2048^3 and the largest weight gradient
// within noise (1.007, 1.005). 4 and 12 steps ahead did no better, 16 and 32 worse; wrapping the
// prefetch to the sliver's start for the next A sliver was 0.99-1.03. The same arithmetic: the same bits.
// (Not on AVX2, whose sliver, KC x 16, stays in L1.)
#ifndef CT_B_AHEAD  // (settable with -D for bench/gemm_variants; 0 is off)
#define CT_B_AHEAD (CT_VL == 16 ? 8 : 0)
#endif
static inline __attribute__((always_inline)) void kern(const int mr, long kc, const float *restrict a, long rs_a,
                                                       long cs_a, const float *restrict b, long ldb,
                                                       float *restrict c, long ldc, float alpha, float beta,
                                                       long ks, int stream) {
    vf acc[CT_MR][CT_NV];
#pragma GCC unroll 16
    for (int r = 0; r < mr && !stream; r++) {  // the tile of C is read at the end: fetch it now
#pragma GCC unroll 4
        for (int j = 0; j < CT_NR; j += 16) __builtin_prefetch(c + r * ldc + j, 1, 3);  // each 64-byte line
        __builtin_prefetch(c + r * ldc + CT_NR - 1, 1, 3);  // and the last, for a row not on a line
    }
    for (long k0 = 0; k0 < kc; k0 += ks) {
        long ke = k0 + ks < kc ? k0 + ks : kc;
#pragma GCC unroll 16
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
            for (int v = 0; v < CT_NV; v++) acc[r][v] = VZERO();
#pragma GCC unroll 4
        for (long k = k0; k < ke; k++) {
            vf bv[CT_NV];
#pragma GCC unroll 4
            for (int v = 0; v < CT_NV; v++) bv[v] = VLOAD(b + v * CT_VL);
#if CT_B_AHEAD
#pragma GCC unroll 4
            for (int v = 0; v < CT_NV; v++) __builtin_prefetch(b + CT_B_AHEAD * ldb + v * CT_VL, 0, 3);
#endif
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++) {
                vf ar = VSET1(a[r * rs_a]);
#pragma GCC unroll 4
                for (int v = 0; v < CT_NV; v++) acc[r][v] = VFMA(ar, bv[v], acc[r][v]);
            }
            a += cs_a;
            b += ldb;
        }
        if (alpha != 1.0f) {
            vf va = VSET1(alpha);
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
                for (int v = 0; v < CT_NV; v++) acc[r][v] = VMUL(acc[r][v], va);
        }
        if (beta == 0.0f && stream) {
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
                for (int v = 0; v < CT_NV; v++) VSTREAM(c + r * ldc + v * CT_VL, acc[r][v]);
        } else if (beta == 0.0f) {
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
                for (int v = 0; v < CT_NV; v++) VSTORE(c + r * ldc + v * CT_VL, acc[r][v]);
        } else if (beta == 1.0f) {
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
                for (int v = 0; v < CT_NV; v++)
                    VSTORE(c + r * ldc + v * CT_VL, VADD(VLOAD(c + r * ldc + v * CT_VL), acc[r][v]));
        } else {
            vf vb = VSET1(beta);
#pragma GCC unroll 16
            for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
                for (int v = 0; v < CT_NV; v++)
                    VSTORE(c + r * ldc + v * CT_VL, VFMA(vb, VLOAD(c + r * ldc + v * CT_VL), acc[r][v]));
        }
        beta = 1.0f;  // the later steps add to C
    }
}

// Packed slivers, the whole MR x NR tile.
// (stream: the tile is final and goes past the cache, stream_c)
static void ukernel(long kc, const float *a, const float *b, float *c, long ldc, float alpha, float beta, long ks,
                    int stream) {
    kern(CT_MR, kc, a, 1, CT_MR, b, CT_NR, c, ldc, alpha, beta, ks, stream);
}

// mr (1..MR) rows read in place; B in place or packed (ldb).
static void ukernel_rows(long mr, long kc, const float *a, long rs_a, long cs_a, const float *b, long ldb, float *c,
                         long ldc, float alpha, float beta, long ks, int stream) {
    switch (mr) {
#define CT_ROWS_CASE(n) \
    case n: kern(n, kc, a, rs_a, cs_a, b, ldb, c, ldc, alpha, beta, ks, stream); break;
        CT_ROWS_CASE(1)
        CT_ROWS_CASE(2)
        CT_ROWS_CASE(3)
        CT_ROWS_CASE(4)
#if CT_MR > 4
        CT_ROWS_CASE(5)
        CT_ROWS_CASE(6)
#endif
#undef CT_ROWS_CASE
    }
}

// A partial tile (fewer than NR columns): C's part copied into a whole-width local tile, the
// kernel run on that with the same beta, the part copied back -- the same operations on every
// element as a whole tile (so where a tile boundary falls never changes a result).
NO_LIBCALLS static void ukernel_cols(long mr, long nr, long kc, const float *a, long rs_a, long cs_a, const float *b,
                                     long ldb, float *c, long ldc, float alpha, float beta, long ks) {
    float t[CT_MR * CT_NR] __attribute__((aligned(64)));
    for (long r = 0; r < mr; r++)
        for (long j = 0; j < CT_NR; j++) t[r * CT_NR + j] = beta != 0.0f && j < nr ? c[r * ldc + j] : 0.0f;
    ukernel_rows(mr, kc, a, rs_a, cs_a, b, ldb, t, CT_NR, alpha, beta, ks, 0);
    for (long r = 0; r < mr; r++)
        for (long j = 0; j < nr; j++) c[r * ldc + j] = t[r * CT_NR + j];
}

// ---------------------------------------------------------------- row blocks
// The threads of a team that share a block column of C (see "threads") share its rows: each
// owns a contiguous range of them (counted in units of MR rows, dealt evenly), takes blocks from
// its front and, when it runs out, from the back of another thread's range. A take is a whole
// block (MC rows) while plenty is left, then half of what is left (at least MC / 4 rows), so the
// threads end within a few MR rows of one another: with whole blocks only, a product over 13
// blocks left one thread idle for a whole block at the end, 7-10% of each S-sized product's
// time (measured per shape). A thread that falls behind (a core shared with another process) is
// relieved instead of holding the others at the end, and each thread still walks contiguous
// rows. Which thread computes which rows never changes a bit.
typedef struct {
    _Alignas(64) unsigned long long w;  // front | back << 32, in units of MR rows
} row_range;

// Units to take when `left` remain and a whole block is `bu` units.
static long take_size(long left, long bu) {
    if (left >= 2 * bu) return bu;
    long half = (left + 1) / 2, least = bu / 4 > 0 ? bu / 4 : 1;
    half = half > least ? half : least;
    return half < left ? half : left;
}

// Takes units from the front (back) of r: returns how many, 0 when none is left; *u0 the first.
static long take_front(row_range *r, long bu, long *u0) {
    unsigned long long w = __atomic_load_n(&r->w, __ATOMIC_RELAXED);
    for (;;) {
        unsigned long long lo = w & 0xffffffffu, hi = w >> 32;
        if (lo >= hi) return 0;
        long n = take_size((long)(hi - lo), bu);
        if (__atomic_compare_exchange_n(&r->w, &w, w + (unsigned long long)n, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            *u0 = (long)lo;
            return n;
        }
    }
}

static long take_back(row_range *r, long bu, long *u0) {
    unsigned long long w = __atomic_load_n(&r->w, __ATOMIC_RELAXED);
    for (;;) {
        unsigned long long lo = w & 0xffffffffu, hi = w >> 32;
        if (lo >= hi) return 0;
        long n = take_size((long)(hi - lo), bu);
        if (__atomic_compare_exchange_n(&r->w, &w, ((hi - (unsigned long long)n) << 32) | lo, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            *u0 = (long)(hi - (unsigned long long)n);
            return n;
        }
    }
}

// One pass: op(B)[pc0 : pc1, jc : jc + nc] (nsl slivers), packed at once.
typedef struct {
    long jc, nc, nsl, pc0, pc1;
} gemm_pass;

// Where this thread's rows come from: all of them (alone: col NULL), or the row ranges of the
// nr threads sharing the block column, this thread's being sets[..][me].
//
// The threads of a block column run the same passes -- a pass is one packing of B: a whole panel,
// or as many K blocks of a panel too tall to pack whole as the buffer holds -- and in every pass
// they pack B together and share the rows of C dynamically (row blocks taken as above). Pass q
// packs into the buffer of the column's thread q mod nr and takes rows from range set q mod 2. A
// thread packs its share of pass q + 1 only after its rows of pass q are done, so once every share
// of pass q + 1 is in, every thread has left pass q: the buffer of pass q (reused by pass q + nr)
// and the range set of pass q - 1 (reset by thread 0 for pass q + 1, after the wait for pass q) are
// free. One wait per pass, for the packing; none at the end of a pass. (Without this sharing a
// K-blocked product -- the loss's dx, K = 8,192 -- keeps static halves, and the wait at its end
// is 10-20% of its time.) A thread takes from the front of its own
// range first, so rows change threads only near the end of a pass; threads of other columns may
// join a column's last pass (help_columns). A K block adds into C after the previous one whoever
// computes it: the same bits.
typedef struct team_column team_column;
typedef struct {
    team_column *col;  // the block column's shared state (NULL: alone)
    int nr, me;
} row_source;

struct team_column {
    row_range *sets[2];          // (nr) each: the row ranges of the passes of parity 0, 1
    float **bufs;                // (nr) each thread's packing buffer, published at its start
    _Alignas(64) long packed;    // shares packed so far, over all passes (pass q: (q + 1) nr)
};

// Units of MR rows in M rows.
#define CT_ROW_UNITS(M) (((M) + CT_MR - 1) / CT_MR)

// The rows of M (in MR units) dealt evenly to the nr ranges of a set.
static void deal_rows(row_range *set, int nr, long M) {
    const unsigned long long units = (unsigned long long)CT_ROW_UNITS(M);
    for (int i = 0; i < nr; i++)
        __atomic_store_n(&set[i].w, (unsigned long long)i * units / (unsigned long long)nr |
                                        ((unsigned long long)(i + 1) * units / (unsigned long long)nr) << 32,
                         __ATOMIC_RELAXED);
}

// Slivers [s0, s1) of pass p's B into bp, K block pc at bp + (pc - pc0) nsl NR.
static void pack_slivers(float *bp, const gemm_args *g, const gemm_pass *p, long s0, long s1) {
    if (s1 <= s0) return;
    for (long pc = p->pc0; pc < p->pc1; pc += CT_KC) {
        long kc = ct_min_l(CT_KC, p->pc1 - pc);
        ct_gemm_pack_b(bp + (pc - p->pc0) * p->nsl * CT_NR + s0 * kc * CT_NR, g, pc, kc, p->jc + s0 * CT_NR,
                       ct_min_l(s1 * CT_NR, p->nc) - s0 * CT_NR);
    }
}

// Packs this thread's share of pass q's B into the pass's buffer; returns it once every share
// is in.
static const float *pack_pass(const gemm_args *g, const row_source *rs, long q, long M, const gemm_pass *p) {
    team_column *c = rs->col;
    float *bp;
    int spins = 0;
    while (!(bp = __atomic_load_n(&c->bufs[q % rs->nr], __ATOMIC_ACQUIRE))) ct_spin_turn(&spins);
    pack_slivers(bp, g, p, rs->me * p->nsl / rs->nr, (rs->me + 1) * p->nsl / rs->nr);
    __atomic_add_fetch(&c->packed, 1, __ATOMIC_RELEASE);
    spins = 0;
    while (__atomic_load_n(&c->packed, __ATOMIC_ACQUIRE) < (q + 1) * rs->nr) ct_spin_turn(&spins);
    // every thread has left pass q - 1: its set is free for pass q + 1 (published by thread 0's
    // share of that pass, which every thread waits for before taking a row of it)
    if (rs->me == 0) deal_rows(c->sets[(q + 1) % 2], rs->nr, M);
    return bp;
}

// Units of MR rows in a whole block.
#define CT_BLOCK_UNITS (CT_MC / CT_MR)

// The next rows of pass q for this thread: [*r0, *r0 + returned), 0 when none are left. Alone,
// all rows in whole blocks (*own, 0 before the first call, is where the next one starts); in a
// team, taken from the front of its own range of the pass's set, then from the backs of the others.
static long next_rows(const row_source *rs, long q, long M, long *own, long *r0) {
    long u0, n;
    if (!rs->col) {
        const long units = CT_ROW_UNITS(M);
        if (*own >= units) return 0;
        u0 = *own;
        n = ct_min_l(CT_BLOCK_UNITS, units - u0);
        *own += n;
    } else {
        row_range *set = rs->col->sets[q % 2];
        n = take_front(&set[rs->me], CT_BLOCK_UNITS, &u0);
        for (int k = 1; !n && k < rs->nr; k++) n = take_back(&set[(rs->me + k) % rs->nr], CT_BLOCK_UNITS, &u0);
        if (!n) return 0;
    }
    *r0 = u0 * CT_MR;
    return ct_min_l(n * CT_MR, M - *r0);
}

// ---------------------------------------------------------------- one thread
// A packed sliver serves every B sliver of the panel; with few of them (N <= 256: 4 slivers on
// AVX-512) packing A costs 9-10% of the product (perf, one thread, (2048, 256, 1536): packing A
// 8.8%), and reading A in place is 4-9% faster on one thread, 2-6% on two (the model's N = 256
// products, forward, input and weight gradients; Zen 5). On a Sapphire Rapids-class Xeon too,
// for A not transposed (one thread, pinned pairs: (2048, 256, 1536) 188-207 against
// 183-198 packed). The same arithmetic either way: the same bits. Measured on AVX-512 only;
// AVX2 keeps packing.
//
// A^T in place reads one row of A per k, lda floats after the last: a constant stride the
// hardware's stride prefetcher must follow. On Zen 5 in place was faster for rows up to 8 KiB
// apart (the loss's dW, rows 32 KiB apart, ran 6% slower); Intel's prefetcher follows strides
// of at most 2 KiB, and on the Xeon the weight gradients with rows 3 and 6 KiB apart ran 12-20%
// slower in place (one thread, pinned pairs: (1536, 256, 2048) 140-145 against 172-173 GFLOP/s
// packed; (768, 256, 2048) 152-154 against 169-173). A software prefetch of the row 4-16 ks
// ahead recovered only half of that (158-170).
//
// A not transposed in place reads MR rows of A side by side, each contiguous; with rows 8 KiB
// or more apart (the loss's dx, K = 8,192: the logits' rows) packing was 5% faster on Zen 4
// (one thread, best of 10: (1024, 256, 8192) 93.0-93.7 in place, 97.8-98.0 packed; K = 2,048
// and 4,096 2-8%; K = 1,536 either way within noise). So were the narrow panels of a long K,
// though each panel packs A again (one thread, three alternations: 2048^3 89-93 -> 97-99,
// (2048, 768, 2048) A B and A B^T 93-100 -> 102-106). Measured on Zen 4 only.
#ifndef CT_A_IN_PLACE_MAX_LDA  // (settable with -D for bench/gemm_variants)
#define CT_A_IN_PLACE_MAX_LDA 2047
#endif
#ifndef CT_A_IN_PLACE_N  // (settable with -D for bench/gemm_variants)
#if CT_VL == 16
#define CT_A_IN_PLACE_N 256
#else
#define CT_A_IN_PLACE_N 0
#endif
#endif
static long a_t_in_place_max_lda(void) {
    static long max_lda;  // 0 until the first call; every thread finds the same value
    long v = __atomic_load_n(&max_lda, __ATOMIC_RELAXED);
    if (!v) __atomic_store_n(&max_lda, v = __builtin_cpu_is("amd") ? 2047 : 512, __ATOMIC_RELAXED);
    return v;
}
static int a_in_place(const gemm_args *g, long nsl) {
    return nsl * CT_NR <= CT_A_IN_PLACE_N && g->lda <= (g->ta ? a_t_in_place_max_lda() : CT_A_IN_PLACE_MAX_LDA);
}

// Whether a block's tiles of C are final when stored and go straight to memory (streaming
// stores), rather than through the cache. A plain store first reads the line it writes
// (write-allocate): for the products that write their C once -- beta 0 and all of K in one
// block, the forward products and the loss's logits (12 and 32 MiB at bench S) -- that read
// is all the traffic there is on the way in, and the line is evicted long before the next
// operation reads it. Not with row hooks (they read the rows just written), and only where
// every tile row is aligned for the streaming store. Measured on a 2-core Xeon with AMX
// in a quiet spell (steal under 3%), bench S's step with and without, alternated
// within one process (bench_train, 16-24 pairs, seven runs): 0.975-1.001 of the time.
#ifndef CT_STREAM_C  // (settable with -D for bench/gemm_variants)
#define CT_STREAM_C 1
#endif
static int stream_c(const gemm_args *g, long kc, long ks, float beta) {
    return CT_STREAM_C && !g->hooks && beta == 0.0f && kc == g->K && ks >= kc && g->ldc % 16 == 0 &&
           ((uintptr_t)g->C & 63) == 0;
}

// C[ic : ic+mc, the panel at jc] over the K blocks pc0..pc1 of the packed panel bp (nsl
// slivers; K block pc at bp + (pc - pc0) nsl NR): each K block packs the A block (or reads it
// in place) and runs the micro-kernels. Every element of C is summed over the same K blocks in
// the same order whichever rows a call covers: the same bits for any cut.
static void gemm_block(const gemm_args *g, float *apack, const float *bp, long nsl, long jc, long ic, long mc,
                       long pc0, long pc1) {
    const long N = g->N, K = g->K, ks = K <= CT_SHORT_K ? CT_SHORT_KS : CT_KC;
    const int inplace = a_in_place(g, nsl);
    for (long pc = pc0; pc < pc1; pc += CT_KC) {
        long kc = ct_min_l(CT_KC, K - pc);
        float beta = pc == 0 ? g->beta : 1.0f;
        const float *bk = bp + (pc - pc0) * nsl * CT_NR;
        // A's rows in place (rs_a, cs_a) or packed slivers (1, MR)
        const long rs_a = !inplace ? 1 : g->ta ? 1 : g->lda, cs_a = !inplace ? CT_MR : g->ta ? g->lda : 1;
        const float *a0 = !inplace ? apack : g->ta ? g->A + pc * g->lda + ic : g->A + ic * g->lda + pc;
        if (!inplace) ct_gemm_pack_a(apack, g, ic, mc, pc, kc);
        const int stream = stream_c(g, kc, ks, beta);
        for (long s = 0; s < nsl; s++) {
            long j = jc + s * CT_NR, nr = ct_min_l(CT_NR, N - j);
            const float *bs = bk + s * kc * CT_NR;
            for (long ir = 0; ir < mc; ir += CT_MR) {
                long mr = ct_min_l(CT_MR, mc - ir);
                const float *as = a0 + ir * (inplace ? rs_a : kc);
                float *c = g->C + (ic + ir) * g->ldc + j;
                if (mr == CT_MR && nr == CT_NR && !inplace)
                    ukernel(kc, as, bs, c, g->ldc, g->alpha, beta, ks, stream);
                else if (nr == CT_NR)
                    ukernel_rows(mr, kc, as, rs_a, cs_a, bs, CT_NR, c, g->ldc, g->alpha, beta, ks, stream);
                else
                    ukernel_cols(mr, nr, kc, as, rs_a, cs_a, bs, CT_NR, c, g->ldc, g->alpha, beta, ks);
            }
        }
        if (stream) VSTREAM_FENCE();
    }
}

// The blocked loops on the calling thread, over the row blocks rs gives it. When the whole
// height of a B panel fits the buffer (K x NC floats), all of it is packed first and each A
// block then runs through every K block (ic outside pc), so that block's rows of C stay in cache
// between the K blocks instead of being streamed from memory once per K block; row blocks are
// then shared out as they are taken (a block is finished, all of K, by whoever takes it).
// Otherwise the panel is packed as many K blocks at a time as the buffer holds (KC NC / the
// panel's width: 8 for a panel of 256 columns), each such span a pass of its own over the rows,
// the same way. Either way each element is summed over the same K blocks in the same order:
// the same bits. (Against one K block a pass, on Zen 4: the loss's input gradients, K = 8,192
// and 32,768 over 256 and 768 columns, read C from L2 once a span instead of once a K block,
// and run 0-8% faster, A and B interleaved in one process, best of 6, three runs.)
//
// A long K (over KC) with a wide N makes panels narrower than NC so that each is packed whole:
// the C block of a row block (MC x the panel, at most 120 KiB) then stays in L2 through all of
// K, and a panel of at most 256 columns may read A in place (a_in_place). On Zen 5, A then
// read in place: one thread, 2048^3 199-205 -> 215-221 GFLOP/s; two threads 382-393 ->
// 430-441, and benchmark M's forward and input-gradient products 2-10% faster (bench_matmul).
// Not for A^T: there each panel packs A^T again, strided, and the weight gradients ran 5-10%
// slower. AVX-512 only: the AVX2 kernel packs A for every panel (it has no in-place path), and
// 2048^3 ran 2.5% slower that way.
#ifndef CT_WHOLE_MIN_NC  // (settable with -D for bench/gemm_variants)
#if CT_VL == 16
#define CT_WHOLE_MIN_NC 256  // narrower panels than this would pack A too often
#else
#define CT_WHOLE_MIN_NC 0  // off
#endif
#endif
static long panel_width(const gemm_args *g) {
    const long N = g->N, K = g->K;
    if (CT_WHOLE_MIN_NC > 0 && !g->ta && K * ct_min_l(N, CT_NC) > CT_BPACK_FLOATS) {  // narrower, packed whole
        long w = CT_BPACK_FLOATS / K / CT_NR * CT_NR;
        if (w >= CT_WHOLE_MIN_NC && w < N) {
            long parts = (N + w - 1) / w;
            return ((N + parts - 1) / parts + CT_NR - 1) / CT_NR * CT_NR;
        }
    }
    return CT_NC;
}

// A^T B products -- the weight gradients, K the tokens -- pack B one K block a pass, whatever the
// buffer holds: the pass's panel is then KC x N (256 KiB at N = 256) rather than the buffer's
// 1 MiB, and the row blocks, shared out again in every pass, multiply it from L2 next to their
// C block (which goes back to memory between passes: read again once a K block, as it is
// anyway). The same K blocks in the same order: the same bits. Measured on a 2-core Xeon
// with AMX (bench/gemm_variants, two threads, 21 rounds, against the buffer's spans):
// bench S's weight gradients (768 | 256 | 1536, 256, 2048) 0.938 / 0.851 / 0.932 of the time,
// (256, 768, 2048) 0.956, the loss's (8192, 256, 1024) 0.998; bench M's (N 768, K 2048)
// 0.981-0.996 (spans of a quarter and a half of the buffer: S's between these and 1.0). Not for
// A not transposed, where it depends on the shape: S's input-gradient and forward products with
// K 768-1,536 ran 1.2-7.6% slower that way, the loss's dx (K 8,192) 0.964-0.979 and M's
// (2048, 768, 2048) 0.970 faster, 2048^3 even.
#ifndef CT_TA_ONE_BLOCK  // (settable with -D for bench/gemm_variants)
#define CT_TA_ONE_BLOCK 1
#endif

// The passes in order: the first (first != 0) or the one after *p; 0 when there is none.
static int next_pass(const gemm_args *g, long panel, int first, gemm_pass *p) {
    const long N = g->N, K = g->K;
    long jc = 0, pc0 = 0;
    if (!first) {
        jc = p->jc, pc0 = p->pc1;
        if (pc0 >= K) jc += panel, pc0 = 0;
        if (jc >= N) return 0;
    }
    p->jc = jc, p->nc = ct_min_l(panel, N - jc), p->nsl = (p->nc + CT_NR - 1) / CT_NR, p->pc0 = pc0;
    // as many K blocks of the panel as the buffer (KC x NC floats) holds -- all of them when they
    // fit -- or for A^T one
    long span = CT_TA_ONE_BLOCK && g->ta ? CT_KC : CT_BPACK_FLOATS / (p->nsl * CT_NR) / CT_KC * CT_KC;
    p->pc1 = ct_min_l(pc0 + span, K);
    return 1;
}

// A product's row hooks (ct_gemm_with_row_hooks) around rows [r0, r0 + n): before (after 0) or
// after them. Set only on products of one pass, where each row block is taken once, whole.
static inline void row_hook(const gemm_args *g, int after, long r0, long n) {
    const ct_gemm_row_hooks *h = g->hooks;
    void (*fn)(void *, long, long) = !h ? NULL : after ? h->after : h->before;
    if (fn) fn(h->ctx, r0, n);
}

static void gemm_packed(const gemm_args *g, ct_gemm_buffers *buf, const row_source *rs) {
    const long M = g->M, panel = panel_width(g);
    gemm_pass p;
    for (long q = 0; next_pass(g, panel, q == 0, &p); q++) {  // q: passes so far (see row_source)
        const float *bp = buf->bpack;  // B[pc block] at bp + (pc - pc0) nsl NR
        if (rs->col)
            bp = pack_pass(g, rs, q, M, &p);
        else
            pack_slivers(buf->bpack, g, &p, 0, p.nsl);
        long own = 0, r0, mc;
        while ((mc = next_rows(rs, q, M, &own, &r0)) > 0) {
            row_hook(g, 0, r0, mc);
            gemm_block(g, buf->apack, bp, p.nsl, p.jc, r0, mc, p.pc0, p.pc1);
            row_hook(g, 1, r0, mc);
        }
    }
}

// A product with K <= KC and a B small enough to stay in L2: B packed once, A not packed at all
// (each MR-row sliver is read in place, from L1, for every NR sliver of B). The attention's
// (64, 64, 64) tiles take this path. (B is packed even when not transposed: read in place, the
// rows of a sliver sit a leading dimension apart, often a multiple of 1 KiB, which maps them
// onto a few L1 sets that cannot hold them.) Same arithmetic per element as gemm_packed.
#define CT_SMALL_B_FLOATS (64L * 1024)
#define CT_SMALL_AT_FLOATS (16L * 1024)

// (A^T in place is read a row of A per k: only when it is small enough to stay in L1)
static int is_small(const gemm_args *g) {
    return g->K <= CT_KC && g->K * g->N <= CT_SMALL_B_FLOATS && (!g->ta || g->M * g->K <= CT_SMALL_AT_FLOATS);
}

// Rows [r0, r0 + mc) of a small product, B packed whole at bp.
static void small_rows(const gemm_args *g, const float *bp, long r0, long mc) {
    const long M = g->M, N = g->N, K = g->K, ldc = g->ldc, ks = K <= CT_SHORT_K ? CT_SHORT_KS : CT_KC;
    const long rs_a = g->ta ? 1 : g->lda, cs_a = g->ta ? g->lda : 1, nsl = (N + CT_NR - 1) / CT_NR;
    for (long i = r0; i < r0 + mc; i += CT_MR) {
        long mr = ct_min_l(CT_MR, M - i);
        const float *a = g->A + i * rs_a;
        for (long s = 0; s < nsl; s++) {
            long j = s * CT_NR, nr = ct_min_l(CT_NR, N - j);
            float *c = g->C + i * ldc + j;
            if (nr < CT_NR)
                ukernel_cols(mr, nr, K, a, rs_a, cs_a, bp + s * K * CT_NR, CT_NR, c, ldc, g->alpha, g->beta, ks);
            else
                ukernel_rows(mr, K, a, rs_a, cs_a, bp + s * K * CT_NR, CT_NR, c, ldc, g->alpha, g->beta, ks, 0);
        }
    }
}

// A small product's one pass: all of B, all of K (K <= KC: one K block).
static gemm_pass small_pass(const gemm_args *g) {
    return (gemm_pass){.jc = 0, .nc = g->N, .nsl = (g->N + CT_NR - 1) / CT_NR, .pc0 = 0, .pc1 = g->K};
}

static void gemm_small(const gemm_args *g, float *bpack, const row_source *rs) {
    const gemm_pass p = small_pass(g);
    const float *bp = bpack;  // (K, N) in NR-wide slivers
    if (rs->col)
        bp = pack_pass(g, rs, 0, g->M, &p);
    else
        pack_slivers(bpack, g, &p, 0, p.nsl);
    long own = 0, r0, mc;
    while ((mc = next_rows(rs, 0, g->M, &own, &r0)) > 0) {
        row_hook(g, 0, r0, mc);
        small_rows(g, bp, r0, mc);
        row_hook(g, 1, r0, mc);
    }
}

// Whether the product is one pass: one packing of B (all of N, all of K), so that each block of
// rows is taken once and is final when its thread is done with it.
static int one_pass(const gemm_args *g) {
    if (is_small(g)) return 1;
    gemm_pass p;
    next_pass(g, panel_width(g), 1, &p);
    return p.nc == g->N && p.pc1 == g->K;
}

static void gemm_serial(const gemm_args *g, const row_source *rs) {
    ct_gemm_buffers *buf = ct_gemm_thread_buffers();
    if (rs->col) __atomic_store_n(&rs->col->bufs[rs->me], buf->bpack, __ATOMIC_RELEASE);  // for the passes it serves
    if (is_small(g))
        gemm_small(g, buf->bpack, rs);
    else
        gemm_packed(g, buf, rs);
}

// ---------------------------------------------------------------- threads
// The team covers C with a tm x tn grid of block columns (cut on the NR tile grid) and rows:
// the tm threads of a block column run its passes together, packing each pass's B once between
// them and sharing its row blocks (row_source). Each element of C is computed by the same
// arithmetic whatever the grid (K is never split), so the result does not depend on the thread
// count or on who took which block.
typedef struct {
    const gemm_args *g;
    team_column *cols;  // (tn) each block column's shared state
    int tm, tn;
} team_gemm;

// Block column c's part of the product (its columns of B and C); 0 when it has none.
static int column_args(const team_gemm *t, int c, gemm_args *s) {
    const gemm_args *g = t->g;
    long nu = (g->N + CT_NR - 1) / CT_NR;  // tiles across
    long n0 = c * nu / t->tn * CT_NR, n1 = ct_min_l((c + 1) * nu / t->tn * CT_NR, g->N);
    if (n0 >= n1) return 0;
    *s = *g;
    s->N = n1 - n0;
    s->B = g->tb ? g->B + n0 * g->ldb : g->B + n0;
    s->C = g->C + n0;
    return 1;
}

// A thread whose block column is done helps each other column with the rows left in its last
// pass, from the backs of that column's ranges, multiplying with the panel that column packed.
// (Only the last pass can be joined: an earlier pass's buffer and row set are reused by the
// passes after it, which a helper does not take part in.) Without this a column split keeps its
// halves, and the wait at its end is 1-10% of the product on a quiet machine (bench S's
// weight gradients of N <= 768 and the loss's logits) and 25-50% when another process takes
// part of a core.
static void help_columns(const team_gemm *t, int in) {
    ct_gemm_buffers *buf = ct_gemm_thread_buffers();
    for (int k = 1; k < t->tn; k++) {
        int c = (in + k) % t->tn;
        gemm_args s;
        if (!column_args(t, c, &s)) continue;
        team_column *col = &t->cols[c];
        const int small = is_small(&s);
        gemm_pass p = small_pass(&s);
        long q = 0;  // the column's last pass
        if (!small) {
            const long panel = panel_width(&s);
            next_pass(&s, panel, 1, &p);
            for (gemm_pass nx = p; next_pass(&s, panel, 0, &nx); q++) p = nx;
        }
        int spins = 0;
        while (__atomic_load_n(&col->packed, __ATOMIC_ACQUIRE) < (q + 1) * t->tm) ct_spin_turn(&spins);
        const float *bp = __atomic_load_n(&col->bufs[q % t->tm], __ATOMIC_ACQUIRE);
        row_range *set = col->sets[q % 2];
        for (int i = 0; i < t->tm; i++)
            for (long u0, n; (n = take_back(&set[i], CT_BLOCK_UNITS, &u0)) > 0;) {
                long r0 = u0 * CT_MR, mc = ct_min_l(n * CT_MR, s.M - r0);
                if (small)
                    small_rows(&s, bp, r0, mc);
                else
                    gemm_block(&s, buf->apack, bp, p.nsl, p.jc, r0, mc, p.pc0, p.pc1);
            }
    }
}

static void gemm_part(const team_gemm *t, int ithr) {
    int im = ithr / t->tn, in = ithr % t->tn;
    gemm_args s;
    if (column_args(t, in, &s)) {
        row_source rs = {.col = t->cols + in, .nr = t->tm, .me = im};
        gemm_serial(&s, &rs);
    }
    if (t->tn > 1) help_columns(t, in);
}

// Team timing (off by default: one predictable branch per product).
static int team_timing;
static double team_total_s, team_wait_s;

void ct_gemm_team_timing(int on) {
    team_timing = on;
    team_total_s = team_wait_s = 0.0;
}

void ct_gemm_team_timing_read(double *total_s, double *wait_s) {
    *total_s = team_total_s;
    *wait_s = team_wait_s;
}

// Products below this many multiply-adds run on the calling thread (a parallel region costs
// microseconds; this is ~30 of them).
#define CT_GEMM_PARALLEL_MIN (1L << 21)
#define CT_GEMM_MAX_THREADS 256  // a larger team runs its products on this many

static void gemm_run(const gemm_args *g);

// Whether every leading dimension is at least its row's length.
static int leading_dims_fit(const gemm_args *g) {
    return g->lda >= (g->ta ? g->M : g->K) && g->ldb >= (g->tb ? g->K : g->N) && g->ldc >= g->N;
}

void ct_gemm(int trans_a, int trans_b, long M, long N, long K, float alpha, const float *A, long lda,
             const float *B, long ldb, float beta, float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {  // nothing to multiply: C = beta * C (beta == 0 clears, even NaN garbage)
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    gemm_args g = {.ta = !!trans_a, .tb = !!trans_b, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                   .A = A, .B = B, .lda = lda, .ldb = ldb, .ldc = ldc, .C = C};
    if (!leading_dims_fit(&g))
        ct_fatal("ct_gemm", "leading dimension below the row length: M=%ld N=%ld K=%ld lda=%ld ldb=%ld ldc=%ld", M,
                 N, K, lda, ldb, ldc);
    gemm_run(&g);
}

// Rows [0, M) through fn, split over the threads (on this one inside a parallel region).
static void all_rows(void (*fn)(void *, long, long), void *ctx, long M) {
    if (!fn || M <= 0) return;
    if (omp_in_parallel()) {
        fn(ctx, 0, M);
        return;
    }
#pragma omp parallel
    {
        long nt = omp_get_num_threads(), i = omp_get_thread_num(), r0 = i * M / nt, r1 = (i + 1) * M / nt;
        if (r1 > r0) fn(ctx, r0, r1 - r0);
    }
}

void ct_gemm_with_row_hooks(int trans_b, long M, long N, long K, float alpha, const float *A, long lda,
                            const float *B, long ldb, float beta, float *C, long ldc, const ct_gemm_row_hooks *hooks) {
    gemm_args g = {.ta = 0, .tb = !!trans_b, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .A = A, .B = B,
                   .lda = lda, .ldb = ldb, .ldc = ldc, .C = C, .hooks = hooks};
    if (hooks && M > 0 && N > 0 && K > 0 && alpha != 0.0f && leading_dims_fit(&g) && one_pass(&g)) {
        gemm_run(&g);
        return;
    }
    // more than one pass (or nothing to multiply): the hooks over all rows, before and after
    all_rows(hooks ? hooks->before : NULL, hooks ? hooks->ctx : NULL, M);
    ct_gemm(0, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    all_rows(hooks ? hooks->after : NULL, hooks ? hooks->ctx : NULL, M);
}

// A checked product on this thread or a team. With row hooks (one pass) the team is a row
// split: every thread takes whole rows of C, so each row block is final where it was computed.
static void gemm_run(const gemm_args *g) {
    const long M = g->M, N = g->N, K = g->K;
    int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nthr > CT_GEMM_MAX_THREADS) nthr = CT_GEMM_MAX_THREADS;
    row_source alone = {.col = NULL};
    if (nthr <= 1 || (double)M * N * K < (double)CT_GEMM_PARALLEL_MIN) {
        gemm_serial(g, &alone);
        return;
    }
    // The grid: tm x tn = nthr, every block at least one tile, with the least to read per thread:
    // its rows of A (M / tm) and its columns of B (N / tn: a row split reads all of B, half of
    // it packed by the other core -- at bench S's (256, 768, 2048) weight gradient that ran
    // 8-30% slower than a column split, measured).
    long mu = (M + CT_MR - 1) / CT_MR, nu = (N + CT_NR - 1) / CT_NR;
    int tm = 1, tn = nthr;
    double best = -1;
    for (int a = 1; a <= nthr && !g->hooks; a++) {
        if (nthr % a || a > mu || nthr / a > nu) continue;
        double cost = (double)M / a + (double)N / (nthr / a);
        if (best < 0 || cost < best) best = cost, tm = a, tn = nthr / a;
    }
    if (best < 0) tm = (int)ct_min_l(mu, nthr), tn = 1;  // too few tiles for every thread (or hooks): a row split
    row_range sets[2][CT_GEMM_MAX_THREADS];
    float *bufs[CT_GEMM_MAX_THREADS];
    team_column cols[CT_GEMM_MAX_THREADS];
    for (int c = 0; c < tn; c++) {
        team_column *col = &cols[c];
        col->sets[0] = sets[0] + c * tm, col->sets[1] = sets[1] + c * tm, col->bufs = bufs + c * tm;
        deal_rows(col->sets[0], tm, M);  // (set 1: by thread 0 once pass 0 is packed)
        for (int i = 0; i < tm; i++) bufs[c * tm + i] = NULL;
        col->packed = 0;
    }
    team_gemm t = {.g = g, .cols = cols, .tm = tm, .tn = tn};
    const int timed = team_timing;
    double t0 = timed ? omp_get_wtime() : 0.0, first = 1e300, last = 0.0;
#pragma omp parallel num_threads(tm * tn)
    {
        if (omp_get_num_threads() == tm * tn)
            gemm_part(&t, omp_get_thread_num());
        else if (omp_get_thread_num() == 0)  // fewer threads than asked (OMP_DYNAMIC, a thread
            gemm_serial(g, &alone);          // limit): the grid's parts would wait for the missing
        if (timed) {
            double end = omp_get_wtime();
#pragma omp critical(ct_gemm_team_timing)
            first = end < first ? end : first, last = end > last ? end : last;
        }
    }
    if (timed) team_total_s += last - t0, team_wait_s += last - first;
}

void ct_linear_forward(float *out, const float *inp, const float *weight, long N, long IC, long OC) {
    // out (N, OC) = inp (N, IC) @ weight (OC, IC)^T
    ct_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}

void ct_linear_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                        long N, long IC, long OC) {
    // dinp (N, IC) = dout (N, OC) @ weight (OC, IC)
    if (dinp) ct_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
    // dweight (OC, IC) += dout (N, OC)^T @ inp (N, IC)
    if (dweight) ct_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
}
