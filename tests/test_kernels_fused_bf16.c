// The fused forward chains in bf16 (kernels.h, "fused forward chains in bf16"), through the cpu
// table, against the unfused calls they replace, which must give the same bits:
//  - residual_rmsnorm_forward_bf16: x_out, the bf16 norm and rstd those of add_inplace +
//    rmsnorm_forward_bf16, with x_out separate, aliasing x and aliasing the delta;
//  - linear_swiglu_forward_bf16: h13_kept and h those of gemm_bf16 + swiglu_forward_bf16;
//  - linear_swiglu_backward_bf16: dh13 that of gemm_bf16 (dy @ W2) + swiglu_backward_bf16;
//  - linear_rope_forward_bf16: qkv16 that of gemm_bf16 + qkv_rope_to_bf16, positions shared
//    (pos_ld 0), per sequence (pos_ld T) and NULL;
//    N != B*T refused with a message naming the kernel;
//  - both matmuls again from the weight packed beforehand (ct_gemm_bf16_pack_b), where the path
//    packs: the same bits.
// Outputs start as garbage, so a row the epilogue skips shows. Each runs at 1, 2 and 3 threads,
// on ctitan's bf16 kernel where this CPU has one (rows taken as they become final, from the
// thread's own buffer where the product is one panel and one K block) and on the path that
// multiplies first and takes the rows after (oneDNN or the fallback), on shapes of one
// and of several B panels and K blocks for both of ctitan's kernels (AMX: 2F or QKV past 768
// columns, C past 1024; VDPBF16PS: C past 2048 with 2F or QKV past 1984), N = 1 and odd N.
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fatal_child.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_rand.h"

static const int threads[] = {1, 2, 3};
#define NTHREADS 3

static float *fill(long n, float a) {
    float *p = malloc(sizeof(float) * (n > 0 ? n : 1));
    for (long i = 0; i < n; i++) p[i] = frand(a);
    return p;
}
static uint16_t *fill16(long n, float a) {  // bf16 values of uniform [-a, a)
    uint16_t *p = malloc(sizeof(uint16_t) * (n > 0 ? n : 1));
    for (long i = 0; i < n; i++) {
        float f = frand(a);
        uint32_t u;
        memcpy(&u, &f, 4);
        p[i] = (uint16_t)(u >> 16);
    }
    return p;
}
static void *garbage(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    memset(p, 0xff, bytes);  // NaN as fp32 and as bf16
    return p;
}

// op(B) (K, N) of B (ldb) packed beforehand (gemm_bf16.h ct_gemm_bf16_pack_b), or NULL where this
// path has no packed form.
static void *packed(const ct_kernels *k, int trans_b, long K, long N, const uint16_t *B, long ldb) {
    size_t bytes = k->gemm_bf16_packed_bytes(K, N);
    void *p = NULL;
    if (!bytes || posix_memalign(&p, 64, bytes)) return NULL;
    k->gemm_bf16_pack_b(trans_b, K, N, B, ldb, p);
    return p;
}

// The two ways ct_gemm_bf16_epilogue_rows runs: ctitan's kernel (hooks inside), or the product
// first (oneDNN here; on a CPU without bf16 units both are the fallback).
static const char *const paths[] = {"ctitan's kernel", "product first"};

// ---------------------------------------------------------------- residual + RMSNorm
static void test_residual_rmsnorm(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    const long shapes[][2] = {{37, 45}, {1, 8}, {300, 256}};
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int s = 0; s < 3; s++) {
            long N = shapes[s][0], C = shapes[s][1];
            float *x = fill(N * C, 2), *d = fill(N * C, 2), *w = fill(C, 1.5f);
            float *xr = malloc(sizeof(float) * N * C), *rr = malloc(sizeof(float) * N);
            uint16_t *nr = garbage(2 * N * C);
            memcpy(xr, x, sizeof(float) * N * C);
            k->add_inplace(xr, d, N * C);
            k->rmsnorm_forward_bf16(nr, rr, xr, w, N, C, 1e-5f);
            for (int alias = 0; alias < 3; alias++) {  // x_out separate, = x, = the delta
                float *xc = fill(N * C, 0), *dc = fill(N * C, 0), *xo = garbage(sizeof(float) * N * C);
                memcpy(xc, x, sizeof(float) * N * C), memcpy(dc, d, sizeof(float) * N * C);
                float *out = alias == 0 ? xo : alias == 1 ? xc : dc, *rs = garbage(sizeof(float) * N);
                uint16_t *n16 = garbage(2 * N * C);
                k->residual_rmsnorm_forward_bf16(out, n16, rs, xc, dc, w, N, C, 1e-5f);
                CHECK(!memcmp(out, xr, sizeof(float) * N * C) && !memcmp(n16, nr, 2 * N * C) &&
                          !memcmp(rs, rr, sizeof(float) * N),
                      "N=%ld C=%ld alias %d threads %d: not add_inplace + rmsnorm_forward_bf16's bits", N, C, alias,
                      threads[t]);
                free(xc), free(dc), free(xo), free(rs), free(n16);
            }
            free(x), free(d), free(w), free(xr), free(rr), free(nr);
        }
    }
    omp_set_num_threads(2);
}

