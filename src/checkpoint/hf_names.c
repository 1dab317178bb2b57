// The two conventions side by side: tensor names (one HF tensor per ctitan tensor, or an expert
// tensor's pieces) and the RoPE row permutation (hf.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/hf.h"

// Suffixes of a block's tensors: ctitan's after "layers.N.", HF's after "model.layers.N.".
static const char *const block_names[][2] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attention.q_norm.weight", "self_attn.q_norm.weight"},
    {"attention.k_norm.weight", "self_attn.k_norm.weight"},
    {"moe.router.weight", "mlp.gate.weight"},
};

// The experts' tensors, each E expert tensors stacked by rows on ctitan's side: w13 is per expert
// w1 (gate_proj) then w3 (up_proj), F rows each; w2 is each expert's down_proj, C rows.
static const char w13_suffix[] = "moe.experts.w13.weight", w2_suffix[] = "moe.experts.w2.weight";

static const char *const top_names[][2] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

ct_status ct_hf_name(const char *ct_name, char *out, size_t out_size) {
    for (size_t i = 0; i < sizeof top_names / sizeof top_names[0]; i++)
        if (!strcmp(ct_name, top_names[i][0])) {
            snprintf(out, out_size, "%s", top_names[i][1]);
            return CT_OK;
        }
    int layer, used = 0;
    if (sscanf(ct_name, "layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0)
        for (size_t i = 0; i < sizeof block_names / sizeof block_names[0]; i++)
            if (!strcmp(ct_name + used, block_names[i][0])) {
                snprintf(out, out_size, "model.layers.%d.%s", layer, block_names[i][1]);
                return CT_OK;
            }
    return ct_set_error("no Hugging Face name for tensor %s", ct_name);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int ct_hf_pieces(const ct_model_config *m, const char *ct_name) {
    if (ends_with(ct_name, w13_suffix)) return 2 * m->n_experts;
    if (ends_with(ct_name, w2_suffix)) return m->n_experts;
    return 1;
}

ct_status ct_hf_piece_name(const char *ct_name, int piece, char *out, size_t out_size) {
    int w13 = ends_with(ct_name, w13_suffix), w2 = ends_with(ct_name, w2_suffix), layer;
    if (!w13 && !w2) return ct_hf_name(ct_name, out, out_size);
    if (sscanf(ct_name, "layers.%d.", &layer) != 1 || layer < 0 || piece < 0)
        return ct_set_error("no Hugging Face name for tensor %s", ct_name);
    if (w2) snprintf(out, out_size, "model.layers.%d.mlp.experts.%d.down_proj.weight", layer, piece);
    else snprintf(out, out_size, "model.layers.%d.mlp.experts.%d.%s.weight", layer, piece / 2,
                  piece % 2 ? "up_proj" : "gate_proj");
    return CT_OK;
}

// q and k (and, under qk_norm, their per-head norm weights, which scale the same rows of a head)
int ct_hf_rope_permuted(const char *ct_name) {
    return ends_with(ct_name, ".attention.wq.weight") || ends_with(ct_name, ".attention.wk.weight") ||
           ends_with(ct_name, ".attention.q_norm.weight") || ends_with(ct_name, ".attention.k_norm.weight");
}

// Within a head, ctitan row 2i + j (the pair (2i, 2i+1) RoPE rotates together) is HF row
// j·HS/2 + i (the pair (i, i + HS/2) that rotate_half rotates together).
long ct_hf_row_of_ct(long row, long head_dim) {
    long head = row / head_dim, r = row % head_dim, half = head_dim / 2;
    return head * head_dim + (r % 2) * half + r / 2;
}

long ct_hf_row_to_ct(long hf_row, long head_dim) {
    long head = hf_row / head_dim, r = hf_row % head_dim, half = head_dim / 2;
    return head * head_dim + 2 * (r % half) + r / half;
}
