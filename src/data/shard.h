// Token shards: the files `ctitan data prepare` writes and the data loader reads.
//
// ctitan format (docs/data_format.md), all little-endian:
//   offset  0  char[8]  magic "CTTOKENS"
//           8  u32      version (2; version 1 files, without the tokenizer fields, still read)
//          12  u32      token width in bytes: 2 (vocab <= 65536) or 4
//          16  u64      token count
//          24  u32      vocab size (every token id is below it)
//          28  u32      flags: bit 0 = the tokenizer below is recorded (version 2)
//          32  i32      BOS id, -1 none                                (version 2, bit 0)
//          36  i32      EOS id, -1 none                                (version 2, bit 0)
//          40  u8[16]   the tokenizer's hash (data/tokenizer.h)        (version 2, bit 0)
//          56  u8[8]    reserved, zero (version 1: 28..63 all reserved)
//          64  tokens   count x width bytes
// llm.c format (read only, plus a writer for tests): 256 x i32 header (magic 20240520,
// version 1, token count at [2]), then count x u16 tokens.
#ifndef CT_SHARD_H
#define CT_SHARD_H
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define CT_SHARD_MAGIC "CTTOKENS"
#define CT_SHARD_VERSION 2
#define CT_SHARD_TOK_HASH_BYTES 16
#define CT_SHARD_HEADER_BYTES 64
#define CT_SHARD_LLMC_MAGIC 20240520
#define CT_SHARD_LLMC_HEADER_BYTES 1024

typedef enum { CT_SHARD_CTITAN = 0, CT_SHARD_LLMC = 1 } ct_shard_format;

// Bytes per token for a vocabulary: 2 when every id fits in u16, else 4.
int ct_shard_token_width(uint32_t vocab_size);

// The tokenizer a shard was made with. present 0: the shard does not say (version 1, llm.c, or
// written without one): it cannot be checked against a tokenizer.
typedef struct {
    int present;
    uint8_t hash[CT_SHARD_TOK_HASH_BYTES];
    int32_t bos, eos;  // -1: none
} ct_shard_tok;

// "hash 1f2e..., bos 128000, eos 128001" (or "no tokenizer recorded") into buf.
void ct_shard_tok_describe(const ct_shard_tok *t, char *buf, size_t n);
// Both present and the same tokenizer: the same hash, and the same bos / eos where both name one.
int ct_shard_tok_same(const ct_shard_tok *a, const ct_shard_tok *b);

// ---- writing --------------------------------------------------------------------------------
// Streaming writer: tokens are appended in pieces; close() patches the count into the header.
typedef struct ct_shard_writer ct_shard_writer;
ct_shard_writer *ct_shard_writer_open(const char *path, uint32_t vocab_size);  // NULL + error
// Appends n tokens; a token id >= vocab_size is refused (the shard would be unreadable).
ct_status ct_shard_writer_append(ct_shard_writer *w, const int32_t *tokens, uint64_t n);
uint64_t ct_shard_writer_count(const ct_shard_writer *w);
// Records the tokenizer in the header (written at close).
void ct_shard_writer_set_tokenizer(ct_shard_writer *w, const ct_shard_tok *tok);
ct_status ct_shard_writer_close(ct_shard_writer *w);  // frees w whatever happens

// One-shot helpers.
ct_status ct_shard_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab_size);
ct_status ct_shard_write_llmc(const char *path, const int32_t *tokens, uint64_t n);  // ids < 65536

// ---- reading --------------------------------------------------------------------------------
typedef struct {
    char path[512];
    ct_shard_format format;
    int token_width;        // 2 or 4
    uint64_t n_tokens;
    uint32_t vocab_size;    // from the header; llm.c files have none (65536 is used)
    uint32_t version;       // ctitan: 1 or 2; llm.c: 1
    ct_shard_tok tok;       // the tokenizer the header records (present 0: none)
    int fd;                 // open for the shard's lifetime (-1: closed); tokens are pread, not mapped
    uint64_t data_offset;   // bytes before the first token (the header)
} ct_shard;

// Opens a shard and validates it once: regular file, magic, version, width, flags, the recorded
// bos / eos below the vocab, file size == header + count x width, and (scanning every token) no
// id >= the header's vocab, >= vocab_limit
// when vocab_limit > 0, or >= 2^31 (ids are handed out as int32). On failure returns CT_ERR with
// a message naming the file and the problem, s is left closed.
ct_status ct_shard_open(ct_shard *s, const char *path, uint32_t vocab_limit);
void ct_shard_close(ct_shard *s);

// The readers below read the file (pread): if it was truncated since it was opened they end
// the job with one line naming the file (ct_fatal), never a SIGBUS as a mapping would.
uint32_t ct_shard_token(const ct_shard *s, uint64_t i);
// out[k] = token[start + k] for k < n (caller keeps start + n <= n_tokens). No allocation.
void ct_shard_copy(const ct_shard *s, uint64_t start, uint64_t n, int32_t *out);

// ---- a dataset folder -------------------------------------------------------------------------
// `data prepare` writes a dataset folder DIR as
//   DIR/.shards-XXXXXX/train_NNN.bin, val_NNN.bin   the shards of one prepare
//   DIR/.current -> .shards-XXXXXX                   which of those folders is the dataset
//   DIR/train_NNN.bin -> .current/train_NNN.bin      one link per shard, so a shard's path reads it
// A new dataset replaces the old one by one rename(2) of .current, so a reader that resolves
// .current once sees one whole dataset, never a mix. A folder without .current (shards made by
// hand, by llm.c, or by an earlier ctitan) holds its shards itself.
#define CT_DATASET_CURRENT ".current"
#define CT_DATASET_SHARDS_PREFIX ".shards-"

// The folder holding dataset folder dir's shards, into out (n bytes): dir/TARGET when
// dir/.current is a link to TARGET, else dir. CT_ERR, with one line naming what to change, when
// .current is there but is not a link to a folder beside it.
ct_status ct_shard_dataset_folder(const char *dir, char *out, size_t n);
#endif
