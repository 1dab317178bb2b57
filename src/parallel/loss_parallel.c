// Vocabulary-parallel cross-entropy (see loss_parallel.h). Per chunk of R rows:
//
//   loss parallel                              gather (disable_loss_parallel)
//   z = x W_local^T          (R, V_local)      z = x W_local^T into my block of G (tp, R, V_local)
//   m = MAX_tp(rowmax z)     (R)               all-gather G
//   e = exp(z - m) in place; s = SUM_tp(Σ e),  m, s, z_t over the full rows of G, each rank alone
//     z_t = SUM_tp(my z[t] or 0)  (2R, one call)
//   loss += m + log s - z_t   (double, in row order: the same numbers on every rank)
//   dlogits = e / s * grad_scale - grad_scale·onehot, my slice only; dx = dlogits W_local,
//   dW_local += dlogits^T x.
//
// The per-row arithmetic is the one of ct_xent_fused (kernels/cpu/xent.c), written again here
// because it is split around the collectives; the exp is the kernels' vectorisable one.
#include "parallel/loss_parallel.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/fastmath.h"
#include "kernels/kernels.h"

// Scratch: logits (R, V_local) -- (tp, R, V_local) in gather mode -- then three per-row float
// buffers: row max (R), and sum-exp | target logit (2R) reduced together. With a group of one
// the call is ct_xent_fused, whose scratch (R·V_local + 2R) fits in the same size.
long ct_xent_vocab_parallel_scratch_floats(long chunk_rows, long V_local, int tp_size, bool gather_logits) {
    long copies = gather_logits && tp_size > 1 ? tp_size : 1;
    return copies * chunk_rows * V_local + 3 * chunk_rows;
}

// Σ_j exp(z[j] - mx) in an order fixed by j alone (8 interleaved partial sums), not by the
// address of z: in gather mode each rank sums the same gathered row from a different buffer, and
// a vectoriser's alignment peel could otherwise give each rank a different loss.
static float sum_exp_fixed_order(const float *z, long n, float mx) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    long j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += ct_fast_expf(z[j + k] - mx);
    for (int k = 0; j < n; j++, k++) acc[k] += ct_fast_expf(z[j] - mx);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static float row_max(const float *z, long n) {
    float mx = z[0];
#pragma omp simd reduction(max : mx)
    for (long j = 0; j < n; j++) mx = z[j] > mx ? z[j] : mx;
    return mx;
}

static void check_args(const float *dx, const float *dW_local, const int32_t *targets, long N, long C,
                       long V_local, long vocab_start, long chunk_rows, const ct_group *tp) {
    const char *where = "ct_xent_vocab_parallel";
    if (N < 0 || C < 1 || V_local < 1 || chunk_rows < 1)
        ct_fatal(where, "bad sizes N %ld, C %ld, V_local %ld, chunk_rows %ld (need N >= 0, the others >= 1)", N, C,
                 V_local, chunk_rows);
    if (dx && !dW_local) ct_fatal(where, "dx given without dW_local (backward needs both)");
    if (vocab_start != (long)tp->rank * V_local)
        ct_fatal(where, "vocab_start %ld on tp rank %d: slices must be equal, i.e. vocab_start = rank * V_local = %ld",
                 vocab_start, tp->rank, (long)tp->rank * V_local);
    long V = (long)tp->size * V_local;
    for (long n = 0; n < N; n++)
        if (targets[n] < -1 || targets[n] >= V)
            ct_fatal(where, "target %d at row %ld is outside [0, %ld) (and is not -1 = ignore)", (int)targets[n], n, V);
}

// Loss parallel, one chunk of nr rows starting at r0: the logits never leave this rank.
static double chunk_loss_parallel(float *dx, float *dW_local, const float *x, const float *W_local,
                                  const int32_t *targets, long r0, long nr, long C, long V_local, long vocab_start,
                                  float grad_scale, float *scratch, long chunk_rows, ct_group *tp) {
    const float *xc = x + r0 * C;                 // (nr, C)
    float *z = scratch;                           // (nr, V_local)
    float *mx = scratch + chunk_rows * V_local;   // (nr) row max, MAX over tp
    float *st = mx + chunk_rows;                  // (2, nr): sum-exp | target logit, SUM over tp
    ct_gemm(0, 1, nr, V_local, C, 1.0f, xc, C, W_local, C, 0.0f, z, V_local);
#pragma omp parallel for schedule(static)
    for (long r = 0; r < nr; r++)  // ignored rows take part with a harmless 0
        mx[r] = targets[r0 + r] < 0 ? 0.0f : row_max(z + r * V_local, V_local);
    ct_comm_all_reduce(tp, mx, mx, (size_t)nr, CT_F32, CT_COMM_MAX);
#pragma omp parallel for schedule(static)
    for (long r = 0; r < nr; r++) {
        float *zr = z + r * V_local;  // (V_local) logits -> exp(z - max)
        long t = targets[r0 + r], tl = t - vocab_start;
        float s = 0.0f, zt = 0.0f;
        if (t >= 0) {
            if (tl >= 0 && tl < V_local) zt = zr[tl];  // only the owner contributes the target's logit
            float m = mx[r];
#pragma omp simd reduction(+ : s)
            for (long j = 0; j < V_local; j++) {
                float e = ct_fast_expf(zr[j] - m);
                zr[j] = e;
                s += e;
            }
        }
        st[r] = s;
        st[nr + r] = zt;
    }
    ct_comm_all_reduce(tp, st, st, (size_t)(2 * nr), CT_F32, CT_COMM_SUM);
    double loss = 0.0;
    for (long r = 0; r < nr; r++)  // fixed order over reduced values: the same loss on every rank
        if (targets[r0 + r] >= 0) loss += (double)mx[r] + log((double)st[r]) - (double)st[nr + r];
    if (dx) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < nr; r++) {
            float *zr = z + r * V_local;  // (V_local) exp(z - max) -> dlogits
            long t = targets[r0 + r], tl = t - vocab_start;
            if (t < 0) {
                memset(zr, 0, (size_t)V_local * sizeof(float));
                continue;
            }
            float scale = grad_scale / st[r];
#pragma omp simd
            for (long j = 0; j < V_local; j++) zr[j] *= scale;
            if (tl >= 0 && tl < V_local) zr[tl] -= grad_scale;
        }
        ct_gemm(0, 0, nr, C, V_local, 1.0f, z, V_local, W_local, C, 0.0f, dx + r0 * C, C);      // dx (nr, C)
        ct_gemm(1, 0, V_local, C, nr, 1.0f, z, V_local, xc, C, 1.0f, dW_local, C);              // dW_local +=
    }
    return loss;
}

