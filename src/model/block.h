// A block, as the stage runs it whatever the family: the views its weights are read through,
// what a call needs besides weights and activations (ct_block_ctx), and the family's operations
// (ct_block_ops). The stage owns the memory -- one workspace per stage, one activations record
// per block and micro-batch slot -- and asks the family how large each piece is and what it
// points where (the carve functions); the family's code reads only its own records.
//
// Strategies act through the stage's operations table (tp edges, attention); weights are
// acquired by the caller.
#ifndef CT_BLOCK_H
#define CT_BLOCK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "model/checkpointing.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/stage_ops.h"

// One block's tensors inside a flat block (parameters or gradients), by view: t[v] is where the
// tensor declared with view v starts (ct_param_spec.view; the family names its views). Under
// bf16, t16[v] is the gathered bf16 compute copy of each tensor the linear layers read
// (ct_param_spec.read_bf16), and t[v] of those is NULL unless 8-bit layers need an fp32 copy;
// otherwise t16 is all NULL.
typedef struct {
    float *t[CT_BLOCK_MAX_VIEWS];
    const uint16_t *t16[CT_BLOCK_MAX_VIEWS];
} ct_block_weights;
// Linear view v of a block's weights as the linear layers take it.
static inline ct_weight ct_block_weight(const ct_block_weights *w, int v) { return (ct_weight){w->t[v], w->t16[v], 0}; }

// Everything a block call needs besides its weights and activations. Shared buffers are scratch,
// valid inside one call.
typedef struct {
    const ct_kernels *k;
    const ct_stage_ops *ops;
    const ct_linear_ctx *lin;         // the matmuls' precision and scratch
    bool fused;                       // --compile.enable: fused kernels where they apply
    const ct_model_config *cfg;       // this rank's dimensions
    long B, T, N, N_local;            // this call's rows: N = B·T, N_local residual rows here
    const int32_t *pos;               // (T) positions of the tokens (NULL: 0..T-1)
    const int32_t *docs;              // (B, T) document ids of the tokens (NULL: causal attention)
    const int32_t *rope_pos;          // (B, T) RoPE positions restarting at each document (NULL: pos)
    const float *rope_cos, *rope_sin; // (>= max position + 1, HS/2)
    float *tmp_local;                 // (N_l, C) sequence parallel only
    float *tmp_full;                  // (N, C) sequence parallel only
    float *scratch;                   // attention tiles
    float *dnorm;                     // (N, C) gradient scratch, backward only (the head's too)
    void *work;                       // the family's shared buffers (ct_block_ops.carve_work)
    // A training forward only (else 0 and NULL): the weight of one token in the step's loss (1 /
    // the step's valid targets), and one float on the device that a block adds its own loss
    // terms to, weighted alike (a mixture-of-experts block's load-balancing loss).
    float token_weight;
    float *aux_sum;
} ct_block_ctx;

// The bit of each checkpointing kind in a set of kinds (ct_block_ops.carve_work).
#define CT_AC_BIT(kind) (1u << (kind))

// A family's block. The carve functions take a base of floats and return how many they used
// (64-byte aligned slices); a NULL base only measures. They read the call's shape from the
// context (rows, dimensions, precision); `work` is carved before any activations record.
struct ct_block_ops {
    size_t acts_size;    // bytes of the family's activations record (one per block and slot)
    size_t wgrad_size;   // bytes of its split-backward record (what backward_input keeps)
    size_t work_size;    // bytes of its workspace record (one per stage)
    // The block's linear layers on this rank, input and output widths (they size the linears'
    // scratch); returns how many (at most CT_BLOCK_LINEARS).
    int (*linears)(const ct_block_ctx *c, ct_linear_shape *out);
    // The stage's shared buffers: backward scratch, work buffers, and the recompute buffers of
    // the checkpointing kinds in `kinds` (CT_AC_BIT set).
    long (*carve_work)(const ct_block_ctx *c, unsigned kinds, void *work, float *base);
    // One block's record under checkpointing kind `kind`; x (N_l, C), the block's input, is the
    // stage's (it is also the previous block's output).
    long (*carve_acts)(const ct_block_ctx *c, ct_ac_kind kind, float *x, void *acts, float *base);
    long (*carve_wgrad)(const ct_block_ctx *c, void *keep, float *base);
    // Releases what carve_acts allocated beside the base (NULL: nothing); the stage calls it for
    // every record it carved with a base before freeing the records.
    void (*release_acts)(void *acts);
    // acts->x (N_l, C) -> out (N_l, C); fills the rest of the record. out may alias x when
    // nothing will run backward (generation).
    void (*forward)(const ct_block_ctx *c, int layer, void *acts, const ct_block_weights *w, float *out);
    // Before the backward of a block checkpointed as kind (ELEMENTWISE or OPS; FULL runs forward
    // again): what the kind does not keep, from what it keeps, with the forward's operations.
    void (*recompute)(const ct_block_ctx *c, int layer, ct_ac_kind kind, void *acts, const ct_block_weights *w);
    // dres (N_l, C): on entry the gradient of the block's output, on exit that of its input.
    // Combined (keep == NULL): weight gradients added into g. Split (keep != NULL, g unused):
    // what each weight's gradient needs is stored in keep for backward_weight.
    void (*backward)(const ct_block_ctx *c, int layer, const void *acts, const ct_block_weights *w,
                     ct_block_weights *g, void *keep, float *dres);
    // g += the weight gradients from what the split backward kept. No communication (except
    // 8-bit scales' amax reductions under tp).
    void (*backward_weight)(const ct_block_ctx *c, int layer, const void *acts, const void *keep, ct_block_weights *g);
    // The policy's arithmetic (model/checkpointing.h): bytes kept per token, FLOPs recomputed.
    double (*kept_bytes_per_token)(const ct_ac_shape *s, ct_ac_kind kind);
    // A mixture-of-experts block: adds the (token, expert) pairs its last forward routed to each
    // of the n_experts experts into counts (host); NULL for a dense family.
    void (*expert_counts)(const void *acts, long n_experts, int64_t *counts);
    double (*recompute_flops_per_token)(const ct_ac_shape *s, ct_ac_kind kind, long seq_len);
};
#endif
