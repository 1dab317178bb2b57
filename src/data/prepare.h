// Corpus -> token shards (`ctitan data prepare`). Files (or folders of them) are read by the
// corpus readers (data/corpus.h: text, JSON Lines, Parquet, Megatron; gzip / zstd streamed) as
// documents; each text document is encoded (special-token text in it stays text), a Megatron
// document's ids are taken as they are, the tokenizer's EOS follows each (<|end_of_text|> for a
// rank file; preceded by BOS when tokenizer_config.json says add_bos_token), and the tokens go to
// train_NNN.bin / val_NNN.bin shards (format in data/shard.h), which record the tokenizer.
//
// Documents: in a fortune-format text file (some line is exactly "%") each fortune is a
// document; any other text file is one; a JSONL line, a Parquet row, a Megatron document is one.
// Blank documents are skipped. The validation split, deterministic in every case:
//   val_docs N > 0      the last N documents of the corpus (in file order);
//   else val_fraction F document i (counted over the whole corpus, in file order) when
//                       i % k == k - 1, k = round(1 / F): spread evenly over the corpus; and when
//                       that picks none (a corpus of fewer than k documents, a single plain file
//                       among them), the last ceil(F x tokens) tokens of the stream instead.
#ifndef CT_PREPARE_H
#define CT_PREPARE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct {
    const char *const *inputs;  // files and/or folders
    int n_inputs;
    const char *tokenizer_path;
    const char *out_dir;        // created if absent; its dataset (data/shard.h) is replaced only
                                // once every new shard is complete, in one step
                                // (data/prepare_swap.h): a failure or a kill leaves the old one
    double val_fraction;        // in [0, 0.5]; 0.05 is the usual choice (0 with val_docs)
    uint64_t val_docs;          // > 0: the last val_docs documents are the validation split
    const char *text_field;     // JSONL field / Parquet column of the text (NULL: "text")
    uint64_t shard_tokens;      // tokens per shard before starting the next (0 = 100M)
    int progress;               // -1: a bar when stderr is a terminal, else plain lines; 0: none
    int threads;                // encoder threads (data/prepare_workers.h); 0: the CPUs this
                                // process may use. The shards do not depend on it.
} ct_data_prepare_opts;

typedef enum {
    CT_VAL_NONE = 0,     // no validation split (val_fraction 0, or a corpus too small for one)
    CT_VAL_SPREAD = 1,   // every k-th document
    CT_VAL_LAST_DOCS = 2,  // the last val_docs documents
    CT_VAL_LAST_TOKENS = 3,  // the last ceil(F x tokens) tokens (too few documents to spread)
} ct_val_split;

typedef struct {
    uint64_t files, bytes;
    uint64_t files_of[4];         // files per ct_corpus_format
    uint64_t docs[2], tokens[2];  // [0] train, [1] val; under CT_VAL_LAST_TOKENS docs[1] is 0
    int shards[2];
    ct_val_split val;
} ct_data_prepare_result;

// The most --val-docs takes (8 bytes of memory each while preparing).
#define CT_PREPARE_MAX_VAL_DOCS 100000000ull

// CT_ERR (one line) also for a corpus with no non-blank document: nothing is written then.
ct_status ct_data_prepare(const ct_data_prepare_opts *opts, ct_data_prepare_result *res);

// ---- corpus pieces (no tokenizer needed; used by ct_data_prepare and the tests) -------------
// Expands inputs into a list of files: a file is taken as given (a Megatron .bin as its .idx,
// and a Megatron PREFIX whose .idx and .bin exist as PREFIX.idx; a pair named twice is read
// once); a folder gives its regular files sorted by name, skipping hidden files, *.u8 (fortune's
// duplicate encodings), the .bin of each Megatron pair (read through its .idx) and other files
// holding a NUL byte early on that are of no known format (binaries such as fortune's *.dat
// indexes); text, gzip / zstd, Parquet and Megatron files are kept. Returns the count (*out is
// malloc'd, free with ct_data_free_list), or -1 with ct_last_error set.
int ct_data_list_files(const char *const *inputs, int n_inputs, char ***out);
void ct_data_free_list(char **list, int n);

bool ct_data_is_fortune_text(const char *text, size_t len);
// Calls fn(doc, len, ctx) for each non-blank document of a file's text; stops early and
// returns fn's non-zero result if it returns one.
typedef int (*ct_data_doc_fn)(const char *doc, size_t len, void *ctx);
int ct_data_for_each_document(const char *text, size_t len, ct_data_doc_fn fn, void *ctx);
#endif
