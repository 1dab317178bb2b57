// Hugging Face interchange: a ctitan model as a directory that `transformers` loads -- a llama3
// model as LlamaForCausalLM, a llama3_moe model as Qwen3MoeForCausalLM -- and such a directory
// (ours, or a real Llama 3 / 3.1 or Qwen3-MoE checkpoint of the shapes ctitan computes) back.
//
// The directory:
//   config.json             LlamaConfig: dims, rms_norm_eps, rope_theta, max_position_embeddings
//                           (the context the model supports: 8192, or 131072 with Llama 3.1
//                           scaling as in Meta's configs, or the training length when longer),
//                           rope_scaling {"rope_type": "llama3", factor 8, low_freq_factor 1,
//                           high_freq_factor 4, original_max_position_embeddings 8192} when the
//                           model uses Llama 3.1 scaling (the constants of ct_model_rope_tables),
//                           torch_dtype; plus "ctitan_flavor" and "ctitan_max_seq_len" (the
//                           training length), which transformers ignores and an import reads back
//   model.safetensors       the tensors under HF's names (export), or on import also
//   model.safetensors.index.json + its shards ({"weight_map": {name: file}})
//   generation_config.json, tokenizer.json, tokenizer_config.json, original/tokenizer.model
//                           when a tokenizer is given (hf_tokenizer.h)
//
// Names, ctitan (TorchTitan) -> HF:
//   tok_embeddings.weight                 model.embed_tokens.weight
//   layers.N.attention.w{q,k,v,o}.weight  model.layers.N.self_attn.{q,k,v,o}_proj.weight
//   layers.N.feed_forward.w1|w3|w2.weight model.layers.N.mlp.gate_proj|up_proj|down_proj.weight
//   layers.N.attention_norm.weight        model.layers.N.input_layernorm.weight
//   layers.N.ffn_norm.weight              model.layers.N.post_attention_layernorm.weight
//   norm.weight, output.weight            model.norm.weight, lm_head.weight
// Shapes are the same on both sides ([out, in] matrices, [C] norm weights).
//
// Qwen3-MoE (model_type "qwen3_moe", the llama3_moe family) has the same attention and norm names
// and adds, per layer:
//   layers.N.attention.q_norm|k_norm.weight   model.layers.N.self_attn.q_norm|k_norm.weight  [HS]
//   layers.N.moe.router.weight                model.layers.N.mlp.gate.weight                 [E, C]
//   layers.N.moe.experts.w13.weight [E·2F, C] model.layers.N.mlp.experts.X.gate_proj.weight  [F, C]
//                                             then .up_proj.weight [F, C], for X = 0 .. E-1
//   layers.N.moe.experts.w2.weight  [E·C, F]  model.layers.N.mlp.experts.X.down_proj.weight  [C, F]
// so an expert tensor is several HF tensors, its pieces (ct_hf_pieces), each a run of its rows in
// order. config.json: Qwen3MoeConfig -- num_experts, num_experts_per_tok, moe_intermediate_size
// (F), norm_topk_prob true (ctitan renormalises the chosen weights), decoder_sparse_step 1 and
// mlp_only_layers [] (every layer routed), head_dim, use_sliding_window false,
// output_router_logits false; intermediate_size, the size of dense layers none of which there
// are, is written as F. The router's softmax over every expert, then top-k, is Qwen3-MoE's.
//
// RoPE: ctitan rotates adjacent pairs (x[2i], x[2i+1]) of each head (Meta's layout,
// kernels/cpu/rope.c); HF's LlamaAttention rotates (x[i], x[i + HS/2]) (rotate_half). The two
// compute the same function when the rows of wq and wk are permuted within each head: ctitan
// row 2i + j of a head is HF row j·HS/2 + i (j = 0, 1; i < HS/2) -- the permutation of HF's
// convert_llama_weights_to_hf.py. q·k is unchanged because q and k move alike; v, wo and the
// rest need nothing. Qwen3's q_norm and k_norm weights scale a head's rows, so they are
// permuted alike (the norm itself, over the whole head, does not see the order).
//
// Everything streams: tensors are read from a memory-mapped file and written a piece at a
// time, and the mapped pages of each piece are let go once it is written, so memory is a fixed
// 4 MiB buffer and a few pages (plus the headers), not a tensor and not the model
// (tests/test_hf_convert.c measures it: a 115 MB model converts in about 11 MB of peak RSS).
#ifndef CT_HF_H
#define CT_HF_H
#include <stddef.h>

