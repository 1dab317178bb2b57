// Token embedding, vocabulary-parallel: this rank holds rows [vocab_start, vocab_start + V_local)
// of the table; tokens outside the window give zero rows (another rank supplies them and the
// tensor-parallel reduction adds the parts).
#include <string.h>

#include "core/float_formats.h"
#include "kernels/kernels.h"

void ct_embedding_forward(float *out, const int32_t *tokens, const float *wte, long N, long C, long vocab_start,
                          long V_local) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        long row = (long)tokens[n] - vocab_start;
        float *o = out + n * C;  // (C)
        if (row >= 0 && row < V_local)
            memcpy(o, wte + row * C, (size_t)C * sizeof(float));
        else
            memset(o, 0, (size_t)C * sizeof(float));
    }
}

void ct_embedding_forward_bf16(float *out, const int32_t *tokens, const uint16_t *wte16, long N, long C,
                               long vocab_start, long V_local) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        long row = (long)tokens[n] - vocab_start;
        float *o = out + n * C;  // (C)
        if (row >= 0 && row < V_local)
            ct_bf16_to_f32_n(wte16 + row * C, o, C);
        else
            memset(o, 0, (size_t)C * sizeof(float));
    }
}

// The scatter-add races when two rows share a token, so threads split the COLUMNS: each owns a
// block of columns and walks every row in order. No two threads touch the same float, and each
// float receives its additions in row order, so the result is the same on every run and for
// every thread count.
#define CT_EMB_COL_BLOCK 64

void ct_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, long N, long C, long vocab_start,
                           long V_local) {
    long nblocks = (C + CT_EMB_COL_BLOCK - 1) / CT_EMB_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (long cb = 0; cb < nblocks; cb++) {
        long c0 = cb * CT_EMB_COL_BLOCK;
        long c1 = c0 + CT_EMB_COL_BLOCK < C ? c0 + CT_EMB_COL_BLOCK : C;
        for (long n = 0; n < N; n++) {
            long row = (long)tokens[n] - vocab_start;
            if (row < 0 || row >= V_local) continue;
            float *d = dwte + row * C;
            const float *g = dout + n * C;
            for (long c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}
