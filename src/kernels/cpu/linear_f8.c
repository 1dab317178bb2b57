// Float8 / MXFP8 linear layers: quantise the operands into the caller's scratch, then multiply
// with ct_gemm_f8 / ct_gemm_mxfp8. Contracts and recipes in kernels/cpu/linear_f8.h.
// The float_formats helpers are serial by design; the loops here run them over row ranges (or
// column blocks) in parallel, with the same scalar casts, so the codes and scales are the ones
// the serial helpers give.
//
// Under tensor parallel (ct_f8_split, kernels/backend.h) an amax that spans a split dimension is
// computed locally, handed to the caller's amax_max (a MAX over the tp group), and only then
// turned into a scale: the casts are the single-process layer's, shard by shard.
#include "kernels/cpu/linear_f8.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/error.h"
#include "core/float_formats.h"
#include "core/mathutil.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_f8.h"

#define PAR_MIN 65536  // elements below which a loop stays serial (thread start-up dominates)
#define CHUNK 16384    // elements per task of the tensorwise amax / cast
#define COLS 64        // columns per task of the columnwise amax
#define TILE 32        // transpose tile

// The gradient's element format in every recipe (see the header for torchao's choices).
#define GRAD_FMT CT_F8_E5M2


// Whether a loop over n elements runs on the team. Serial loops are plain loops, not
// `parallel for if (...)`: libgomp allocates and frees a team for every region that runs on one
// thread (an `if` clause that is false, one thread, a region nested in another); only a team of
// several is kept for the next region. Branching here keeps a steady step free of allocations.
static int par(long n) { return n > PAR_MIN && omp_get_max_threads() > 1 && !omp_in_parallel(); }

// ---- agreeing on amaxes over tp ----------------------------------------------------------------

// Whether amaxes over a dimension that `split` says is this rank's part must be agreed on.
static bool agree(const ct_f8_split *sp, bool split_dim) { return sp && sp->amax_max && split_dim; }

// amax (n) = its max over the ranks of sp. NaNs are made positive first (amax_max's contract:
// the bit patterns of values >= +0 and of positive NaNs order as MAX-with-NaN-winning).
static void amax_agree(const ct_f8_split *sp, float *amax, long n) {
    for (long i = 0; i < n; i++)
        if (isnan(amax[i])) {
            uint32_t b = 0x7fc00000u;  // the positive quiet NaN
            memcpy(&amax[i], &b, sizeof b);
        }
    sp->amax_max(sp->ctx, amax, n);
}

// Chunk c of the n elements into the running max *m (NaN sets *nan).
static void amax_chunk(const float *x, long n, long c, float *m, int *nan) {
    long len = n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK;
    float a = ct_amax_f32(x + c * CHUNK, len);
    if (isnan(a)) *nan = 1;
    else if (a > *m) *m = a;
}

// max |x| over n elements, NaN if any is NaN (ct_amax_f32's contract), in parallel chunks.
static float amax_par(const float *x, long n) {
    long nc = (n + CHUNK - 1) / CHUNK;
    float m = 0.0f;
    int nan = 0;
    if (!par(n)) {
        for (long c = 0; c < nc; c++) amax_chunk(x, n, c, &m, &nan);
        return nan ? NAN : m;
    }
#pragma omp parallel
    {
        float lm = 0.0f;
        int lnan = 0;
#pragma omp for schedule(static) nowait
        for (long c = 0; c < nc; c++) amax_chunk(x, n, c, &lm, &lnan);
#pragma omp critical(ct_linear_f8_amax)
        {
            nan |= lnan;
            if (lm > m) m = lm;
        }
    }
    return nan ? NAN : m;
}

// Chunk c of the n elements cast with the scale s.
static void cast_chunk(const float *x, long n, long c, ct_dtype fmt, float s, uint8_t *q) {
    long len = n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK;
    ct_f8_quantize(x + c * CHUNK, len, fmt, s, q + c * CHUNK);
}

