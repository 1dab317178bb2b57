// A byte-level BPE tokenizer (tiktoken's form: a rank is both the token id and the merge
// priority) written as Hugging Face `tokenizers` files, so AutoTokenizer loads it beside the
// model:
//   tokenizer.json          model BPE with ignore_merges (a piece that is a whole token is that
//                           token, as tiktoken does); vocab in GPT-2's byte-to-unicode spelling;
//                           merges rebuilt from the ranks the way transformers' TikTokenConverter
//                           does (every split of a token into two tokens, in the token's rank
//                           order); pre-tokenizer Split(the tokenizer's regex, Isolated) then
//                           ByteLevel; decoder ByteLevel; special tokens as added tokens. No BOS
//                           is added on encode, as `ctitan tokenizer encode` adds none.
//   tokenizer_config.json   PreTrainedTokenizerFast, bos/eos tokens
//   original/tokenizer.model  the rank file itself (where Meta's Llama 3 repositories keep it)
//
// checkpoint/ sits below data/ (scripts/check_includes.sh), so the tokenizer comes in as this
// plain description; the caller fills it from a ct_tokenizer (cli/cmd_convert.c does).
#ifndef CT_HF_TOKENIZER_H
#define CT_HF_TOKENIZER_H
#include <stdint.h>

#include "core/error.h"

typedef struct {
    long n_tokens;                  // ids 0..n_tokens-1 are BPE tokens (ranks)
    const char *const *token;       // (n_tokens) each token's bytes
    const long *token_len;          // (n_tokens)
    int n_special;
    const char *const *special;     // (n_special) text, e.g. "<|begin_of_text|>"
    const int32_t *special_id;      // (n_special) ids >= n_tokens
    int32_t bos, eos;               // ids of the begin / end of text tokens, -1 when none
    const char *pattern;            // the pre-tokenisation regex (PCRE syntax, as HF's Split takes it)
    const char *rank_file;          // optional: copied as original/tokenizer.model
    // A tokenizer that came from a tokenizer.json (its merges are its own, not the ones ranks
    // imply): that file and its tokenizer_config.json (when there is one) are copied as they are,
    // in place of the files above.
    const char *tokenizer_json, *tokenizer_config;
} ct_hf_vocab;

// Writes the files above into dir (which must exist). Every one of the 256 single bytes must
// be a token (byte-level BPE encodes any text); errors name the file.
ct_status ct_hf_write_tokenizer(const char *dir, const ct_hf_vocab *v);
#endif
