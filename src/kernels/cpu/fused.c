// Fused forward chains (contracts in kernels.h, "fused forward chains"): the residual add with the
// RMSNorm after it, and the three matmuls of a block with what comes right before or after them
// (the norm that feeds wqkv / w13, the SwiGLU after w13, the RoPE after wqkv -- with the norm before
// it, the whole chain of a block without sequence parallel, in one product).
//
// A matmul whose input and output are kept runs as one product on all threads, ct_gemm's team
// (ct_gemm_with_row_hooks): the thread that takes a block of rows (at most 120) normalises them
// right before multiplying them, or applies the SwiGLU / RoPE to its rows of the output right
// after, while they are in its cache. Where the product is more than one packing of the weight
// (wide or deep weights: bench M's), the step before or after runs on all rows on its own, and
// the chain costs what the unfused one does. (Each thread running its own gemm on blocks of up
// to 256 rows, packing the weight again for each, is 4-10% slower than the unfused chain at S
// and 9-14% at M on Zen 4, bench_fused.)
//
// When a fused step's input or output is not kept (norm_out or h13 NULL), the rows go through
// scratch instead: the rows are cut into blocks of CT_FUSED_ROWS_MIN..CT_FUSED_ROWS_MAX rows
// handed out to the threads, and each block runs the step before the gemm, the gemm (ct_gemm
// called inside the parallel region, so on the calling thread) and the step after it. With
// fewer blocks than threads (few rows) the chain runs on all rows at once instead.
//
// The elementwise steps are the unfused kernels' arithmetic: the norm row is the shared
// ct_rmsnorm_row, the SwiGLU row the shared ct_swiglu_row, the RoPE row the shared ct_rope_row,
// so given the gemm's product they give the same bits; and ct_gemm sums each element the same way
// whichever rows a call covers and whichever thread computes them (gemm.c), so every output is
// the unfused chain's bits (test_kernels_fused).
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
        ct_residual_add_row(x_out + n * C, x + n * C, residual_delta + n * C, C);  // (C), may alias either
        rstd[n] = ct_rmsnorm_row(norm_out + n * C, x_out + n * C, weight, C, eps);
    }
}

// ------------------------------------------------------------------ RoPE rows

// The rows of qkv (row stride ld) to rotate, (B, T) of them: q heads (NH) at column 0 and k heads
// (NKV) at NH*HS, each by its token's angle.
typedef struct {
    float *qkv;
    long ld, T, NH, NKV, HS;
    const float *cos_tab, *sin_tab;
    const int32_t *pos;  // row b of T positions at pos + b * pos_ld (NULL: 0..T-1)
    long pos_ld;
} rope_rows_ctx;

// Rows [r0, r0 + m) rotated: rope.c's row (rope_row.h) with dir = +1.
static void rope_rows(const rope_rows_ctx *c, long r0, long m) {
    long half = c->HS / 2;
    for (long n = r0; n < r0 + m; n++) {
        long t = n % c->T, p = c->pos ? (long)c->pos[n / c->T * c->pos_ld + t] : t;
        const float *cs = c->cos_tab + p * half, *sn = c->sin_tab + p * half;  // (HS/2)
        ct_rope_row(c->qkv + n * c->ld, c->NH + c->NKV, c->HS, cs, sn, 1.0f);   // (NH + NKV, HS) rotated
    }
}

static void rope_rows_after(void *p, long r0, long n) { rope_rows(p, r0, n); }

// ------------------------------------------------------------------ RMSNorm + linear

long ct_rmsnorm_linear_scratch_floats(long N, long C, long OC) { return scratch_floats(N, C); }

// Rows [r0, r0 + n) of x normalised into norm_out, their rstd kept: ct_rmsnorm_forward's rows.
typedef struct {
    float *norm_out, *rstd;
    const float *x, *weight;
    long C;
    float eps;
} norm_rows_ctx;

static void norm_rows(const norm_rows_ctx *c, long r0, long n) {
    for (long i = r0; i < r0 + n; i++)
        c->rstd[i] = ct_rmsnorm_row(c->norm_out + i * c->C, c->x + i * c->C, c->weight, c->C, c->eps);
}

// The norm (before) and, when rope is given, RoPE (after) around one product's row blocks.
typedef struct {
    norm_rows_ctx norm;
    const rope_rows_ctx *rope;
} norm_rope_ctx;

static void norm_rows_before(void *p, long r0, long n) { norm_rows(&((const norm_rope_ctx *)p)->norm, r0, n); }
static void rope_rows_after_norm(void *p, long r0, long n) { rope_rows(((const norm_rope_ctx *)p)->rope, r0, n); }

// RMSNorm -> linear, then RoPE on the output rows when rope is not NULL.
static void rmsnorm_linear_chain(float *out, float *norm_out, float *rstd, const float *x, const float *norm_weight,
                                 const float *W, long N, long C, long OC, float eps, float *scratch,
                                 const rope_rows_ctx *rope) {
    if (N <= 0) return;
    if (norm_out) {  // one product; each row block normalised right before it is multiplied (and rotated after)
        norm_rope_ctx c = {{norm_out, rstd, x, norm_weight, C, eps}, rope};
        ct_gemm_row_hooks h = {.before = norm_rows_before, .after = rope ? rope_rows_after_norm : NULL, .ctx = &c};
        ct_gemm_with_row_hooks(1, N, OC, C, 1.0f, norm_out, C, W, C, 0.0f, out, OC, &h);
        return;
    }
    row_plan p = plan_rows(N);
    if (!p.per_thread) {
        ct_rmsnorm_forward(scratch, rstd, x, norm_weight, N, C, eps);  // (N, C)
        ct_gemm(0, 1, N, OC, C, 1.0f, scratch, C, W, C, 0.0f, out, OC);
        if (rope) rope_rows(rope, 0, N);
        return;
    }
    long next = 0;  // blocks handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    {
        float *nrm = scratch + omp_get_thread_num() * slot_floats(N, C);  // (rows, C)
        for (long b; (b = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED)) < p.nblocks;) {
            long r0 = b * p.rows, m = N - r0 < p.rows ? N - r0 : p.rows;
            for (long i = 0; i < m; i++)
                rstd[r0 + i] = ct_rmsnorm_row(nrm + i * C, x + (r0 + i) * C, norm_weight, C, eps);
            block_gemm(out + r0 * OC, nrm, W, m, C, OC);
            if (rope) rope_rows(rope, r0, m);
        }
    }
}

