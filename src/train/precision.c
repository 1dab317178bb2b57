// The run's precision from its settings: bf16 mixed precision (compute copies and kept
// activations in bf16, fp32 master weights and optimizer), 8-bit linear layers (float8 with
// tensorwise / rowwise scales, or MXFP8) for the block linears the filter leaves, and the dtype
// of gradient reductions. Precision is a run-time choice: parameters, optimizer state and model
// files are fp32 whatever it is, so a run can change it when resumed.
#include <stdio.h>
#include <string.h>

#include "parallel/precision_policy.h"
#include "train/precision.h"
#include "train/trainer.h"

ct_status ct_trainer_precision(ct_trainer *t) {
    // parallel/precision_policy.c decides, so that the planner's memory model sizes the same linears.
    return ct_precision_policy(&t->cfg, &t->model, t->mesh.dim[CT_MESH_TP].size, &t->prec, &t->f8_layers);
}

void ct_precision_describe(const ct_precision *p, const ct_config *c, const ct_kernels *k, int n_layers, char *out,
                           size_t n) {
    int used = snprintf(out, n, "precision: %s compute",
                        p->compute == CT_BF16 ? "bf16" : "fp32");
    if (p->compute == CT_BF16)
        used += snprintf(out + used, n > (size_t)used ? n - used : 0, " (bf16 gemm: %s)", k->bf16_gemm_path());
    used += snprintf(out + used, n > (size_t)used ? n - used : 0,
                     ", fp32 master weights and optimizer, gradients reduced in %s",
                     c->mixed_precision_reduce == CT_CFG_BF16 ? "bf16" : "fp32");
    if (p->quantized) {
        int on = 0, L = n_layers;
        for (int l = 0; l < L; l++)
            for (int i = 0; i < CT_BLOCK_LINEARS; i++) on += ct_precision_f8(p, l, (ct_block_linear)i);
        const char *recipe = p->recipe == CT_F8_RECIPE_MXFP8   ? "mxfp8 (e4m3, blocks of 32, e8m0 scales)"
                             : p->recipe == CT_F8_RECIPE_ROWWISE ? "float8 rowwise"
                                                                 : "float8 tensorwise";
        snprintf(out + used, n > (size_t)used ? n - used : 0,
                 "; %s for %d of %d block linears (filter \"%s\"), %s", recipe, on,
                 L * CT_BLOCK_LINEARS, c->quant_filter, k->f8_gemm_path());
    }
}
