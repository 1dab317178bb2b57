// The output layer's products in fp32 or bf16 (contracts and the precision rules in
// kernels/backend.h). Written against the kernel table, so every backend's loss shares it.
#include "kernels/backend.h"

#include <stddef.h>

static long align16(long n) { return (n + 15) / 16 * 16; }
static long floats_of_bf16(long n) { return align16((n + 1) / 2); }  // floats that hold n bf16 values

long ct_head_products_floats(long chunk_rows, long V, long C, bool bf16) {
    if (!bf16) return 0;
    return floats_of_bf16(chunk_rows * C) + floats_of_bf16(chunk_rows * V);
}

ct_head_products ct_head_products_begin(const ct_kernels *k, bool bf16, const void *W, long V, long C, long chunk_rows,
                                        float *scratch) {
    ct_head_products h = {.k = k, .V = V, .C = C};
    if (!bf16) return h;
    float *at = scratch;  // the two copies in turn, each 16-float aligned
    h.W16 = W;
    h.x16 = (uint16_t *)at, at += floats_of_bf16(chunk_rows * C);
    h.z16 = (uint16_t *)at;
    return h;
}

void ct_head_logits(const ct_head_products *h, float *z, const float *xc, const void *W, long nr) {
    const long V = h->V, C = h->C;
    if (!h->W16) {
        h->k->gemm(0, 1, nr, V, C, 1.0f, xc, C, W, C, 0.0f, z, V);
        return;
    }
    h->k->f32_to_bf16(h->x16, xc, nr * C);
    h->k->gemm_bf16(0, 1, nr, V, C, 1.0f, h->x16, C, h->W16, C, 0.0f, z, V);
}

void ct_head_backward(const ct_head_products *h, float *dx, float *dW, const float *z, const float *xc, const void *W,
                      long nr) {
    const long V = h->V, C = h->C;
    if (!h->W16) {
        if (dx) h->k->gemm(0, 0, nr, C, V, 1.0f, z, V, W, C, 0.0f, dx, C);  // dx (nr, C) = dlogits W
        h->k->gemm(1, 0, V, C, nr, 1.0f, z, V, xc, C, 1.0f, dW, C);         // dW (V, C) += dlogits^T x
        return;
    }
    h->k->f32_to_bf16(h->z16, z, nr * V);
    ct_head_backward_rounded(h, dx, dW, nr);
}

void ct_head_backward_rounded(const ct_head_products *h, float *dx, float *dW, long nr) {
    const long V = h->V, C = h->C;
    if (dx) h->k->gemm_bf16(0, 0, nr, C, V, 1.0f, h->z16, V, h->W16, C, 0.0f, dx, C);
    h->k->gemm_bf16(1, 0, V, C, nr, 1.0f, h->z16, V, h->x16, C, 1.0f, dW, C);
}
