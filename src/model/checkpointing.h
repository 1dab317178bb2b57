// Activation checkpointing: which of a block's activations its backward finds kept and which it
// recomputes first (model/block.c does both), what each policy keeps per token, and what its
// recompute costs. The arithmetic here is the policy's definition; the stage carves exactly
// these buffers (tests/test_parity_ac.c holds the two together).
#ifndef CT_CHECKPOINTING_H
#define CT_CHECKPOINTING_H
#include <stdbool.h>

#include "model/model.h"

// What a block keeps for backward. Letters as in model/stage.h; the residual stream (x, x_mid)
// is fp32 (it accumulates every block's small updates), the rest is in the compute dtype.
typedef enum {
    CT_AC_NONE = 0,     // everything its backward reads
    CT_AC_ELEMENTWISE,  // every matmul and attention output (qkv, att with lse, x_mid, h13) and the
                        // norms' rstd; recomputes only elementwise work: norm1, norm2, SwiGLU's h
    CT_AC_OPS,          // TorchTitan's per-op policy, every second matmul's output recomputed: keeps
                        // x, q and v, att with lse, w1's output; recomputes norm1, k (wk, RoPE),
                        // x_mid (wo, and its tp reduction), norm2, w3's output and h
    CT_AC_FULL,         // its input only; its whole forward is recomputed
    CT_AC_KINDS
} ct_ac_kind;

// The run's policy: kind for every block, or with FULL and every > 1, every N-th block
// (blocks N-1, 2N-1, ... in global numbering, as TorchTitan counts) and none for the others.
typedef struct {
    ct_ac_kind kind;
    int every;
} ct_ac_policy;

ct_ac_kind ct_ac_layer_kind(const ct_ac_policy *p, int layer);
const char *ct_ac_kind_name(ct_ac_kind k);  // "none", "elementwise", "op", "full"

// One rank's block shape for the arithmetic below.
typedef struct {
    const ct_model_config *cfg;  // this rank's dimensions (heads and FFN hidden already / tp)
    int compute_bytes;           // 2 (bf16) or 4 (fp32)
    int seq_parallel_tp;         // > 1: the residual stream's rows split over this many tp ranks
} ct_ac_shape;

// Bytes one block keeps per token of the micro-batch under kind (the slot's buffers).
double ct_ac_kept_bytes_per_token(const ct_ac_shape *s, ct_ac_kind kind);
// Matmul FLOPs one block recomputes per token under kind, before its backward (elementwise work
// not counted: a few FLOPs per element). seq_len sizes the attention a full recompute repeats.
double ct_ac_recompute_flops_per_token(const ct_ac_shape *s, ct_ac_kind kind, long seq_len);
#endif
