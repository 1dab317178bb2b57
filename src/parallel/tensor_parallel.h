// Tensor (compute) parallelism, Megatron style, with sequence parallel and loss parallel.
//
// Each tp rank holds a slice of every matrix (ct_param_table_build_tp): wq, wk, wv, w1, w3
// column-parallel (heads, FFN columns), wo and w2 row-parallel, embedding and output split over
// the vocabulary, norm weights whole on every rank. The model (model/llama.c) computes with the
// local dimensions and calls the hooks made here at the edges of the parallel regions:
//   without sequence parallel   f = identity forward / all-reduce backward,
//                               g = all-reduce forward / identity backward
//   with sequence parallel      the residual stream and the norms hold N / tp rows; f becomes an
//                               all-gather (reduce-scatter backward), g a reduce-scatter
//                               (all-gather backward): the same bytes, and activations outside
//                               the parallel regions fall as 1/tp.
// 8-bit matmuls (float8 / MXFP8) get the single-process scales through one more hook, amax_max:
// a MAX all-reduce over tp of the amaxes that span a split dimension (model/linear.h says which).
// The output layer's cross-entropy never gathers the logits (loss_parallel.h) unless
// parallelism.disable_loss_parallel asks it to, for comparison.
//
// Replicated tensors (the norm weights): under sequence parallel each rank's gradient covers only
// its rows, so their gradients are summed over tp once per step (a gradient reducer). Their
// shard descriptors mark them replicated over tp, so the gradient norm and export count them once.
#ifndef CT_TENSOR_PARALLEL_H
#define CT_TENSOR_PARALLEL_H
#include <stdbool.h>

#include "comm/comm.h"
#include "model/weights.h"
#include "model/stage_ops.h"
#include "parallel/param_store.h"

typedef struct {
    const ct_kernels *k;
    ct_group *group;           // the tp group (size 1: no tensor parallelism)
    bool sequence_parallel;
    bool gather_logits;        // parallelism.disable_loss_parallel
    ct_param_store *store;     // this rank's parameters and gradients (built by data sharding)
    bool async;                // parallelism.enable_async_comm: backward's input-gradient reduction
                               // overlaps the weight-gradient matmul (reduce_rows_start / _wait)
    ct_comm_handle pending;    // that reduction while in flight
} ct_tp;

// Fills the stage's tp edges (f / g) and output loss (vocabulary-parallel) for this group; a
// group of one leaves the table as it is.
void ct_tp_apply(ct_tp *tp, ct_stage_ops *ops);

// Under sequence parallel: sums the replicated tensors' gradients over tp (once per step,
// after every micro-batch, on this rank's shard of them). No-op otherwise. A gradient
// reducer for the executor (ctx: the ct_tp).
void ct_tp_reduce_replicated_grads(void *ctx);

#endif
