// A model as the rest of ctitan sees it: its dimensions (ct_model_config) and its family
// (ct_model_family), the table of what differs between model families -- the parameters of a
// block with their sharding and initialisation, the block's forward and backward
// (model/block.h: ct_block_ops), the activations it keeps per checkpointing policy, its FLOPs.
// Stages, strategies, checkpoints, the planner and the trainer work through these and never
// name a family; each family lives in its own folder (model/llama3/).
//
// Every family here is a decoder-only transformer with a token embedding in front and a final
// norm + output projection behind (the stage runs those); they differ inside the blocks.
#ifndef CT_MODEL_H
#define CT_MODEL_H
#include "core/config.h"
#include "core/error.h"

typedef struct ct_model_family ct_model_family;
typedef struct ct_block_ops ct_block_ops;

typedef struct ct_model_config {
    const ct_model_family *family;  // model.name: how the blocks compute and what they hold
    char flavor[64];
    int dim;          // C
    int n_layers;     // L
    int n_heads;      // NH
    int n_kv_heads;   // NKV (grouped-query attention when < NH)
    int head_dim;     // HS: C / NH unless a flavor sets its own (attention is written in NH·HS)
    int ffn_hidden;   // F, from the multiple_of / ffn_dim_multiplier rule unless overridden; each
                      // expert's hidden size in a mixture-of-experts family
    int n_experts;    // E routed experts per block (0: a dense family)
    int moe_top_k;    // experts each token is routed to
    int n_shared_experts;  // S experts of hidden F every token passes besides its top_k (DeepSeek)
    int n_dense_layers;    // the first blocks are dense SwiGLU blocks instead of experts (DeepSeek)
    int dense_ffn_hidden;  // those blocks' FFN hidden size
    int qk_norm;      // 1: an RMSNorm over each head's HS values of q and of k before RoPE (Qwen3)
    // The router and its load balancing (model.moe.*, model/moe_settings.c; a dense family: zero)
    int moe_sigmoid;             // scores: a sigmoid each (DeepSeek-V3), else a softmax over the experts
    int moe_route_norm;          // the chosen experts' weights divided by their sum
    double moe_aux_coeff;        // load-balancing loss coefficient (0: none)
    int moe_aux_per_sequence;    // its groups: each sequence, else each block call's micro-batch
    double moe_bias_rate;        // the choosing bias's update per step (0: the blocks hold no bias)
    int vocab_size;   // V
    int multiple_of;
    double ffn_dim_multiplier;  // 0 = none
    double norm_eps;
    double rope_theta;
    int rope_scaling;           // Llama 3.1 frequency scaling on/off
    int max_seq_len;            // rope table length
    // What the weights were trained to expect of the inputs (not of the weights' shapes):
    int block_causal;           // model.attn_mask_type block_causal: attention kept inside documents
    int document_positions;     // model.rope_positions document: RoPE positions from 0 at each document
} ct_model_config;

typedef enum { CT_INIT_ONES, CT_INIT_NORMAL } ct_init_kind;

enum {
    CT_BLOCK_MAX_PARAMS = 16,  // tensors of one block
    CT_BLOCK_MAX_VIEWS = 12,   // the views a block's code reads its weights through
};

// One tensor of a block, as its family declares it: global shape, how tensor parallelism
// splits it, how it starts, and where the block's code finds it.
typedef struct {
    const char *name;  // inside the block: "attention.wq.weight" (the registry prefixes "layers.<l>.")
    long rows, cols;   // global shape; cols 1: a vector
    int tp_dim;        // -1 replicated, 0 rows split (column-parallel), 1 columns split (row-parallel)
    ct_init_kind init;
    double init_std;
    int view;          // the view (ct_block_weights.t[view]) it starts, or -1: it continues the
                       // previous tensor's matrix (wq | wk | wv read as one fused matrix)
    bool read_bf16;    // under bf16 read only in bf16 (by the linear layers, model/linear.h): FSDP
                       // then gathers it without an fp32 copy (a tensor that continues a matrix
                       // says the same as the matrix's first)
    bool expert;       // a routed experts' tensor, (E·rows per expert, cols): under expert
                       // parallelism split by rows over the ep group (E/ep experts a rank) and
                       // sharded by FSDP over the ranks holding the same experts. A block's
                       // expert tensors come last, so they are one contiguous part of its group.
} ct_param_spec;

