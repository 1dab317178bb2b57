// The training state as a checkpoint sees it, apart from the trainer that steps it: every tensor
// shard this rank holds, each with the shard descriptor naming its global elements, in three
// kinds laid out alike (parameters and AdamW's two moments), and the run's position (step,
// optimizer step, data position, seed). A model with other tensors (more of them, or experts)
// adds shards to the store and nothing here: saving, loading and resharding walk descriptors,
// never a model's own names.
#ifndef CT_TRAIN_STATE_H
#define CT_TRAIN_STATE_H
#include <stdbool.h>

#include "checkpoint/dcp.h"
#include "comm/mesh.h"
#include "data/loader.h"
#include "parallel/param_store.h"

// Where a run stands: what, with the tensors, a resumed run needs to continue bit for bit.
typedef struct {
    int step;               // optimizer steps done (also the learning-rate schedule's position)
    long optimizer_step;    // AdamW's count (behind step by the steps skipped as non-finite)
    ct_loader_state data;   // the training data's global sample position, so it reshards
} ct_train_position;

typedef struct {
    const ct_kernels *k;                // the run's device: every copy to or from the host
    ct_group *world;                    // the ranks that save and load together
    const ct_mesh *mesh;                // this rank's coordinates (which copies it owns), the layout
    const ct_param_store *store;        // every tensor shard here, with its descriptor
    float *tensors[CT_DCP_NKINDS];      // (store->numel) per kind, laid out as store->params
    int *step;                          // the trainer's step counter
    long *optimizer_step;               // the optimizer's
    ct_loader *data;                    // the training data
    int seed;                           // parameters' initialisation and the data's order
    const ct_model_config *model;       // the dimensions a checkpoint must match
} ct_train_state;

ct_train_position ct_train_state_position(const ct_train_state *s);
// Moves the run to p; CT_ERR (with the loader's reason) on a data position out of range.
ct_status ct_train_state_set_position(ct_train_state *s, const ct_train_position *p);

// Whether this rank writes shard sh: it holds elements of it and owns their copy (coordinate 0
// in every dimension the tensor is replicated over), so each element is written exactly once.
bool ct_train_state_owns(const ct_train_state *s, const ct_param_shard *sh);
// Shard sh's elements of one kind where they live (on the run's device).
const float *ct_train_state_live(const ct_train_state *s, const ct_param_shard *sh, ct_dcp_kind kind);

// Reads one shard's elements of one kind into host memory: the global elements desc names, in
// its order (a checkpoint reader takes each range from whichever files hold it: resharding).
typedef ct_status (*ct_train_state_read_fn)(void *ctx, const char *name, ct_dcp_kind kind, const ct_shard_desc *desc,
                                            float *host);
// Fills every shard this rank holds (owned or a replica), kinds [0, n_kinds), from read; stops
// at the first failure and returns it.
ct_status ct_train_state_load(ct_train_state *s, int n_kinds, ct_train_state_read_fn read, void *ctx);
#endif
