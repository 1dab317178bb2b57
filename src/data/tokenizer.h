// Byte-level BPE tokenizers of two forms, behind one interface:
//   - tiktoken's rank file: a table of byte strings with ranks (a rank is both the token id and
//     the merge priority), the CT_TOKENIZER_PATTERN pre-tokenisation regex, and special tokens.
//     ctitan's own trained tokenizers are written in this format (one "base64(bytes) rank" per
//     line), so one encoder serves Llama 3's tokenizer.model, cl100k_base and our own files.
//   - Hugging Face's tokenizer.json of the byte-level BPE kind (GPT-2, Llama 3, Qwen2/3): model
//     BPE with its vocab and merges, a ByteLevel pre-tokenizer (after Split patterns), added
//     tokens, normalizer none or NFC, and bos/eos from tokenizer_config.json beside it. The ids
//     are the ones `tokenizers` gives (tokenizer_json.c says what is read and what is refused).
// ct_tokenizer_load tells them apart by content.
//
// Encoding a text with a rank file: (1) split it into pieces with CT_TOKENIZER_PATTERN, (2) for
// each piece, if the whole piece is a token emit its rank, else start from single bytes and
// repeatedly merge the adjacent pair whose concatenation has the lowest rank (leftmost on ties)
// until no adjacent pair is a token. A tokenizer.json merges only the pairs its merges list, by
// their order in the list. Every one of the 256 single bytes must be a token, so every byte
// string encodes and (without a normalizer or a prefix space) decode(encode(x)) == x.
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

// Loads a tokenizer: a tiktoken rank file, a tokenizer.json (by content: a JSON object), or a
// folder holding a tokenizer.json. For a rank file: special tokens <|begin_of_text|> and <|end_of_text|> get the ids
// after the last rank unless the file (or its "#special" lines) says otherwise.
// Returns NULL and sets ct_last_error on failure.
//
// Format: one "BASE64 RANK" per line; ranks must be exactly 0..N-1 (any order), token byte
// strings distinct, all 256 single bytes present. Blank lines and lines starting with '#' are
// ignored, except "#special TEXT ID", which gives special token TEXT the id ID (ID >= N).
// Errors name the file and line ("path:LINE: what").
ct_tokenizer *ct_tokenizer_load(const char *path);
void ct_tokenizer_free(ct_tokenizer *tok);

long ct_tokenizer_vocab_size(const ct_tokenizer *tok);  // max id + 1: ranks (model.vocab) + added tokens
// Rank file: <|begin_of_text|>, <|end_of_text|>. tokenizer.json: tokenizer_config.json's bos_token
// and eos_token, -1 when it names none (or there is no tokenizer_config.json).
int32_t ct_tokenizer_bos(const ct_tokenizer *tok);
int32_t ct_tokenizer_eos(const ct_tokenizer *tok);
long ct_tokenizer_n_ranks(const ct_tokenizer *tok);     // rank file: ids 0..n-1 are ranks; tokenizer.json: model.vocab's size
int ct_tokenizer_add_bos(const ct_tokenizer *tok);      // tokenizer_config.json's add_bos_token (rank files: 0)
int ct_tokenizer_is_json(const ct_tokenizer *tok);      // loaded from a tokenizer.json
const char *ct_tokenizer_json_path(const ct_tokenizer *tok);    // that tokenizer.json, or NULL
const char *ct_tokenizer_config_path(const ct_tokenizer *tok);  // the tokenizer_config.json read, or NULL

// Encodes `len` bytes of text. The text of a special token is encoded as ordinary text (tiktoken's
// encode_ordinary; tokenizers' encode_special_tokens); a tokenizer.json's added tokens that are
// not special are found in the text as tokenizers finds them.
// Appends to *ids (realloc'd; *cap is its capacity) and returns the new count, or -1 on error.
long ct_tokenizer_encode(const ct_tokenizer *tok, const char *text, long len, int32_t **ids, long *n, long *cap);
// The same, but special tokens in the text become their ids, as `tokenizers` finds them: before
// pre-tokenisation, leftmost first, then longest.
long ct_tokenizer_encode_special(const ct_tokenizer *tok, const char *text, long len, int32_t **ids, long *n,
                                 long *cap);

// Like ct_tokenizer_encode, with the BOS token before (bos != 0) and the EOS token after
// (eos != 0) the text: the form a training document takes. -1 + error when the tokenizer has
// no such token.
long ct_tokenizer_encode_doc(const ct_tokenizer *tok, const char *text, long len, int bos, int eos,
                             int32_t **ids, long *n, long *cap);

// Decodes ids to bytes into a malloc'd buffer (NUL-terminated for convenience); *out_len = bytes.
// Special ids decode to their text. Returns NULL (and sets the error) for an id out of range.
char *ct_tokenizer_decode(const ct_tokenizer *tok, const int32_t *ids, long n, long *out_len);

// Bytes of one id (not NUL-terminated); NULL for an id out of range.
const char *ct_tokenizer_token(const ct_tokenizer *tok, int32_t id, long *len);

// Writes the rank file (and "#special" lines for specials not at their default ids).
ct_status ct_tokenizer_save(const ct_tokenizer *tok, const char *path);

// ---- Identity ------------------------------------------------------------------------------
// SHA-256 of the tokenizer's canonical content, cut to 16 bytes: what a token shard records so
// that a run can tell whether a tokenizer is the one its data was made with. The content (exactly
// as docs/data_format.md lists it): every id's bytes and kind (token, special, added), the
// normalizer, the pre-tokenisation steps (patterns), ignore_merges and the merges in priority
// order (for a rank file, the merges its ranks imply, as transformers' tiktoken converter writes
// them). A rank file and the tokenizer.json converted from it hash equal.
#define CT_TOKENIZER_HASH_BYTES 16
ct_status ct_tokenizer_hash(const ct_tokenizer *tok, uint8_t out[CT_TOKENIZER_HASH_BYTES]);
// The hash as 32 lower-case hex digits (+ NUL) into hex[33]; "" (and CT_ERR) if out of memory.
ct_status ct_tokenizer_hash_hex(const ct_tokenizer *tok, char hex[2 * CT_TOKENIZER_HASH_BYTES + 1]);

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
// Calls fn(ctx, piece, len) for each piece BPE would see, in order (an added token that is not
// special is one piece); the pieces tile the text exactly, unless a tokenizer.json's normalizer
// or prefix space changed it. fn returns 0 to go on, non-zero to stop. Returns CT_ERR if the
// regex engine failed.
typedef int (*ct_tokenizer_piece_fn)(void *ctx, const char *piece, long len);
ct_status ct_tokenizer_pretokenize(const ct_tokenizer *tok, const char *text, long len, ct_tokenizer_piece_fn fn,
                                   void *ctx);
#endif