// Tensorwise: one scale (torchao's tensorwise scales are not rounded to powers of two). split:
// the tensor is this rank's part of one that sp splits, whose amax is agreed on.
static void quantize_tensor(const float *x, long n, ct_dtype fmt, const ct_f8_split *sp, bool split, float *scale,
                            uint8_t *q) {
    *scale = amax_par(x, n);
    if (agree(sp, split)) amax_agree(sp, scale, 1);
    *scale = ct_f8_scale_from_amax(*scale, fmt, 0);
    long nc = (n + CHUNK - 1) / CHUNK;
    float s = *scale;
    if (par(n)) {
#pragma omp parallel for schedule(static)
        for (long c = 0; c < nc; c++) cast_chunk(x, n, c, fmt, s, q);
    } else {
        for (long c = 0; c < nc; c++) cast_chunk(x, n, c, fmt, s, q);
    }
}

// Row r's amax in scales[r] -> its scale, and the row's cast.
static void row_scale_cast(const float *x, long r, long cols, ct_dtype fmt, float *scales, uint8_t *q) {
    scales[r] = ct_f8_scale_from_amax(scales[r], fmt, 1);
    ct_f8_quantize(x + r * cols, cols, fmt, scales[r], q + r * cols);
}
// Row r's amax, scale and cast in one go (ct_f8_quantize_rows of one row).
static void row_quantize(const float *x, long r, long cols, ct_dtype fmt, float *scales, uint8_t *q) {
    scales[r] = ct_amax_f32(x + r * cols, cols);
    row_scale_cast(x, r, cols, fmt, scales, q);
}

// One scale per row, rounded down to a power of two (torchao rowwise): ct_f8_quantize_rows.
// split: the rows are this rank's parts of rows that sp splits (cols is the split dimension):
// then every row's amax is taken and agreed on before any row is scaled and cast.
static void quantize_rows(const float *x, long rows, long cols, ct_dtype fmt, const ct_f8_split *sp, bool split,
                          float *scales, uint8_t *q) {
    bool p = par(rows * cols);
    if (agree(sp, split)) {
        if (p) {
#pragma omp parallel for schedule(static)
            for (long r = 0; r < rows; r++) scales[r] = ct_amax_f32(x + r * cols, cols);
        } else {
            for (long r = 0; r < rows; r++) scales[r] = ct_amax_f32(x + r * cols, cols);
        }
        amax_agree(sp, scales, rows);
        if (p) {
#pragma omp parallel for schedule(static)
            for (long r = 0; r < rows; r++) row_scale_cast(x, r, cols, fmt, scales, q);
        } else {
            for (long r = 0; r < rows; r++) row_scale_cast(x, r, cols, fmt, scales, q);
        }
    } else if (p) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) row_quantize(x, r, cols, fmt, scales, q);
    } else {
        for (long r = 0; r < rows; r++) row_quantize(x, r, cols, fmt, scales, q);
    }
}

// One scale per column, power of two: ct_f8_quantize_cols, with the amax in column blocks (a
// task walks every row of its COLS columns) and the cast in row ranges.
// The amaxes of column block b (COLS columns from b COLS) of quantize_cols, into amax.
static void col_block_amax(const float *x, long rows, long cols, long b, float *amax) {
    long c0 = b * COLS, w = cols - c0 < COLS ? cols - c0 : COLS;
    float m[COLS];
    for (long c = 0; c < w; c++) m[c] = 0.0f;
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * cols + c0;
        for (long c = 0; c < w; c++) {
            float a = fabsf(xr[c]);
            if (isnan(m[c])) continue;  // NaN sticks (ct_amax_cols, torch.amax)
            if (isnan(a) || a > m[c]) m[c] = a;
        }
    }
    for (long c = 0; c < w; c++) amax[c0 + c] = m[c];
}
static void cast_row_cols(const float *x, long r, long cols, ct_dtype fmt, const float *scales, uint8_t *q) {
    for (long c = 0; c < cols; c++) q[r * cols + c] = ct_f32_to_f8(x[r * cols + c] * scales[c], fmt, CT_F8_SATURATE);
}
// split: the columns are this rank's parts of columns that sp splits (rows is the split
// dimension): the column amaxes are agreed on between the amax and the cast passes.
static void quantize_cols(const float *x, long rows, long cols, ct_dtype fmt, const ct_f8_split *sp, bool split,
                          float *scales, uint8_t *q) {
    long nblk = (cols + COLS - 1) / COLS;
    bool p = par(rows * cols);
    if (p) {
#pragma omp parallel for schedule(static)
        for (long b = 0; b < nblk; b++) col_block_amax(x, rows, cols, b, scales);
    } else {
        for (long b = 0; b < nblk; b++) col_block_amax(x, rows, cols, b, scales);
    }
    if (agree(sp, split)) amax_agree(sp, scales, cols);
    for (long c = 0; c < cols; c++) scales[c] = ct_f8_scale_from_amax(scales[c], fmt, 1);
    if (p) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) cast_row_cols(x, r, cols, fmt, scales, q);
    } else {
        for (long r = 0; r < rows; r++) cast_row_cols(x, r, cols, fmt, scales, q);
    }
}

