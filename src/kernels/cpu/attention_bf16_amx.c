// The bf16 attention's tile products on AMX (attention_tile.h: ct_att_mm_bf16 hands them here).
// A TDPBF16PS adds a 16 x 32 bf16 A tile times a 32 x 16 bf16 B tile (16 rows of k pairs: the
// attention's "pairs" layout as it is) into a 16 x 16 fp32 tile, 8,192 multiply-adds where a
// VDPBF16PS does 32: the attention's products are 16-row blocks of 16-64 columns summed over up
// to 32 pairs, two or three tile multiplies each.
//
// What this file takes: A in rows of pairs (cs_a 1, the operands of the scores, dV, dP and dK
// products and the forward's P in query rows), at least 16 rows and 16 pairs. Tiles are read in
// place, so only whole 16 x 16-pair blocks go to the tiles: rows past the last whole block of 16,
// and pairs past the last whole block of 16, are summed by the register kernel
// (attention_bf16_tile.c) onto the tiles' sums, in the same order for a given shape wherever it
// runs (the same bits on any thread count). The mode's step after the sum is the register
// kernel's, from the tiles' sums stored to a 16 x 64 block -- but for a product stored as it
// is (dV's and dK's shares) and one added to C (dQ), which go to C straight from the tiles (the
// adds start from C loaded into them) where no pairs are left over.
//
// Numerics: the pairs' products are exact; TDPBF16PS sums them in fp32 in its own order, with
// denormal inputs and outputs flushed to zero as VDPBF16PS does. The path is its own
// (ct_attention_bf16_path: "amx"): its bits differ from the VDPBF16PS chains' in the last places.
#include "core/error.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/gemm_bf16_amx.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
#include <immintrin.h>

#define TILE_ROWS 16
#define TILE_PAIRS 16
#define BLOCK_COLS 64  // four accumulator tiles: C block (16, 64)

static __thread bool g_held;  // this thread holds the tile configuration

bool ct_att16_tiles_begin(void) {
    if (!ct_bf16_amx_usable()) return false;
    ct_bf16_amx_begin();  // 8 tiles of 16 rows x 64 bytes: accumulators, A and B tiles alike
    return g_held = true;
}

void ct_att16_tiles_end(void) {
    if (g_held) ct_bf16_amx_end();
    g_held = false;
}

bool ct_att16_tiles_held(void) { return g_held; }

// acc tiles 0..nt-1 (+)= A (16 rows, kf pairs) B (kf pairs, 16 nt), A tile 4, B tiles 5-7; from
// zero, or from C (16, 16 nt) (row stride ldc floats) where c is given.
static inline __attribute__((always_inline)) void tile_sums(int nt, long kf, const uint32_t *a, long lda,
                                                            const uint32_t *b, long ldb, const float *c, long ldc) {
    if (c) {
        _tile_loadd(0, c, ldc * 4);
        if (nt > 1) _tile_loadd(1, c + 16, ldc * 4);
        if (nt > 2) _tile_loadd(2, c + 32, ldc * 4);
        if (nt > 3) _tile_loadd(3, c + 48, ldc * 4);
    } else {
        _tile_zero(0);
        if (nt > 1) _tile_zero(1);
        if (nt > 2) _tile_zero(2);
        if (nt > 3) _tile_zero(3);
    }
    for (long k0 = 0; k0 < kf; k0 += TILE_PAIRS) {
        const uint32_t *bk = b + k0 * ldb;
        _tile_loadd(4, a + k0, lda * 4);
        _tile_loadd(5, bk, ldb * 4);
        _tile_dpbf16ps(0, 4, 5);
        if (nt > 1) {
            _tile_loadd(6, bk + 16, ldb * 4);
            _tile_dpbf16ps(1, 4, 6);
        }
        if (nt > 2) {
            _tile_loadd(7, bk + 32, ldb * 4);
            _tile_dpbf16ps(2, 4, 7);
        }
        if (nt > 3) {
            _tile_loadd(5, bk + 48, ldb * 4);
            _tile_dpbf16ps(3, 4, 5);
        }
    }
}

static inline __attribute__((always_inline)) void tile_store(int nt, float *acc, long ld) {
    _tile_stored(0, acc, ld * 4);
    if (nt > 1) _tile_stored(1, acc + 16, ld * 4);
    if (nt > 2) _tile_stored(2, acc + 32, ld * 4);
    if (nt > 3) _tile_stored(3, acc + 48, ld * 4);
}