// What a family's blocks support beyond fp32, one process-wide tensor layout and no
// checkpointing (ct_model_family.supports); ct_model_config_from refuses the rest by name.
enum {
    CT_FAMILY_TP = 1,              // tensor (and sequence) parallelism
    CT_FAMILY_BF16 = 2,            // mixed_precision bf16
    CT_FAMILY_8BIT = 4,            // float8 / MXFP8 matmuls
    CT_FAMILY_CHECKPOINTING = 8,   // activation checkpointing, every kind
    CT_FAMILY_SPLIT_BACKWARD = 16, // zero-bubble schedules (backward_input / backward_weight)
};

struct ct_model_family {
    const char *name;  // model.name
    unsigned supports; // CT_FAMILY_* bits
    // Dimensions from the settings (flavor, then overrides), validated; family set by the caller.
    ct_status (*config_from)(ct_model_config *m, const ct_config *c);
    // CT_ERR naming the setting when the blocks do not run this model under these settings yet
    // (the planner sizes it; training refuses it). NULL: the supports bits say everything.
    ct_status (*trainable)(const ct_model_config *m, const ct_config *c);
    // Block `layer`'s tensors in the order they lie in memory; returns how many.
    int (*block_params)(const ct_model_config *m, int layer, ct_param_spec specs[CT_BLOCK_MAX_PARAMS]);
    // Matmul FLOPs of one block's forward per token, attention's score and value products
    // excluded (those are counted from the sequence length): 2 x the parameters a token meets;
    // the mean over the blocks where a family's blocks differ (dense-first MoE layers).
    double (*block_forward_flops_per_token)(const ct_model_config *m);
    const ct_block_ops *block;  // model/block.h
    const char *hf_model_type;  // its Hugging Face config's model_type (checkpoint/hf*.c), NULL: none yet
};

// The family named `name` (model.name), or NULL.
const ct_model_family *ct_model_family_find(const char *name);
// Every family, NULL-terminated (help text, errors).
const ct_model_family *const *ct_model_families(void);

// For a family's config_from, once dim and the heads are set: what the inputs were made with
// (norm_eps, RoPE scaling, the mask and RoPE positions, max_seq_len) from the settings, and the
// head width -- head_dim when > 0 (a flavor's own), else dim / n_heads, which must divide -- with
// kv heads dividing the heads and an even head width (RoPE). CT_ERR names the setting.
ct_status ct_model_config_attention(ct_model_config *m, const ct_config *c, int head_dim);

// For ct_model_config_plan, after the family's config_from: the router and balancing settings
// (model.moe.*) into m for a family with experts; CT_ERR naming the setting for a negative
// coefficient, or for any of them set away from its default on a dense family.
ct_status ct_model_config_moe(ct_model_config *m, const ct_config *c);

// The family model.name names, then its flavor and the config's overrides; validated, and
// refused where the family's blocks cannot train it (supports, trainable).
ct_status ct_model_config_from(ct_model_config *m, const ct_config *c);
// The same dimensions without the training checks: what the planner sizes (it plans layouts
// and models the blocks do not run yet, and says so).
ct_status ct_model_config_plan(ct_model_config *m, const ct_config *c);

// The dimensions one tensor-parallel rank computes with: heads, kv heads, FFN hidden (each
// expert's, and dense blocks') and vocabulary divided by tp (dim and head_dim unchanged). A tp degree that does not divide them
// is refused with a message naming both numbers.
ct_status ct_model_config_local(const ct_model_config *m, int tp, ct_model_config *local);

// Number of parameters: total, in the token embedding, in the last block (the blocks of a family
// are alike but for a mixture-of-experts model's dense first blocks) and in the head (final norm and output projection). With m from
// ct_model_config_local, those one tp rank holds.
long ct_model_num_params(const ct_model_config *m);
long ct_model_embedding_params(const ct_model_config *m);
long ct_model_block_params(const ct_model_config *m);
long ct_model_head_params(const ct_model_config *m);
// Parameters one token meets (embedding row, blocks, head): the total less, in each routed
// block, the n_experts - moe_top_k experts it is not sent to. The total for a dense family.
long ct_model_active_params(const ct_model_config *m);

// Model FLOPs per token for one training step (forward + backward): 3 x the blocks' forward
// matmul FLOPs and the output projection's, + 12 * L * NH * HS * T (the attention score and
// value products, forward and backward).
double ct_model_flops_per_token(const ct_model_config *m, long seq_len);
#endif
