#include "model/weight_packs.h"

#include <stdlib.h>

#include "core/error.h"

// K and N of the B operand W (OC, IC) is for `use` (weight_packs.h ct_pack_use).
static void operand(const ct_linear_shape *s, int use, long *K, long *N) {
    *K = use == CT_PACK_FORWARD ? s->in : s->out;
    *N = use == CT_PACK_FORWARD ? s->out : s->in;
}

static size_t packed_bytes(const ct_kernels *k, const ct_linear_shape *s, int use) {
    long K, N;
    operand(s, use, &K, &N);
    size_t b = k->gemm_bf16_packed_bytes ? k->gemm_bf16_packed_bytes(K, N) : 0;
    return (b + 63) & ~(size_t)63;
}

size_t ct_weight_packs_bytes(const ct_kernels *k, int n_layers, const ct_linear_shape *shapes, int n_linears) {
    size_t per_layer = 0;
    for (int l = 0; l < n_linears; l++)
        for (int u = 0; u < CT_PACK_USES; u++) {
            size_t b = packed_bytes(k, &shapes[l], u);
            if (!b) return 0;  // no packed form: keep nothing
            per_layer += b;
        }
    return per_layer * (size_t)(n_layers > 0 ? n_layers : 0);
}

void ct_weight_packs_init(ct_weight_packs *p, const ct_kernels *k, int layer_begin, int n_layers,
                          const ct_linear_shape *shapes, int n_linears, void *base) {
    *p = (ct_weight_packs){.k = k, .layer_begin = layer_begin, .n_layers = n_layers, .n_linears = n_linears,
                           .base = base};
    if (!base || n_layers <= 0 || !ct_weight_packs_bytes(k, n_layers, shapes, n_linears)) {
        p->base = NULL;  // nothing to keep (no packed form on this path): every get is NULL
        return;
    }
    if (n_linears > CT_BLOCK_LINEARS) ct_fatal("weight_packs", "%d linears per block, at most %d", n_linears, CT_BLOCK_LINEARS);
    for (int l = 0; l < n_linears; l++) p->shape[l] = shapes[l];
    long n = (long)n_layers * n_linears * CT_PACK_USES;
    p->offset = ct_xcalloc((size_t)n, sizeof *p->offset);
    p->epoch_of = ct_xcalloc((size_t)n, sizeof *p->epoch_of);
    size_t at = 0;
    for (long i = 0; i < n; i++) {
        p->offset[i] = at;
        at += packed_bytes(k, &shapes[i / CT_PACK_USES % n_linears], (int)(i % CT_PACK_USES));
    }
}

void ct_weight_packs_free(ct_weight_packs *p) {
    free(p->offset);
    free(p->epoch_of);
    p->offset = NULL, p->epoch_of = NULL, p->base = NULL;
}

void ct_weight_packs_open(ct_weight_packs *p) { p->epoch = ++p->last_epoch; }
void ct_weight_packs_close(ct_weight_packs *p) { p->epoch = 0; }

const void *ct_weight_packs_get(ct_weight_packs *p, int layer, int l, ct_pack_use use, const uint16_t *w16, long OC,
                                long IC) {
    if (!p || !p->base || !p->epoch || !w16) return NULL;
    int local = layer - p->layer_begin;
    if (local < 0 || local >= p->n_layers || l < 0 || l >= p->n_linears) return NULL;
    if (p->shape[l].out != OC || p->shape[l].in != IC) return NULL;  // a part of the weight
    long i = ((long)local * p->n_linears + l) * CT_PACK_USES + use;
    void *dst = p->base + p->offset[i];
    if (p->epoch_of[i] != p->epoch) {
        long K, N;
        operand(&p->shape[l], use, &K, &N);
        // forward: op(B) = W^T, W (OC, IC) read transposed; input gradient: op(B) = W as it is
        p->k->gemm_bf16_pack_b(use == CT_PACK_FORWARD, K, N, w16, IC, dst);
        p->epoch_of[i] = p->epoch;
    }
    return dst;
}
