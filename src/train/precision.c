// The run's precision from its settings: bf16 mixed precision (compute copies and kept
// activations in bf16, fp32 master weights and optimizer), 8-bit linear layers (float8 with
// tensorwise / rowwise scales, or MXFP8) for the block linears the filter leaves, and the dtype
// of gradient reductions. Precision is a run-time choice: parameters, optimizer state and model
// files are fp32 whatever it is, so a run can change it when resumed.
#include <stdio.h>
#include <string.h>

#include "train/trainer.h"

// The next entry of a comma list, trimmed, into entry; false at the end.
static bool next_entry(const char **p, char *entry, size_t size) {
    while (**p) {
        size_t n = strcspn(*p, ",");
        const char *b = *p, *e = *p + n;
        *p = e + (*e == ',');
        while (b < e && *b == ' ') b++;
        while (e > b && e[-1] == ' ') e--;
        if (e > b) {
            snprintf(entry, size, "%.*s", (int)(e - b), b);
            return true;
        }
    }
    return false;
}

// TorchTitan's rule: a linear layer stays in high precision when any filter entry is a substring
// of its name. The fused matrices answer to the names of their parts (wq, wk, wv; w1, w3), so a
// filter written for TorchTitan's unfused modules means the same here.
static bool filtered(const char *filter, int layer, ct_block_linear l) {
    static const char *parts[CT_BLOCK_LINEARS][3] = {
        {"attention.wq", "attention.wk", "attention.wv"}, {"attention.wo"},
        {"feed_forward.w1", "feed_forward.w3"}, {"feed_forward.w2"},
    };
    char entry[CT_STR], name[96];
    for (const char *p = filter; next_entry(&p, entry, sizeof entry);)
        for (int i = 0; i < 3 && parts[l][i]; i++) {
            snprintf(name, sizeof name, "layers.%d.%s", layer, parts[l][i]);
            if (strstr(name, entry)) return true;
        }
    return false;
}

static bool filter_keeps_output(const char *filter) {
    char entry[CT_STR];
    for (const char *p = filter; next_entry(&p, entry, sizeof entry);)
        if (strstr("output", entry)) return true;
    return false;
}

ct_status ct_trainer_precision(ct_trainer *t) {
    const ct_config *c = &t->cfg;
    ct_precision *p = &t->prec;
    *p = ct_precision_fp32();
    if (!strcmp(c->mixed_precision, "bf16")) p->compute = CT_BF16;
    if (!c->float8 && !c->mxfp8) return CT_OK;
    // The output projection is fused with the loss, which computes in fp32 (a vocabulary-sized
    // 8-bit matmul would also cost the most accuracy); TorchTitan filters it by default too.
    if (!filter_keeps_output(c->quant_filter))
        return ct_set_error("quantization.filter_fqns \"%s\": the output projection cannot run in 8 bits here; "
                            "keep \"output\" in the filter",
                            c->quant_filter);
    // Under tensor parallel a rank holds a slice of each weight and of the row-parallel inputs,
    // so its scales (a tensor's amax, a row's amax, a block's) would be the slice's, not the
    // whole tensor's, and the numbers would depend on the layout. Agreeing on them needs an amax
    // reduction over the tp group inside the 8-bit matmul; until that exists the combination is
    // refused rather than run with layout-dependent numerics.
    int tp = t->mesh.dim[CT_MESH_TP].size;
    if (tp > 1)
        return ct_set_error("%s with parallelism.compute_parallel_degree %d is not supported yet: 8-bit scales would "
                            "be computed per tensor-parallel shard",
                            c->mxfp8 ? "quantization.mxfp8.enable" : "quantization.float8.enable", tp);
    p->quantized = true;
    p->recipe = c->mxfp8 ? CT_F8_RECIPE_MXFP8
                : !strcmp(c->float8_recipe, "rowwise") ? CT_F8_RECIPE_ROWWISE
                                                       : CT_F8_RECIPE_TENSORWISE;
    int L = t->model.n_layers;
    t->f8_layers = ct_xcalloc((size_t)L, 1);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < CT_BLOCK_LINEARS; i++)
            if (!filtered(c->quant_filter, l, (ct_block_linear)i)) t->f8_layers[l] |= (uint8_t)(1u << i);
    p->f8_layers = t->f8_layers;
    return CT_OK;
}

void ct_trainer_describe_precision(const ct_trainer *t, char *out, size_t n) {
    const ct_precision *p = &t->prec;
    const ct_config *c = &t->cfg;
    int used = snprintf(out, n, "precision: %s compute",
                        p->compute == CT_BF16 ? "bf16" : "fp32");
    if (p->compute == CT_BF16)
        used += snprintf(out + used, n > (size_t)used ? n - used : 0, " (bf16 gemm: %s)", t->k->bf16_gemm_path());
    used += snprintf(out + used, n > (size_t)used ? n - used : 0,
                     ", fp32 master weights and optimizer, gradients reduced in %s",
                     !strcmp(c->mixed_precision_reduce, "bf16") ? "bf16" : "fp32");
    if (p->quantized) {
        int on = 0, L = t->model.n_layers;
        for (int l = 0; l < L; l++)
            for (int i = 0; i < CT_BLOCK_LINEARS; i++) on += ct_precision_f8(p, l, (ct_block_linear)i);
        const char *recipe = p->recipe == CT_F8_RECIPE_MXFP8   ? "mxfp8 (e4m3, blocks of 32, e8m0 scales)"
                             : p->recipe == CT_F8_RECIPE_ROWWISE ? "float8 rowwise"
                                                                 : "float8 tensorwise";
        snprintf(out + used, n > (size_t)used ? n - used : 0,
                 "; %s for %d of %d block linears (filter \"%s\"), emulated on %s", recipe, on,
                 L * CT_BLOCK_LINEARS, c->quant_filter, t->k->name);
    }
}
