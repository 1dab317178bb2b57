// Pieces shared by the Hugging Face interchange's files (not part of the public API, hf.h).
#ifndef CT_HF_INTERNAL_H
#define CT_HF_INTERNAL_H
#include <string.h>

#include "checkpoint/hf.h"

// hf_config.c: DIR/config.json -> dims (as ct_hf_load_config) and whether the output
// projection is the embedding (tie_word_embeddings).
ct_status ct_hf_config_read(const char *dir, ct_model_config *m, int *tied);
// DIR/config.json for m, its tensors stored as dtype (CT_F32 | CT_BF16); the bos/eos ids
// (and DIR/generation_config.json) when vocab is given.
ct_status ct_hf_config_write(const char *dir, const ct_model_config *m, ct_dtype dtype, const ct_hf_vocab *vocab);

// hf_read.c: lets go of the mapped pages (ct_st_release) under elements [begin, begin + n) of
// p's tensor once they are read (for q/k: under the whole heads those elements lie in).
void ct_hf_release(const ct_hf_dir *f, const ct_param *p, long begin, long n);

// [*begin, *begin + *n) of wq / wk widened to whole heads: the rows of the other layout that
// hold these elements lie within the same heads. Other tensors are left as they are.
static inline void ct_hf_widen_to_heads(const ct_param *p, long head_dim, long *begin, long *n) {
    if (!ct_hf_rope_permuted(p->name)) return;
    const long head = head_dim * p->global_shape[1], lo = *begin / head * head;
    const long hi = (*begin + *n + head - 1) / head * head;
    *begin = lo;
    *n = (hi < p->numel ? hi : p->numel) - lo;
}

// Paths are built in fixed buffers of 1024 bytes: a directory name may take 900 of them, which
// leaves room for the longest file name inside it (original/tokenizer.model.tmp).
enum { CT_HF_MAX_DIR = 900 };
static inline ct_status ct_hf_check_dir(const char *dir) {
    size_t n = strlen(dir);
    if (n == 0 || n > CT_HF_MAX_DIR) return ct_set_error("%.60s...: a directory name of %zu characters (1 to %d)", dir, n, CT_HF_MAX_DIR);
    return CT_OK;
}

// Elements converted per piece while streaming: 1 Mi floats (4 MiB) bounds a conversion's memory.
enum { CT_HF_PIECE = 1 << 20 };
#endif