// ---------------------------------------------------------------- linear + SwiGLU, both ways
static const long swi_shapes[][3] = {{37, 45, 29}, {1, 64, 8}, {257, 96, 400}, {70, 1100, 24}, {20, 2100, 2000}};
#define NSWI 5  // N, C, F each

// check(k, path, threads, N, C, F) on both paths, at each thread count, on each shape.
static void for_each_swiglu_case(void (*check)(const ct_kernels *, const char *, int, long, long, long)) {
    const ct_kernels *k = ct_kernels_get("cpu");
    for (int p = 0; p < 2; p++) {
        ct_gemm_bf16_prefer_onednn(p);
        for (int t = 0; t < NTHREADS; t++) {
            omp_set_num_threads(threads[t]);
            for (int s = 0; s < NSWI; s++) check(k, paths[p], threads[t], swi_shapes[s][0], swi_shapes[s][1], swi_shapes[s][2]);
        }
    }
    ct_gemm_bf16_prefer_onednn(0);
    omp_set_num_threads(2);
}

static void swiglu_forward_case(const ct_kernels *k, const char *path, int th, long N, long C, long F) {
    uint16_t *inp = fill16(N * C, 1), *W = fill16(2 * F * C, 0.2f);
    float *pr = garbage(sizeof(float) * N * 2 * F), *pf = garbage(sizeof(float) * N * 2 * F);
    uint16_t *kr = garbage(2 * N * 2 * F), *hr = garbage(2 * N * F);
    uint16_t *kf = garbage(2 * N * 2 * F), *hf = garbage(2 * N * F);
    k->gemm_bf16(0, 1, N, 2 * F, C, 1.0f, inp, C, W, C, 0.0f, pr, 2 * F);
    k->swiglu_forward_bf16(hr, kr, pr, N, F);
    void *Wp = packed(k, 1, C, 2 * F, W, C);  // W13^T packed beforehand (NULL: no packed form here)
    for (int pk = 0; pk < (Wp ? 2 : 1); pk++) {
        memset(kf, 0xff, 2 * N * 2 * F), memset(hf, 0xff, 2 * N * F);
        k->linear_swiglu_forward_bf16(hf, kf, pf, inp, W, pk ? Wp : NULL, N, C, F);
        CHECK(!memcmp(kf, kr, 2 * N * 2 * F) && !memcmp(hf, hr, 2 * N * F),
              "%s N=%ld C=%ld F=%ld threads %d%s: h13_kept or h is not swiglu_forward_bf16's", path, N, C, F, th,
              pk ? ", W13 packed" : "");
    }
    free(Wp), free(inp), free(W), free(pr), free(pf), free(kr), free(hr), free(kf), free(hf);
}

static void swiglu_backward_case(const ct_kernels *k, const char *path, int th, long N, long C, long F) {
    uint16_t *dy = fill16(N * C, 1), *W2 = fill16(C * F, 0.2f), *h13 = fill16(N * 2 * F, 2);
    float *dh = garbage(sizeof(float) * N * F), *room = garbage(sizeof(float) * N * F);
    float *ref = garbage(sizeof(float) * N * 2 * F), *got = garbage(sizeof(float) * N * 2 * F);
    k->gemm_bf16(0, 0, N, F, C, 1.0f, dy, C, W2, F, 0.0f, dh, F);
    k->swiglu_backward_bf16(ref, dh, h13, N, F);
    void *Wp = packed(k, 0, C, F, W2, F);  // W2 packed beforehand (NULL: no packed form here)
    for (int pk = 0; pk < (Wp ? 2 : 1); pk++) {
        memset(got, 0xff, sizeof(float) * N * 2 * F);
        k->linear_swiglu_backward_bf16(got, room, dy, W2, pk ? Wp : NULL, h13, N, C, F);
        CHECK(!memcmp(got, ref, sizeof(float) * N * 2 * F),
              "%s N=%ld C=%ld F=%ld threads %d%s: dh13 is not gemm_bf16 + swiglu_backward_bf16's", path, N, C, F, th,
              pk ? ", W2 packed" : "");
    }
    free(Wp), free(dy), free(W2), free(h13), free(dh), free(room), free(ref), free(got);
}

static void test_linear_swiglu(void) { for_each_swiglu_case(swiglu_forward_case); }
static void test_linear_swiglu_backward(void) { for_each_swiglu_case(swiglu_backward_case); }

// ---------------------------------------------------------------- linear + RoPE
typedef struct {
    long B, T, C, NH, NKV, HS;
} rope_shape;

