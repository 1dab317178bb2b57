// A routed mixture-of-experts feed-forward layer, dropless, with expert parallelism:
//
//   logits = x @ router^T                      (N, E)
//   ids, weights = top-k of the router's scores (N, k): softmax or sigmoid, optional choosing
//                  bias (DeepSeek-V3's load balancing), optional renormalisation
//   y[n] = Σ_j weights[n, j] · w2_e (silu(w1_e x[n]) · w3_e x[n]),  e = ids[n, j]
//
// Every (token, choice) pair reaches its expert: the pairs are sorted by expert (kernels.h,
// "mixture of experts"), and under expert parallelism -- experts split evenly over the `ep`
// group, rank r holding experts [r·E_local, (r + 1)·E_local) -- they travel to their expert's
// rank by all-to-all-v and back, the per-expert counts exchanged first. On the expert's rank the
// rows are grouped by local expert and go through one grouped SwiGLU (two grouped linears).
// The same numbers whatever the ep degree, up to the matmuls' summation order over rows grouped
// differently (tests/test_moe_layer.c).
//
// Under bf16 mixed precision (spec.bf16) the layer computes as TorchTitan's under autocast: the
// experts' matmuls take bf16 inputs and FSDP's gathered bf16 weights with fp32 accumulation
// (kernels.h ct_grouped_linear_forward_bf16), their output gradients rounded to bf16 as the dense
// linear layers' are (model/linear.h); the router, its scores, the combine weights and every
// gradient stay fp32. What the backward reads, by dtype:
//   bf16  xe (each expert row's input), h13 (w1 | w3's output, rounded when kept, the forward
//         going on with the rounded values), h (SwiGLU's output, w2's input)
//   fp32  logits, scores, weights, ys (the combine reads them in fp32), and the token rows in
//         transit (xs, xr: bf16 values, moved and permuted as fp32)
//
// Under 8-bit training (spec.f8, on top of fp32 or bf16) the experts' w13 and w2 -- the ones the
// call asks for (ct_moe_params.f8_w13 / f8_w2) -- run as the dense layers' 8-bit linears do
// (model/linear.h), expert by expert: each expert is a linear layer on its row range of xe (or
// h), computed by the kernel table's linear_forward_f8 / linear_backward_f8 with the recipe's
// scales taken over that expert's rows and weight alone (as TorchTitan's float8 grouped matmuls
// scale per expert), fp32 accumulation, its weight gradient added into its slice; an expert with
// no rows is skipped. Their inputs go as kept (fp32, or bf16 under bf16), their weights in fp32
// (under bf16 FSDP widens the 8-bit layers' matrices, parallel/fsdp.h), their output gradients in
// fp32 (the kernels cast them to e5m2). No tensor-parallel agreement: every tp rank holds the
// experts whole and runs them on its own rows (split NULL). The router stays fp32.
//
// Buffers are the caller's (ct_moe_layer_buffers sizes them): under expert parallelism the rows
// a rank receives are not known before the step, so the expert-side buffers hold the most it can
// receive, every pair of every rank of the group (N·k·ep rows).
#ifndef CT_MOE_LAYER_H
#define CT_MOE_LAYER_H
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "kernels/backend.h"
#include "model/stage_ops.h"

// ct_moe_ep_ops, how pairs reach their experts' ranks: model/stage_ops.h.

typedef struct {
    const ct_kernels *k;
    long C, F, E, topk;  // model dim, expert hidden, experts, experts per token
    int sigmoid;         // scores: sigmoid (DeepSeek-V3) instead of softmax (Qwen3)
    int renorm;          // chosen weights divided by their sum
    ct_moe_ep_ops ep;    // expert parallelism (zero: none)
    long N;              // tokens per call on this rank (the buffers' size)
    float aux_coef;      // load-balancing loss coefficient (0: none; kernels.h ct_moe_aux_loss)
    long aux_group;      // its groups: tokens per sequence (sequence-level), or 0 (the whole batch)
    bool bf16;           // bf16 mixed precision: x and the experts' weights in bf16 (above)
    bool f8;             // 8-bit experts possible (the scratch holds the 8-bit kernels' work)
    ct_f8_recipe recipe; // their recipe (f8)
} ct_moe_layer_spec;

