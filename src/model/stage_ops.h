// How parallel strategies reach the model: one operations table per stage. The model is written
// once against local shapes and calls these at the points where a strategy may act; a run
// without parallelism uses ct_stage_ops_local(), whose entries do nothing (weights, tp edges) or
// run the local kernels (attention, loss).
//
//   weights    acquire / release a layer group's parameters (and its gradient buffer) around
//              each phase: FSDP gathers, frees and reduce-scatters here.
//   tp         Megatron's f / g operators at the edges of the parallel regions (tensor and
//              sequence parallel).
//   attention  causal attention of one block; context parallel replaces it with a ring.
//   loss       output projection + cross-entropy; loss parallel replaces it with the
//              vocabulary-split version.
//   experts    the exchange of a mixture-of-experts layer's tokens with the ranks holding their
//              experts (expert parallelism).
// Each strategy fills only its own entries, with its own context.
#ifndef CT_STAGE_OPS_H
#define CT_STAGE_OPS_H
#include <stdint.h>

#include "kernels/backend.h"

// The phases a layer group is used in.
typedef enum {
    CT_PHASE_FORWARD = 0,
    CT_PHASE_RECOMPUTE,        // forward again before backward (activation checkpointing)
    CT_PHASE_BACKWARD,         // input and weight gradients together
    CT_PHASE_BACKWARD_INPUT,   // input (activation) gradients only
    CT_PHASE_BACKWARD_WEIGHT,  // weight gradients only, from what backward-input kept
    CT_NPHASES
} ct_phase;

const char *ct_phase_name(ct_phase p);  // "forward", "recompute", "backward", ...

// What a phase of a group uses, as the model declares it in `use` (bit mask).
enum {
    CT_USE_WEIGHTS = 1,  // reads the group's parameters
    CT_USE_GRADS = 2,    // adds into the group's parameter gradients
};

// Layer groups: 0 the embedding, 1..L the transformer blocks, L+1 the head (final norm +
// output projection). The head's forward in training also computes its whole backward (the
// fused output projection + cross-entropy has the logit gradients in hand), so it acquires
// weights and gradients in the forward phase and has no backward phases of its own; the
// embedding's backward reads no weights.
typedef struct {
    void *ctx;
    void (*acquire)(void *ctx, int group, ct_phase phase, unsigned use);
    void (*release)(void *ctx, int group, ct_phase phase, unsigned use);
    // A schedule's explicit control (UNSHARD / RESHARD actions): make a group whole now and keep
    // it whole across acquire/release until reshard. reserve(n), before a schedule runs: up to n
    // groups will be held that way at once. finish: let go of everything (RESHARD of every
    // stage, the end of a step). Any may be NULL when the strategy holds nothing.
    void (*unshard)(void *ctx, int group);
    void (*reshard)(void *ctx, int group);
    void (*reserve)(void *ctx, int n);
    void (*finish)(void *ctx);
} ct_weight_ops;

// Tensor (compute) parallelism, Megatron style. The model computes with this rank's heads, FFN
// columns and vocabulary slice, and calls two operators at the edges of the parallel regions:
//   gather_rows  the f operator: before a column-parallel matmul, the residual stream's local
//                rows (N_l, C) become the full rows (N, C) every tp rank multiplies. Without
//                sequence parallel N_l = N and it is the identity (local == full).
//                Its backward is reduce_rows.
//   reduce_rows  the g operator: after a row-parallel matmul, the partial sums (N, C) of every
//                tp rank are summed into local rows: all-reduce in place (local == full), or
//                reduce-scatter under sequence parallel. Its backward is gather_rows.
// size 1 (NULL functions): no tensor parallelism.
typedef struct {
    void *ctx;
    int size, rank;              // tp degree and this rank's place
    int sequence_parallel;       // the residual stream holds N / size rows per rank
    void (*gather_rows)(void *ctx, const float *local, float *full, long local_rows, long C);
    void (*reduce_rows)(void *ctx, float *full, float *local, long local_rows, long C);
    // Optional (async comm): reduce_rows started and finished apart, so the backward overlaps
    // an input-gradient reduction with the same layer's weight-gradient matmul. One in flight.
    void (*reduce_rows_start)(void *ctx, float *full, float *local, long local_rows, long C);
    void (*reduce_rows_wait)(void *ctx);
    // The 8-bit matmuls' scales (ct_f8_split's amax_max, kernels/backend.h): amax (n) = its
    // element-wise max over the tp group, in place, blocking. NULL without tp.
    void (*amax_max)(void *ctx, float *amax, long n);
} ct_tp_ops;

