// This rank's parameters, as every strategy sees them: a flat buffer of parameters and one of
// gradients (the same layout), and for each tensor a shard descriptor (core/shard_desc.h) saying
// which global elements sit where. Data sharding builds the store (it decides the layout);
// tensor parallel, the gradient norm, loading and export read it through the descriptors, so
// no strategy reaches into another's internals.
#ifndef CT_PARAM_STORE_H
#define CT_PARAM_STORE_H
#include <stdint.h>

#include "comm/comm.h"
#include "core/shard_desc.h"
#include "kernels/backend.h"
#include "model/params.h"

typedef struct {
    const ct_param *param;   // the registry entry (name; this tp rank's shape)
    ct_shard_desc desc;      // the global elements held here
    long offset;             // where they start in params / grads (desc.flat_count of them)
} ct_param_shard;

typedef struct {
    float *params;           // (numel) this rank's elements; padding stays zero
    float *grads;            // (numel)
    long numel;
    ct_param_shard *shards;  // (count) one per tensor with elements here
    int count;
} ct_param_store;

// How the host writes the store (initialisation, loading): fill(ctx, shard, run, dst) puts the
// run's run->len values (global elements run->global.. of shard->param) at dst, host memory; each
// tensor's values then go to the device in one copy. A tensor's elements that no run covers
// become zero.
typedef void (*ct_param_fill_fn)(void *ctx, const ct_param_shard *sh, const ct_shard_run *run, float *dst);
void ct_param_store_fill(const ct_param_store *s, const ct_kernels *k, ct_param_fill_fn fill, void *ctx);

// Fills every held element from (seed, name, global index): the numbers one process has.
void ct_param_store_init_values(const ct_param_store *s, const ct_kernels *k, uint64_t seed);

// Sum of squared gradients over the elements this rank counts (the copies it owns: coordinate
// 0 in every mesh dimension a tensor is replicated over); summed over every rank this is the
// squared global gradient norm with each element counted once. coord: this rank's mesh
// coordinates (ct_dim order).
// The sum is added to *sum, one double on k's device (the step reads it with its other scalars).
void ct_param_store_grad_sum_squares(const ct_param_store *s, const ct_kernels *k, const int coord[CT_DIM_COUNT],
                                     double *sum);

// The whole model in the global registry's layout (global->total floats, host) on every rank of
// `all`, which must hold every copy owner: each rank places the elements it owns, then one SUM
// all-reduce over `all` assembles them (every element has one non-zero contributor). For export
// and checks, not the step.
void ct_param_store_gather(const ct_param_store *s, const ct_kernels *k, const int coord[CT_DIM_COUNT],
                           const ct_param_table *global, ct_group *all, float *full);

void ct_param_store_free(ct_param_store *s);  // the shard list (buffers belong to the builder)
#endif
