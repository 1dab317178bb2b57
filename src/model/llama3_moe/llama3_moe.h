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
// Shared experts (n_shared_experts, DeepSeek): one SwiGLU of hidden S·F every token passes, its
// output added beside the routed experts'. Dense first blocks (n_dense_layers, DeepSeek): Llama
// 3's block with FFN width dense_ffn_hidden, run by Llama 3's own code.
//
// What it runs (ct_model_family.supports): fp32 and bf16 mixed precision (the routed experts'
// matmuls in bf16 with fp32 accumulation, the router in fp32: model/moe_layer.h); float8 and
// MXFP8 matmuls (the routed experts' w13 and w2 one 8-bit linear per expert on its rows, the
// rest as Llama 3's, the router in fp32); tensor parallelism (llama3_moe/block.c); activation checkpointing of every kind (the
// routed experts' activations are kept whole by the selective kinds and recomputed by full);
// expert parallelism (model/moe_layer.h); no split backward.
#ifndef CT_LLAMA3_MOE_H
#define CT_LLAMA3_MOE_H
#include <stdbool.h>

#include "model/llama3/llama3.h"
#include "model/moe_layer.h"
#include "model/model.h"

extern const ct_model_family ct_llama3_moe_family;
extern const ct_block_ops ct_llama3_moe_block;

// A block's weight views: Llama 3's (a dense first block's are Llama 3's alone; a routed
// block's LLAMA3_W13 / LLAMA3_W2 are its shared experts', one SwiGLU of hidden S·F, absent
// without shared experts), then the experts'.
enum {
    LLAMA3_MOE_ROUTER = LLAMA3_K_NORM + 1,  // (E, C)
    LLAMA3_MOE_W13,                         // (E·2F, C): each expert's w1 | w3
    LLAMA3_MOE_W2,                          // (E·C, F): each expert's w2
    LLAMA3_MOE_BIAS,                        // (E) the choosing bias (moe_bias_rate > 0 only)
};

// The FFN width a block's Llama 3 record and workspace are carved for: the widest of a dense
// first block's (dense_ffn_hidden) and the shared experts' (S·F), 0 with neither. The record
// does not know its block, so every record holds room for either kind.
long ct_llama3_moe_ffn_width(const ct_model_config *m);

// One block's activations: the attention half's with the dense or shared FFN's h13 / h (first,
// so Llama 3's code reads it), then the expert layer's (its buffers allocated on the device when
// the record is carved, released with the stage's slots; under full checkpointing one block's
// worth in the workspace, shared by the records).
typedef struct {
    ct_llama3_acts attn;
    ct_moe_acts moe;
    bool dense;          // set by the forward: the block was a dense first block (no routing)
    float aux_weight;    // the load-balancing loss's weight the last training forward used, kept
                         // for a full recompute (whose call carries no loss weight)
    int *shared_users;   // full checkpointing: the records sharing the workspace's moe buffers
    ct_moe_acts *shared; // those buffers (NULL: moe is the record's own)
    struct ct_llama3_moe_work *work;  // the workspace whose expert work rows moe uses
} ct_llama3_moe_acts;

typedef struct ct_llama3_moe_work {
    ct_llama3_work attn;  // first, as Llama 3's block reads it (carved for ct_llama3_moe_ffn_width)
    ct_moe_layer layer;   // the expert layer for this stage's N rows
    float *tmp;           // (N, C) the routed experts' output; the shared experts' input gradient
    ct_moe_acts rc_moe;   // full checkpointing: the routed experts' buffers of the block recomputed
    int rc_moe_users;     // records using rc_moe (allocated with the first, freed with the last)
    float *moe_scratch;   // (ct_moe_scratch_floats) the expert layer's work rows within a call,
                          // one for the stage's records (blocks run one at a time)
    int moe_scratch_users;  // records using it (allocated with the first, freed with the last)
} ct_llama3_moe_work;
#endif
