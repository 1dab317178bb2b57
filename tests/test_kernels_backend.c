// The kernel backend table (kernels/backend.h): lookup by name, every member present, the cpu
// memory functions (sizes on both sides of the parallel threshold, no write past the end), and
// calls through the table giving the same bits as the kernels.h functions they stand for.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_rand.h"

static float *frandn(long n, float a) {
    float *p = malloc(sizeof(float) * (n > 0 ? n : 1));
    for (long i = 0; i < n; i++) p[i] = frand(a);
    return p;
}
static int same(const void *a, const void *b, long floats) { return memcmp(a, b, sizeof(float) * floats) == 0; }

static void test_lookup(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    CHECK(k != NULL, "no cpu backend");
    if (!k) return;
    CHECK(strcmp(k->name, "cpu") == 0 && k->device == CT_DEVICE_CPU, "name %s device %d", k->name, (int)k->device);
    CHECK(ct_kernels_get("cpu") == k, "two lookups, two tables");
    CHECK(ct_kernels_get("no-such-backend") == NULL, "unknown name accepted");
    CHECK(ct_kernels_get("") == NULL && ct_kernels_get(NULL) == NULL, "empty / NULL name accepted");
    CHECK(ct_kernels_get("cpux") == NULL && ct_kernels_get("cp") == NULL, "prefix match");
}

// Every member after `device` is a function pointer: scanning the struct as such checks the
// members added later too, without editing this test.
static void test_every_member_set(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    typedef void (*fn)(void);
    int n = 0;
    for (size_t off = offsetof(ct_kernels, zero); off + sizeof(fn) <= sizeof(ct_kernels); off += sizeof(fn), n++) {
        fn f;
        memcpy(&f, (const char *)k + off, sizeof f);
        CHECK(f != NULL, "member %d (byte offset %zu) is NULL", n, off);
    }
    CHECK(n >= 30, "only %d members", n);
    CHECK((const void *)k->matmul_peak_gflops == CT_KERNEL_TARGET(ct_cpu_matmul_peak_gflops),
          "peak is not the cpu measurement");
}

// zero / copy / copy_to_host / copy_from_host over sizes below and above the 1 MiB where the
// cpu backend goes parallel, at odd lengths, with guard bytes after the end.
static void test_memory(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    const size_t sizes[] = {0, 1, 63, 65, 4097, (1u << 20) - 1, (1u << 20) + 13, (3u << 20) + 5};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s], G = 64;
        unsigned char *src = malloc(n + G), *dst = malloc(n + G);
        for (size_t i = 0; i < n + G; i++) src[i] = (unsigned char)(i * 131 + 7), dst[i] = 0xAB;
        void (*copies[3])(void *, const void *, size_t) = {k->copy, k->copy_to_host, k->copy_from_host};
        for (int c = 0; c < 3; c++) {
            memset(dst, 0xAB, n + G);
            copies[c](dst, src, n);
            CHECK(memcmp(dst, src, n) == 0, "copy %d of %zu bytes differs", c, n);
            for (size_t i = n; i < n + G; i++) CHECK(dst[i] == 0xAB, "copy %d of %zu bytes wrote past the end", c, n);
        }
        k->zero(dst, n);
        for (size_t i = 0; i < n; i++)
            if (dst[i] != 0) {
                CHECK(0, "zero of %zu bytes left byte %zu", n, i);
                break;
            }
        for (size_t i = n; i < n + G; i++) CHECK(dst[i] == 0xAB, "zero of %zu bytes wrote past the end", n);
        free(src), free(dst);
    }
}

