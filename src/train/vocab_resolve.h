// The run's vocabulary, settled before the model's dimensions are: the tokenizer, the data and
// model.vocab_size agree, or the run is refused with the setting to change.
#ifndef CT_VOCAB_RESOLVE_H
#define CT_VOCAB_RESOLVE_H
#include "core/config.h"
#include "data/shard.h"

// model.vocab_size 0 takes the tokenizer's id count (model.tokenizer_path), else the vocabulary
// in the training shards' header, else the flavor's; a tokenizer or shards with more ids than the
// model are refused with the fix. Writes the vocabulary into c (config.toml then records it) and
// into *data_tok the tokenizer the data was made with (its shards' record, else the tokenizer's).
// rank: rank 0 alone prints the note on data that records no tokenizer.
ct_status ct_vocab_resolve(ct_config *c, int rank, ct_shard_tok *data_tok);
#endif