// Gather mode, one chunk: every rank sees the chunk's full (nr, V) logits as (tp, nr, V_local).
static double chunk_gather(float *dx, float *dW_local, const float *x, const float *W_local, const int32_t *targets,
                           long r0, long nr, long C, long V_local, float grad_scale, float *scratch, long chunk_rows,
                           ct_group *tp) {
    const float *xc = x + r0 * C;                             // (nr, C)
    const long P = tp->size, slice = nr * V_local;
    float *G = scratch;                                       // (P, nr, V_local) gathered logits
    float *z = G + tp->rank * slice;                          // (nr, V_local) mine, gathered in place
    float *mx = scratch + P * chunk_rows * V_local;           // (nr)
    float *st = mx + chunk_rows;                              // (2, nr)
    ct_gemm(0, 1, nr, V_local, C, 1.0f, xc, C, W_local, C, 0.0f, z, V_local);
    ct_comm_all_gather(tp, z, G, (size_t)slice, CT_F32);
#pragma omp parallel for schedule(static)
    for (long r = 0; r < nr; r++) {
        long t = targets[r0 + r];
        float *zr = z + r * V_local;  // (V_local) my slice of the row -> dlogits
        if (t < 0) {
            if (dx) memset(zr, 0, (size_t)V_local * sizeof(float));
            mx[r] = st[r] = st[nr + r] = 0.0f;
            continue;
        }
        float m = G[r * V_local];
        for (long p = 0; p < P; p++) {
            float mp = row_max(G + p * slice + r * V_local, V_local);
            m = mp > m ? mp : m;
        }
        float s = 0.0f;
        for (long p = 0; p < P; p++) s += sum_exp_fixed_order(G + p * slice + r * V_local, V_local, m);
        mx[r] = m;
        st[r] = s;
        st[nr + r] = G[(t / V_local) * slice + r * V_local + t % V_local];
        if (dx) {
            float scale = grad_scale / s;
#pragma omp simd
            for (long j = 0; j < V_local; j++) zr[j] = ct_fast_expf(zr[j] - m) * scale;
            long tl = t - (long)tp->rank * V_local;
            if (tl >= 0 && tl < V_local) zr[tl] -= grad_scale;
        }
    }
    double loss = 0.0;
    for (long r = 0; r < nr; r++)
        if (targets[r0 + r] >= 0) loss += (double)mx[r] + log((double)st[r]) - (double)st[nr + r];
    if (dx) {
        ct_gemm(0, 0, nr, C, V_local, 1.0f, z, V_local, W_local, C, 0.0f, dx + r0 * C, C);      // dx (nr, C)
        ct_gemm(1, 0, V_local, C, nr, 1.0f, z, V_local, xc, C, 1.0f, dW_local, C);              // dW_local +=
    }
    return loss;
}

double ct_xent_vocab_parallel(float *dx, float *dW_local, const float *x, const float *W_local,
                              const int32_t *targets, long N, long C, long V_local, long vocab_start,
                              float grad_scale, long chunk_rows, float *scratch, ct_group *tp,
                              bool gather_logits) {
    check_args(dx, dW_local, targets, N, C, V_local, vocab_start, chunk_rows, tp);
    if (tp->size == 1)  // the whole vocabulary is here: nothing to reduce
        return ct_xent_fused(dx, dW_local, x, W_local, targets, N, C, V_local, grad_scale, chunk_rows, scratch);
    double total = 0.0;
    for (long r0 = 0; r0 < N; r0 += chunk_rows) {
        long nr = N - r0 < chunk_rows ? N - r0 : chunk_rows;
        total += gather_logits ? chunk_gather(dx, dW_local, x, W_local, targets, r0, nr, C, V_local, grad_scale,
                                              scratch, chunk_rows, tp)
                               : chunk_loss_parallel(dx, dW_local, x, W_local, targets, r0, nr, C, V_local,
                                                     vocab_start, grad_scale, scratch, chunk_rows, tp);
    }
    return total;
}
