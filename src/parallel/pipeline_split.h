// Which transformer blocks each pipeline stage computes. Stages are numbered in model order:
// stage 0 also holds the embedding, the last stage the head (final norm, output, loss).
#ifndef CT_PIPELINE_SPLIT_H
#define CT_PIPELINE_SPLIT_H
#include "core/error.h"

// first (n_stages + 1): stage s computes blocks [first[s], first[s + 1]). Chosen by, in order:
//   split_points      "layers.4,layers.8" (or "4,8"): the first block of stages 1..n_stages-1
//   layers_per_stage  > 0: that many blocks in every stage (must cover n_layers exactly)
//   otherwise         as even as possible, the earlier stages taking one more when it does not divide
// A split that leaves a stage without blocks, or does not match n_stages, is refused with one
// line that says what would work.
ct_status ct_pp_split_layers(int n_layers, int n_stages, int layers_per_stage, const char *split_points, int *first);
#endif
