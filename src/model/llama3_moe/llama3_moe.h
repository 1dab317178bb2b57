// Llama 3 with routed experts: each block is Llama 3's attention half (model/llama3/llama3.h)
// followed by a dropless mixture-of-experts feed-forward (model/moe_layer.h): a router picks
// moe_top_k of n_experts SwiGLU experts per token (softmax scores, chosen weights renormalised,
// as Qwen3-MoE does, with its per-head QK-norm), and the block's output is x_mid + their weighted
// sum.
//
// What it runs today: fp32, no tensor parallelism, no activation checkpointing, no split
// backward (ct_model_family.supports); every expert on every rank (no expert parallelism), so
// data sharding shards the experts like any other parameter. No load-balancing loss yet.
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
