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

static double output_loss(void *ctx, float *dx, float *dW, const float *x, const float *W, const int32_t *targets,
                          long N, long C, long V_local, long vocab_start, float grad_scale, long chunk_rows,
                          float *scratch) {
    ct_tp *tp = ctx;
    return ct_xent_vocab_parallel_k(tp->k, dx, dW, x, W, targets, N, C, V_local, vocab_start, grad_scale,
                                    chunk_rows, scratch, tp->group, tp->gather_logits);
}

static long output_loss_scratch(void *ctx, long chunk_rows, long V_local) {
    ct_tp *tp = ctx;
    return ct_xent_vocab_parallel_scratch_floats(chunk_rows, V_local, tp->group->size, tp->gather_logits);
}

void ct_tp_apply(ct_tp *tp, ct_stage_ops *ops) {
    if (tp->group->size == 1) return;  // identity everywhere: the single-process model
    ops->tp = (ct_tp_ops){.ctx = tp, .size = tp->group->size, .rank = tp->group->rank,
                          .sequence_parallel = tp->sequence_parallel, .gather_rows = gather_rows,
                          .reduce_rows = reduce_rows};
    ops->loss = (ct_loss_ops){.ctx = tp, .fn = output_loss, .scratch_floats = output_loss_scratch};
}

// ------------------------------------------------------------------ replicated tensors

void ct_tp_reduce_replicated_grads(void *ctx) {
    ct_tp *tp = ctx;
    ct_fsdp *f = tp->fsdp;
    if (tp->group->size == 1 || !tp->sequence_parallel) return;
    for (int i = 0; i < f->table->count; i++) {
        const ct_param *p = &f->table->params[i];
        long begin, off, n;
        if (p->tp_dim >= 0 || !(n = ct_fsdp_param_range(f, p, &begin, &off))) continue;
        ct_comm_all_reduce(tp->group, f->grads + off, f->grads + off, (size_t)n, CT_F32, CT_COMM_SUM);
    }
}

double ct_tp_grad_sum_squares(ct_tp *tp, ct_fsdp *f) {
    double sum = tp->k->sum_squares(f->grads, f->local_numel);  // FSDP padding stays zero
    if (tp->group->rank > 0) {
        // Every tp rank holds the same replicated tensors: only tp rank 0 counts them.
        for (int i = 0; i < f->table->count; i++) {
            const ct_param *p = &f->table->params[i];
            long begin, off, n;
            if (p->tp_dim < 0 && (n = ct_fsdp_param_range(f, p, &begin, &off)))
                sum -= tp->k->sum_squares(f->grads + off, n);
        }
    }
    ct_comm_all_reduce(f->shard_group, &sum, &sum, 1, CT_F64, CT_COMM_SUM);
    if (tp->group->size > 1) ct_comm_all_reduce(tp->group, &sum, &sum, 1, CT_F64, CT_COMM_SUM);
    return sum;
}

// ------------------------------------------------------------------ whole-model gather

void ct_tp_gather_full(ct_tp *tp, ct_fsdp *f, const ct_llama_config *m, const ct_param_table *global, float *full) {
    int T = tp->group->size;
    long P_local = f->table->total;
    if (T == 1) {
        ct_fsdp_gather_full(f, full);
        return;
    }
    float *local = ct_xmalloc((size_t)P_local * sizeof(float));         // (P_l) this tp rank's block
    float *all = ct_xmalloc((size_t)T * (size_t)P_local * sizeof(float));  // (T, P_l)
    ct_fsdp_gather_full(f, local);
    ct_comm_all_gather(tp->group, local, all, (size_t)P_local, CT_F32);
    for (int r = 0; r < T; r++) {
        ct_param_table t;
        ct_param_table_build_tp(&t, m, r, T);  // rank r's slices: same layout, its own offsets
        for (int i = 0; i < t.count; i++) {
            const ct_param *p = &t.params[i];
            if (p->tp_dim < 0 && r > 0) continue;  // replicated: rank 0's copy
            const ct_param *gp = ct_param_find(global, p->name);
            const float *src = all + (size_t)r * P_local + p->offset;
            for (long k = 0; k < p->numel;) {
                long run = ct_param_contiguous_run(p, k, p->numel - k);
                memcpy(full + gp->offset + ct_param_global_index(p, k), src + k, (size_t)run * sizeof(float));  // host buffers
                k += run;
            }
        }
        ct_param_table_free(&t);
    }
    free(local);
    free(all);
}