// MX blocks of 32 along each row (ct_mx_quantize_rows), e8m0 scales (rows, nblocks(cols)).
static void quantize_mx(const float *x, long rows, long cols, ct_dtype fmt, uint8_t *scales, uint8_t *q) {
    long nb = ct_mx_nblocks(cols);
    if (par(rows * cols)) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) ct_mx_quantize_rows(x + r * cols, 1, cols, fmt, q + r * cols, scales + r * nb);
    } else {
        ct_mx_quantize_rows(x, rows, cols, fmt, q, scales);
    }
}

// dst (cols, rows) fp32 = src (rows, cols)^T, in tiles; src fp32 or bf16 (widened on the way,
// exactly, so a bf16 source costs no fp32 copy of its own).
static void transpose_tile(float *dst, const void *src, ct_dtype dt, long rows, long cols, long i0, long j0) {
    long i1 = i0 + TILE < rows ? i0 + TILE : rows, j1 = j0 + TILE < cols ? j0 + TILE : cols;
    if (dt == CT_BF16) {
        const uint16_t *s = src;
        for (long j = j0; j < j1; j++)
            for (long i = i0; i < i1; i++) dst[j * rows + i] = ct_bf16_to_f32(s[i * cols + j]);
    } else {
        const float *s = src;
        for (long j = j0; j < j1; j++)
            for (long i = i0; i < i1; i++) dst[j * rows + i] = s[i * cols + j];
    }
}
static void transpose(float *dst, const void *src, ct_dtype dt, long rows, long cols) {
    if (par(rows * cols)) {
#pragma omp parallel for collapse(2) schedule(static)
        for (long i0 = 0; i0 < rows; i0 += TILE)
            for (long j0 = 0; j0 < cols; j0 += TILE) transpose_tile(dst, src, dt, rows, cols, i0, j0);
    } else {
        for (long i0 = 0; i0 < rows; i0 += TILE)
            for (long j0 = 0; j0 < cols; j0 += TILE) transpose_tile(dst, src, dt, rows, cols, i0, j0);
    }
}

// ---- the input operand -----------------------------------------------------------------------
static void check_input(ct_dtype dt) {
    if (dt != CT_F32 && dt != CT_BF16)
        ct_fatal("linear_f8", "input of dtype %s: the 8-bit linears take f32 or bf16", ct_dtype_name(dt));
}
// inp (n elements of dt) as fp32: itself, or a bf16 input widened into `spare`, a part of the
// scratch nothing else uses before the matmul (the decoded tiles' region, >= n floats).
static const float *input_f32(const void *inp, ct_dtype dt, long n, float *spare) {
    if (dt == CT_F32) return inp;
    ct_bf16_to_f32_array(spare, inp, n);
    return spare;
}

// ---- forward ---------------------------------------------------------------------------------
// Layout: [gemm scratch][float scales: N + OC][codes: N*IC, OC*IC][e8m0 scales: (N + OC) nb];
// the gemm scratch (N*IC + OC*IC) first holds a bf16 inp widened, until inp is quantised.
long ct_f8_scratch_floats(long N, long IC, long OC) {
    long bytes = (N + OC) * IC + (N + OC) * ct_mx_nblocks(IC);
    return ct_gemm_f8_scratch_floats(N, OC, IC, 0) + N + OC + (bytes + 3) / 4;
}