// A few kernels through the table and directly, on the same random inputs: the same bits.
static void test_table_calls_are_the_kernels(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    const long M = 37, N = 29, K = 45;
    float *A = frandn(M * K, 1), *B = frandn(K * N, 1), *C1 = frandn(M * N, 1), *C2 = malloc(sizeof(float) * M * N);
    memcpy(C2, C1, sizeof(float) * M * N);
    ct_gemm(0, 0, M, N, K, 0.5f, A, K, B, N, 1.0f, C1, N);
    k->gemm(0, 0, M, N, K, 0.5f, A, K, B, N, 1.0f, C2, N);
    CHECK(same(C1, C2, M * N), "gemm");

    const long R = 33, F = 19;  // rmsnorm and swiglu
    float *x = frandn(R * 2 * F, 1), *w = frandn(2 * F, 1), *o1 = malloc(sizeof(float) * R * 2 * F);
    float *o2 = malloc(sizeof(float) * R * 2 * F), *rs1 = malloc(sizeof(float) * R), *rs2 = malloc(sizeof(float) * R);
    ct_rmsnorm_forward(o1, rs1, x, w, R, 2 * F, 1e-5f);
    k->rmsnorm_forward(o2, rs2, x, w, R, 2 * F, 1e-5f);
    CHECK(same(o1, o2, R * 2 * F) && same(rs1, rs2, R), "rmsnorm_forward");
    ct_swiglu_forward(o1, x, R, F);
    k->swiglu_forward(o2, x, R, F);
    CHECK(same(o1, o2, R * F), "swiglu_forward");

    const long Bt = 2, T = 13, NH = 4, NKV = 2, HS = 8;  // attention
    float *q = frandn(Bt * T * NH * HS, 1), *kk = frandn(Bt * T * NKV * HS, 1), *v = frandn(Bt * T * NKV * HS, 1);
    float *a1 = malloc(sizeof(float) * Bt * T * NH * HS), *a2 = malloc(sizeof(float) * Bt * T * NH * HS);
    float *l1 = malloc(sizeof(float) * Bt * NH * T), *l2 = malloc(sizeof(float) * Bt * NH * T);
    long sf = k->attention_scratch_floats(T, T, HS);
    CHECK(sf == ct_attention_scratch_floats(T, T, HS), "attention scratch size");
    float *scr = malloc(sizeof(float) * sf);
    ct_attention_forward(a1, l1, q, NH * HS, kk, NKV * HS, v, NKV * HS, NULL, NULL, NULL, NULL, Bt, T, T, NH, NKV, HS, scr);
    k->attention_forward(a2, l2, q, NH * HS, kk, NKV * HS, v, NKV * HS, NULL, NULL, NULL, NULL, Bt, T, T, NH, NKV, HS, scr);
    CHECK(same(a1, a2, Bt * T * NH * HS) && same(l1, l2, Bt * NH * T), "attention_forward");

    const long Nx = 21, Cx = 12, V = 37, chunk = 8;  // fused cross-entropy
    float *xx = frandn(Nx * Cx, 1), *W = frandn(V * Cx, 1), *dW1 = frandn(V * Cx, 1);
    float *dW2 = malloc(sizeof(float) * V * Cx);
    float *dx1 = malloc(sizeof(float) * Nx * Cx), *dx2 = malloc(sizeof(float) * Nx * Cx);
    int32_t tg[21];
    for (long n = 0; n < Nx; n++) tg[n] = urand() < 0.2 ? -1 : (int32_t)(urand() * V);
    memcpy(dW2, dW1, sizeof(float) * V * Cx);
    CHECK(k->xent_scratch_floats(chunk, V, Cx, false) == ct_xent_scratch_floats(chunk, V, Cx, false),
          "xent scratch size");
    float *xs = malloc(sizeof(float) * ct_xent_scratch_floats(chunk, V, Cx, false));
    double L1 = ct_xent_fused(dx1, dW1, xx, W, tg, Nx, Cx, V, 0.1f, chunk, false, xs);
    double L2 = 0.5;  // the table adds to what is there
    k->xent_fused(&L2, dx2, dW2, xx, W, tg, Nx, Cx, V, 0.1f, chunk, false, xs);
    CHECK(L2 == 0.5 + L1 && same(dx1, dx2, Nx * Cx) && same(dW1, dW2, V * Cx), "xent_fused: %.17g vs 0.5 + %.17g",
          L2, L1);

    const long P = 1001;  // AdamW and the reductions
    float *p1 = frandn(P, 1), *g = frandn(P, 1), *m1 = frandn(P, 0.1f), *v1 = frandn(P, 0.1f);
    for (long i = 0; i < P; i++) v1[i] = v1[i] * v1[i];
    float *p2 = malloc(sizeof(float) * P), *m2 = malloc(sizeof(float) * P), *v2 = malloc(sizeof(float) * P);
    memcpy(p2, p1, sizeof(float) * P), memcpy(m2, m1, sizeof(float) * P), memcpy(v2, v1, sizeof(float) * P);
    const float half = 0.5f;
    ct_adamw_update(p1, g, m1, v1, P, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, &half);
    k->adamw_update(p2, g, m2, v2, P, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, &half);
    CHECK(same(p1, p2, P) && same(m1, m2, P) && same(v1, v2, P), "adamw_update");
    double ss = -2.0;  // added to
    k->sum_squares(&ss, g, P);
    CHECK(ss == -2.0 + ct_sum_squares(g, P), "sum_squares %.17g vs -2 + %.17g", ss, ct_sum_squares(g, P));

    free(A), free(B), free(C1), free(C2), free(x), free(w), free(o1), free(o2), free(rs1), free(rs2);
    free(q), free(kk), free(v), free(a1), free(a2), free(l1), free(l2), free(scr);
    free(xx), free(W), free(dW1), free(dW2), free(dx1), free(dx2), free(xs);
    free(p1), free(g), free(m1), free(v1), free(p2), free(m2), free(v2);
}

static void test_matmul_peak(void) {
    double g = ct_kernels_get("cpu")->matmul_peak_gflops(128, 2);
    CHECK(g > 0.1 && g < 1e6, "peak %g GFLOP/s", g);
}

int main(void) {
    rng_state = 0x243F6A8885A308D3ull;
    CT_RUN(test_lookup);
    CT_RUN(test_every_member_set);
    CT_RUN(test_memory);
    CT_RUN(test_table_calls_are_the_kernels);
    CT_RUN(test_matmul_peak);
    CT_TEST_EXIT();
}
