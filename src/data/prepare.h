// Corpus -> token shards (`ctitan data prepare`). Text files (or folders of them) are split into
// documents, each document is encoded (special-token text in it stays text) and followed by the
// tokenizer's EOS (<|end_of_text|> for a rank file; preceded by BOS when tokenizer_config.json says
// add_bos_token), and the tokens go to train_NNN.bin / val_NNN.bin shards (format in
// data/shard.h), which record the tokenizer.
//
// Documents: in a fortune-format file (some line is exactly "%") each fortune is a document;
// otherwise the whole file is one. Document i (counted over the whole corpus, in file order)
// goes to validation when val_fraction > 0 and i % k == k - 1, k = round(1 / val_fraction), so
// the split is deterministic and spread evenly over the corpus.
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
    const char *out_dir;        // created if absent; old train_NNN.bin / val_NNN.bin are replaced
                                // only once every new shard is complete (staged in a hidden
                                // folder of out_dir, then swapped in): a failure leaves them be
    double val_fraction;        // in [0, 0.5]; 0.05 is the usual choice
    uint64_t shard_tokens;      // tokens per shard before starting the next (0 = 100M)
    int progress;               // -1: a bar when stderr is a terminal, else plain lines; 0: none
} ct_data_prepare_opts;

typedef struct {
    uint64_t files, bytes;
    uint64_t docs[2], tokens[2];  // [0] train, [1] val
    int shards[2];
} ct_data_prepare_result;

// CT_ERR (one line) also for a corpus with no non-blank document: nothing is written then.
ct_status ct_data_prepare(const ct_data_prepare_opts *opts, ct_data_prepare_result *res);

// ---- corpus pieces (no tokenizer needed; used by ct_data_prepare and the tests) -------------
// Expands inputs into a list of files: a file is taken as given; a folder gives its regular
// files sorted by name, skipping hidden files, *.u8 (fortune's duplicate encodings) and files
// containing a NUL byte (binaries such as fortune's *.dat indexes). Returns the count (*out is
// malloc'd, free with ct_data_free_list), or -1 with ct_last_error set.
int ct_data_list_files(const char *const *inputs, int n_inputs, char ***out);
void ct_data_free_list(char **list, int n);

bool ct_data_is_fortune_text(const char *text, size_t len);
// Calls fn(doc, len, ctx) for each non-blank document of a file's text; stops early and
// returns fn's non-zero result if it returns one.
typedef int (*ct_data_doc_fn)(const char *doc, size_t len, void *ctx);
int ct_data_for_each_document(const char *text, size_t len, ct_data_doc_fn fn, void *ctx);
#endif
