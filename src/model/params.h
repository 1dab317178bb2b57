// The parameter registry: every tensor of the model with its TorchTitan name, global shape,
// place in the flat parameter block and FSDP group. All parameters live in ONE block (llm.c
// style), laid out group by group so each FSDP group (embedding; each transformer block; final
// norm + output) is one contiguous slice: sharding a group is cutting a slice.
//
// The embedding and the head are the same in every family; a block's tensors, their order (chosen
// so fused matmuls read one matrix), tp split and initialisation are its family's
// (ct_model_family.block_params).
#ifndef CT_PARAMS_H
#define CT_PARAMS_H
#include <stdint.h>

#include "core/error.h"
#include "model/model.h"

enum { CT_PARAM_NAME = 96 };

typedef struct {
    char name[CT_PARAM_NAME];  // e.g. "layers.0.attention.wq.weight"
    int ndim;
    long shape[2];             // this rank's shape (rows, cols); 1-D tensors have shape[1] = 1
    long global_shape[2];      // the whole tensor's shape (= shape without tensor parallelism)
    int tp_dim;                // split over tp: -1 replicated, 0 rows, 1 columns; a routed experts'
                               // tensor under expert parallelism: 0, split over ep
    long tp_start;             // first global row (tp_dim 0) or column (tp_dim 1) held here
    bool expert;               // ct_param_spec.expert: sharded by FSDP over the expert shard group
    long offset;               // element offset in the flat block
    long numel;
    int group;                 // FSDP group: 0 embedding, 1..L blocks, L+1 norm + output
    int view;                  // the view it starts in its group (ct_block_weights.t[view]; embedding 0;
                               // head: norm 0, output 1), -1: it continues the previous tensor
    ct_init_kind init;
    double init_std;
    bool read_bf16;            // ct_param_spec.read_bf16
} ct_param;

typedef struct {
    ct_param *params;
    int count;
    long total;                // elements in the block
    int tp_rank, tp_size;      // the tp slice this table describes (1: the whole model)
    int ep_rank, ep_size;      // and the ep slice of the routed experts (1: every expert)
    int n_groups;
    long *group_offset;        // (n_groups + 1) element offsets: group g is [off[g], off[g+1])
    int *group_first;          // (n_groups + 1) group g's tensors are params[first[g] .. first[g+1])
} ct_param_table;

// Tensors and elements of the whole model's registry (3 + the blocks' tensors), computed without
// overflow: CT_ERR naming the setting when a dimension is not positive or the registry could
// not be indexed (more tensors than an int holds, more elements than a long). The builders
// below end the job (ct_fatal) on such a config; a reader of untrusted dimensions (a model
// file) calls this first, and compares the counts with what the file holds.
ct_status ct_param_count(const ct_model_config *m, int *n_tensors, long *n_elements);
// The whole model (no tensor parallelism).
void ct_param_table_build(ct_param_table *t, const ct_model_config *m);
// This tp rank's part under Megatron's split (m: the global config; tp_size must divide heads,
// kv heads, FFN hidden and vocabulary — ct_model_config_local checks): embedding and output
// split by rows (vocabulary), the final norm replicated, a block's tensors as its family says.
void ct_param_table_build_tp(ct_param_table *t, const ct_model_config *m, int tp_rank, int tp_size);
// This rank's part under tensor and expert parallelism: as ct_param_table_build_tp, and the
// routed experts' tensors (ct_param_spec.expert) split by rows over ep (ep_size must divide
// them: ct_model_config_from checks the experts).
void ct_param_table_build_local(ct_param_table *t, const ct_model_config *m, int tp_rank, int tp_size, int ep_rank,
                                int ep_size);
// Global flattened index of local element `local` of p.
long ct_param_global_index(const ct_param *p, long local);
void ct_param_table_free(ct_param_table *t);
const ct_param *ct_param_find(const ct_param_table *t, const char *name);

// Initialisation is a pure function of (seed, parameter name, global element index), so every
// layout and every shard starts from the same numbers: ones, or normal(0, std) as the tensor's
// spec says (embedding and output normal(0, 0.02): small logits, loss at step 0 is ln(V)).
// Fills dst with local elements [begin, begin + n) of parameter p (values by global index).
void ct_param_init_range(const ct_param *p, uint64_t seed, long begin, long n, float *dst);
// Fills dst with the n values of p at global flat indices [global_begin, global_begin + n).
void ct_param_init_global(const ct_param *p, uint64_t seed, long global_begin, long n, float *dst);
// Initialises the whole flat block.
void ct_param_init_all(const ct_param_table *t, uint64_t seed, float *block);
#endif
