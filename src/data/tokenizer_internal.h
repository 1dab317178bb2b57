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
typedef struct ct_pretok ct_pretok;
ct_pretok *ct_pretok_new(void);  // NULL + error when the pattern does not compile
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

// ---- the tokenizer ----------------------------------------------------------------------
typedef struct {
    char *text;
    long len;
    int32_t id;
} ct_special;

struct ct_tokenizer {
    ct_vocab vocab;      // ranks: id == rank == position in the table
    ct_special *special; // (n_special)
    int n_special;
    int32_t bos, eos;
    long vocab_size;     // max id + 1 over ranks and specials
    ct_pretok *pre;
};

// Builds a tokenizer around a filled vocab (taken over) with default or given specials.
// Checks that all 256 single bytes have ranks. Frees the vocab and returns NULL on error.
ct_tokenizer *ct_tokenizer_from_vocab(ct_vocab *v, const ct_special *special, int n_special);
#endif
