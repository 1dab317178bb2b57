// The 8-bit linears (kernels/cpu/linear_f8.h) with their input in bf16, as a bf16 run keeps it:
// every output must be bit for bit the output of the same call with the input's fp32 values
// (bf16 widens exactly, so the codes and scales cannot differ), for every recipe, forward and
// backward (dweight accumulated, dinp skipped or not), with and without a tensor-parallel split,
// on serial and parallel loops; and the widening must fit in the scratch the kernels already ask
// for (a canary after f8_scratch_floats / f8_backward_scratch_floats floats stays untouched).
#include <stdint.h>
#include <string.h>

#include "core/float_formats.h"
#include "kernels/backend.h"
#include "test.h"
#include "test_rand.h"

static const char *names[] = {"tensorwise", "rowwise", "mxfp8"};

#define CANARY 8
static float *scratch_with_canary(long ns) {
    float *s = malloc((ns + CANARY) * sizeof(float));
    for (int i = 0; i < CANARY; i++) s[ns + i] = -3.0f;
    return s;
}
static int canary_bad(const float *s, long ns) {
    int bad = 0;
    for (int i = 0; i < CANARY; i++) bad += s[ns + i] != -3.0f;
    return bad;
}

// A single-process split: the amaxes go through the agreement path and come back unchanged.
static void amax_max_one_rank(void *ctx, float *amax, long n) { (void)ctx, (void)amax, (void)n; }

// The input (N, IC) in bf16 and its fp32 widening: activations with an outlier, a zero column and
// bf16 subnormals (which the 8-bit casts flush or keep exactly as from fp32).
typedef struct {
    uint16_t *x16;
    float *x32;
} input;
static input make_input(long N, long IC) {
    input in = {malloc((N * IC + 1) * sizeof(uint16_t)), malloc((N * IC + 1) * sizeof(float))};
    for (long i = 0; i < N * IC; i++) in.x16[i] = ct_f32_to_bf16(frand(5.0f));
    if (N > 2 && IC > 2) {
        for (long n = 0; n < N; n++) in.x16[n * IC + 1] = 0;
        in.x16[2] = ct_f32_to_bf16(60.0f);
        in.x16[IC + 2] = ct_f32_to_bf16(-3e-39f);
    }
    for (long i = 0; i < N * IC; i++) in.x32[i] = ct_bf16_to_f32(in.x16[i]);
    return in;
}

static float *randn(long n, float scale) {
    float *x = malloc((n + 1) * sizeof(float));
    for (long i = 0; i < n; i++) x[i] = frand(scale);
    return x;
}

// One shape, one recipe, one split: the fp32-input and bf16-input calls, compared bit for bit.
static void compare(const ct_kernels *k, long N, long IC, long OC, int r, const ct_f8_split *sp) {
    input in = make_input(N, IC);
    float *w = randn(OC * IC, 0.02f), *dout = randn(N * OC, 1e-3f), *C0 = randn(OC * IC, 0.01f);
    long nf = k->f8_scratch_floats(N, IC, OC), nb = k->f8_backward_scratch_floats(N, IC, OC);
    float *sf = scratch_with_canary(nf), *sb = scratch_with_canary(nb);
    float *o[2], *di[2], *dw[2], *dw_only[2];
    for (int b = 0; b < 2; b++) {
        const void *x = b ? (const void *)in.x16 : (const void *)in.x32;
        ct_dtype dt = b ? CT_BF16 : CT_F32;
        o[b] = malloc((N * OC + 1) * sizeof(float));
        di[b] = malloc((N * IC + 1) * sizeof(float));
        dw[b] = malloc((OC * IC + 1) * sizeof(float));
        dw_only[b] = malloc((OC * IC + 1) * sizeof(float));
        memcpy(dw[b], C0, OC * IC * sizeof(float));
        memcpy(dw_only[b], C0, OC * IC * sizeof(float));
        k->linear_forward_f8(o[b], x, dt, w, N, IC, OC, (ct_f8_recipe)r, sp, sf);
        k->linear_backward_f8(di[b], dw[b], dout, x, dt, w, N, IC, OC, (ct_f8_recipe)r, sp, sb);
        k->linear_backward_f8(NULL, dw_only[b], dout, x, dt, NULL, N, IC, OC, (ct_f8_recipe)r, sp, sb);
    }
    const char *how = sp ? "split" : "whole";
    CHECK(!memcmp(o[0], o[1], N * OC * sizeof(float)), "%s %s %ldx%ldx%ld: forward differs", names[r], how, N, IC,
          OC);
    CHECK(!memcmp(di[0], di[1], N * IC * sizeof(float)), "%s %s %ldx%ldx%ld: dinp differs", names[r], how, N, IC, OC);
    CHECK(!memcmp(dw[0], dw[1], OC * IC * sizeof(float)), "%s %s %ldx%ldx%ld: dweight differs", names[r], how, N, IC,
          OC);
    CHECK(!memcmp(dw_only[0], dw_only[1], OC * IC * sizeof(float)), "%s %s %ldx%ldx%ld: dweight alone differs",
          names[r], how, N, IC, OC);
    CHECK(!canary_bad(sf, nf) && !canary_bad(sb, nb), "%s %s %ldx%ldx%ld: scratch canary overwritten", names[r], how,
          N, IC, OC);
    for (int b = 0; b < 2; b++) free(o[b]), free(di[b]), free(dw[b]), free(dw_only[b]);
    free(in.x16), free(in.x32), free(w), free(dout), free(C0), free(sf), free(sb);
}

static void test_bf16_input_is_its_fp32_values(void) {
    // (N, IC, OC): tails of the 32-blocks on every axis, 1x1x1, and shapes whose every operand
    // exceeds the kernels' serial threshold (65536 elements), so the parallel loops run too.
    static const long shapes[][3] = {{37, 45, 29}, {33, 64, 32}, {1, 1, 1}, {600, 130, 129}, {300, 256, 260}};
    const ct_kernels *k = ct_kernels_get("cpu");
    ct_f8_split split = {.ic_split = true, .oc_split = true, .amax_max = amax_max_one_rank};
    int cases = 0;
    for (int s = 0; s < 5; s++)
        for (int r = 0; r < 3; r++)
            for (int with = 0; with < 2; with++, cases++)
                compare(k, shapes[s][0], shapes[s][1], shapes[s][2], r, with ? &split : NULL);
    printf("  %d cases (shapes x recipes x whole/split), each forward + backward + dweight alone\n", cases);
}

int main(void) {
    rng_state = 0x9e3779b97f4a7c15ull;
    CT_RUN(test_bf16_input_is_its_fp32_values);
    CT_TEST_EXIT();
}
