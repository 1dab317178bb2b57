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
// The row math is the backend's (xent_rows_*: the per-row arithmetic of its xent_fused, split
// where the collectives go); this file only orders those calls and the collectives.
#include "parallel/loss_parallel.h"

#include "core/error.h"

// Scratch: logits (R, V_local) -- (tp, R, V_local) in gather mode -- then three per-row float
// buffers: row max (R), and sum-exp | target logit (2R) reduced together, then the bf16 copies
// of the products' inputs (bf16 only). With a group of one the call is the backend's xent_fused,
// with its own scratch size.
static long rows_floats(long chunk_rows, long V_local, int tp_size, bool gather_logits) {
    long copies = gather_logits && tp_size > 1 ? tp_size : 1;
    return copies * chunk_rows * V_local + 3 * chunk_rows;
}

long ct_xent_vocab_parallel_scratch_floats(const ct_kernels *k, long chunk_rows, long V_local, long C, bool bf16,
                                           int tp_size, bool gather_logits) {
    if (tp_size == 1) return k->xent_scratch_floats(chunk_rows, V_local, C, bf16);
    return rows_floats(chunk_rows, V_local, tp_size, gather_logits) +
           ct_head_products_floats(chunk_rows, V_local, C, bf16);
}

static void check_args(const ct_kernels *k, const float *dx, const float *dW_local, const int32_t *targets, long N,
                       long C, long V_local, long vocab_start, long chunk_rows, const ct_group *tp) {
    const char *where = "ct_xent_vocab_parallel";
    if (!k) ct_fatal(where, "no kernel backend given");
    if (N < 0 || C < 1 || V_local < 1 || chunk_rows < 1)
        ct_fatal(where, "bad sizes N %ld, C %ld, V_local %ld, chunk_rows %ld (need N >= 0, the others >= 1)", N, C,
                 V_local, chunk_rows);
    if (dx && !dW_local) ct_fatal(where, "dx given without dW_local (backward needs both)");
    if (vocab_start != (long)tp->rank * V_local)
        ct_fatal(where, "vocab_start %ld on tp rank %d: slices must be equal, i.e. vocab_start = rank * V_local = %ld",
                 vocab_start, tp->rank, (long)tp->rank * V_local);
    long V = (long)tp->size * V_local;
    long bad = k->xent_bad_target ? k->xent_bad_target(targets, N, V) : -1;  // (kernels/backend.h)
    if (bad >= 0) {
        int32_t t;  // targets live on the backend's device
        k->copy_to_host(&t, targets + bad, sizeof t);
        ct_fatal(where, "target %d at row %ld is outside [0, %ld) (and is not -1 = ignore)", (int)t, bad, V);
    }
}

// Loss parallel, one chunk of nr rows starting at r0: the logits never leave this rank.
static void chunk_loss_parallel(const ct_kernels *k, double *loss_sum, const ct_head_products *h, float *dx, float *dW_local,
                                  const float *x, const void *W_local, const int32_t *targets, long r0, long nr,
                                  long C, long V_local, long vocab_start, float grad_scale, float *scratch,
                                  long chunk_rows, ct_group *tp) {
    const float *xc = x + r0 * C;                 // (nr, C)
    const int32_t *tc = targets + r0;             // (nr)
    float *z = scratch;                           // (nr, V_local)
    float *mx = scratch + chunk_rows * V_local;   // (nr) row max, MAX over tp
    float *st = mx + chunk_rows;                  // (2, nr): sum-exp | target logit, SUM over tp
    ct_head_logits(h, z, xc, W_local, nr);
    k->xent_rows_max(mx, z, tc, nr, V_local);
    ct_comm_all_reduce(tp, mx, mx, (size_t)nr, CT_F32, CT_COMM_MAX);
    k->xent_rows_exp_sum(z, st, st + nr, mx, tc, nr, V_local, vocab_start);
    ct_comm_all_reduce(tp, st, st, (size_t)(2 * nr), CT_F32, CT_COMM_SUM);
    k->xent_rows_loss(loss_sum, mx, st, st + nr, tc, nr);
    if (dx) {
        k->xent_rows_dlogits(z, st, tc, nr, V_local, vocab_start, grad_scale);
        ct_head_backward(h, dx + r0 * C, dW_local, z, xc, W_local, nr);  // dx (nr, C) and dW_local +=
    }
}

// Gather mode, one chunk: every rank sees the chunk's full (nr, V) logits as (tp, nr, V_local).
static void chunk_gather(const ct_kernels *k, double *loss_sum, const ct_head_products *h, float *dx, float *dW_local, const float *x,
                           const void *W_local, const int32_t *targets, long r0, long nr, long C, long V_local,
                           float grad_scale, float *scratch, long chunk_rows, ct_group *tp) {
    const float *xc = x + r0 * C;                             // (nr, C)
    const int32_t *tc = targets + r0;                         // (nr)
    const long P = tp->size, slice = nr * V_local;
    float *G = scratch;                                       // (P, nr, V_local) gathered logits
    float *z = G + tp->rank * slice;                          // (nr, V_local) mine, gathered in place
    float *mx = scratch + P * chunk_rows * V_local;           // (nr)
    float *st = mx + chunk_rows;                              // (2, nr)
    ct_head_logits(h, z, xc, W_local, nr);
    ct_comm_all_gather(tp, z, G, (size_t)slice, CT_F32);
    k->xent_rows_gathered(G, mx, st, st + nr, tc, P, nr, V_local, tp->rank, grad_scale, dx != NULL);
    k->xent_rows_loss(loss_sum, mx, st, st + nr, tc, nr);
    if (dx) ct_head_backward(h, dx + r0 * C, dW_local, z, xc, W_local, nr);  // dx (nr, C) and dW_local +=
}

void ct_xent_vocab_parallel(const ct_kernels *k, double *loss_sum, float *dx, float *dW_local, const float *x, const void *W_local,
                              const int32_t *targets, long N, long C, long V_local, long vocab_start, float grad_scale,
                              long chunk_rows, bool bf16, float *scratch, ct_group *tp, bool gather_logits) {
    check_args(k, dx, dW_local, targets, N, C, V_local, vocab_start, chunk_rows, tp);
    if (tp->size == 1) {  // the whole vocabulary is here: nothing to reduce
        k->xent_fused(loss_sum, dx, dW_local, x, W_local, targets, N, C, V_local, grad_scale, chunk_rows, bf16,
                      scratch);
        return;
    }
    ct_head_products h = ct_head_products_begin(k, bf16, W_local, V_local, C, chunk_rows,
                                                scratch + rows_floats(chunk_rows, V_local, tp->size, gather_logits));
    for (long r0 = 0; r0 < N; r0 += chunk_rows) {
        long nr = N - r0 < chunk_rows ? N - r0 : chunk_rows;
        if (gather_logits)
            chunk_gather(k, loss_sum, &h, dx, dW_local, x, W_local, targets, r0, nr, C, V_local, grad_scale, scratch,
                         chunk_rows, tp);
        else
            chunk_loss_parallel(k, loss_sum, &h, dx, dW_local, x, W_local, targets, r0, nr, C, V_local, vocab_start,
                                grad_scale, scratch, chunk_rows, tp);
    }
}
