// Fused forward chains (contracts in kernels.h, "fused forward chains"): the residual add with the
// RMSNorm after it, and the three matmuls of a block with what comes right before or after them
// (the norm that feeds wqkv / w13, the SwiGLU after w13, the RoPE after wqkv).
//
// The matmul kernels split the rows into blocks of CT_FUSED_ROWS_MIN..CT_FUSED_ROWS_MAX rows,
// hand the blocks out to the threads, and on each block run the step before the gemm, the gemm
// (ct_gemm called inside the parallel region, so it runs on the calling thread: see gemm.c),
// and the step after it. A block's rows are normalised straight into the buffer its
// gemm reads and are still in that core's cache when multiplied; a block's gemm output is still
// in cache when the SwiGLU / RoPE reads it back. With fewer blocks than threads (few rows) the
// split would idle threads, so the chain runs on all rows at once instead: the elementwise
// steps row-parallel, the gemm on all threads.
//
// Blocks are up to 256 rows: each block gemm packs the weight again (ct_gemm packs its B operand
// per call), a cost spread over the block's rows, so blocks much shorter lose to one gemm on all
// rows; 256 rows of C = 768 floats (768 KiB) still sit in a core's L2.
//
// The elementwise steps are the unfused kernels' arithmetic: the norm row is the shared
// ct_rmsnorm_row, the SwiGLU row the shared ct_swiglu_row, the RoPE row the shared ct_rope_row,
// so given the gemm's product they give the same bits; and a block's gemm sums each element as one gemm on all rows
// does (gemm.c), so every output is the unfused chain's bits (test_kernels_fused).
#include <omp.h>

#include "core/error.h"
#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/rmsnorm_row.h"
#include "kernels/cpu/rope_row.h"
#include "kernels/cpu/swiglu_row.h"
#include "kernels/kernels.h"

#define CT_FUSED_ROWS_MIN 32
#define CT_FUSED_ROWS_MAX 256

// How the rows are cut: blocks of `rows` rows (the last one shorter), `per_thread` when there
// are at least as many blocks as threads (else the chain runs on all rows at once).
typedef struct {
    long rows, nblocks;
    int per_thread;
} row_plan;

static row_plan plan_rows(long N) {
    long nt = omp_get_max_threads();
    long r = (N + nt - 1) / nt;
    r = r < CT_FUSED_ROWS_MIN ? CT_FUSED_ROWS_MIN : r > CT_FUSED_ROWS_MAX ? CT_FUSED_ROWS_MAX : r;
    row_plan p = {r, (N + r - 1) / r, 0};
    p.per_thread = p.nblocks >= nt;
    return p;
}

// Scratch for the rows that are not kept: one slot per thread for a block of up to
// min(N, ROWS_MAX) rows of `width` floats. The slots also hold all N rows when the chain runs at
// once (then N < ROWS_MIN * threads).
static long slot_floats(long N, long width) { return (N < CT_FUSED_ROWS_MAX ? N : CT_FUSED_ROWS_MAX) * width; }
static long scratch_floats(long N, long width) { return N > 0 ? (long)omp_get_max_threads() * slot_floats(N, width) : 0; }

// out (m, OC) = A (m, C) @ W (OC, C)^T, on this thread (called inside a parallel region).
static void block_gemm(float *out, const float *A, const float *W, long m, long C, long OC) {
    ct_gemm(0, 1, m, OC, C, 1.0f, A, C, W, C, 0.0f, out, OC);
}

// ------------------------------------------------------------------ residual + RMSNorm

void ct_residual_rmsnorm_forward(float *x_out, float *norm_out, float *rstd, const float *x,
                                 const float *residual_delta, const float *weight, long N, long C, float eps) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const float *xr = x + n * C, *d = residual_delta + n * C;  // (C)
        float *xo = x_out + n * C;                                  // (C), may be xr or d
        for (long c = 0; c < C; c++) xo[c] = xr[c] + d[c];         // ct_add_inplace's sum
        rstd[n] = ct_rmsnorm_row(norm_out + n * C, xo, weight, C, eps);
    }
}

// ------------------------------------------------------------------ RMSNorm + linear

long ct_rmsnorm_linear_scratch_floats(long N, long C, long OC) { return scratch_floats(N, C); }

