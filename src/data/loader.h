// Data loader: fixed-size training samples from token shards (read with pread, validated once
// at open) or a synthetic stream, in a seeded order, split over data-parallel ranks.
//
// The token stream is the concatenation of a split's shards in file-name order (documents are
// already separated by <|end_of_text|>, so samples pack across document boundaries). Window w
// is the T + 1 tokens starting at stream offset w·T (inputs = the first T, targets = the last T),
// so windows tile the stream and every token after the first is a target exactly once per
// epoch. An epoch visits all floor((N - 1) / T) windows in a permutation drawn from
// (seed, epoch) — or in stream order when `sequential` — and the next epoch follows on directly.
//
// Global batch g (B sequences) consists of the next B windows of that order. Data-parallel
// rank r reads sequences [r·B/dp, (r+1)·B/dp) of it, so the ranks' samples are disjoint and
// together equal the single-rank batch. The state (epoch, position) is the same on every rank
// and, restored, makes a resumed run read exactly the tokens it would have read.
//
// A source written "W1 PATH1 W2 PATH2 ..." is a blend of datasets (data/loader_blend.h): each
// sequence of the global order comes from one of them, in proportion to the weights, by a rule
// that depends only on the sequence's index -- so layouts, resumes and reshards read the same.
#ifndef CT_LOADER_H
#define CT_LOADER_H
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "data/shard.h"

typedef struct {
    const char *source;  // "synthetic", a folder of shards, one shard file, or a blend "W1 PATH1 W2 PATH2 ..."
    const char *split;   // "train" | "val": train_*.bin / val_*.bin (or llm.c's *_train_*.bin)
    int seq_len;         // T
    int global_batch;    // B: sequences per optimizer step over all data-parallel ranks
    int dp_rank, dp_size;  // this rank's place among the data-parallel ranks (0, 1 = none)
    uint64_t seed;       // window order (and the synthetic tokens)
    uint32_t vocab_size; // the model's vocabulary: token ids must be below it (0 = trust headers)
    bool sequential;     // visit windows in stream order (evaluation) instead of a permutation
} ct_loader_config;

typedef struct {
    uint64_t epoch;     // epochs completed
    uint64_t position;  // windows of this epoch's order already consumed (by all ranks together)
} ct_loader_state;

typedef struct ct_loader ct_loader;

// Opens and validates every shard of the split (see ct_shard_open). NULL + ct_last_error on
// failure: empty folder, bad shard (the message names the file), too few tokens for one sample,
// global_batch not divisible by dp_size.
ct_loader *ct_loader_open(const ct_loader_config *cfg);
void ct_loader_free(ct_loader *l);

// Fills this rank's B/dp sequences of the next global batch. No allocation.
void ct_loader_next_batch(ct_loader *l, int32_t *inputs /* (B/dp, T) */, int32_t *targets /* (B/dp, T) */);

// CT_ERR naming the problem when source is a malformed blend (its datasets are checked at open).
ct_status ct_loader_check_source(const char *source);

// The vocabulary the split's shards were made with (the first shard's header), without opening
// the split: 0 for synthetic data, llm.c shards (no such field) or anything unreadable.
uint32_t ct_loader_peek_vocab(const char *source, const char *split);
// The tokenizer the split's first shard records, likewise (present 0: none recorded, or unreadable).
ct_shard_tok ct_loader_peek_tokenizer(const char *source, const char *split);

// The tokenizer the split's shards record (present 0 when none does; shards that record
// different tokenizers are refused at open, naming both files).
ct_shard_tok ct_loader_tokenizer(const ct_loader *l);

ct_loader_state ct_loader_get_state(const ct_loader *l);
ct_status ct_loader_set_state(ct_loader *l, ct_loader_state st);  // CT_ERR if position is out of range
void ct_loader_reset(ct_loader *l);  // back to epoch 0, position 0 (e.g. before each evaluation)

uint64_t ct_loader_num_tokens(const ct_loader *l);   // tokens in the stream (synthetic: nominal)
uint64_t ct_loader_num_windows(const ct_loader *l);  // samples per epoch
int ct_loader_num_shards(const ct_loader *l);        // 0 for synthetic
int ct_loader_local_batch(const ct_loader *l);       // B / dp

// A blend's datasets (0 when the source is not a blend): path, normalised weight, and tokens
// drawn from each so far by all data-parallel ranks together (targets: sequences x T).
int ct_loader_blend_parts(const ct_loader *l);
const char *ct_loader_blend_path(const ct_loader *l, int d);
double ct_loader_blend_weight(const ct_loader *l, int d);
uint64_t ct_loader_blend_tokens(const ct_loader *l, int d);
#endif
