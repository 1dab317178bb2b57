// ct_gemm_bf16 against a float64 gemm of the same bf16 values, and the bf16 rounding it relies on.
//
// Error bound, per element: |C - ref| <= (K + 4) * 2^-24 * (|alpha| * sum_k |a_ik b_kj| + |beta C0_ij|).
// Why: a product of two bf16 values (8-bit significands) is exact in fp32, so the only error is
// summing K fp32 terms in some order, which Higham's gamma_K bounds by K u sum|terms| (u = 2^-24)
// whatever the order or blocking oneDNN chooses; the +4 covers alpha's scaling, beta C's
// product and the final additions. A wrong stride or transpose gives errors of order one, far
// beyond this. Inputs avoid subnormals (AMX and AVX-512 BF16 flush them).
//
// Every case runs twice: on the path this CPU takes, and with the oneDNN path forced through
// an fp32 primitive (ct_gemm_bf16_test_f32_primitive), so descriptors, strides, alpha and beta
// of that path are tested even where the CPU has no bf16 kernel. The shapes run a third time
// through oneDNN's bf16 kernels where the CPU has them but takes ctitan's own kernel.
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "fatal_child.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernel_set.h"
#include "test.h"

static _Thread_local uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) {  // uniform in [-2, 2), never subnormal except exact 0
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}
static float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t to_bf(float f) {
    uint16_t h;
    ct_f32_to_bf16_array(&h, &f, 1);
    return h;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_rounding(void) {
    // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
    CHECK(to_bf(from_bits(0x3f808000u)) == 0x3f80, "1+2^-8 -> %04x", to_bf(from_bits(0x3f808000u)));
    // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): up.
    CHECK(to_bf(from_bits(0x3f818000u)) == 0x3f82, "1+3*2^-8 -> %04x", to_bf(from_bits(0x3f818000u)));
    CHECK(to_bf(from_bits(0x3f808001u)) == 0x3f81, "just above half rounds up");
    CHECK(to_bf(from_bits(0x3f807fffu)) == 0x3f80, "just below half rounds down");
    CHECK(to_bf(from_bits(0xbf808000u)) == 0xbf80, "negative tie to even");
    CHECK(to_bf(from_bits(0x7f7fffffu)) == 0x7f80, "FLT_MAX rounds to inf");
    CHECK(to_bf(from_bits(0xff800000u)) == 0xff80, "-inf stays -inf");
    uint16_t n = to_bf(from_bits(0x7f800001u));  // signalling NaN with a low payload: must stay NaN
    CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f), "NaN -> %04x", n);
    CHECK(to_bf(0.0f) == 0 && to_bf(-0.0f) == 0x8000, "signed zeros");
    // Array (parallel) == scalar; and bf16 -> f32 -> bf16 is the identity.
    long len = 200000;
    float *x = malloc(len * sizeof(float)), *y = malloc(len * sizeof(float));
    uint16_t *h = malloc(len * sizeof(uint16_t)), *h2 = malloc(len * sizeof(uint16_t));
    for (long i = 0; i < len; i++) x[i] = urand() * 1000.0f;
    ct_f32_to_bf16_array(h, x, len);
    int bad = 0;
    for (long i = 0; i < len; i++) bad += h[i] != to_bf(x[i]);
    ct_bf16_to_f32_array(y, h, len);
    ct_f32_to_bf16_array(h2, y, len);
    for (long i = 0; i < len; i++) bad += h2[i] != h[i] || y[i] != bf(h[i]);
    CHECK(bad == 0, "%d array mismatches", bad);
    free(x), free(y), free(h), free(h2);
}

static void test_path(void) {
    const char *p = ct_bf16_gemm_path();
    printf("  bf16 gemm path: %s\n", p);
    CHECK(!strcmp(p, "amx") || !strcmp(p, "avx512_bf16") || !strcmp(p, "fallback"), "path %s", p);
    const ct_kernels *k = ct_kernels_get("cpu");
    CHECK(k && (const void *)k->gemm_bf16 == CT_KERNEL_TARGET(ct_gemm_bf16) && k->matmul_peak_gflops_bf16 &&
              (const void *)k->bf16_gemm_path == CT_KERNEL_TARGET(ct_bf16_gemm_path) &&
              (const void *)k->f32_to_bf16 == CT_KERNEL_TARGET(ct_f32_to_bf16_array),
          "cpu table members");
}

