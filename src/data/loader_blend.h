// Dataset blends (internal to data/loader.c): training.dataset written as Megatron writes a
// blend, "W1 PATH1 W2 PATH2 ...", draws each sequence of the global order from one of the
// datasets, chosen so that after n sequences dataset d has given as close to w_d·n of them as
// whole sequences allow (Megatron's rule: the next sequence goes to the dataset furthest below
// its share, max_d w_d·(n+1) - count_d, the lowest d on a tie; weights normalised to sum 1). The
// choice depends only on n, so every data-parallel layout reads the same sequences, and a
// position restored from a checkpoint (n sequences consumed) is reached by replaying the rule.
// Each dataset keeps its own window order (its k-th sequence is window k of its permutation).
#ifndef CT_LOADER_BLEND_H
#define CT_LOADER_BLEND_H
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

enum { CT_BLEND_MAX = 16 };

typedef struct {
    int n;
    double w[CT_BLEND_MAX];        // normalised weights
    char path[CT_BLEND_MAX][512];
} ct_blend_spec;

// Whether source is written as a blend (its first word is a number), and its parts: CT_ERR
// naming what is wrong (an odd word count, a weight that is not a positive number, more than
// CT_BLEND_MAX datasets).
bool ct_blend_is_blend(const char *source);
ct_status ct_blend_parse(const char *source, ct_blend_spec *out);

// The dataset sequence n of the blend's order goes to, given count[d] sequences each has given
// for the n before it (count is advanced).
int ct_blend_next(const ct_blend_spec *b, uint64_t n, uint64_t *count);
#endif