void ct_linear_forward_f8(float *out, const void *inp_any, ct_dtype inp_dtype, const float *weight, long N, long IC,
                          long OC, ct_f8_recipe recipe, const ct_f8_split *split, float *scratch) {
    check_input(inp_dtype);
    if (N <= 0 || OC <= 0) return;
    bool ic = split && split->ic_split, oc = split && split->oc_split;
    float *g = scratch, *sx = g + ct_gemm_f8_scratch_floats(N, OC, IC, 0), *sw = sx + N;
    uint8_t *qx = (uint8_t *)(sw + OC), *qw = qx + N * IC, *mx = qw + OC * IC, *mw = mx + N * ct_mx_nblocks(IC);
    const float *inp = input_f32(inp_any, inp_dtype, N * IC, g);  // g: the gemm's, N*IC + OC*IC floats
    switch (recipe) {
    case CT_F8_RECIPE_TENSORWISE:
        quantize_tensor(inp, N * IC, CT_F8_E4M3, split, ic, sx, qx);
        quantize_tensor(weight, OC * IC, CT_F8_E4M3, split, ic || oc, sw, qw);
        ct_gemm_f8(0, 1, N, OC, IC, qx, IC, CT_F8_E4M3, sx, qw, IC, CT_F8_E4M3, sw, 0, 0.0f, out, OC, g);
        break;
    case CT_F8_RECIPE_ROWWISE:  // weight's rows are the columns of weight^T: one scale per OC
        quantize_rows(inp, N, IC, CT_F8_E4M3, split, ic, sx, qx);  // amaxes over IC
        quantize_rows(weight, OC, IC, CT_F8_E4M3, split, ic, sw, qw);
        ct_gemm_f8(0, 1, N, OC, IC, qx, IC, CT_F8_E4M3, sx, qw, IC, CT_F8_E4M3, sw, 1, 0.0f, out, OC, g);
        break;
    case CT_F8_RECIPE_MXFP8:  // both (rows, IC): already blocked along the reduction dimension
        quantize_mx(inp, N, IC, CT_F8_E4M3, mx, qx);
        quantize_mx(weight, OC, IC, CT_F8_E4M3, mw, qw);
        ct_gemm_mxfp8(N, OC, IC, qx, mx, CT_F8_E4M3, qw, mw, CT_F8_E4M3, 0.0f, out, g);
        break;
    }
}

// ---- backward --------------------------------------------------------------------------------
// One matmul at a time, so the regions serve both (an unused tail is fine):
//   [gemm scratch G][scales of dout: max(N, OC)][scales of the other operand: IC]
//   [codes of dout: N*OC][codes of the other operand: max(OC, N) * IC]
//   [e8m0 of dout: max(N nb(OC), OC nb(N))][e8m0 of the other: IC max(nb(OC), nb(N))]
// G is the larger gemm's scratch: dweight's with beta (OC*N + N*IC + OC*IC), which also holds any
// one of the fp32 transposes MXFP8 makes (W^T, dout^T, inp^T), or a bf16 inp widened, before it
// is quantised.
typedef struct {
    float *g, *sg, *so;
    uint8_t *qg, *qo, *mg, *mo;
} bwd_scratch;

// Sizes of the regions above, in floats (G, the two scale arrays) and bytes (the rest).
static void bwd_sizes(long N, long IC, long OC, long f[3], long b[4]) {
    f[0] = ct_max_l(ct_gemm_f8_scratch_floats(N, IC, OC, 0), ct_gemm_f8_scratch_floats(OC, IC, N, 1));
    f[1] = ct_max_l(ct_max_l(N, OC), 1);
    f[2] = ct_max_l(IC, 1);
    b[0] = N * OC;
    b[1] = ct_max_l(OC, N) * IC;
    b[2] = ct_max_l(N * ct_mx_nblocks(OC), OC * ct_mx_nblocks(N));
    b[3] = IC * ct_max_l(ct_mx_nblocks(OC), ct_mx_nblocks(N));
}

long ct_f8_backward_scratch_floats(long N, long IC, long OC) {
    long f[3], b[4];
    bwd_sizes(N, IC, OC, f, b);
    return f[0] + f[1] + f[2] + (b[0] + b[1] + b[2] + b[3] + 3) / 4;
}

static bwd_scratch bwd_layout(float *scratch, long N, long IC, long OC) {
    long f[3], b[4];
    bwd_sizes(N, IC, OC, f, b);
    bwd_scratch s;
    s.g = scratch;
    s.sg = s.g + f[0];
    s.so = s.sg + f[1];
    s.qg = (uint8_t *)(s.so + f[2]);
    s.qo = s.qg + b[0];
    s.mg = s.qo + b[1];
    s.mo = s.mg + b[2];
    return s;
}

