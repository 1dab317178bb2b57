// The device mesh: world = pp × dp_replicate × dp_shard × cp × tp, tp fastest, pp slowest:
//
//   rank = ((((pp·R + r)·S + s)·CP + c)·TP + t)
//
// (pp, r, s, c, t: this rank's coordinates; R, S, CP, TP: the degrees). Neighbouring ranks
// share a tp group because tp talks most (every layer), pp least (once per micro-batch).
//
// The layout arithmetic (resolve, coordinates, group positions) is pure and testable without
// MPI; ct_mesh_create makes one communicator per dimension and per combined group, once, at
// start-up.
#ifndef CT_MESH_H
#define CT_MESH_H
#include <stddef.h>

#include "comm/comm.h"
#include "core/config.h"
#include "core/error.h"

typedef enum {
    CT_MESH_PP = 0,        // pipeline stages                  (parallelism.pipeline_degree)
    CT_MESH_DP_REPLICATE,  // replicated data parallel (DDP)   (parallelism.data_replicate_degree)
    CT_MESH_DP_SHARD,      // sharded data parallel (FSDP)     (parallelism.data_shard_degree)
    CT_MESH_CP,            // context parallel                 (parallelism.context_extension_degree)
    CT_MESH_TP,            // tensor parallel                  (parallelism.compute_parallel_degree)
    CT_MESH_NDIMS
} ct_mesh_dim;

// Groups that span several dimensions, as bit masks of (1 << ct_mesh_dim).
enum {
    CT_MESH_MASK_FSDP = (1 << CT_MESH_DP_SHARD) | (1 << CT_MESH_CP),        // FSDP shards over it
    CT_MESH_MASK_DP = (1 << CT_MESH_DP_REPLICATE) | (1 << CT_MESH_DP_SHARD),  // distinct data
    CT_MESH_MASK_DP_CP = CT_MESH_MASK_DP | (1 << CT_MESH_CP),  // every holder of one (pp, tp) slice
};

// Degrees in ct_mesh_dim order. In a requested layout dp_shard may be -1: whatever is left.
typedef struct {
    int degree[CT_MESH_NDIMS];
} ct_mesh_layout;

enum { CT_MESH_ERR_LEN = 256 };

// The requested layout from the [parallelism] settings.
ct_mesh_layout ct_mesh_layout_from_config(const ct_config *c);

// Resolves dp_shard = -1 and checks the layout against the world size. On refusal returns
// CT_ERR with ONE line in err (also left in ct_last_error), e.g.
//   layout pp 2 × dp_replicate 1 × dp_shard 3 × cp 1 × tp 2 = 12 ranks, but the world has 8
// Pure: no MPI.
ct_status ct_mesh_resolve(const ct_mesh_layout *want, int world, ct_mesh_layout *out, char *err,
                          size_t errlen);

// "pp 2 × dp_replicate 1 × dp_shard 3 × cp 1 × tp 2"; returns the length, like snprintf.
int ct_mesh_layout_format(const ct_mesh_layout *l, char *buf, size_t n);

// Coordinates of a world rank, and back (resolved layouts only).
void ct_mesh_coords(const ct_mesh_layout *l, int rank, int coord[CT_MESH_NDIMS]);
int ct_mesh_rank(const ct_mesh_layout *l, const int coord[CT_MESH_NDIMS]);
int ct_mesh_mask_size(const ct_mesh_layout *l, unsigned mask);  // product of the masked degrees

// Where a rank sits among the groups spanning the dimensions in `mask`: color numbers the
// group (mixed radix over the other dimensions), key is the rank inside it (mixed radix over
// the masked dimensions, in mesh order, so the group's rank order follows world rank order).
void ct_mesh_group_position(const ct_mesh_layout *l, int rank, unsigned mask, int *color,
                           int *key);

typedef struct {
    ct_mesh_layout layout;            // resolved
    int coord[CT_MESH_NDIMS];         // this rank's coordinate per dimension
    int world_rank, world_size;
    ct_group dim[CT_MESH_NDIMS];      // named "pp", "dp_replicate", "dp_shard", "cp", "tp"
    ct_group fsdp;                    // dp_shard × cp ("fsdp"): parameter/gradient shards
    ct_group dp;                      // dp_replicate × dp_shard ("dp"): ranks reading different data
    ct_group dp_cp;                   // dp_replicate × dp_shard × cp ("dp_cp"): gradient
                                      // reduction and global token counts
    // Expert parallelism borrows its ranks from the fsdp group (ct_mesh_create_experts): `ep`
    // neighbouring ranks of it hold E/ep routed experts each and exchange tokens; the routed
    // experts are sharded by FSDP over `expert_shard`, the fsdp ranks holding the same experts
    // (fsdp / ep of them). Without expert parallelism ep has one rank and expert_shard is fsdp.
    ct_group ep;                      // "ep"
    ct_group expert_shard;            // "expert_shard"
} ct_mesh;

// Resolves `want` against world's size (refusing before any communication, with the message
// of ct_mesh_resolve in ct_last_error), then splits world into every group (collective over
// world). Groups inherit world's timeout.
ct_status ct_mesh_create(ct_group *world, const ct_mesh_layout *want, ct_mesh *out);
// Splits the fsdp group into expert-parallel groups of ep consecutive fsdp ranks and the expert
// shard groups across them (collective over fsdp). CT_ERR with one line when ep does not divide
// the fsdp group.
ct_status ct_mesh_create_experts(ct_mesh *m, int ep);
// Every group of the mesh gets this collective timeout (they start with the world's).
void ct_mesh_set_timeout(ct_mesh *m, double timeout_s);
void ct_mesh_free(ct_mesh *m);
#endif
