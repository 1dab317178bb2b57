// Llama 3 model dimensions: the named flavors, the FFN sizing rule, parameter and FLOP counts.
#ifndef CT_LLAMA_CONFIG_H
#define CT_LLAMA_CONFIG_H
#include "core/config.h"
#include "core/error.h"

typedef struct {
    char flavor[64];
    int dim;          // C
    int n_layers;     // L
    int n_heads;      // NH
    int n_kv_heads;   // NKV (grouped-query attention when < NH)
    int head_dim;     // HS = C / NH
    int ffn_hidden;   // F, from the multiple_of / ffn_dim_multiplier rule unless overridden
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

// Meta's FFN rule: hidden = 2/3 * 4 * dim, times ffn_dim_multiplier if set, rounded up to a
// multiple of multiple_of (8B: 4096 -> 14336; debugmodel: 256 -> 768).
int ct_llama3_ffn_hidden(int dim, int multiple_of, double ffn_dim_multiplier);

// Flavor (debugmodel, 8B, 70B, 405B) plus the config's overrides; validates divisibility.
ct_status ct_model_config_from(ct_model_config *m, const ct_config *c);

// The dimensions one tensor-parallel rank computes with: heads, kv heads, FFN hidden and
// vocabulary divided by tp (dim and head_dim unchanged). A tp degree that does not divide them
// is refused with a message naming both numbers.
ct_status ct_model_config_local(const ct_model_config *m, int tp, ct_model_config *local);

// Number of parameters: total, in the token embedding, in one block (two norms, wq/wk/wv, wo,
// w1/w3/w2) and in the head (final norm and output projection). With m from
// ct_model_config_local, those one tp rank holds.
long ct_model_num_params(const ct_model_config *m);
long ct_model_embedding_params(const ct_model_config *m);
long ct_model_block_params(const ct_model_config *m);
long ct_model_head_params(const ct_model_config *m);

// Model FLOPs per token for one training step (forward + backward):
// 6 * (params - embedding) + 12 * L * NH * HS * T  (the attention score and value products).
double ct_model_flops_per_token(const ct_model_config *m, long seq_len);
#endif
