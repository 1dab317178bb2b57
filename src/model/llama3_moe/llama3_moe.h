// Llama 3 with routed experts: each block is Llama 3's attention half (model/llama3/llama3.h)
// followed by a dropless mixture-of-experts feed-forward (model/moe_layer.h): a router picks
// moe_top_k of n_experts SwiGLU experts per token, and the block's output is x_mid + their
// weighted sum. The router as model.moe.* sets it (ct_model_config's moe_* fields): softmax
// or sigmoid scores, the chosen weights renormalised or not; load balancing by the auxiliary
// loss (moe_aux_coeff, per sequence or per block call's micro-batch: each call's loss weighted
// by its tokens' share of the step's valid targets, added to the stage's aux_sum and its
// gradient to the router's), and by DeepSeek-V3's choosing bias (moe_bias_rate > 0: a tensor
// "moe.expert_bias" of E per block, read by the router only, moved after each step by
// train/moe_bias.c, never by the optimizer).
//
// What it runs today: fp32, no tensor parallelism, no activation checkpointing, no split
// backward (ct_model_family.supports); every expert on every rank (no expert parallelism), so
// data sharding shards the experts like any other parameter.
#ifndef CT_LLAMA3_MOE_H
#define CT_LLAMA3_MOE_H
#include "model/llama3/llama3.h"
#include "model/moe_layer.h"
#include "model/model.h"

extern const ct_model_family ct_llama3_moe_family;
extern const ct_block_ops ct_llama3_moe_block;

// A block's weight views: Llama 3's attention views, then the experts'.
enum {
    LLAMA3_MOE_ROUTER = LLAMA3_K_NORM + 1,  // (E, C)
    LLAMA3_MOE_W13,                         // (E·2F, C): each expert's w1 | w3
    LLAMA3_MOE_W2,                          // (E·C, F): each expert's w2
    LLAMA3_MOE_BIAS,                        // (E) the choosing bias (moe_bias_rate > 0 only)
};

// One block's activations: the attention half's (first, so Llama 3's code reads it), then the
// expert layer's (its buffers allocated on the device when the record is carved, released with
// the stage's slots).
typedef struct {
    ct_llama3_acts attn;
    ct_moe_acts moe;
} ct_llama3_moe_acts;

typedef struct {
    ct_llama3_work attn;  // first, as Llama 3's attention half reads it
    ct_moe_layer layer;   // the expert layer for this stage's N rows
} ct_llama3_moe_work;
#endif