typedef struct {
    const float *router;  // (E, C)
    const float *bias;    // (E) choosing bias, or NULL
    const float *w13;     // (E_local, 2F, C): w1 | w3 of each local expert (fp32 runs)
    const float *w2;      // (E_local, C, F)
    const uint16_t *w13_16, *w2_16;  // the same in bf16 (bf16 runs: FSDP's gathered compute copy)
    bool f8_w13, f8_w2;   // this call's w13 / w2 in 8 bits (spec.f8; w13 / w2 then given in fp32)
} ct_moe_params;

typedef struct {
    float *router, *w13, *w2;  // accumulated (+=), shapes as ct_moe_params
} ct_moe_grads;

// What a forward keeps for its backward, and the expert side's work rows. Device memory unless
// said; shapes with R = N·k·ep rows at most on the expert side.
typedef struct {
    float *logits, *scores;   // (N, E)
    float *weights;           // (N, k)
    int32_t *ids, *pos;       // (N, k)
    int64_t *counts;          // (E)
    float *xs, *ys;           // (N·k, C) pairs in expert order, sent and received back
    float *xr, *xe;           // (R, C) rows received (by source rank), grouped by local expert
    float *h13;               // (R, 2F)
    float *h;                 // (R, F)
    uint16_t *xe16, *h13_16, *h16;  // bf16: xe, h13, h kept in bf16 instead (those three NULL)
    float *ye;                // (R, C)
    float *scratch;           // (ct_moe_scratch_floats) work rows within one call: the caller's to share, or own
    bool own_scratch;         // scratch taken by ct_moe_acts_init (freed with a)
    float *aux_loss;          // (1) the load-balancing loss of the last forward, times aux_weight (aux_coef > 0)
    float *daux;              // (N, E) its gradient in the scores
    // host: the exchange's shape, set by the forward and reused by the backward
    int64_t *host_counts;     // (E) this rank's pairs per expert
    int64_t *from;            // (ep, E_local) pairs source s sends to local expert le
    size_t *send_rows, *send_at, *recv_rows, *recv_at;  // (ep) in rows
    int64_t *offsets;         // (E_local + 1) local experts' row ranges in xe
    long rows;                // R this call
} ct_moe_acts;

typedef struct {
    ct_moe_layer_spec s;
    int ep_size, ep_rank;
    long E_local;
    float aux_weight;  // the next calls' load-balancing loss (value and gradient) scaled by this: 1
                       // from init; a caller sets it per call (0: the loss and its gradient are 0)
} ct_moe_layer;

// CT_ERR (one line) when E does not split over the ep group or a size is not positive.
ct_status ct_moe_layer_init(ct_moe_layer *l, const ct_moe_layer_spec *spec);
// Floats of the work rows a forward or backward uses within the call (two areas of the most rows
// the expert side can receive by the widest row, three under bf16; under f8 then the 8-bit
// kernels' scratch for the most rows one expert can receive, N·ep: a token picks an expert at
// most once): nothing there outlives a call, so the records of one stage may share them.
long ct_moe_scratch_floats(const ct_moe_layer *l);
// Allocates a's buffers on the layer's device (and its host arrays), with `scratch` as the work
// rows (ct_moe_scratch_floats of them; NULL: its own); ct_moe_acts_free releases what it took.
void ct_moe_acts_init(const ct_moe_layer *l, ct_moe_acts *a, float *scratch);
void ct_moe_acts_free(ct_moe_acts *a);

// y (N, C) fp32 from x (N, C), fp32 or under bf16 bf16. Collective over the ep group.
void ct_moe_forward(const ct_moe_layer *l, const ct_moe_params *p, ct_moe_acts *a, const void *x, float *y);
// dx (N, C) overwritten from dy (N, C) and the forward's a (the load-balancing loss's gradient,
// with unit weight, included); weight gradients added into g. Collective over the ep group.
// x as the forward's; dy, dx and the gradients fp32 whatever the precision.
void ct_moe_backward(const ct_moe_layer *l, const ct_moe_params *p, ct_moe_acts *a, const void *x, const float *dy,
                     float *dx, ct_moe_grads *g);

// min, max and max / mean of counts (E); imbalance 1 is perfectly balanced.
void ct_moe_load_stats(const int64_t *counts, long E, double *min, double *max, double *imbalance);
#endif
