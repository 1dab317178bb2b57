// The precision policy of parallel/precision_policy.h: TorchTitan's filter rule for 8-bit linears,
// and the check that MXFP8's blocks stay whole under tensor parallel.
#include "parallel/precision_policy.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/float_formats.h"

// Whether an entry of the comma list `list` (each trimmed of spaces) is a substring of name (n
// chars). (Run for every layer of every layout the planner sizes: no copy, no formatting.)
static bool entry_in(const char *list, const char *name, size_t n) {
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        const char *b = p, *e = p + len;
        p = e + (*e == ',');
        while (b < e && *b == ' ') b++;
        while (e > b && e[-1] == ' ') e--;
        if (e > b && memmem(name, n, b, (size_t)(e - b))) return true;
    }
    return false;
}

// TorchTitan's rule: a linear layer stays in high precision when any filter entry is a substring
// of its name. The fused matrices answer to the names of their parts (wq, wk, wv; w1, w3), so a
// filter written for TorchTitan's unfused modules means the same here. prefix: "layers.<l>.".
static bool filtered(const char *filter, const char *prefix, ct_block_linear l) {
    static const char *parts[CT_BLOCK_LINEARS][3] = {
        {"attention.wq", "attention.wk", "attention.wv"}, {"attention.wo"},
        {"feed_forward.w1", "feed_forward.w3"}, {"feed_forward.w2"},
    };
    char name[96];
    size_t n = strlen(prefix);
    for (int i = 0; i < 3 && parts[l][i]; i++) {
        size_t m = strlen(parts[l][i]);
        memcpy(name, prefix, n);
        memcpy(name + n, parts[l][i], m);
        if (entry_in(filter, name, n + m)) return true;
    }
    return false;
}

// MXFP8 under tp: a 32-element block along a contraction dimension that tp splits must lie on one
// rank, or its scale would be a shard's (a block straddling two ranks). The split contraction
// extents: wo's and w2's inputs (forward), wqkv's and w13's outputs (input gradient), each part
// of the fused matrices on its own (q, k, v; w1, w3), so the local blocks are the whole model's.
// A mixture of experts' FFN split over tp is its dense first blocks' (its routed experts are whole
// on every tp rank, and its ffn_hidden is theirs).
static ct_status mxfp8_blocks_fit(const ct_model_config *m, int tp, unsigned linears) {
    if (tp <= 1) return CT_OK;
    bool moe = m->n_experts > 0;
    long ffn = !moe ? m->ffn_hidden : m->n_dense_layers > 0 ? m->dense_ffn_hidden : 0;
    struct {
        unsigned used_by;
        const char *what;
        long global;
    } dims[] = {
        {1u << CT_LINEAR_WQKV | 1u << CT_LINEAR_WO, "model.n_heads x head_dim", (long)m->n_heads * m->head_dim},
        {1u << CT_LINEAR_WQKV, "model.n_kv_heads x head_dim", (long)m->n_kv_heads * m->head_dim},
        {1u << CT_LINEAR_W13 | 1u << CT_LINEAR_W2, moe ? "model.moe.dense_ffn_hidden_dim" : "FFN hidden size", ffn},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if ((linears & dims[i].used_by) && (dims[i].global / tp) % CT_MX_BLOCK)
            return ct_set_error("quantization.mxfp8.enable with parallelism.compute_parallel_degree %d: %s %ld / %d = "
                                "%ld per rank is not a multiple of the 32-element MXFP8 block (a block would straddle "
                                "two tensor-parallel ranks)",
                                tp, dims[i].what, dims[i].global, tp, dims[i].global / tp);
    return CT_OK;
}

ct_status ct_precision_policy(const ct_config *c, const ct_model_config *m, int tp, ct_precision *p, uint8_t **f8) {
    int n_layers = m->n_layers;
    *p = ct_precision_fp32();
    *f8 = NULL;
    if (c->mixed_precision == CT_CFG_BF16) p->compute = CT_BF16;
    // FSDP gathers the bf16 copy the linear layers read (parallel/fsdp.h), unless 8-bit layers
    // need fp32 weights: then every weight is widened, and bf16 layers narrow theirs.
    p->weights_bf16 = p->compute == CT_BF16 && !c->float8 && !c->mxfp8;
    if (!c->float8 && !c->mxfp8) return CT_OK;
    // The output projection is fused with the loss, which computes in fp32 (a vocabulary-sized
    // 8-bit matmul would also cost the most accuracy); TorchTitan filters it by default too.
    if (!entry_in(c->quant_filter, "output", strlen("output")))
        return ct_set_error("quantization.filter_fqns \"%s\": the output projection cannot run in 8 bits here; "
                            "keep \"output\" in the filter",
                            c->quant_filter);
    // Under tensor parallel a rank holds a slice of each weight and of the row-parallel inputs,
    // so a scale taken on its own slice (a tensor's amax, a row's amax) would be the slice's,
    // and the numbers would depend on the layout. The 8-bit matmuls agree on every amax that
    // spans a split dimension with a MAX all-reduce over the tp group (model/linear.h), so tp runs
    // use the single-process scales. MXFP8's blocks need that each shard's extent of a split
    // contraction dimension be a multiple of 32, checked below.
    p->quantized = true;
    p->recipe = c->mxfp8 ? CT_F8_RECIPE_MXFP8
                : c->float8_recipe == CT_CFG_F8_ROWWISE ? CT_F8_RECIPE_ROWWISE
                                                       : CT_F8_RECIPE_TENSORWISE;
    *f8 = ct_xcalloc((size_t)n_layers, 1);
    for (int l = 0; l < n_layers; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        for (int i = 0; i < CT_BLOCK_LINEARS; i++)
            if (!filtered(c->quant_filter, prefix, (ct_block_linear)i)) (*f8)[l] |= (uint8_t)(1u << i);
    }
    p->f8_layers = *f8;
    unsigned used = 0;  // the block linears some layer runs in 8 bits
    for (int l = 0; l < n_layers; l++) used |= (*f8)[l];
    if (c->mxfp8 && mxfp8_blocks_fit(m, tp, used)) {
        free(*f8);
        *f8 = NULL;
        p->f8_layers = NULL;
        return CT_ERR;
    }
    return CT_OK;
}
