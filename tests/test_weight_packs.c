// The stage's packed bf16 weights (model/weight_packs.h), through the cpu table:
//  - closed (no epoch open), a layer outside the stage, a linear out of range, or a part of a
//    weight (another shape): no packing (NULL), so the product packs its own;
//  - within one epoch a weight is packed once: changing the bf16 values after the first get
//    does not change what the second returns (the executor's promise is that they do not change);
//  - a new epoch packs again from the values as they are then;
//  - a packing multiplies to gemm_bf16's bits, for the forward (W^T) and the input gradient (W);
//  - the bytes are 0 where the backend has no packed form, and the packs then keep nothing, even
//    when given room.
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/weight_packs.h"
#include "test.h"
#include "test_rand.h"

enum { LAYERS = 2, LINEARS = 2, N = 40 };
static const ct_linear_shape shapes[LINEARS] = {{48, 80}, {80, 48}};  // {in, out}

static uint16_t *weight16(long n) {
    uint16_t *w = malloc(sizeof(uint16_t) * n);
    for (long i = 0; i < n; i++) {
        float f = frand(1);
        uint32_t u;
        memcpy(&u, &f, 4);
        w[i] = (uint16_t)(u >> 16);
    }
    return w;
}

// The product that uses W from a packing, and from W itself: the same bits? The forward's
// inp (N, IC) @ W^T, or the input gradient's dout (N, OC) @ W.
static int product_matches(const ct_kernels *k, const void *packed, const uint16_t *W, long OC, long IC,
                           ct_pack_use use) {
    long K = use == CT_PACK_FORWARD ? IC : OC, Nn = use == CT_PACK_FORWARD ? OC : IC;
    uint16_t *a = weight16(N * K);
    float *x = malloc(sizeof(float) * N * Nn), *y = malloc(sizeof(float) * N * Nn);
    k->gemm_bf16_packed(0, N, Nn, K, 1.0f, a, K, packed, 0.0f, x, Nn);
    k->gemm_bf16(0, use == CT_PACK_FORWARD, N, Nn, K, 1.0f, a, K, W, IC, 0.0f, y, Nn);
    int ok = !memcmp(x, y, sizeof(float) * N * Nn);
    free(a), free(x), free(y);
    return ok;
}

static void test_packs(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    size_t bytes = ct_weight_packs_bytes(k, LAYERS, shapes, LINEARS);
    if (!bytes) {
        CHECK(!k->gemm_bf16_packed_bytes(64, 64), "packs keep nothing though the backend packs");
        printf("  no packed form on this path (%s)\n", k->bf16_gemm_path());
        ct_weight_packs p;  // given room anyway, they pack nothing
        char room[64] __attribute__((aligned(64)));
        uint16_t w[80 * 48] = {0};
        ct_weight_packs_init(&p, k, 0, LAYERS, shapes, LINEARS, room);
        ct_weight_packs_open(&p);
        CHECK(!ct_weight_packs_get(&p, 0, 1, CT_PACK_FORWARD, w, 48, 80), "packed on a path without a packed form");
        ct_weight_packs_close(&p);
        ct_weight_packs_free(&p);
        return;
    }
    void *base = NULL;
    CHECK(!posix_memalign(&base, 64, bytes), "memory");
    ct_weight_packs p;
    ct_weight_packs_init(&p, k, 3, LAYERS, shapes, LINEARS, base);  // the stage's blocks 3 and 4
    long OC = shapes[1].out, IC = shapes[1].in;
    uint16_t *W = weight16(OC * IC), *W0 = malloc(sizeof(uint16_t) * OC * IC);
    memcpy(W0, W, sizeof(uint16_t) * OC * IC);

    CHECK(!ct_weight_packs_get(&p, 4, 1, CT_PACK_FORWARD, W, OC, IC), "closed, yet packed");
    ct_weight_packs_open(&p);
    CHECK(!ct_weight_packs_get(&p, 2, 1, CT_PACK_FORWARD, W, OC, IC), "a layer before the stage's");
    CHECK(!ct_weight_packs_get(&p, 5, 1, CT_PACK_FORWARD, W, OC, IC), "a layer after the stage's");
    CHECK(!ct_weight_packs_get(&p, 4, LINEARS, CT_PACK_FORWARD, W, OC, IC), "a linear past the block's");
    CHECK(!ct_weight_packs_get(&p, 4, 1, CT_PACK_FORWARD, W, OC / 2, IC), "a part of the weight");

    const void *f = ct_weight_packs_get(&p, 4, 1, CT_PACK_FORWARD, W, OC, IC);
    const void *g = ct_weight_packs_get(&p, 4, 1, CT_PACK_INPUT_GRAD, W, OC, IC);
    CHECK(f && g && f != g, "forward and input-gradient packings");
    CHECK(product_matches(k, f, W, OC, IC, CT_PACK_FORWARD), "the forward packing's product differs from gemm_bf16's");
    CHECK(product_matches(k, g, W, OC, IC, CT_PACK_INPUT_GRAD), "the input-gradient packing's product differs from gemm_bf16's");
    CHECK(f != ct_weight_packs_get(&p, 3, 1, CT_PACK_FORWARD, W, OC, IC), "two layers share a packing");

    for (long i = 0; i < OC * IC; i++) W[i] ^= 0x0040;  // other values, same epoch
    CHECK(ct_weight_packs_get(&p, 4, 1, CT_PACK_FORWARD, W, OC, IC) == f && product_matches(k, f, W0, OC, IC, CT_PACK_FORWARD),
          "packed again within one epoch");
    ct_weight_packs_close(&p);
    CHECK(!ct_weight_packs_get(&p, 4, 1, CT_PACK_FORWARD, W, OC, IC), "closed, yet packed");
    ct_weight_packs_open(&p);
    f = ct_weight_packs_get(&p, 4, 1, CT_PACK_FORWARD, W, OC, IC);
    CHECK(f && product_matches(k, f, W, OC, IC, CT_PACK_FORWARD), "a new epoch did not pack the new values");
    ct_weight_packs_close(&p);

    ct_weight_packs_free(&p);
    free(base), free(W), free(W0);
}

int main(void) {
    rng_state = 0xA4093822299F31D0ull;
    CT_RUN(test_packs);
    CT_TEST_EXIT();
}
