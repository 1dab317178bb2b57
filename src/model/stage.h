// The model as stages. A stage is a contiguous range of transformer blocks, with or without the
// embedding in front and with or without the head (final norm, output projection, loss) behind.
// One process may run several stages (virtual pipeline stages); with no pipeline one stage holds
// the whole model. A stage runs one micro-batch at a time, in the actions a schedule orders:
//
//   forward          input (tokens, or the previous stage's output) -> output (or the loss).
//                    On the head stage, in training, the fused output projection + loss also
//                    computes the head's whole backward: the slot then holds the gradient of the
//                    last block's output.
//   backward         gradient of the output -> gradient of the input, plus weight gradients.
//   backward_input   the input gradient only; keeps what the weight gradients need in the slot.
//   backward_weight  the weight gradients from what backward_input kept (pure compute: no
//                    communication, so a zero-bubble schedule can fill a pipeline bubble with it).
//
// Activations live in slots, one per micro-batch in flight on this stage; the executor decides
// how many a schedule needs and which slot a micro-batch uses. Buffers shared by every slot
// (gradient scratch, attention tiles, RoPE tables) are used only inside one action.
//
// Letters: B micro-batch, T sequence, N = B·T rows, N_l rows of the residual stream on this
// rank (N, or N / tp under sequence parallel), C model dim, V vocabulary on this rank.
#ifndef CT_STAGE_H
#define CT_STAGE_H
#include <stdbool.h>
#include <stdint.h>

#include "core/mem_sizing.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/checkpointing.h"
#include "model/block.h"
#include "model/linear.h"
#include "model/weight_packs.h"
#include "model/weights.h"
#include "model/stage_ops.h"

// One micro-batch's activations on one stage.
typedef struct {
    int mb;                      // the micro-batch in this slot (-1: free)
    const int32_t *inputs;       // (B, T) tokens (first stage)
    const int32_t *targets;      // (B, T) targets, -1 ignored (last stage)
    const int32_t *docs;         // (B, T) document ids (every stage; NULL: causal attention)
    const int32_t *rope_pos;     // (B, T) RoPE positions restarting at each document (NULL: the stage's pos)
    float **x;                   // (n_layers) each block's input (N_l, C); x[0] is the stage's input
    void *blocks;                // (n_layers) the family's activations records (block->acts_size bytes each)
    float *out;                  // (N_l, C) the last block's output: the stage's output
    float *norm_f;               // (N, C) head: final norm, gathered
    float *rstd_f;               // (N_l) head
    float *grad;                 // (N_l, C) running residual gradient: in, the output's; out, the input's
    void *wg;                    // (n_layers) split backward only: the family's records (block->wgrad_size each), else NULL
    float *dx_embed;             // (N, C) split backward on the embedding stage: its weight-gradient input
    double *loss_sum;            // (1) head: a double on the device the micro-batch's token losses are added to (the caller's)
} ct_act_slot;

typedef struct {
    const ct_kernels *k;
    ct_stage_ops ops;
    ct_model_config cfg;         // this rank's dimensions (ct_model_config_local under tp)
    int layer_begin, layer_end;  // blocks [begin, end) in global numbering
    bool has_embedding, has_head;
    const ct_block_ops *block;   // the family's block (cfg.family->block)
    long B, T, N, N_local;
    const int32_t *pos;          // (T) token positions (NULL: 0..T-1)
    long rope_len;               // rows of the RoPE tables
    ct_model_weights *w;         // parameter views (strategies re-point them per group)
    ct_model_weights *g;         // gradient views
    ct_precision prec;           // how the blocks' matmuls compute and what dtype they keep
    ct_linear_ctx lin;           // their scratch
    ct_ac_policy ac;             // activation checkpointing
    bool fused;                  // --compile.enable: the blocks use fused kernels (the family says where)

    int n_slots;
    bool split_backward;         // slots keep backward_weight's inputs
    ct_act_slot *slots;          // (n_slots)

    // Shared by every slot, valid inside one action only.
    float *dnorm;                // (N, C) gradient scratch: the head's input gradient, the blocks' norms'
    void *work;                  // the family's shared buffers (block->work_size bytes; model/block.h)
    float *tmp_local;            // (N_l, C) sequence parallel: a norm's output before gathering
    float *tmp_full;             // (N, C) sequence parallel: partial sums before reduce-scatter
    float *rope_cos, *rope_sin;  // (rope_len, HS/2)
    float *scratch;              // attention tiles / logits chunk
    long xent_chunk_rows;
    int64_t *expert_load;        // (n_layers, n_experts) host, mixture-of-experts families only: pairs
                                 // each block routed to each expert in training forwards since the
                                 // last ct_stage_take_expert_load
    float *aux_sum;              // one float on the device (the caller's; NULL: none) that training
                                 // forwards add the blocks' own loss terms to (ct_block_ctx.aux_sum)
    bool keep_packs;             // keep packed bf16 weights over an executor run (packs)
    ct_weight_packs packs;       // the blocks' packed bf16 linear weights (model/weight_packs.h)
    float *arena;                // shared buffers
    float *slot_arena;           // every slot's buffers
    ct_mem_sizing *sizing;       // non-NULL: a sizing stage (no buffers, see ct_stage_spec)
} ct_stage;

