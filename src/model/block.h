// One transformer block (pre-norm attention + SwiGLU FFN, Llama 3), forward and backward,
// written once: training stages and the KV-cache generator both run it. Strategies act through
// the stage's operations table (tp edges, attention); weights are acquired by the caller.
#ifndef CT_BLOCK_H
#define CT_BLOCK_H
#include <stdint.h>

#include "kernels/backend.h"
#include "model/linear.h"
#include "model/weights.h"
#include "model/stage.h"
#include "model/stage_ops.h"

// Everything a block call needs besides its weights and activations. Shared buffers are
// scratch, valid inside one call.
typedef struct {
    const ct_kernels *k;
    const ct_stage_ops *ops;
    const ct_linear_ctx *lin;         // the matmuls' precision and scratch
    bool fused;                       // --compile.enable: fused kernels where they apply (fp32)
    float *fuse_scratch;              // their scratch (fused only)
    const ct_model_config *cfg;       // this rank's dimensions
    long B, T, N, N_local, qkv_dim;   // this call's rows: N = B·T, N_local residual rows here
    const int32_t *pos;               // (T) positions of the tokens (NULL: 0..T-1)
    const int32_t *docs;              // (B, T) document ids of the tokens (NULL: causal attention)
    const int32_t *rope_pos;          // (B, T) RoPE positions restarting at each document (NULL: pos)
    const float *rope_cos, *rope_sin; // (>= max position + 1, HS/2)
    float *tmp_local;                 // (N_l, C) sequence parallel only
    float *tmp_full;                  // (N, C) sequence parallel only
    float *scratch;                   // attention tiles
    float *dnorm;                     // (N, C)   backward only
    float *datt;                      // (N, NH·HS)
    float *dqkv;                      // (N, QKV)
    float *dh;                        // (N, F)
    float *dh13;                      // (N, 2F)
    // fp32 work buffers for activations kept in bf16 (NULL in fp32, where the kept buffers are
    // the work buffers): each is computed here, narrowed into the slot, and widened again for
    // the kernels that read fp32 (attention, SwiGLU).
    float *w_norm;                    // (N, C)
    float *w_qkv;                     // (N, QKV)
    float *w_att;                     // (N, NH·HS)
    float *w_h13;                     // (N, 2F)
    float *w_h;                       // (N, F)
} ct_block_ctx;

// s->x (N_l, C) -> out (N_l, C); fills the rest of s. out may alias s->x when nothing will
// run backward (generation).
void ct_block_forward(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w, float *out);
// Activation checkpointing (model/checkpointing.h), just before the block's backward, with the
// same operations as its forward, so the values are the forward's. Elementwise: norm1, norm2 and
// h from what the block kept (x, x_mid, h13). Per op: norm1, k, x_mid, norm2, w3's output and h
// from x, q | v, att and w1's output (the shared qkv and h13 are filled whole).
void ct_block_recompute_elementwise(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w);
void ct_block_recompute_ops(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w);
// dres (N_l, C): on entry the gradient of the block's output, on exit that of its input.
// Combined (keep == NULL): weight gradients are added into g. Split (keep != NULL, g unused):
// the gradients each weight's update needs are stored in keep for ct_block_backward_weight.
void ct_block_backward(const ct_block_ctx *c, int layer, const ct_block_acts *s, const ct_block_weights *w,
                       ct_block_weights *g, ct_block_wgrad_inputs *keep, float *dres);
// g += the block's weight gradients from what the split backward kept. No communication, except
// the 8-bit tensorwise scales' amax reductions under tp (ct_f8_split, kernels/backend.h).
void ct_block_backward_weight(const ct_block_ctx *c, int layer, const ct_block_acts *s, const ct_block_wgrad_inputs *kept,
                              ct_block_weights *g);
#endif
