// Pieces shared by the tokenizer's files (not part of the public API): the ranked byte-string
// table with hash lookup, base64, the compiled pre-tokeniser, the BPE merge of one piece, and
// the tokenizer struct itself.
#ifndef CT_TOKENIZER_INTERNAL_H
#define CT_TOKENIZER_INTERNAL_H
#include <stdint.h>

#include "data/tokenizer.h"

// ---- tokenizer_vocab.c: byte strings numbered 0..n-1 in insertion order, found by hash ------
typedef struct {
    uint8_t *bytes;     // (nbytes) all strings, concatenated in id order
    long nbytes, bytes_cap;
    long *off;          // (n + 1) string i is bytes[off[i] .. off[i+1])
    long n, n_cap;
    int32_t *slot;      // (slot_cap) open addressing, linear probing; -1 = empty
    uint32_t *tag;      // (slot_cap) high bits of the hash of the string in the slot
    long slot_cap;      // power of two, kept >= 2 * n
} ct_vocab;

void ct_vocab_init(ct_vocab *v);
void ct_vocab_free(ct_vocab *v);
// Id of the string, adding it when absent (*added says which). -1 only if memory ran out.
int32_t ct_vocab_intern(ct_vocab *v, const uint8_t *s, long len, int *added);
// Id of the string, or -1.
int32_t ct_vocab_find(const ct_vocab *v, const uint8_t *s, long len);
static inline const uint8_t *ct_vocab_get(const ct_vocab *v, int32_t id, long *len) {
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

// ---- tokenizer_base64.c: standard alphabet, '=' padding -----------------------------------
long ct_base64_encoded_len(long n);
void ct_base64_encode(const uint8_t *in, long n, char *out);  // writes encoded_len chars + NUL
// Decodes `n` chars into out (room for 3*n/4 bytes); returns the byte count or -1 if invalid.
long ct_base64_decode(const char *in, long n, uint8_t *out);

// ---- tokenizer_pretok.c: PCRE2 pre-tokeniser ------------------------------------------------
// A compiled split pattern. Matches are found left to right as `tokenizers` (and tiktoken) find
// them; text between two matches is a piece too, so the pieces always tile the text. `\s` and
// `\S` are read as Oniguruma and Rust's regex read them (Unicode White_Space; PCRE2's also holds
// U+180E). literal: the pattern is a plain string (tokenizers' Split {"String": ...}).
typedef struct ct_pretok ct_pretok;
ct_pretok *ct_pretok_compile(const char *pattern, int literal);  // NULL + error (with the offset)
ct_pretok *ct_pretok_new(void);  // CT_TOKENIZER_PATTERN
void ct_pretok_free(ct_pretok *p);
ct_status ct_pretok_split(const ct_pretok *p, const char *text, long len, ct_tokenizer_piece_fn fn, void *ctx);
// Length of the longest valid UTF-8 prefix of s[0..n) (strict: no overlongs, surrogates, > U+10FFFF).
long ct_utf8_valid_prefix(const uint8_t *s, long n);

// ---- tokenizer_bpe.c: the merge loop for one piece -------------------------------------------
// Writes the ranks of piece's tokens to out (room for len ids) and returns their count.
// Every single byte must be in v. Pieces longer than CT_BPE_HEAP_MIN use a heap, shorter ones
// tiktoken's linear scan; both give the same tokens. `force` (tests): 0 auto, 1 scan, 2 heap.
#define CT_BPE_HEAP_MIN 128
long ct_bpe_merge(const ct_vocab *v, const uint8_t *piece, long len, int32_t *out, int force);

// ---- tokenizer_merges.c: Hugging Face BPE (merges listed with ranks) ----------------------
// The merge table of a tokenizer.json: (left id, right id) -> (rank, id of the merged token).
typedef struct {
    uint64_t *key;     // (cap) left << 32 | right; UINT64_MAX = empty slot
    uint32_t *rank;    // (cap) index of the merge in the file's list (a repeated pair: the last)
    int32_t *result;   // (cap)
    long cap;          // power of two, >= 2 * n_list
    int32_t *left, *right;  // (n_list) the file's list, in order
    long n_list;
} ct_merges;

void ct_merges_free(ct_merges *m);
// Adds merge number n_list (left, right) -> result. -1 if memory ran out.
int ct_merges_add(ct_merges *m, int32_t left, int32_t right, int32_t result);
// Rank and result of a pair; 0 when the pair is no merge.
int ct_merges_find(const ct_merges *m, int32_t left, int32_t right, uint32_t *rank, int32_t *result);
// The merge loop of tokenizers' BPE (models/bpe/word.rs, merge_all) on the symbols ids[0..n): a
// min-heap of candidate merges by (rank, position); a popped candidate is applied when the pair
// now at its position still merges into the same token. Writes the result over ids and returns
// its length, or -1 if memory ran out.
long ct_merges_apply(const ct_merges *m, int32_t *ids, long n);

// ---- the tokenizer ----------------------------------------------------------------------
// An added token (tokenizers' AddedToken; a rank file's special tokens are added tokens with
// special = 1, normalized = 0). Found in the text before pre-tokenisation by ct_tokenizer_encode_special.
typedef struct {
    char *text;      // NUL-terminated (texts hold no NUL)
    long len;
    int32_t id;
    uint8_t special;     // skipped by the ordinary encoder (tokenizers' encode_special_tokens)
    uint8_t normalized;  // looked for in the normalized text, as `norm`
    char *norm;          // the text after the normalizer (NFC); NULL when it is `text`
    long norm_len;
} ct_special;

typedef enum { CT_TOK_RANKS = 0, CT_TOK_MERGES = 1 } ct_tok_kind;

// Kinds of id in the table (the values are part of the tokenizer hash, tokenizer_hash.c).
enum { CT_ID_NONE = 0, CT_ID_TOKEN = 1, CT_ID_SPECIAL = 2, CT_ID_ADDED = 3 };

// One pre-tokenisation step: a split by a pattern, or ByteLevel's add_prefix_space.
typedef enum { CT_STEP_REGEX = 1, CT_STEP_STRING = 2, CT_STEP_PREFIX_SPACE = 3 } ct_step_kind;
typedef struct {
    ct_step_kind kind;
    char *pattern;   // REGEX / STRING
    ct_pretok *re;
} ct_pre_step;

struct ct_tokenizer {
    ct_tok_kind kind;
    ct_vocab vocab;        // BPE lookup by bytes: rank files: lookup index == id == rank
    int32_t *vocab_id;     // MERGES: (vocab.n) the id of lookup entry i; NULL for rank files
    ct_merges merges;      // MERGES only
    int32_t byte_id[256];  // MERGES: the id of each single byte
    int ignore_merges;     // a piece that is a whole token is that token (rank files: always)

    // Every id's bytes (decode, the hash): id i is tbytes[toff[i] .. toff[i+1] - 1), of kind
    // tkind[i], followed by a NUL (special-token texts are handed out as C strings).
    uint8_t *tbytes;
    long *toff;            // (vocab_size + 1)
    uint8_t *tkind;        // (vocab_size) CT_ID_*

    ct_special *special;   // (n_special) added tokens, in the file's order
    int n_special;
    // Added tokens by first byte, for the search: set 0 those found in the raw text, set 1 those
    // found in the normalized text; set s's tokens starting with byte b are special[match_idx[s][q]]
    // for q in [match_off[s][b], match_off[s][b + 1]).
    int32_t *match_off[2];   // (257)
    int32_t *match_idx[2];   // (match_n[s])
    int match_n[2], match_special_n[2];
    int32_t bos, eos;      // -1: none
    int add_bos;           // tokenizer_config.json's add_bos_token
    long vocab_size;       // max id + 1 over every kind

    long n_ranks;          // rank files: the ranks; tokenizer.json: the entries of model.vocab
    char *path;            // tokenizer.json: the file read (NULL for rank files)
    char *config_path;     // tokenizer_config.json when one was read, else NULL
    int nfc;               // normalizer NFC (else none)
    ct_pre_step *steps;    // (n_steps) pre-tokenisation, in order
    int n_steps;
    ct_pretok *pre;        // while ct_tokenizer_from_vocab builds: the split, then steps[0].re
};

// Builds a rank-file tokenizer around a filled vocab (taken over) with default or given specials.
// Checks that all 256 single bytes have ranks. Frees the vocab and returns NULL on error.
ct_tokenizer *ct_tokenizer_from_vocab(ct_vocab *v, const ct_special *special, int n_special);
// The search index of the added tokens (match_*), once special[] is complete. -1: out of memory.
int ct_tokenizer_index_added(ct_tokenizer *t);

// ---- tokenizer_json.c: a Hugging Face tokenizer.json (+ tokenizer_config.json beside it) -----
// NULL + one line naming the file and the field.
ct_tokenizer *ct_tokenizer_load_json(const char *path);

// ---- tokenizer_encode.c ----------------------------------------------------------------------
// NFC of the valid UTF-8 spans of s[0..n) (other bytes copied) into *out (malloc'd; NULL when the
// text is ASCII, its own NFC). Returns the length, or -1 + error.
long ct_nfc(const char *s, long n, char **out);
#endif
