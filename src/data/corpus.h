// Corpus readers for `ctitan data prepare`: one input file in, its documents out, one at a time,
// in memory bounded by the largest document (or Parquet page), never by the file.
//
// The format is read from the file's first bytes, not trusted from its name:
//   gzip (1f 8b) or zstd (28 b5 2f fd) magic  -> decompressed as a stream (zlib / libzstd), and
//                                                what comes out is JSONL or text, as below
//   "PAR1" at both ends                       -> Apache Parquet (corpus_parquet.c)
//   "MMIDIDX\0\0", or PREFIX.idx / PREFIX.bin  -> Megatron-LM indexed dataset (corpus_megatron.c):
//     with its partner beside it                  token ids, already tokenised
//   otherwise, text: JSON Lines when the name (less .gz / .zst) ends .jsonl, .ndjson or .json, or
//     when the first non-blank line is a JSON object (corpus_jsonl.c); else plain text, fortune
//     format or one document per file (corpus_text.c)
// What should be text is checked as it is read: a NUL byte or invalid UTF-8 is refused with the
// file and byte offset (binary input is never tokenised). Every refusal is one line that names
// the file and where (byte offset, line, row group / column / page, document) and what to change.
#ifndef CT_CORPUS_H
#define CT_CORPUS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum {
    CT_CORPUS_TEXT = 0,      // plain text: fortune format or one document per file
    CT_CORPUS_JSONL = 1,     // JSON Lines: one object per line, the document in a string field
    CT_CORPUS_PARQUET = 2,   // Apache Parquet: a top-level string column, one document per row
    CT_CORPUS_MEGATRON = 3,  // Megatron-LM indexed dataset (.idx + .bin): token ids per document
    CT_CORPUS_N_FORMATS
} ct_corpus_format;

typedef enum { CT_CODEC_NONE = 0, CT_CODEC_GZIP = 1, CT_CODEC_ZSTD = 2 } ct_corpus_codec;

// The largest document a reader holds (a fortune, a JSONL line, a plain file, a Parquet value, a
// Megatron document's ids in bytes) and the largest Parquet page: 1 GiB. Anything larger is
// refused with the place it starts, rather than grown into without bound.
#define CT_CORPUS_DOC_MAX (1ull << 30)

typedef struct {
    const char *text_field;  // JSONL key / Parquet column holding the text (NULL or "": "text")
    uint32_t vocab_size;     // Megatron ids must be below it (0: not checked)
} ct_corpus_opts;

typedef struct {
    const char *text;    // a text document: UTF-8 without NUL, len bytes (not NUL-terminated);
    size_t len;          //   NULL for a token document
    const int32_t *ids;  // a token document (Megatron): n_ids ids, each < vocab_size; else NULL
    size_t n_ids;
    uint64_t where;      // its place, for messages: JSONL line (1-based), Parquet row (0-based,
                         //   over the file), Megatron document, text: byte offset of its start
} ct_corpus_doc;

typedef struct ct_corpus ct_corpus;

// Opens path and reads enough to know its format (and for Parquet and Megatron, to check the
// footer or index whole). NULL + one-line error naming the file.
ct_corpus *ct_corpus_open(const char *path, const ct_corpus_opts *opts);
// 1: *doc is the next document that is not blank (whitespace only, or no ids); it stays valid
// until the next call. 0: no more. -1: the file is bad from here on; the error names file and
// place. After -1 only ct_corpus_close may be called.
int ct_corpus_next(ct_corpus *c, ct_corpus_doc *doc);
ct_corpus_format ct_corpus_format_of(const ct_corpus *c);
ct_corpus_codec ct_corpus_codec_of(const ct_corpus *c);
// Bytes of the file read so far (of its compressed bytes, for gzip / zstd): for progress lines.
uint64_t ct_corpus_position(const ct_corpus *c);
void ct_corpus_close(ct_corpus *c);

const char *ct_corpus_format_name(ct_corpus_format f);  // "text", "JSONL", "Parquet", "Megatron"
const char *ct_corpus_codec_name(ct_corpus_codec c);    // "", "gzip", "zstd"

// What a file holds, from its first bytes (and, for a Megatron .bin, the .idx beside it): for
// folder listings, which take known formats and text and skip other binaries.
typedef enum {
    CT_SNIFF_TEXT,          // no NUL in the first 64 KiB, and no known magic
    CT_SNIFF_COMPRESSED,    // gzip or zstd
    CT_SNIFF_PARQUET,
    CT_SNIFF_MEGATRON_IDX,  // an index with its .bin beside it
    CT_SNIFF_MEGATRON_BIN,  // a data file with its index beside it (the pair is read once, by the .idx)
    CT_SNIFF_BINARY,        // anything else holding a NUL byte early on
    CT_SNIFF_UNREADABLE,
} ct_corpus_sniff_result;
ct_corpus_sniff_result ct_corpus_sniff(const char *path);

// True when s[0..n) is UTF-8 (RFC 3629: no overlong forms, surrogates or code points past
// U+10FFFF) without a NUL byte; else false and *bad = the offset of the first byte at fault.
bool ct_utf8_check(const char *s, size_t n, size_t *bad);
#endif
