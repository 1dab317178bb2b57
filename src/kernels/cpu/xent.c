// Output projection fused with cross-entropy, chunked over rows so the (N, V) logits never exist
// at once: per chunk, logits = x W^T into scratch, per-row log-sum-exp and loss, then the logits
// are turned into dlogits = (softmax - onehot) * grad_scale (in place, or straight into the bf16
// copy the bf16 products take) and multiplied back:
// dx = dlogits W, dW += dlogits^T x. The three products are kernels/backend.h's (fp32, or bf16
// inputs under bf16 compute). The per-row max and sum of exp are xent_row.h's, shared with the
// vocabulary-slice row pieces (xent_rows.c).
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/float_formats.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/xent_row.h"
#include "kernels/kernels.h"

// scratch: logits (chunk_rows, V), one double per row (as 2 floats) for the row losses, then the
// bf16 copies of the products' inputs (bf16 only).
static long own_floats(long chunk_rows, long V) { return chunk_rows * V + 2 * chunk_rows; }
long ct_xent_scratch_floats(long chunk_rows, long V, long C, bool bf16) {
    return own_floats(chunk_rows, V) + ct_head_products_floats(chunk_rows, V, C, bf16);
}

double ct_xent_fused(float *dx, float *dW, const float *x, const void *W, const int32_t *targets, long N, long C,
                     long V, float grad_scale, long chunk_rows, bool bf16, float *scratch) {
    long bad = ct_xent_bad_target(targets, N, V);
    if (bad >= 0)
        ct_fatal("ct_xent_fused", "target %d at row %ld is outside [0, %ld) (and is not -1 = ignore)",
                 (int)targets[bad], bad, V);
    float *logits = scratch;                   // (chunk_rows, V)
    char *row_loss = (char *)(scratch + chunk_rows * V);  // (chunk_rows) doubles, possibly unaligned
    ct_head_products h = ct_head_products_begin(ct_cpu_kernel_set_this.kernels, bf16, W, V, C, chunk_rows,
                                                scratch + own_floats(chunk_rows, V));
    double total = 0.0;
    for (long r0 = 0; r0 < N; r0 += chunk_rows) {
        long nr = N - r0 < chunk_rows ? N - r0 : chunk_rows;
        const float *xc = x + r0 * C;  // (nr, C)
        ct_head_logits(&h, logits, xc, W, nr);
#pragma omp parallel for schedule(static)
        for (long r = 0; r < nr; r++) {
            float *z = logits + r * V;  // (V)
            int32_t t = targets[r0 + r];
            double loss = 0.0;
            uint16_t *z16 = h.z16 ? h.z16 + r * V : NULL;  // (V) the row's dlogits in bf16, or NULL
            if (t < 0) {  // ignored row: no loss, zero gradient
                if (dx && z16)
                    memset(z16, 0, (size_t)V * sizeof(uint16_t));
                else if (dx)
                    memset(z, 0, (size_t)V * sizeof(float));
            } else {
                float mx = ct_xent_row_max(z, V), zt = z[t];
                // z = exp(z - mx): one exp per logit, the next row fetched meanwhile
                float sum = ct_xent_row_exp_sum(z, V, mx, r + 1 < nr ? z + V : NULL);
                double lse = (double)mx + log((double)sum);
                loss = lse - (double)zt;
                if (dx && z16) {  // rounded as they are made (ct_head_backward_rounded)
                    const float s = 1.0f / sum, zt_grad = z[t] * s * grad_scale - grad_scale;
                    for (long j = 0; j < V; j++) z16[j] = ct_f32_to_bf16(z[j] * s * grad_scale);
                    z16[t] = ct_f32_to_bf16(zt_grad);
                } else if (dx) {
                    ct_v8f s = ct_v8f_splat(1.0f / sum), gs = ct_v8f_splat(grad_scale);
                    long j = 0;
#ifdef CT_V16
                    ct_v16f s16 = ct_v16f_splat(s[0]), gs16 = ct_v16f_splat(grad_scale);
                    for (; j + 16 <= V; j += 16) ct_v16f_store(z + j, ct_v16f_load(z + j) * s16 * gs16);
#endif
                    for (; j + 8 <= V; j += 8) ct_v8f_store(z + j, ct_v8f_load(z + j) * s * gs);
                    for (; j < V; j++) z[j] = z[j] * s[0] * grad_scale;
                    z[t] -= grad_scale;
                }
            }
            memcpy(row_loss + r * sizeof(double), &loss, sizeof(double));
        }
        for (long r = 0; r < nr; r++) {  // fixed order: the same loss on every run
            double loss;
            memcpy(&loss, row_loss + r * sizeof(double), sizeof(double));
            total += loss;
        }
        if (dx && h.z16)
            ct_head_backward_rounded(&h, dx + r0 * C, dW, nr);
        else if (dx)
            ct_head_backward(&h, dx + r0 * C, dW, logits, xc, W, nr);
    }
    return total;
}
