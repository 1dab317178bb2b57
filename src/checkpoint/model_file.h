// A trained model as one safetensors file, the form `ctitan generate` / `ctitan eval` read and
// the trainer exports: every parameter under its TorchTitan name with its real shape
// ([rows, cols], or [rows] for norm weights), stored fp32 or bf16, and the model's dimensions
// in `__metadata__` (string values):
//   format "ctitan-llama3", flavor, dim, n_layers, n_heads, n_kv_heads, vocab_size,
//   ffn_hidden, norm_eps, rope_theta, rope_scaling (0|1), max_seq_len (the training length),
//   attn_mask_type (causal|block_causal), rope_positions (sequence|document) (both optional:
//   causal and sequence when absent),
//   and, when the run knew it, the tokenizer its data was made with: tokenizer (the tokenizer
//   hash, 32 hex digits; docs/data_format.md), tokenizer_bos, tokenizer_eos.
// A file is loaded against the parameter registry of the dimensions it declares: every
// expected tensor must be there with its shape, and nothing else may be.
#ifndef CT_MODEL_FILE_H
#define CT_MODEL_FILE_H
#include <stdbool.h>

#include "checkpoint/safetensors.h"
#include "model/model.h"
#include "model/params.h"

#define CT_MODEL_FORMAT "ctitan-llama3"

// "fp32" | "bf16" (checkpoint.export_dtype's spellings) -> CT_F32 | CT_BF16.
ct_status ct_model_dtype_parse(const char *s, ct_dtype *out);

// Writes the flat parameter block `full` (t->total floats, registry layout) to path (via
// path.tmp, renamed when complete). dtype: CT_F32 or CT_BF16.
ct_status ct_model_save(const char *path, const ct_param_table *t, const ct_model_config *m, const float *full,
                        ct_dtype dtype);

// The tokenizer a model was trained with, as its metadata records it. present 0: not recorded
// (a file saved before these keys, or converted from a Hugging Face folder).
typedef struct {
    int present;
    char hash[33];      // 32 lower-case hex digits
    int32_t bos, eos;   // -1: none
} ct_model_tok;

// ct_model_save, recording the tokenizer too (tok may be NULL or not present: the same file).
// The metadata a model file carries (dims, norm and RoPE settings, the attention mask and RoPE
// positions, the tokenizer when tok says one): every writer of model files uses it, so a model
// that went elsewhere and back is the same file.
void ct_model_write_metadata(ct_st_writer *w, const ct_model_config *m, const ct_model_tok *tok);
ct_status ct_model_save_tok(const char *path, const ct_param_table *t, const ct_model_config *m, const float *full,
                            ct_dtype dtype, const ct_model_tok *tok);
// The recorded tokenizer (present 0 when the file has none). CT_ERR naming the file and key when
// the file does not open or a recorded value is malformed.
ct_status ct_model_read_tok(const char *path, ct_model_tok *tok);

// Reads the dimensions from the metadata (head_dim derived; max_seq_len 0 when absent) and
// checks them as ct_model_config_from does. The error names the file and the key.
ct_status ct_model_load_config(const char *path, ct_model_config *m);

// Fills the flat block (t->total floats) from the file; bf16/f16 tensors are widened to fp32.
// Errors name the tensor: missing, wrong shape (both shapes given), unexpected, bad dtype.
ct_status ct_model_load(const char *path, const ct_param_table *t, float *full);

// Everything at once for a tool: the config, its registry and a malloc'd block (free with
// free()). max_seq_len is left as the file says (0 when absent). path may also be a checkpoint's
// step folder (step-N: a manifest.toml inside), saved under any layout: its files are verified
// and every tensor gathered whole; max_seq_len is then the length it was trained at.
bool ct_model_is_step_folder(const char *path);
ct_status ct_model_load_all(const char *path, ct_model_config *m, ct_param_table *t, float **full);

// ---- partial reads (the trainer: each rank copies its own FSDP shard ranges) -------------
typedef struct ct_model_file ct_model_file;
// Opens the file and validates its tensors against t (as ct_model_load does). NULL + error.
ct_model_file *ct_model_open(const char *path, const ct_param_table *t);
void ct_model_close(ct_model_file *f);
// Elements [begin, begin + n) of parameter p's flattened tensor, converted to fp32.
void ct_model_read_range(const ct_model_file *f, const ct_param *p, long begin, long n, float *dst);

// CT_ERR naming the first tensor of the flat block `full` (t->total floats, registry layout) that
// holds a NaN or an infinity, with how many of its elements do: a diverged run's weights.
ct_status ct_model_check_finite(const ct_param_table *t, const float *full);

// CT_ERR naming the first setting where the two configs differ in a way that changes the
// function the weights compute (dims, heads, vocab, FFN, norm eps, RoPE): "what: file X, run Y".
ct_status ct_model_config_match(const ct_model_config *file, const ct_model_config *run);
#endif