void ct_rmsnorm_linear_forward(float *out, float *norm_out, float *rstd, const float *x, const float *norm_weight,
                               const float *W, long N, long C, long OC, float eps, float *scratch) {
    if (N <= 0) return;
    row_plan p = plan_rows(N);
    if (!p.per_thread) {
        float *nrm = norm_out ? norm_out : scratch;  // (N, C)
        ct_rmsnorm_forward(nrm, rstd, x, norm_weight, N, C, eps);
        ct_gemm(0, 1, N, OC, C, 1.0f, nrm, C, W, C, 0.0f, out, OC);
        return;
    }
    long next = 0;  // blocks handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    {
        float *mine = norm_out ? NULL : scratch + omp_get_thread_num() * slot_floats(N, C);
        for (long b; (b = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED)) < p.nblocks;) {
            long r0 = b * p.rows, m = N - r0 < p.rows ? N - r0 : p.rows;
            float *nrm = norm_out ? norm_out + r0 * C : mine;  // (m, C)
            for (long i = 0; i < m; i++)
                rstd[r0 + i] = ct_rmsnorm_row(nrm + i * C, x + (r0 + i) * C, norm_weight, C, eps);
            block_gemm(out + r0 * OC, nrm, W, m, C, OC);
        }
    }
}

// ------------------------------------------------------------------ linear + SwiGLU

// h (m, F) = silu(gate) * up of m rows of [gate | up] (m, 2F): the row swiglu.c runs.
static void swiglu_rows(float *h, const float *h13, long m, long F) {
    for (long i = 0; i < m; i++) ct_swiglu_row(h + i * F, h13 + i * 2 * F, h13 + i * 2 * F + F, F);
}

long ct_linear_swiglu_scratch_floats(long N, long C, long F) { return scratch_floats(N, 2 * F); }

void ct_linear_swiglu_forward(float *h13, float *h, const float *inp, const float *W13, long N, long C, long F,
                              float *scratch) {
    if (N <= 0) return;
    row_plan p = plan_rows(N);
    if (!p.per_thread) {
        float *hh = h13 ? h13 : scratch;  // (N, 2F)
        ct_gemm(0, 1, N, 2 * F, C, 1.0f, inp, C, W13, C, 0.0f, hh, 2 * F);
        ct_swiglu_forward(h, hh, N, F);
        return;
    }
    long next = 0;  // blocks handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    {
        float *mine = h13 ? NULL : scratch + omp_get_thread_num() * slot_floats(N, 2 * F);
        for (long b; (b = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED)) < p.nblocks;) {
            long r0 = b * p.rows, m = N - r0 < p.rows ? N - r0 : p.rows;
            float *hh = h13 ? h13 + r0 * 2 * F : mine;  // (m, 2F)
            block_gemm(hh, inp + r0 * C, W13, m, C, 2 * F);
            swiglu_rows(h + r0 * F, hh, m, F);
        }
    }
}

// ------------------------------------------------------------------ linear + RoPE

// Rows [r0, r0 + m) of qkv (row stride ld): q heads (NH) at column 0 and k heads (NKV) at
// NH*HS rotated by their token's angle: rope.c's row (rope_row.h) with dir = +1.
static void rope_rows(float *qkv, long ld, long r0, long m, const float *cos_tab, const float *sin_tab,
                      const int32_t *pos, long T, long NH, long NKV, long HS) {
    long half = HS / 2;
    for (long n = r0; n < r0 + m; n++) {
        long t = n % T, p = pos ? (long)pos[t] : t;
        const float *cs = cos_tab + p * half, *sn = sin_tab + p * half;  // (HS/2)
        ct_rope_row(qkv + n * ld, NH + NKV, HS, cs, sn, 1.0f);            // (NH + NKV, HS) rotated
    }
}

// Nothing to keep aside: the cpu needs no scratch here (the member is there for other backends).
long ct_linear_rope_scratch_floats(long N, long C, long QKV) { return 0; }

void ct_linear_rope_forward(float *qkv, const float *inp, const float *W, long N, long C, long QKV,
                            const float *cos_tab, const float *sin_tab, const int32_t *pos, long B, long T, long NH,
                            long NKV, long HS, float *scratch) {
    if (N != B * T || (NH + 2 * NKV) * HS > QKV)
        ct_fatal("ct_linear_rope_forward", "N=%ld is not B*T=%ld*%ld, or (NH %ld + 2 NKV %ld) * HS %ld > QKV %ld", N,
                 B, T, NH, NKV, HS, QKV);
    if (N <= 0) return;
    row_plan p = plan_rows(N);
    if (!p.per_thread) {
        ct_gemm(0, 1, N, QKV, C, 1.0f, inp, C, W, C, 0.0f, qkv, QKV);
#pragma omp parallel for schedule(static)
        for (long n = 0; n < N; n++) rope_rows(qkv, QKV, n, 1, cos_tab, sin_tab, pos, T, NH, NKV, HS);
        return;
    }
    long next = 0;  // blocks handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    for (long b; (b = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED)) < p.nblocks;) {
        long r0 = b * p.rows, m = N - r0 < p.rows ? N - r0 : p.rows;
        block_gemm(qkv + r0 * QKV, inp + r0 * C, W, m, C, QKV);
        rope_rows(qkv, QKV, r0, m, cos_tab, sin_tab, pos, T, NH, NKV, HS);
    }
}
