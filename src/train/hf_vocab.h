// A ctitan tokenizer (data/) as the plain description checkpoint/hf.h writes to a Hugging Face
// folder (checkpoint/ may not include data/, so the two meet here, a layer above both). Used by
// `ctitan convert --to hf --tokenizer` and by training's checkpoint.last_save_in_hf.
#ifndef CT_HF_VOCAB_H
#define CT_HF_VOCAB_H
#include "checkpoint/hf.h"
#include "data/tokenizer.h"

typedef struct {
    ct_tokenizer *tok;
    const char **token, **special;  // (n ranks), (specials): views into tok
    long *len;                      // (n ranks)
    int32_t *special_id;            // (specials)
    ct_hf_vocab v;                  // what ct_hf_export / ct_hf_save take
} ct_hf_vocab_view;

// Loads the tokenizer at path and describes it; CT_ERR when it does not load or has more ids
// than the model's vocabulary. Free with ct_hf_vocab_free (also after a failure).
ct_status ct_hf_vocab_load(ct_hf_vocab_view *vv, const char *path, int model_vocab);
void ct_hf_vocab_free(ct_hf_vocab_view *vv);
#endif