// One gemm checked against float64 with the bound above; C's padding columns must stay as they
// were. Returns 1 when it passed.
static int check_gemm(int ta, int tb, long M, long N, long K, float alpha, float beta, long pad) {
    long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    long lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    uint16_t *A = malloc(sizeof(uint16_t) * ar * lda), *B = malloc(sizeof(uint16_t) * br * ldb);
    float *C = malloc(sizeof(float) * M * ldc), *C0 = malloc(sizeof(float) * M * ldc);
    for (long i = 0; i < ar * lda; i++) A[i] = to_bf(urand());
    for (long i = 0; i < br * ldb; i++) B[i] = to_bf(urand());
    for (long i = 0; i < M * ldc; i++) C0[i] = (beta == 0.0f && i % ldc < N) ? NAN : urand();  // beta 0: overwrite NaN
    memcpy(C, C0, sizeof(float) * M * ldc);
    ct_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    int ok = 1;
    for (long i = 0; i < M && ok; i++)
        for (long j = 0; j < ldc && ok; j++) {
            if (j >= N) {
                ok = memcmp(&C[i * ldc + j], &C0[i * ldc + j], sizeof(float)) == 0;
                if (!ok) printf("  padding C[%ld][%ld] written\n", i, j);
                continue;
            }
            double s = 0, sa = 0;
            for (long k = 0; k < K; k++) {
                double a = bf(ta ? A[k * lda + i] : A[i * lda + k]), b = bf(tb ? B[j * ldb + k] : B[k * ldb + j]);
                s += a * b, sa += fabs(a * b);
            }
            double c0 = beta == 0.0f ? 0.0 : (double)beta * C0[i * ldc + j];
            double ref = (double)alpha * s + c0;
            double bound = (K + 4) * 0x1p-24 * (fabs(alpha) * sa + fabs(c0)) + 1e-30;
            double err = fabs(C[i * ldc + j] - ref);
            if (!(err <= bound)) {
                printf("  ta=%d tb=%d M=%ld N=%ld K=%ld alpha=%g beta=%g pad=%ld: C[%ld][%ld]=%.9g ref %.9g err %.3g "
                       "bound %.3g\n",
                       ta, tb, M, N, K, alpha, beta, pad, i, j, C[i * ldc + j], ref, err, bound);
                ok = 0;
            }
        }
    free(A), free(B), free(C), free(C0);
    return ok;
}

// (the last: two K blocks and two B panels of the AMX kernel, and a partial 32-row sliver)
static const long shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {65, 33, 129}, {256, 512, 384}, {33, 300, 1100}};
static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-1.5f, 0.25f}};

static void all_shapes(void) {
    int fails = 0, runs = 0;
    for (int s = 0; s < 5; s++)
        for (int t = 0; t < 4; t++)
            for (int c = 0; c < 3; c++)
                for (long pad = 0; pad <= 7; pad += 7) {
                    if (s >= 3 && (c == 1 || pad)) continue;  // the big shapes: fewer combinations (time)
                    fails += !check_gemm(t >> 1, t & 1, shapes[s][0], shapes[s][1], shapes[s][2], ab[c][0], ab[c][1],
                                         pad);
                    runs++;
                }
    CHECK(fails == 0, "%d of %d gemms outside the bound", fails, runs);
}

static void test_shapes_native(void) {
    printf("  ctitan's kernel: %s\n", ct_gemm_bf16_avx512_uses_amx() ? "AMX tiles" : "VDPBF16PS (or none here)");
    all_shapes();
}

// Where the CPU has AMX, ctitan's other kernel (VDPBF16PS) set aside there, run for real.
// Elsewhere the same as test_shapes_native.
static void test_shapes_native_without_amx(void) {
    ct_gemm_bf16_avx512_allow_amx(0);
    all_shapes();
    ct_gemm_bf16_avx512_allow_amx(1);
}

static void test_shapes_onednn_f32(void) {
    ct_gemm_bf16_test_f32_primitive(1);
    all_shapes();
    ct_gemm_bf16_test_f32_primitive(0);
}

// Where this CPU has bf16 units but runs ctitan's own kernel (avx512_bf16), oneDNN's bf16 kernels
// set aside there: the path AMX machines take (its primitives, user scratchpad and the buffer of
// onednn_arena.h), run for real. Elsewhere the same as test_shapes_native.
static void test_shapes_onednn_bf16(void) {
    ct_gemm_bf16_prefer_onednn(1);
    all_shapes();
    ct_gemm_bf16_prefer_onednn(0);
}

