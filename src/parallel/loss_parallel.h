// Vocabulary-parallel output projection + cross-entropy (Megatron's parallel cross-entropy).
//
// The output weight W (V, C) is split by rows over the tp group: rank p holds rows
// [p·V_local, (p+1)·V_local), so each rank can compute only its slice of the logits. The
// softmax needs three numbers per row from the whole vocabulary -- the max (for stability),
// the sum of exp, and the target's logit -- and those are all a rank has to exchange:
//   loss parallel (default)     per chunk of R rows: MAX all-reduce of R floats, then one SUM
//                               all-reduce of 2R floats (sum-exp | target logit). The (N, V)
//                               logits are never gathered, nor ever whole on any rank.
//   gather (disable_loss_parallel)  per chunk the local logits are all-gathered into
//                               (tp, R, V_local) and every rank does the full softmax, then keeps
//                               its own slice's gradient: (tp-1)·R·V_local floats sent per chunk,
//                               and tp times the logits memory. Kept for comparison.
// Both modes give the same loss on every rank and the same gradients (within rounding).
//
// Layout requirement (checked): equal slices, V = tp_size · V_local and
// vocab_start = tp_rank · V_local (the model pads V to a multiple of tp).
#ifndef CT_LOSS_PARALLEL_H
#define CT_LOSS_PARALLEL_H
#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "kernels/backend.h"

// Floats of scratch ct_xent_vocab_parallel needs for these arguments: the logits of one chunk
// (gathered over tp in gather mode) plus per-row max / sum-exp / target-logit buffers, and under
// bf16 the products' bf16 inputs (kernels/backend.h: ct_head_products). With a group of one the call is the
// backend's xent_fused: its own scratch size.
long ct_xent_vocab_parallel_scratch_floats(const ct_kernels *k, long chunk_rows, long V_local, long C, bool bf16,
                                           int tp_size, bool gather_logits);

// Output projection fused with cross-entropy, the vocabulary split over the tp group: this rank
// holds rows [vocab_start, vocab_start + V_local) of the output weight W (V, C). Same contract
// as ct_xent_fused (kernels.h): x (N, C) is the same on every tp rank; targets (N) global ids,
// -1 = ignore; adds the SUM over valid rows of -log softmax(logits)[target] to *loss_sum (one
// double on k's device; the same sum on every tp rank); when dx != NULL also dW_local (V_local, C) += dlogits_local^T x and
// dx (N, C) = dlogits_local @ W_local -- a PARTIAL sum over this rank's vocabulary slice: the
// caller reduces dx over tp (all-reduce, or reduce-scatter under sequence parallel).
// dlogits = (softmax - onehot) * grad_scale. gather_logits: see the top of this file. bf16: W_local
// holds bf16 values and the products take bf16 inputs (kernels/backend.h: ct_head_products), as
// xent_fused's do.
// Collective over tp: every rank calls it with the same N, chunk_rows, gather_logits.
// With a group of one this is the backend's xent_fused. The math runs on the backend k (every
// buffer lives on its device); this file only sequences k's row pieces and the tp collectives.
void ct_xent_vocab_parallel(const ct_kernels *k, double *loss_sum, float *dx, float *dW_local, const float *x,
                              const void *W_local, const int32_t *targets, long N, long C, long V_local,
                              long vocab_start, float grad_scale, long chunk_rows, bool bf16, float *scratch,
                              ct_group *tp, bool gather_logits);

#endif