#include "checkpoint/hf_tokenizer.h"
#include "checkpoint/model_file.h"

// As the dtype of a conversion: keep the source's -- BF16 when every source tensor is BF16,
// else F32 (F16 widens to F32) -- so a conversion loses nothing unless asked to.
#define CT_HF_DTYPE_SOURCE CT_NDTYPES

// ---- export ------------------------------------------------------------------------------
// A ctitan model file -> an HF directory (created if absent; files in it replaced). dtype:
// CT_F32, CT_BF16 or CT_HF_DTYPE_SOURCE. vocab: the tokenizer to write, or NULL for none.
ct_status ct_hf_export(const char *model_file, const char *dir, const ct_hf_vocab *vocab, ct_dtype dtype);

// The same from a flat parameter block in memory (the trainer's gathered model, t a whole-model
// registry, tp_size 1): what checkpoint.last_save_in_hf needs. CT_HF_DTYPE_SOURCE means F32.
ct_status ct_hf_save(const char *dir, const ct_param_table *t, const ct_model_config *m, const float *full,
                     ct_dtype dtype, const ct_hf_vocab *vocab);

// ---- import ------------------------------------------------------------------------------
// The model's dimensions from DIR/config.json (max_seq_len = ctitan_max_seq_len, else
// max_position_embeddings; flavor = ctitan_flavor or "hf"). Refused with one line naming the file and key: a missing file, a
// model_type other than "llama" or "qwen3_moe", missing or non-integer dims, head_dim != hidden/heads,
// hidden_act other than silu, attention or MLP biases, rope_scaling other than none or
// Llama 3.1's (ctitan computes only that one).
ct_status ct_hf_load_config(const char *dir, ct_model_config *m);

// An HF directory opened for reading in ctitan's layout, as ct_model_open is for model files:
// every parameter of t (whole or one tp rank's table: global shapes are matched) must be
// there with its shape and a float dtype (F32/BF16/F16), from model.safetensors or the shards
// of model.safetensors.index.json; with tie_word_embeddings, output.weight is read from
// embed_tokens. A tensor that is no parameter of t is refused (rotary_emb.inv_freq buffers of
// old checkpoints excepted). NULL + error naming the file and tensor.
typedef struct ct_hf_dir ct_hf_dir;
ct_hf_dir *ct_hf_open(const char *dir, const ct_param_table *t);
void ct_hf_close(ct_hf_dir *f);
// Elements [begin, begin + n) of parameter p's global flattened tensor in ctitan's layout (q/k
// rows un-permuted), as fp32. The trainer's ranks each read their own ranges with this.
void ct_hf_read_range(const ct_hf_dir *f, const ct_param *p, long begin, long n, float *dst);
// CT_BF16 when every tensor the model reads is BF16, else CT_F32.
ct_dtype ct_hf_source_dtype(const ct_hf_dir *f);

// An HF directory -> a ctitan model file (via model_file.tmp, renamed when complete), with the
// metadata ct_model_save writes. dtype: CT_F32, CT_BF16 or CT_HF_DTYPE_SOURCE.
ct_status ct_hf_import(const char *dir, const char *model_file, ct_dtype dtype);

// ---- the two conventions, for tests and tools ---------------------------------------------
// HF's name for a ctitan parameter name; CT_ERR for a name that is not a model parameter or one
// HF stores in pieces.
ct_status ct_hf_name(const char *ct_name, char *out, size_t out_size);
// How many HF tensors hold ctitan parameter ct_name of model m (an expert tensor: one per expert
// and projection; else 1), each the same number of its rows, in order; and piece `piece`'s HF
// name (for a one-piece tensor, ct_hf_name's).
int ct_hf_pieces(const ct_model_config *m, const char *ct_name);
ct_status ct_hf_piece_name(const char *ct_name, int piece, char *out, size_t out_size);
// 1 for the tensors whose rows are permuted (attention.wq / wk / q_norm / k_norm), else 0.
int ct_hf_rope_permuted(const char *ct_name);
// Row of the HF tensor that holds ctitan row `row` of wq / wk (HS = head_dim), and back.
long ct_hf_row_of_ct(long row, long head_dim);
long ct_hf_row_to_ct(long hf_row, long head_dim);
#endif
