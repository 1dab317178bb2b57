// The transformer blocks' linear layers at the run's precision. One place decides
// how a matmul of the model is computed, so block.c reads the same whatever the precision:
//
//   fp32      fp32 inputs and weights, fp32 accumulation (the kernels' linear_forward/backward).
//   bf16      mixed precision: the input activation is kept in bf16, the weight and the output
//             gradient are rounded to bf16 (nearest even) at the call, and the products are
//             accumulated in fp32 (the backend's gemm_bf16: AMX / AVX-512 BF16 through oneDNN, or
//             an exact fp32 fallback). Outputs and gradients come back in fp32. This is what
//             torch.autocast(bfloat16) computes for a linear layer.
//   float8    the layers the filter converts quantise input and weight to e4m3 and the output
//             gradient to e5m2 with tensorwise or rowwise scales, or blocks of 32 with e8m0
//             scales (MXFP8), and multiply the 8-bit values with fp32 accumulation
//             (linear_forward_f8 / linear_backward_f8); on top of fp32 or bf16 for the rest.
//             The input goes to them as it is kept, bf16 under bf16 (quantised from its exact
//             fp32 values): no fp32 copy of it is made here.
//             Under tensor parallel the scales are the single-process run's: every amax that
//             spans a dimension tp splits is MAX-reduced over the tp group before the casts
//             (the caller passes a ct_f8_split: block.c says which layers are column-parallel --
//             wqkv, w13: OC split -- and which row-parallel -- wo, w2: IC split -- and the tp
//             strategy supplies the reduction, parallel/tensor_parallel.c). Tensorwise: the
//             weight's amax always, dout's (column-parallel) or inp's (row-parallel); rowwise:
//             the forward's row amaxes of row-parallel layers and the input gradient's amaxes
//             (over OC) of column-parallel ones; the weight gradient's run over N, never split.
//             MXFP8 needs no reduction: its 32-blocks lie along the contraction dimension and
//             parallel/precision_policy.c refuses a tp degree that would leave a shard's extent
//             of a split one (heads x head_dim, kv heads x head_dim, FFN hidden, each / tp) not
//             a multiple of 32. So a tp run matches the tp=1 run up to fp32 summation order
//             (which tensorwise scales, not powers of two, pass on to every product: such runs
//             drift apart sooner; tests/test_parity_f8.c measures it).
//
// Weights arrive as ct_weight: under bf16, the bf16 compute copy the weight operations gather,
// read by the matmuls as it is (no fp32 copy of it is made, and no narrowing pass per call); an
// fp32 weight (fp32 runs, the 8-bit layers, callers without a gathered copy) is narrowed at the
// call into the w16 scratch, which ct_precision.weights_bf16 leaves out.
#ifndef CT_LINEAR_H
#define CT_LINEAR_H
#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"
#include "kernels/backend.h"

// The linear layers of one block, in the order they run.
typedef enum { CT_LINEAR_WQKV = 0, CT_LINEAR_WO, CT_LINEAR_W13, CT_LINEAR_W2, CT_BLOCK_LINEARS } ct_block_linear;

typedef struct {
    ct_dtype compute;              // CT_F32 or CT_BF16: matmul inputs and the activations they keep
    bool quantized;                // 8-bit matmuls for the layers f8_layers selects
    ct_f8_recipe recipe;           // tensorwise, rowwise or MXFP8
    const uint8_t *f8_layers;      // (n_layers) bit l set: linear l of that block is 8-bit; NULL = all
    bool weights_bf16;             // bf16: every non-8-bit layer gets its weight as bf16 (no w16 scratch)
} ct_precision;

// A linear layer's weight (OC, IC), row-major, as the caller holds it: fp32, bf16, or both (the
// same values); the other NULL. pack_id: which block linear it is, 1 + layer · CT_BLOCK_LINEARS
// + linear, for the stage's packed copies (model/weight_packs.h); 0: none (packed at the
// product). ct_weight_at: the rows from element `off` on (a part: no pack_id).
typedef struct {
    const float *f32;
    const uint16_t *bf16;
    int pack_id;
} ct_weight;
static inline ct_weight ct_weight_at(ct_weight w, long off) {
    return (ct_weight){w.f32 ? w.f32 + off : NULL, w.bf16 ? w.bf16 + off : NULL, 0};
}

static inline ct_precision ct_precision_fp32(void) { return (ct_precision){.compute = CT_F32}; }

// Whether linear l of block `layer` runs in 8 bits.
static inline bool ct_precision_f8(const ct_precision *p, int layer, ct_block_linear l) {
    return p->quantized && (!p->f8_layers || (p->f8_layers[layer] >> l & 1));
}

// Scratch a stage owns for its linears, shared by every call (valid inside one call).
typedef struct {
    const ct_kernels *k;
    ct_precision prec;
    uint16_t *w16;   // (max OC·IC) bf16 weight narrowed at the call (NULL under weights_bf16)
    uint16_t *g16;   // (N · max OC) bf16 output gradient
    float *f8;       // the 8-bit kernels' scratch (they take a bf16 input as it is kept)
    struct ct_weight_packs *packs;  // the stage's packed bf16 weights, or NULL (model/weight_packs.h)
} ct_linear_ctx;

// One linear layer's widths: inp (N, in) -> out (N, out).
typedef struct {
    long in, out;
} ct_linear_shape;

// Floats of scratch a ct_linear_ctx needs for N rows and the layers it will compute (each buffer
// sized by the largest layer that uses it, never by widths of different layers combined), and
// the carving of a buffer of that many floats into it.
long ct_linear_scratch_floats(const ct_kernels *k, const ct_precision *p, long N, const ct_linear_shape *layers,
                              int n_layers);
void ct_linear_ctx_init(ct_linear_ctx *c, const ct_kernels *k, const ct_precision *p, float *scratch, long N,
                        const ct_linear_shape *layers, int n_layers);

// out (N, OC) fp32 = inp (N, IC) @ W (OC, IC)^T. inp: fp32 or bf16 (the kept activation).
// f8: in 8 bits; split: how tp splits this layer, for the 8-bit scales (kernels/backend.h;
// NULL: whole, or not 8-bit).
void ct_linear_fwd(const ct_linear_ctx *c, bool f8, const ct_f8_split *split, float *out, ct_tensor inp,
                   ct_weight W, long OC);
// dinp (N, IC) = dout @ W (NULL: skipped, and W unread); dW (OC, IC) += dout^T @ inp (NULL: skipped).
void ct_linear_bwd(const ct_linear_ctx *c, bool f8, const ct_f8_split *split, float *dinp, float *dW,
                   const float *dout, ct_tensor inp, ct_weight W, long OC);

// Keeping an activation for backward: `work` (n fp32, just computed) is narrowed to the kept
// dtype, nearest even, into `kept`, and work itself takes the narrowed values so that the rest
// of the forward computes with exactly what backward will see. Nothing to do in fp32, where
// work is the kept buffer.
void ct_keep_activation(const ct_linear_ctx *c, void *kept, float *work, long n);
// A kept activation as fp32 for a kernel that reads fp32: the buffer itself in fp32, else
// widened (exactly) into `work`.
const float *ct_kept_as_f32(const ct_linear_ctx *c, const void *kept, float *work, long n);
// Rounds x (n fp32) to bf16 values in place, through the g16 scratch (n <= its size).
void ct_round_to_bf16(const ct_linear_ctx *c, float *x, long n);
#endif
