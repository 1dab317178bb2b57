// The model's tensors as views into a flat block of parameters (or gradients): the embedding,
// each block's views (model/block.h: ct_block_weights, named by the family), the final norm and
// the output projection. Strategies act by what they put behind the views (FSDP re-points a
// group at its gathered buffer), and by the stage's operations table. Also the RoPE tables.
#ifndef CT_WEIGHTS_H
#define CT_WEIGHTS_H
#include "kernels/backend.h"
#include "model/block.h"
#include "model/model.h"
#include "model/params.h"

typedef struct {
    float *tok_embeddings;     // (V, C)
    ct_block_weights *blocks;  // (L)
    float *norm;               // (C)
    float *output;             // (V, C)
    // Under bf16 (FSDP's gathered compute copy): the two vocabulary matrices in bf16, their fp32
    // views above NULL; otherwise NULL.
    const uint16_t *tok_embeddings16, *output16;
} ct_model_weights;

// Points a weights struct at the tensors of a flat block laid out by the registry.
void ct_model_weights_init(ct_model_weights *w, const ct_param_table *t, const ct_model_config *m, float *block);
// Re-points the views of one group (FSDP moves a group into a gathered buffer and back).
// `group_block` holds the group's elements: tensor i at at[i] (per table tensor), or with at NULL
// as they lie in the flat block, starting at its first tensor. No name lookups: each tensor
// knows its view.
void ct_model_weights_point_group(ct_model_weights *w, const ct_param_table *t, int group, float *group_block,
                                  const long *at);
// The same for a group gathered in bf16: each read_bf16 tensor's bf16 view points into
// group_bf16 (the whole group's elements); the fp32 views point into group_f32 at f32_at[i] (per
// table tensor), or are NULL where f32_at[i] < 0 (no fp32 copy).
void ct_model_weights_point_group_bf16(ct_model_weights *w, const ct_param_table *t, int group, float *group_f32,
                                       const long *f32_at, const uint16_t *group_bf16, const long *at);
void ct_model_weights_free(ct_model_weights *w);

// RoPE tables cos/sin (T, HS/2) for this model: rope_theta, and Llama 3.1's frequency scaling
// when cfg->rope_scaling (factor 8, low 1, high 4, original context 8192) -- the one place
// those constants live.
void ct_model_rope_tables(const ct_kernels *k, const ct_model_config *m, float *cos_tab, float *sin_tab, long T);
#endif