// One block's sums: stored to C as they are (C = AB, or C += AB with C the tiles' start: no
// pass after them) where the mode allows and no pairs are left over; else to acc (16, 64).
// Returns whether C is done.
static inline __attribute__((always_inline)) bool block_sums(int nt, ct_att_mode mode, long kf, long Kp,
                                                             const uint32_t *a, long lda, const uint32_t *b, long ldb,
                                                             float *c, long ldc, float alpha, float *acc) {
    const bool direct = kf == Kp && ((mode == CT_ATT_STORE && alpha == 1.0f) || mode == CT_ATT_ADD);
    tile_sums(nt, kf, a, lda, b, ldb, direct && mode == CT_ATT_ADD ? c : NULL, ldc);
    tile_store(nt, direct ? c : acc, direct ? ldc : BLOCK_COLS);
    return direct;
}

// C (16, 16 nt) (mode) acc (16, 64): the register kernel's step after its chain.
static void finish(ct_att_mode mode, int nt, const float *acc, float *c, long ldc, float alpha, const float *vec) {
    const vf va = VSET1(alpha);
    for (int r = 0; r < TILE_ROWS; r++)
        for (int v = 0; v < nt; v++) {
            float *cp = c + r * ldc + v * 16;
            vf s = VLOAD(acc + r * BLOCK_COLS + v * 16);
            if (mode == CT_ATT_STORE)
                VSTORE(cp, VMUL(s, va));
            else if (mode == CT_ATT_ADD)
                VSTORE(cp, VADD(VLOAD(cp), s));
            else if (mode == CT_ATT_RESCALE)
                VSTORE(cp, VFMA(VLOAD(cp), VSET1(vec[r]), s));
            else
                VSTORE(cp, VMUL(VMUL(va, VLOAD(cp)), VSUB(s, VLOAD(vec + v * 16))));
        }
}

void ct_att16_mm_amx(ct_att_mode mode, long M, long N, long Kp, const uint32_t *a, long lda, const uint32_t *b,
                     long ldb, float *c, long ldc, float alpha, const float *vec) {
    float acc[TILE_ROWS * BLOCK_COLS] __attribute__((aligned(64)));  // (16, 64) one block's sums
    const long mf = M / TILE_ROWS * TILE_ROWS, kf = Kp / TILE_PAIRS * TILE_PAIRS;
    for (long i0 = 0; i0 < mf; i0 += TILE_ROWS)
        for (long j0 = 0; j0 < N; j0 += BLOCK_COLS) {
            const int nt = (int)((N - j0 < BLOCK_COLS ? N - j0 : BLOCK_COLS) / 16);
            const uint32_t *ai = a + i0 * lda, *bj = b + j0;
            float *cij = c + i0 * ldc + j0;
            bool done;
            switch (nt) {
            case 1: done = block_sums(1, mode, kf, Kp, ai, lda, bj, ldb, cij, ldc, alpha, acc); break;
            case 2: done = block_sums(2, mode, kf, Kp, ai, lda, bj, ldb, cij, ldc, alpha, acc); break;
            case 3: done = block_sums(3, mode, kf, Kp, ai, lda, bj, ldb, cij, ldc, alpha, acc); break;
            default: done = block_sums(4, mode, kf, Kp, ai, lda, bj, ldb, cij, ldc, alpha, acc); break;
            }
            if (done) continue;
            if (kf < Kp)  // the last pairs, onto the tiles' sums
                ct_att_mm_bf16(CT_ATT_ADD, TILE_ROWS, nt * 16L, Kp - kf, ai + kf, lda, 1, bj + kf * ldb, ldb, acc,
                               BLOCK_COLS, 1.0f, NULL);
            finish(mode, nt, acc, cij, ldc, alpha,
                   !vec ? NULL : mode == CT_ATT_DS ? vec + j0 : vec + i0);
        }
    if (mf < M)  // the last rows
        ct_att_mm_bf16(mode, M - mf, N, Kp, a + mf * lda, lda, 1, b, ldb, c + mf * ldc, ldc, alpha,
                       !vec ? NULL : mode == CT_ATT_DS ? vec : vec + mf);
}

#else  // no AMX in this build
bool ct_att16_tiles_begin(void) { return false; }
void ct_att16_tiles_end(void) {}
bool ct_att16_tiles_held(void) { return false; }
void ct_att16_mm_amx(ct_att_mode mode, long M, long N, long Kp, const uint32_t *a, long lda, const uint32_t *b,
                     long ldb, float *c, long ldc, float alpha, const float *vec) {
    ct_fatal("ct_att16_mm_amx", "this kernel set has no AMX (ct_att16_tiles_held is false here)");
}
#endif