void ct_rmsnorm_linear_forward(float *out, float *norm_out, float *rstd, const float *x, const float *norm_weight,
                               const float *W, long N, long C, long OC, float eps, float *scratch) {
    rmsnorm_linear_chain(out, norm_out, rstd, x, norm_weight, W, N, C, OC, eps, scratch, NULL);
}

void ct_rmsnorm_linear_rope_forward(float *qkv, float *norm_out, float *rstd, const float *x,
                                    const float *norm_weight, const float *W, long N, long C, long QKV, float eps,
                                    const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld,
                                    long B, long T, long NH, long NKV, long HS, float *scratch) {
    if (N != B * T || (NH + 2 * NKV) * HS > QKV)
        ct_fatal("ct_rmsnorm_linear_rope_forward", "N=%ld is not B*T=%ld*%ld, or (NH %ld + 2 NKV %ld) * HS %ld > QKV %ld",
                 N, B, T, NH, NKV, HS, QKV);
    rope_rows_ctx r = {qkv, QKV, T, NH, NKV, HS, cos_tab, sin_tab, pos, pos_ld};
    rmsnorm_linear_chain(qkv, norm_out, rstd, x, norm_weight, W, N, C, QKV, eps, scratch, &r);
}

// ------------------------------------------------------------------ linear + SwiGLU

// h (m, F) = silu(gate) * up of m rows of [gate | up] (m, 2F): the row swiglu.c runs.
static void swiglu_rows(float *h, const float *h13, long m, long F) {
    for (long i = 0; i < m; i++) ct_swiglu_row(h + i * F, h13 + i * 2 * F, h13 + i * 2 * F + F, F);
}

long ct_linear_swiglu_scratch_floats(long N, long C, long F) { return scratch_floats(N, 2 * F); }

typedef struct {
    float *h;
    const float *h13;
    long F;
} swiglu_rows_ctx;

static void swiglu_rows_after(void *p, long r0, long n) {
    const swiglu_rows_ctx *c = p;
    swiglu_rows(c->h + r0 * c->F, c->h13 + r0 * 2 * c->F, n, c->F);
}

void ct_linear_swiglu_forward(float *h13, float *h, const float *inp, const float *W13, long N, long C, long F,
                              float *scratch) {
    if (N <= 0) return;
    if (h13) {  // one product; each row block's SwiGLU right after its rows of h13 are final
        swiglu_rows_ctx c = {h, h13, F};
        ct_gemm_row_hooks hk = {.after = swiglu_rows_after, .ctx = &c};
        ct_gemm_with_row_hooks(1, N, 2 * F, C, 1.0f, inp, C, W13, C, 0.0f, h13, 2 * F, &hk);
        return;
    }
    row_plan p = plan_rows(N);
    if (!p.per_thread) {
        ct_gemm(0, 1, N, 2 * F, C, 1.0f, inp, C, W13, C, 0.0f, scratch, 2 * F);  // (N, 2F)
        ct_swiglu_forward(h, scratch, N, F);
        return;
    }
    long next = 0;  // blocks handed out as threads ask (not schedule(dynamic): omp_inline.c)
#pragma omp parallel
    {
        float *hh = scratch + omp_get_thread_num() * slot_floats(N, 2 * F);  // (rows, 2F)
        for (long b; (b = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED)) < p.nblocks;) {
            long r0 = b * p.rows, m = N - r0 < p.rows ? N - r0 : p.rows;
            block_gemm(hh, inp + r0 * C, W13, m, C, 2 * F);
            swiglu_rows(h + r0 * F, hh, m, F);
        }
    }
}

// ------------------------------------------------------------------ linear + RoPE

// Nothing to keep aside: the cpu needs no scratch here (the member is there for other backends).
long ct_linear_rope_scratch_floats(long N, long C, long QKV) { return 0; }

void ct_linear_rope_forward(float *qkv, const float *inp, const float *W, long N, long C, long QKV,
                            const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                            long T, long NH, long NKV, long HS, float *scratch) {
    if (N != B * T || (NH + 2 * NKV) * HS > QKV)
        ct_fatal("ct_linear_rope_forward", "N=%ld is not B*T=%ld*%ld, or (NH %ld + 2 NKV %ld) * HS %ld > QKV %ld", N,
                 B, T, NH, NKV, HS, QKV);
    if (N <= 0) return;
    // one product; each row block's q and k heads rotated right after its rows are final
    rope_rows_ctx c = {qkv, QKV, T, NH, NKV, HS, cos_tab, sin_tab, pos, pos_ld};
    ct_gemm_row_hooks h = {.after = rope_rows_after, .ctx = &c};
    ct_gemm_with_row_hooks(1, N, QKV, C, 1.0f, inp, C, W, C, 0.0f, qkv, QKV, &h);
}