static void test_linear_rope(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    const rope_shape shapes[] = {{2, 19, 45, 4, 2, 8}, {1, 1, 32, 2, 1, 4}, {3, 40, 64, 16, 8, 32}, {1, 9, 1100, 2, 2, 16},
                                 {1, 5, 2100, 32, 16, 64}};
    for (int p = 0; p < 2; p++) {
        ct_gemm_bf16_prefer_onednn(p);
        for (int t = 0; t < NTHREADS; t++) {
            omp_set_num_threads(threads[t]);
            for (int s = 0; s < 5; s++)
                for (int pm = 0; pm < 3; pm++) {  // pos shared, per sequence, NULL
                    rope_shape r = shapes[s];
                    long N = r.B * r.T, QKV = (r.NH + 2 * r.NKV) * r.HS, maxT = 2 * r.T + 1;
                    float *cs = malloc(sizeof(float) * maxT * r.HS / 2), *sn = malloc(sizeof(float) * maxT * r.HS / 2);
                    k->rope_tables(cs, sn, maxT, r.HS, 10000.0, 0.0, 1.0, 4.0, 8192);
                    int32_t *pos = malloc(sizeof(int32_t) * N);
                    for (long i = 0; i < N; i++) pos[i] = (int32_t)(urand() * maxT);
                    long pos_ld = pm == 1 ? r.T : 0;
                    const int32_t *pp = pm == 2 ? NULL : pos;
                    uint16_t *inp = fill16(N * r.C, 1), *W = fill16(QKV * r.C, 0.2f);
                    float *pr = garbage(sizeof(float) * N * QKV), *pf = garbage(sizeof(float) * N * QKV);
                    uint16_t *qr = garbage(2 * N * QKV), *qf = garbage(2 * N * QKV);
                    k->gemm_bf16(0, 1, N, QKV, r.C, 1.0f, inp, r.C, W, r.C, 0.0f, pr, QKV);
                    k->qkv_rope_to_bf16(qr, pr, cs, sn, pp, pos_ld, r.B, r.T, r.NH, r.NKV, r.HS);
                    k->linear_rope_forward_bf16(qf, pf, inp, W, NULL, N, r.C, cs, sn, pp, pos_ld, r.B, r.T, r.NH, r.NKV, r.HS);
                    CHECK(!memcmp(qf, qr, 2 * N * QKV),
                          "%s B=%ld T=%ld C=%ld NH=%ld NKV=%ld HS=%ld pos %d threads %d: not gemm_bf16 + "
                          "qkv_rope_to_bf16's bits", paths[p], r.B, r.T, r.C, r.NH, r.NKV, r.HS, pm, threads[t]);
                    void *Wp = packed(k, 1, r.C, QKV, W, r.C);
                    if (Wp) {  // W^T packed beforehand: the same bits
                        memset(qf, 0xff, 2 * N * QKV);
                        k->linear_rope_forward_bf16(qf, pf, inp, W, Wp, N, r.C, cs, sn, pp, pos_ld, r.B, r.T, r.NH,
                                                    r.NKV, r.HS);
                        CHECK(!memcmp(qf, qr, 2 * N * QKV), "%s B=%ld T=%ld C=%ld threads %d, W packed: not the "
                              "unfused bits", paths[p], r.B, r.T, r.C, threads[t]);
                        free(Wp);
                    }
                    free(cs), free(sn), free(pos), free(inp), free(W), free(pr), free(pf), free(qr), free(qf);
                }
        }
    }
    ct_gemm_bf16_prefer_onednn(0);
    omp_set_num_threads(2);
}

static void rope_bad_rows(void) {
    float x[64] = {0}, cs[4] = {1, 1, 1, 1}, sn[4] = {0};
    uint16_t h[64] = {0};
    ct_linear_rope_forward_bf16(h, x, h, h, NULL, 3, 1, cs, sn, NULL, 0, 1, 2, 1, 1, 2);  // N 3 != B*T 2
}

static void test_linear_rope_refuses_bad_rows(void) {
    char err[512];
    int rc = ct_test_run_fatal_void(rope_bad_rows, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "ct_linear_rope_forward_bf16") != NULL, "rc %d, stderr: %s", rc, err);
}

// The table points at the kernels.h functions.
static void test_table(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    CHECK((const void *)k->residual_rmsnorm_forward_bf16 == CT_KERNEL_TARGET(ct_residual_rmsnorm_forward_bf16) &&
              (const void *)k->linear_swiglu_forward_bf16 == CT_KERNEL_TARGET(ct_linear_swiglu_forward_bf16) &&
              (const void *)k->linear_rope_forward_bf16 == CT_KERNEL_TARGET(ct_linear_rope_forward_bf16) &&
              (const void *)k->linear_swiglu_backward_bf16 == CT_KERNEL_TARGET(ct_linear_swiglu_backward_bf16),
          "a fused bf16 member is not its kernels.h function");
}

int main(void) {
    rng_state = 0x13198A2E03707344ull;
    printf("bf16 gemm path: %s\n", ct_kernels_get("cpu")->bf16_gemm_path());
    CT_RUN(test_table);
    CT_RUN(test_residual_rmsnorm);
    CT_RUN(test_linear_swiglu);
    CT_RUN(test_linear_swiglu_backward);
    CT_RUN(test_linear_rope);
    CT_RUN(test_linear_rope_refuses_bad_rows);
    CT_TEST_EXIT();
}
