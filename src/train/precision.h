// How a run computes, said in one log line: compute dtype and bf16 gemm path, master weights,
// reduction dtype, and which block linears run in 8 bits.
#ifndef CT_TRAIN_PRECISION_H
#define CT_TRAIN_PRECISION_H
#include <stddef.h>

#include "core/config.h"
#include "kernels/backend.h"
#include "model/linear.h"

// The line for precision p chosen from settings c, on kernels k, over a model of n_layers blocks.
void ct_precision_describe(const ct_precision *p, const ct_config *c, const ct_kernels *k, int n_layers, char *out,
                           size_t n);
#endif