void ct_linear_backward_f8(float *dinp, float *dweight, const float *dout, const void *inp, ct_dtype inp_dtype,
                           const float *weight, long N, long IC, long OC, ct_f8_recipe recipe,
                           const ct_f8_split *split, float *scratch) {
    check_input(inp_dtype);
    if (N <= 0 || IC <= 0 || (!dinp && !dweight)) return;  // nothing to write (dweight += 0)
    bwd_scratch s = bwd_layout(scratch, N, IC, OC);
    bool ic = split && split->ic_split, oc = split && split->oc_split;  // N is never split
    switch (recipe) {
    case CT_F8_RECIPE_TENSORWISE:
        quantize_tensor(dout, N * OC, GRAD_FMT, split, oc, s.sg, s.qg);  // one cast of dout for both
        if (dinp) {  // (N, OC) @ (OC, IC)
            quantize_tensor(weight, OC * IC, CT_F8_E4M3, split, ic || oc, s.so, s.qo);
            ct_gemm_f8(0, 0, N, IC, OC, s.qg, OC, GRAD_FMT, s.sg, s.qo, IC, CT_F8_E4M3, s.so, 0, 0.0f, dinp, IC,
                       s.g);
        }
        if (dweight) {  // (N, OC)^T @ (N, IC)
            quantize_tensor(input_f32(inp, inp_dtype, N * IC, s.g), N * IC, CT_F8_E4M3, split, ic, s.so, s.qo);
            ct_gemm_f8(1, 0, OC, IC, N, s.qg, OC, GRAD_FMT, s.sg, s.qo, IC, CT_F8_E4M3, s.so, 0, 1.0f, dweight, IC,
                       s.g);
        }
        break;
    case CT_F8_RECIPE_ROWWISE:
        // scale_a per row of op(A), scale_b per column of op(B): both taken over the reduction.
        if (dinp) {  // rows of dout (over OC), columns of weight (over OC)
            quantize_rows(dout, N, OC, GRAD_FMT, split, oc, s.sg, s.qg);
            quantize_cols(weight, OC, IC, CT_F8_E4M3, split, oc, s.so, s.qo);
            ct_gemm_f8(0, 0, N, IC, OC, s.qg, OC, GRAD_FMT, s.sg, s.qo, IC, CT_F8_E4M3, s.so, 1, 0.0f, dinp, IC,
                       s.g);
        }
        if (dweight) {  // rows of dout^T = columns of dout (over N), columns of inp (over N)
            quantize_cols(dout, N, OC, GRAD_FMT, split, false, s.sg, s.qg);
            quantize_cols(input_f32(inp, inp_dtype, N * IC, s.g), N, IC, CT_F8_E4M3, split, false, s.so, s.qo);
            ct_gemm_f8(1, 0, OC, IC, N, s.qg, OC, GRAD_FMT, s.sg, s.qo, IC, CT_F8_E4M3, s.so, 1, 1.0f, dweight, IC,
                       s.g);
        }
        break;
    case CT_F8_RECIPE_MXFP8:
        // ct_gemm_mxfp8 takes A (M, K), B (N', K), both blocked along K: the transposes go
        // through G (free until the gemm) and are quantised out of it.
        if (dinp) {  // A = dout (N, OC), B = weight^T (IC, OC); K = OC
            quantize_mx(dout, N, OC, GRAD_FMT, s.mg, s.qg);
            transpose(s.g, weight, CT_F32, OC, IC);
            quantize_mx(s.g, IC, OC, CT_F8_E4M3, s.mo, s.qo);
            ct_gemm_mxfp8(N, IC, OC, s.qg, s.mg, GRAD_FMT, s.qo, s.mo, CT_F8_E4M3, 0.0f, dinp, s.g);
        }
        if (dweight) {  // A = dout^T (OC, N), B = inp^T (IC, N); K = N
            transpose(s.g, dout, CT_F32, N, OC);
            quantize_mx(s.g, OC, N, GRAD_FMT, s.mg, s.qg);
            transpose(s.g, inp, inp_dtype, N, IC);
            quantize_mx(s.g, IC, N, CT_F8_E4M3, s.mo, s.qo);
            ct_gemm_mxfp8(OC, IC, N, s.qg, s.mg, GRAD_FMT, s.qo, s.mo, CT_F8_E4M3, 1.0f, dweight, s.g);
        }
        break;
    }
}
