// Pieces shared by the Hugging Face interchange's files (not part of the public API, hf.h).
#ifndef CT_HF_INTERNAL_H
#define CT_HF_INTERNAL_H
#include "checkpoint/hf.h"

// hf_config.c: DIR/config.json -> dims (as ct_hf_load_config) and whether the output
// projection is the embedding (tie_word_embeddings).
ct_status ct_hf_config_read(const char *dir, ct_llama_config *m, int *tied);
// DIR/config.json for m, its tensors stored as dtype (CT_F32 | CT_BF16); the bos/eos ids
// (and DIR/generation_config.json) when vocab is given.
ct_status ct_hf_config_write(const char *dir, const ct_llama_config *m, ct_dtype dtype, const ct_hf_vocab *vocab);

// Elements converted per piece while streaming: 1 Mi floats (4 MiB) bounds a conversion's memory.
enum { CT_HF_PIECE = 1 << 20 };
#endif
