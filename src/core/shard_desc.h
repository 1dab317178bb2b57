// The shard descriptor: which global elements of one parameter live on this rank. It is the ONE
// description that loading, gathering and checkpointing share, so they cannot disagree about
// where an element lives. A rank's part of a tensor is cut in two steps:
//
//   1. tensor parallel: a slice of rows (tp_dim 0) or columns (tp_dim 1) of the global
//      (rows, cols) tensor -- the "tp-local tensor", stored row-major;
//   2. data sharding (FSDP): a flat range [flat_begin, flat_begin + flat_count) of the
//      tp-local tensor flattened row-major (the whole of it when not sharded).
//
// Plus the pipeline stage that owns the tensor and the mesh dimensions over which other ranks
// hold identical copies (so reductions such as the gradient norm count each element once).
//
// Pure arithmetic: no MPI, no model/, no allocation. The iterator does one division per run,
// so walking a big tensor costs O(runs), not O(elements).
#ifndef CT_SHARD_DESC_H
#define CT_SHARD_DESC_H
#include <stdbool.h>

#include "core/error.h"

// Mesh dimensions, in the order of the device mesh (comm/mesh.h: pp slowest, tp fastest).
// Defined here so core can name them without depending on comm; comm's ct_mesh_dim has the
// same values (tests/test_shard_desc.c checks) and may adopt this enum.
typedef enum {
    CT_DIM_PP = 0,        // pipeline stages
    CT_DIM_DP_REPLICATE,  // replicated data parallel (DDP / HSDP replicas)
    CT_DIM_DP_SHARD,      // sharded data parallel (FSDP)
    CT_DIM_CP,            // context parallel
    CT_DIM_TP,            // tensor parallel
    CT_DIM_COUNT
} ct_dim;

#define CT_DIM_BIT(d) (1u << (unsigned)(d))

typedef struct {
    long global_shape[2];      // the whole tensor (rows, cols); 1-D tensors: cols = 1
    int tp_dim;                // -1 whole (not split), 0 rows split, 1 columns split
    long tp_start, tp_count;   // first global row (tp_dim 0) / column (tp_dim 1) held, and how many
    long flat_begin;           // data-sharded range of the tp-local tensor, flattened row-major
    long flat_count;
    int stage;                 // owning pipeline stage (0 when there is no pipeline)
    unsigned replicated_over;  // CT_DIM_BIT mask: dimensions whose ranks hold identical copies
} ct_shard_desc;

// A maximal run of local elements that map to consecutive global elements.
typedef struct {
    long local;   // offset within this rank's flat_count elements (0 = element flat_begin)
    long global;  // flat row-major index in the global tensor
    long len;     // > 0
} ct_shard_run;

// Iterator state; start it with CT_SHARD_ITER_INIT (or zero it).
typedef struct {
    long pos;  // next local offset to yield
} ct_shard_iter;
#define CT_SHARD_ITER_INIT ((ct_shard_iter){0})

// A descriptor for an explicit tp slice (tp_dim -1: the whole tensor; tp_start/tp_count are then
// ignored and set to 0), holding the whole tp-local tensor, stage 0, replicated over nothing.
ct_shard_desc ct_shard_desc_make(long rows, long cols, int tp_dim, long tp_start, long tp_count);

// Megatron's even split: tp rank tp_rank of tp_size holds the tp_rank-th 1/tp_size of dimension
// tp_dim. A tensor not split (tp_dim -1) while tp_size > 1 is marked replicated over CT_DIM_TP.
// Refuses (CT_ERR, message in ct_last_error) a bad tp_dim/rank or a size tp_size does not divide.
ct_status ct_shard_desc_tp(ct_shard_desc *d, long rows, long cols, int tp_dim, int tp_rank, int tp_size);

// Whether the fields are consistent (slice inside the tensor, flat range inside the slice).
bool ct_shard_desc_valid(const ct_shard_desc *d);

long ct_shard_desc_global_numel(const ct_shard_desc *d);  // rows * cols of the whole tensor
long ct_shard_desc_slice_numel(const ct_shard_desc *d);   // elements of the tp-local tensor
long ct_shard_desc_numel_local(const ct_shard_desc *d);   // elements on this rank (flat_count)
void ct_shard_desc_local_shape(const ct_shard_desc *d, long shape[2]);  // the tp-local (rows, cols)

// Global flat index of local element `local` (0 <= local < flat_count). For one element; walk
// ranges with ct_shard_next_run.
long ct_shard_desc_global_index(const ct_shard_desc *d, long local);

// Data sharding. The tp-local tensor sits at [tensor_offset, tensor_offset + slice_numel) of a
// flat buffer (an FSDP group) and this rank holds [lo, hi) of that buffer. Narrows d's flat
// range to its intersection with [lo, hi) and returns the new flat_count (0: nothing here,
// flat_begin then 0). When pos_in_range is not NULL it receives where the first held element
// sits within [lo, hi), i.e. its offset in this rank's shard buffer (0 when empty).
long ct_shard_desc_intersect(ct_shard_desc *d, long tensor_offset, long lo, long hi, long *pos_in_range);

// The next maximal run, or false at the end. A whole tensor or a row slice is one run; a column
// slice (narrower than the tensor) breaks at each row end.
bool ct_shard_next_run(const ct_shard_desc *d, ct_shard_iter *it, ct_shard_run *run);

// Whether the rank at mesh coordinates `coord` is the one that counts d's elements among its
// identical copies: coordinate 0 in every dimension of replicated_over. Summing over the ranks
// that own their copy counts each element exactly once (gradient norm, checkpoint writers).
bool ct_shard_desc_owns_copy(const ct_shard_desc *d, const int coord[CT_DIM_COUNT]);
#endif