static void test_shapes_library_scratchpad(void) {
    ct_gemm_bf16_set_user_scratchpad(0);
    int ok = check_gemm(1, 0, 65, 33, 129, 1.0f, 1.0f, 3) && check_gemm(0, 1, 256, 512, 384, 1.0f, 0.0f, 0);
    ct_gemm_bf16_test_f32_primitive(1);
    ok = ok && check_gemm(1, 1, 65, 33, 129, -1.5f, 0.25f, 7);
    ct_gemm_bf16_test_f32_primitive(0);
    ct_gemm_bf16_set_user_scratchpad(1);
    CHECK(ok, "library scratchpad mode");
}

// No products (K = 0 or alpha = 0): C = beta C, and A, B are never read (NULL here).
static void test_degenerate(void) {
    float C[6] = {1, 2, 3, 4, 5, NAN};
    ct_gemm_bf16(0, 0, 2, 3, 0, 1.0f, NULL, 1, NULL, 1, 2.0f, C, 3);
    CHECK(C[0] == 2 && C[4] == 10, "K=0 beta=2: %g %g", C[0], C[4]);
    ct_gemm_bf16(0, 1, 2, 3, 5, 0.0f, NULL, 5, NULL, 5, 0.0f, C, 3);
    CHECK(C[0] == 0 && C[5] == 0, "alpha=0 beta=0 clears NaN: %g", C[5]);
    ct_gemm_bf16(0, 0, 0, 3, 5, 1.0f, NULL, 5, NULL, 3, 0.0f, NULL, 3);  // M = 0: nothing
}

// More distinct shapes than the cache holds (64), interleaved, twice: every result correct, and
// on the oneDNN path a second pass over a set that fits creates no primitive.
static void cache_pass(int nshapes, int reps, int *fails) {
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nshapes; i++) {
            long M = 1 + (i * 7) % 23, N = 1 + (i * 5) % 19, K = 1 + (i * 3) % 29 + i / 20;
            *fails += !check_gemm(i & 1, (i >> 1) & 1, M, N, K, (i % 3) ? 1.0f : 0.75f, (i % 4) ? 0.0f : 1.0f, i % 2);
        }
}

static void run_cache(void) {
    int fails = 0;
    cache_pass(80, 2, &fails);  // 80 keys > 64 slots: evictions, then recreations
    cache_pass(40, 1, &fails);  // warm 40 of them
    long before = ct_gemm_bf16_primitives_created();
    cache_pass(40, 3, &fails);
    long created = ct_gemm_bf16_primitives_created() - before;
    CHECK(fails == 0, "%d cached gemms outside the bound", fails);
    CHECK(created == 0, "steady state created %ld primitives", created);
}

// A B packed once (ct_gemm_bf16_pack_b) gives ct_gemm_bf16's bits from ct_gemm_bf16_packed, for
// both B layouts, A transposed or not, alpha and beta, at 1-3 threads, on shapes of one and of
// several K blocks and B panels of both kernels (AMX: K past 1024, N past its panel; VDPBF16PS: K
// past 2048). Where this path has no packed form (oneDNN, the fallback) the size is 0.
static int packed_matches(int ta, int tb, long M, long N, long K, float alpha, float beta) {
    long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    uint16_t *A = malloc(sizeof(uint16_t) * ar * ac), *B = malloc(sizeof(uint16_t) * br * bc);
    float *C = malloc(sizeof(float) * M * N), *Cp = malloc(sizeof(float) * M * N);
    for (long i = 0; i < ar * ac; i++) A[i] = to_bf(urand());
    for (long i = 0; i < br * bc; i++) B[i] = to_bf(urand());
    for (long i = 0; i < M * N; i++) C[i] = Cp[i] = urand();
    size_t bytes = ct_gemm_bf16_packed_bytes(K, N);
    void *Bp = NULL;
    if (posix_memalign(&Bp, 64, bytes)) return 0;
    memset(Bp, 0x5a, bytes);  // padding the packing leaves unwritten would show
    ct_gemm_bf16_pack_b(tb, K, N, B, bc, Bp);
    ct_gemm_bf16(ta, tb, M, N, K, alpha, A, ac, B, bc, beta, C, N);
    ct_gemm_bf16_packed(ta, M, N, K, alpha, A, ac, Bp, beta, Cp, N);
    int ok = memcmp(C, Cp, sizeof(float) * M * N) == 0;
    if (!ok) printf("  packed B differs: ta=%d tb=%d M=%ld N=%ld K=%ld alpha=%g beta=%g\n", ta, tb, M, N, K, alpha, beta);
    free(A), free(B), free(C), free(Cp), free(Bp);
    return ok;
}

