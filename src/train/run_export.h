// The trained model written out at the end of a run: a model file (checkpoint/model_file.h) and,
// on request, a Hugging Face folder beside it (checkpoint/hf.h).
#ifndef CT_RUN_EXPORT_H
#define CT_RUN_EXPORT_H
#include "comm/comm.h"
#include "core/config.h"
#include "data/shard.h"
#include "model/model.h"
#include "model/params.h"

// Rank 0 of world writes full (global->total floats, the whole model in the global registry's
// layout) to path in dtype, recording the tokenizer the data was made with (tok); collective
// over world. Every rank returns rank 0's outcome.
ct_status ct_run_export_model(ct_group *world, const float *full, const ct_param_table *global,
                              const ct_model_config *model, const ct_shard_tok *tok, ct_dtype dtype, const char *path);

// checkpoint.last_save_in_hf: the model file at model_path, streamed by rank 0 into
// <job.dump_folder>/hf in checkpoint.export_dtype, with model.tokenizer_path's tokenizer when
// there is one (vocab_size: the model's, which the tokenizer may not exceed). Collective over
// world; every rank returns the agreed outcome.
ct_status ct_run_export_hf(ct_group *world, const ct_config *cfg, int vocab_size, const char *model_path);
#endif
