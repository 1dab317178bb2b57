// Byte-level BPE tokenizer in tiktoken's form: a table of byte strings with ranks (a rank is
// both the token id and the merge priority), a pre-tokenisation regex (PCRE2, Unicode classes),
// and special tokens. ctitan's own trained tokenizers are written in the same rank-file format
// (one "base64(bytes) rank" per line), so one encoder serves Llama 3's tokenizer.model,
// cl100k_base and our own files.
//
// Encoding a text: (1) split it into pieces with CT_TOKENIZER_PATTERN, (2) for each piece, if
// the whole piece is a token emit its rank, else start from single bytes and repeatedly merge
// the adjacent pair whose concatenation has the lowest rank (leftmost on ties) until no
// adjacent pair is a token. Every one of the 256 single bytes must have a rank, so every byte
// string encodes and decode(encode(x)) == x.
//
// Bytes that are not valid UTF-8: the regex runs (in UTF mode) only over maximal valid UTF-8
// spans; each byte outside them is a piece of its own. A span boundary ends a piece, so text
// around an invalid byte is split as if the invalid byte were the end/start of the text.
#ifndef CT_TOKENIZER_H
#define CT_TOKENIZER_H
#include <stdint.h>

#include "core/error.h"

typedef struct ct_tokenizer ct_tokenizer;

// Llama 3 / cl100k pre-tokenisation pattern (compiled with UTF + UCP).
#define CT_TOKENIZER_PATTERN                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define CT_TOKENIZER_BOS_TEXT "<|begin_of_text|>"
#define CT_TOKENIZER_EOS_TEXT "<|end_of_text|>"

// Loads a tiktoken rank file. Special tokens <|begin_of_text|> and <|end_of_text|> get the ids
// after the last rank unless the file (or its "#special" lines) says otherwise.
// Returns NULL and sets ct_last_error on failure.
//
// Format: one "BASE64 RANK" per line; ranks must be exactly 0..N-1 (any order), token byte
// strings distinct, all 256 single bytes present. Blank lines and lines starting with '#' are
// ignored, except "#special TEXT ID", which gives special token TEXT the id ID (ID >= N).
// Errors name the file and line ("path:LINE: what").
ct_tokenizer *ct_tokenizer_load(const char *path);
void ct_tokenizer_free(ct_tokenizer *tok);

long ct_tokenizer_vocab_size(const ct_tokenizer *tok);  // ranks + special tokens
int32_t ct_tokenizer_bos(const ct_tokenizer *tok);      // <|begin_of_text|>
int32_t ct_tokenizer_eos(const ct_tokenizer *tok);      // <|end_of_text|>
long ct_tokenizer_n_ranks(const ct_tokenizer *tok);     // ordinary (BPE) tokens: ids 0..n-1

// Encodes `len` bytes of text (special-token strings in the text are encoded as ordinary bytes).
// Appends to *ids (realloc'd; *cap is its capacity) and returns the new count, or -1 on error.
long ct_tokenizer_encode(const ct_tokenizer *tok, const char *text, long len, int32_t **ids, long *n, long *cap);

// Like ct_tokenizer_encode, with <|begin_of_text|> before (bos != 0) and <|end_of_text|> after
// (eos != 0) the text: the form a training document takes.
long ct_tokenizer_encode_doc(const ct_tokenizer *tok, const char *text, long len, int bos, int eos,
                             int32_t **ids, long *n, long *cap);

// Decodes ids to bytes into a malloc'd buffer (NUL-terminated for convenience); *out_len = bytes.
// Special ids decode to their text. Returns NULL (and sets the error) for an id out of range.
char *ct_tokenizer_decode(const ct_tokenizer *tok, const int32_t *ids, long n, long *out_len);

// Bytes of one id (not NUL-terminated); NULL for an id out of range.
const char *ct_tokenizer_token(const ct_tokenizer *tok, int32_t id, long *len);

// Writes the rank file (and "#special" lines for specials not at their default ids).
ct_status ct_tokenizer_save(const ct_tokenizer *tok, const char *path);

// ---- Training ----------------------------------------------------------------------------
// Deterministic byte-level BPE: pre-tokenise every text, count unique pieces, then repeatedly
// merge the most frequent adjacent pair (ties: lowest (left rank, right rank)) until the table
// has vocab_size - 2 ranks (the 2 specials take the last ids). Ranks 0..255 are the single
// bytes 0x00..0xff; each merge adds the concatenation as the next rank (a merge whose bytes are
// already a token adds nothing). Fails when the texts run out of pairs first.
ct_tokenizer *ct_tokenizer_train_texts(const char *const *texts, const long *lens, int n_texts, long vocab_size);

// Trains on files; an input that is a directory stands for its regular files (sorted by name,
// not recursive, dotfiles skipped). Writes the rank file to out_path.
ct_status ct_tokenizer_train(const char *const *inputs, int n_inputs, long vocab_size, const char *out_path);

// ---- Pre-tokeniser (exposed for tests and tools) -------------------------------------------
// Calls fn(ctx, piece, len) for each piece of text in order; the pieces tile the text exactly.
// fn returns 0 to go on, non-zero to stop. Returns CT_ERR if the regex engine failed.
typedef int (*ct_tokenizer_piece_fn)(void *ctx, const char *piece, long len);
ct_status ct_tokenizer_pretokenize(const ct_tokenizer *tok, const char *text, long len, ct_tokenizer_piece_fn fn,
                                   void *ctx);
#endif