static void test_packed_b(void) {
    if (!ct_gemm_bf16_packed_bytes(64, 64)) {
        CHECK(strcmp(ct_bf16_gemm_path(), "fallback") == 0 || !ct_gemm_bf16_avx512_available(),
              "no packed form on the %s path with ctitan's kernel available", ct_bf16_gemm_path());
        printf("  no packed form on this path (%s)\n", ct_bf16_gemm_path());
        return;
    }
    static const long pshapes[][3] = {{1, 1, 1}, {37, 45, 29}, {70, 1600, 256}, {33, 300, 1100}, {20, 1984, 2100}};
    int fails = 0, runs = 0;
    for (int amx = 1; amx >= 0; amx--) {
        ct_gemm_bf16_avx512_allow_amx(amx);
        for (int th = 1; th <= 3; th++) {
            omp_set_num_threads(th);
            for (int s = 0; s < 5; s++)
                for (int t = 0; t < 4; t++) {
                    if (th > 1 && t % 3) continue;  // (time)
                    fails += !packed_matches(t >> 1, t & 1, pshapes[s][0], pshapes[s][1], pshapes[s][2],
                                             ab[t % 3][0], ab[t % 3][1]);
                    runs++;
                }
        }
    }
    ct_gemm_bf16_avx512_allow_amx(1);
    omp_set_num_threads(2);
    CHECK(fails == 0, "%d of %d packed products differ from ct_gemm_bf16's", fails, runs);
}

static void packed_wrong_shape(void) {
    uint16_t B[64 * 64] = {0}, A[64 * 64] = {0};
    float C[64 * 64];
    static char Bp[1 << 16] __attribute__((aligned(64)));
    ct_gemm_bf16_pack_b(1, 64, 32, B, 64, Bp);
    ct_gemm_bf16_packed(0, 4, 64, 32, 1.0f, A, 32, Bp, 0.0f, C, 64);  // packed for K 64, N 32
}

// A packing used for another shape is refused, naming both.
static void test_packed_b_refuses_other_shape(void) {
    if (!ct_gemm_bf16_packed_bytes(64, 64)) return;
    char err[512];
    int rc = ct_test_run_fatal_void(packed_wrong_shape, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "packed for K 64, N 32") && strstr(err, "used for K 32, N 64"), "rc %d, stderr: %s",
          rc, err);
}

static void test_cache_native(void) { run_cache(); }
static void test_cache_onednn_f32(void) {
    ct_gemm_bf16_test_f32_primitive(1);
    run_cache();
    ct_gemm_bf16_test_f32_primitive(0);
}

// Calls from inside a parallel region (each thread its own C) stay correct.
static void test_parallel_callers(void) {
    int fails = 0;
#pragma omp parallel for reduction(+ : fails) schedule(static, 1)
    for (int i = 0; i < 8; i++) fails += !check_gemm(i & 1, (i >> 1) & 1, 17 + i, 9 + i, 33, 1.0f, 0.0f, 1);
    CHECK(fails == 0, "%d parallel callers wrong", fails);
}

// bf16_to_f32 (the table's widening) on every bf16 pattern, three times over so the array is
// long enough for the parallel loop: the result's bits are the pattern << 16 (NaN payloads and
// signs included), which is what a bf16 is.
static void test_bf16_to_f32_all(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    CHECK(k && (const void *)k->bf16_to_f32 == CT_KERNEL_TARGET(ct_bf16_to_f32_array), "cpu table member bf16_to_f32");
    if (!k || !k->bf16_to_f32) return;
    long n = 3 * 65536;
    uint16_t *h = malloc(n * sizeof(uint16_t));
    float *y = malloc(n * sizeof(float));
    for (long i = 0; i < n; i++) h[i] = (uint16_t)(i * 40503u);  // odd multiplier: each pass permutes
    k->bf16_to_f32(y, h, n);
    long bad = 0;
    for (long i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        bad += u != (uint32_t)h[i] << 16;
    }
    CHECK(bad == 0, "%ld of %ld patterns widened wrongly", bad, n);
    free(h), free(y);
}

int main(void) {
    CT_RUN(test_rounding);
    CT_RUN(test_bf16_to_f32_all);
    CT_RUN(test_path);
    CT_RUN(test_degenerate);
    CT_RUN(test_shapes_native);
    CT_RUN(test_shapes_native_without_amx);
    CT_RUN(test_shapes_onednn_f32);
    CT_RUN(test_shapes_onednn_bf16);
    CT_RUN(test_shapes_library_scratchpad);
    CT_RUN(test_packed_b);
    CT_RUN(test_packed_b_refuses_other_shape);
    CT_RUN(test_cache_native);
    CT_RUN(test_cache_onednn_f32);
    CT_RUN(test_parallel_callers);
    CT_TEST_EXIT();
}
