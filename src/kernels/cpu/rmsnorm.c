// RMSNorm (Zhang & Sennrich 2019): y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
#include <math.h>

#include "kernels/cpu/rmsnorm_row.h"
#include "kernels/cpu/spin.h"
#include "kernels/kernels.h"

// (`omp simd reduction` lets the compiler vectorise the float sums, which strict IEEE order
// would forbid; the order is still fixed, so results stay reproducible.)

// The row itself is ct_rmsnorm_row (rmsnorm_row.h), which the fused kernels share.
void ct_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, long N, long C, float eps) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) rstd[n] = ct_rmsnorm_row(out + n * C, inp + n * C, weight, C, eps);
}

// What a block keeps under bf16 mixed precision: the fp32 norm's values narrowed row by row, so
// no fp32 copy of the output is written and read back.
void ct_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *weight, long N, long C,
                             float eps) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) rstd[n] = ct_rmsnorm_row_bf16(out + n * C, inp + n * C, weight, C, eps);
}

// dinp_c += r w_c dy_c - r^3/C x_c sum_j(dy_j w_j x_j)
// dweight_c += sum_n dy_nc x_nc r_n
// One pass over x and dy: rows go in blocks of CT_RMS_ROW_BLOCK, handed out in order; a thread
// sums its block's share of dweight in a row of its own and adds it to dweight when the block
// before has been added (a turn counter), so dweight = ((dweight + s_0) + s_1) + ... over the
// blocks in order, whatever the thread count: reproducible. Against a second pass for dweight, over
// column blocks of all rows, the one-pass backward takes 0.57-0.64 of the time at bench S's (2048,
// 256) and 0.56 at M's (2048, 768) (a 2-core Xeon with AMX, two threads, caches flushed
// before each call, medians of 41). Rows wider than CT_RMS_SPAN take a pass per span of columns.
#define CT_RMS_ROW_BLOCK 64
#define CT_RMS_SPAN 16384  // dweight columns a thread's stack row holds (every Llama's dim)

// Rows [n0, n1): dx (when dinp) and the block's share of dweight's columns [c0, c0 + cw) into
// part (when non-NULL).
static void backward_rows(float *dinp, float *part, long c0, long cw, const float *dout, const float *inp,
                          const float *weight, const float *rstd, long n0, long n1, long C) {
    if (part)
        for (long c = 0; c < cw; c++) part[c] = 0.0f;
    for (long n = n0; n < n1; n++) {
        const float *x = inp + n * C, *dy = dout + n * C;  // (C)
        float r = rstd[n];
        if (dinp) {
            float *dx = dinp + n * C;  // (C)
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (long c = 0; c < C; c++) dot += dy[c] * weight[c] * x[c];
            float k = r * r * r * dot / (float)C;
            for (long c = 0; c < C; c++) dx[c] += r * weight[c] * dy[c] - k * x[c];
        }
        if (part)
            for (long c = 0; c < cw; c++) part[c] += dy[c0 + c] * x[c0 + c] * r;
    }
}

// One pass over the rows: dinp (or NULL) and dweight's columns [c0, c0 + cw) (or NULL).
static void backward_pass(float *dinp, float *dweight, long c0, long cw, const float *dout, const float *inp,
                          const float *weight, const float *rstd, long N, long C) {
    const long nblocks = (N + CT_RMS_ROW_BLOCK - 1) / CT_RMS_ROW_BLOCK;
    long next = 0, added = 0;  // the next block to hand out; the blocks added to dweight so far
#pragma omp parallel
    {
        float part[CT_RMS_SPAN];  // (cw) this thread's block's share of dweight
        for (;;) {
            long b = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (b >= nblocks) break;
            long n0 = b * CT_RMS_ROW_BLOCK, n1 = n0 + CT_RMS_ROW_BLOCK < N ? n0 + CT_RMS_ROW_BLOCK : N;
            backward_rows(dinp, dweight ? part : NULL, c0, cw, dout, inp, weight, rstd, n0, n1, C);
            if (!dweight) continue;
            int spins = 0;  // blocks are handed out in order: the one waited for is running
            while (__atomic_load_n(&added, __ATOMIC_ACQUIRE) != b) ct_spin_turn(&spins);
            for (long c = 0; c < cw; c++) dweight[c] += part[c];
            __atomic_store_n(&added, b + 1, __ATOMIC_RELEASE);
        }
    }
}

// Either half may be skipped (NULL): a split backward computes dinp in its input-gradient pass
// and dweight later in its weight-gradient pass; each half alone gives the same bits.
void ct_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         const float *rstd, long N, long C) {
    if (!dweight) {
        backward_pass(dinp, NULL, 0, 0, dout, inp, weight, rstd, N, C);
        return;
    }
    for (long c0 = 0; c0 < C; c0 += CT_RMS_SPAN) {  // one pass up to 16,384 columns
        long cw = C - c0 < CT_RMS_SPAN ? C - c0 : CT_RMS_SPAN;
        backward_pass(c0 == 0 ? dinp : NULL, dweight + c0, c0, cw, dout, inp, weight, rstd, N, C);
    }
}
