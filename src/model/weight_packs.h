// Packed bf16 weights, reused while the weights stay the same. A bf16 matmul packs its B operand
// (the weight, for the forward's out = inp W^T and the input gradient's dinp = dout W) into the
// layout its kernel reads (kernels/cpu/gemm_bf16.h ct_gemm_bf16_packed): once per product, so a
// step of m micro-batches packs each weight m times for the forward (more with checkpointing's
// recompute) and m times for the input gradient. A stage that runs more than one micro-batch per
// step keeps one packed copy of each of its blocks' linear weights per use instead, packed on the
// first product of a run of the executor and read by the rest of it: the weights do not change
// while the executor runs (the optimizer steps between runs), and each run opens a new epoch, so
// a packing is never read after the values it came from could have changed (an FSDP re-gather
// between micro-batches writes the same values again).
//
// Memory: 2 bytes per element of each linear weight per use, 4 in all (plus the kernel's padding):
// what the stage's planning counts. `training.pack_weights = false` keeps none. Without a packed form (fp32 runs, 8-bit layers, the
// fallback and oneDNN paths) nothing is kept and the products pack as before.
#ifndef CT_WEIGHT_PACKS_H
#define CT_WEIGHT_PACKS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "model/linear.h"

// How a weight W (OC, IC) is the B operand: the forward's op(B) = W^T (K = IC, N = OC), the input
// gradient's op(B) = W (K = OC, N = IC).
typedef enum { CT_PACK_FORWARD = 0, CT_PACK_INPUT_GRAD = 1, CT_PACK_USES = 2 } ct_pack_use;

typedef struct ct_weight_packs {
    const ct_kernels *k;
    int layer_begin, n_layers;  // the stage's blocks (global numbering)
    int n_linears;              // linear layers per block
    ct_linear_shape shape[CT_BLOCK_LINEARS];  // (n_linears) each linear's {in, out} on this rank
    char *base;                 // every packing, [layer][linear][use], 64-byte aligned each
    size_t *offset;             // (n_layers × n_linears × uses) byte offset of each in base
    long *epoch_of;             // (same) the epoch each was packed in (0: never)
    long epoch;                 // the open epoch, 0 while closed (weights may change)
    long last_epoch;
} ct_weight_packs;

// Bytes of every packing for n_layers blocks of these linears, 0 when the backend has no packed
// form for them (then nothing is kept).
size_t ct_weight_packs_bytes(const ct_kernels *k, int n_layers, const ct_linear_shape *shapes, int n_linears);
// p over `base` (ct_weight_packs_bytes of it; NULL: packs nothing, get returns NULL).
void ct_weight_packs_init(ct_weight_packs *p, const ct_kernels *k, int layer_begin, int n_layers,
                          const ct_linear_shape *shapes, int n_linears, void *base);
void ct_weight_packs_free(ct_weight_packs *p);

// Opens a new epoch (the weights are fixed until close) or closes it.
void ct_weight_packs_open(ct_weight_packs *p);
void ct_weight_packs_close(ct_weight_packs *p);

// The packed B of linear l of block `layer` for `use`, packed from w16 (OC, IC) now unless this
// epoch packed it already; NULL (the caller packs at the product) when p is NULL or closed, the
// layer is not the stage's, or (OC, IC) is not the linear's whole shape.
const void *ct_weight_packs_get(ct_weight_packs *p, int layer, int l, ct_pack_use use, const uint16_t *w16, long OC,
                                long IC);
#endif
