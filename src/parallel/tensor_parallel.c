#include "parallel/tensor_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "parallel/loss_parallel.h"

// ------------------------------------------------------------------ the f / g hooks

// local (N_l, C) -> full (N, C): rank r's rows are rows [r·N_l, (r+1)·N_l) of the full buffer.
static void gather_rows(void *ctx, const float *local, float *full, long local_rows, long C) {
    ct_tp *tp = ctx;
    ct_comm_all_gather(tp->group, local, full, (size_t)(local_rows * C), CT_F32);
}

// partial sums (N, C) -> reduced local rows: in place, or this rank's rows under sequence parallel.
static void reduce_rows(void *ctx, float *full, float *local, long local_rows, long C) {
    ct_tp *tp = ctx;
    if (tp->group->size == 1) return;
    if (tp->sequence_parallel)
        ct_comm_reduce_scatter(tp->group, full, local, (size_t)(local_rows * C), CT_F32, CT_COMM_SUM);
    else
        ct_comm_all_reduce(tp->group, full, full, (size_t)(local_rows * C), CT_F32, CT_COMM_SUM);
}

// The same reduction started, to be finished by reduce_rows_wait: one in flight at a time.
static void reduce_rows_start(void *ctx, float *full, float *local, long local_rows, long C) {
    ct_tp *tp = ctx;
    size_t n = (size_t)(local_rows * C);
    if (tp->pending.group) ct_fatal("tp", "reduce_rows_start with a reduction already in flight");
    tp->pending = tp->sequence_parallel ? ct_comm_reduce_scatter_start(tp->group, full, local, n, CT_F32, CT_COMM_SUM)
                                        : ct_comm_all_reduce_start(tp->group, full, full, n, CT_F32, CT_COMM_SUM);
}
static void reduce_rows_wait(void *ctx) {
    ct_tp *tp = ctx;
    ct_comm_wait(&tp->pending);
}

// The 8-bit matmuls' scales (ct_f8_split, kernels/backend.h): amax (n) = its max over tp. The
// values are >= +0 or positive NaNs, whose bit patterns order as the values do with NaN above
// +inf, so an int32 MAX of the patterns is the float MAX with NaN winning (a float MAX would
// drop a NaN on transports that compare with >). Counted as an all_reduce on the tp group.
static void amax_max(void *ctx, float *amax, long n) {
    ct_tp *tp = ctx;
    ct_comm_all_reduce(tp->group, amax, amax, (size_t)n, CT_I32, CT_COMM_MAX);
}

static void output_loss(void *ctx, double *loss_sum, float *dx, float *dW, const float *x, const void *W,
                        const int32_t *targets, long N, long C, long V_local, long vocab_start, float grad_scale,
                        long chunk_rows, bool bf16, float *scratch) {
    ct_tp *tp = ctx;
    ct_xent_vocab_parallel(tp->k, loss_sum, dx, dW, x, W, targets, N, C, V_local, vocab_start, grad_scale,
                                    chunk_rows, bf16, scratch, tp->group, tp->gather_logits);
}

static long output_loss_scratch(void *ctx, long chunk_rows, long V_local, long C, bool bf16) {
    ct_tp *tp = ctx;
    return ct_xent_vocab_parallel_scratch_floats(tp->k, chunk_rows, V_local, C, bf16, tp->group->size,
                                                 tp->gather_logits);
}

void ct_tp_apply(ct_tp *tp, ct_stage_ops *ops) {
    if (tp->group->size == 1) return;  // identity everywhere: the single-process model
    ops->tp = (ct_tp_ops){.ctx = tp, .size = tp->group->size, .rank = tp->group->rank,
                          .sequence_parallel = tp->sequence_parallel, .gather_rows = gather_rows,
                          .reduce_rows = reduce_rows, .amax_max = amax_max};
    if (tp->async) {
        ops->tp.reduce_rows_start = reduce_rows_start;
        ops->tp.reduce_rows_wait = reduce_rows_wait;
    }
    ops->loss = (ct_loss_ops){.ctx = tp, .fn = output_loss, .scratch_floats = output_loss_scratch};
}

// ------------------------------------------------------------------ replicated tensors

void ct_tp_reduce_replicated_grads(void *ctx) {
    ct_tp *tp = ctx;
    if (tp->group->size == 1 || !tp->sequence_parallel) return;
    const ct_param_store *st = tp->store;
    for (int i = 0; i < st->count; i++) {
        const ct_param_shard *sh = &st->shards[i];
        if (!(sh->desc.replicated_over & CT_DIM_BIT(CT_DIM_TP))) continue;
        float *g = st->grads + sh->offset;
        ct_comm_all_reduce(tp->group, g, g, (size_t)sh->desc.flat_count, CT_F32, CT_COMM_SUM);
    }
}