// One block's attention call, in the attention kernel's terms (kernels/backend.h): q (B, Tq,
// NH, HS) with token stride ldq; k, v (B, Tk, NKV, HS) with strides ldk, ldv; out (B, Tq, NH,
// HS); lse (B, NH, Tq); positions q_pos (Tq) / k_pos (Tk) (NULL: 0..T-1); document ids q_doc
// (B, Tq) / k_doc (B, Tk) (NULL: causal; model.attn_mask_type block_causal gives them).
typedef struct {
    int layer;                   // global layer index (a KV cache or a ring keeps per-layer state)
    long B, Tq, Tk, NH, NKV, HS;
    const float *q, *k, *v;
    long ldq, ldk, ldv;
    const int32_t *q_pos, *k_pos;
    const int32_t *q_doc, *k_doc;
    float *out, *lse;
    // The same q, k, v and out in bf16, for the ops' bf16 calls (q, k, v, out NULL then): under
    // bf16 the block keeps them in bf16, and the kernel reads and writes them so (lse stays fp32).
    const uint16_t *q16, *k16, *v16;
    uint16_t *out16;
    float *scratch;              // the stage's attention scratch
} ct_attention_args;

typedef struct {
    void *ctx;
    void (*forward)(void *ctx, const ct_attention_args *a);
    // dq, dk, dv (layouts of q, k, v) +=, from dout (layout of out).
    void (*backward)(void *ctx, const ct_attention_args *a, const float *dout, float *dq, float *dk, float *dv);
    // The same on the args' bf16 tensors (dout, dq, dk, dv stay fp32); NULL where the strategy
    // or the backend has no bf16 attention (context parallel's exchanges are fp32): the block
    // then runs the fp32 calls on the widened values.
    void (*forward_bf16)(void *ctx, const ct_attention_args *a);
    void (*backward_bf16)(void *ctx, const ct_attention_args *a, const float *dout, float *dq, float *dk, float *dv);
    // Scratch floats the calls need for (Tq, Tk, HS).
    long (*scratch_floats)(void *ctx, long Tq, long Tk, long HS);
} ct_attention_ops;

// Output projection + cross-entropy with ct_xent_fused's contract: x (N, C), W (V_local, C),
// targets (N) global ids (-1 ignored); adds the SUM of token losses to *loss_sum (one double on
// the device: the loss is read on the host once a step, not per call); with dx != NULL also
// dx (N, C) = partial input gradient (summed over tp by the caller) and dW += its gradient.
// bf16: W holds bf16 values and the output projection's products take bf16 inputs
// (kernels/backend.h: ct_head_products).
typedef struct {
    void *ctx;
    void (*fn)(void *ctx, double *loss_sum, float *dx, float *dW, const float *x, const void *W,
               const int32_t *targets, long N, long C, long V_local, long vocab_start, float grad_scale,
               long chunk_rows, bool bf16, float *scratch);
    long (*scratch_floats)(void *ctx, long chunk_rows, long V_local, long C, bool bf16);
} ct_loss_ops;

// Expert parallelism: how a mixture-of-experts layer's (token, expert) pairs reach their experts'
// ranks (model/moe_layer.h; parallel/expert_parallel.c provides it over the ep group; size 0 or
// 1: every expert on this rank, nothing moves). Both are collective over the group.
typedef struct {
    int size, rank;
    // recv[s·per_peer + i] = what rank s sent as send[rank·per_peer + i] (host int64)
    void (*exchange_counts)(void *ctx, const int64_t *send, int64_t *recv, long per_peer);
    // rows of C floats (device): send_rows[p] rows from send + send_at[p] to rank p, recv_rows[s]
    // rows from rank s into recv + recv_at[s] (counts and offsets in rows, host)
    void (*exchange_rows)(void *ctx, const float *send, const size_t *send_rows, const size_t *send_at, float *recv,
                          const size_t *recv_rows, const size_t *recv_at, long C);
    void *ctx;
} ct_moe_ep_ops;

typedef struct {
    ct_weight_ops weights;
    ct_tp_ops tp;
    ct_attention_ops attention;
    ct_loss_ops loss;
    ct_moe_ep_ops experts;
} ct_stage_ops;

// The single-process table over kernel backend k: weights always in place, no tp, local
// attention and loss through k.
ct_stage_ops ct_stage_ops_local(const ct_kernels *k);
#endif