typedef struct {
    const ct_kernels *k;
    const ct_model_config *cfg;  // this rank's dimensions
    int layer_begin, layer_end;
    bool has_embedding, has_head;
    long B, T;                   // micro-batch: B sequences of T tokens on this rank
    const int32_t *pos;          // (T) global positions of those tokens (NULL: 0..T-1); context
                                 // parallel gives each rank its chunks of a longer sequence
    long max_pos;                // RoPE table length: 1 + the largest position (0: T)
    ct_stage_ops ops;
    ct_model_weights *weights, *grads;
    ct_precision prec;           // zero: fp32
    ct_ac_policy ac;             // zero: keep everything
    bool fused;                  // fused kernels (--compile.enable)
    int micro_batches;           // micro-batches this stage runs per step
    bool pack_weights;           // with more than one: keep bf16 weights packed over a step
                                 // (model/weight_packs.h)
    ct_mem_sizing *sizing;       // non-NULL: allocate nothing, add the bytes init and
                                 // ct_stage_plan_slots would allocate to it (core/mem_sizing.h);
                                 // such a stage can be planned (executor) but never run
} ct_stage_spec;

// Plans the shared buffers; slots come from ct_stage_plan_slots (the executor's count).
void ct_stage_init(ct_stage *s, const ct_stage_spec *spec);
// (Re)allocates n slots; split: keep backward_weight's inputs (schedules with I/W actions).
void ct_stage_plan_slots(ct_stage *s, int n, bool split);
void ct_stage_free(ct_stage *s);
// The weights stay as they are (fixed true) until the next call with false: from now on the
// stage's packed weights are packed once and reused (a new epoch); with false, never read again.
void ct_stage_weights_fixed(ct_stage *s, bool fixed);

// What travels between stages, as typed views on the backend's device: the slot's input
// (N_l, C) a receive fills on a stage without the embedding, its output (N_l, C) a send reads on
// a stage without the head, and the residual gradient (N_l, C) that travels back.
ct_tensor ct_stage_input(ct_stage *s, ct_act_slot *a);
ct_tensor ct_stage_output(ct_stage *s, ct_act_slot *a);
ct_tensor ct_stage_grad(ct_stage *s, ct_act_slot *a);

// The layer groups this stage computes (0 embedding, 1 + l block l, L + 1 head), in order, into
// groups (room for n_layers + 2); returns how many.
int ct_stage_groups(const ct_stage *s, int *groups);

// Adds this stage's expert_load into load (L, n_experts) at its blocks' global rows, then zeroes
// it. A dense family adds nothing.
void ct_stage_take_expert_load(ct_stage *s, int64_t *load);

// Forward of one micro-batch in slot a (a->inputs / a->targets set by the caller). On the head
// stage: the sum of its token losses is added to *a->loss_sum (on the device), and with training also the head's backward (gradients
// scaled by grad_scale = 1 / valid tokens of the whole step) leaving a->grad set.
// With training, the blocks' own loss terms, weighted by grad_scale per token, are added to
// *s->aux_sum when it is set.
void ct_stage_forward(ct_stage *s, ct_act_slot *a, bool training, float grad_scale);
// a->grad holds the gradient of the stage's output (set by the head's forward, or received);
// on return it holds the gradient of the stage's input (not on the embedding stage).
void ct_stage_backward(ct_stage *s, ct_act_slot *a);
void ct_stage_backward_input(ct_stage *s, ct_act_slot *a);
void ct_stage_backward_weight(ct_stage *s, ct_act_slot *a);
#endif
