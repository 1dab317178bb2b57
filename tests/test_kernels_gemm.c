// ct_gemm (all four transpose combinations, leading dimensions wider than the matrices, alpha,
// beta = 0 / 1 / other, K = 0) and the linear layer built on it, against naive float64 loops;
// shapes past every cache block of the packed loops (K > 256, N > 1024, M > 120) and the small
// in-place path, on 1, 2 and 3 threads, with bitwise the same result for every thread count;
// a short product split along K at multiples of 16 gives the whole product's bits; the row hooks
// of ct_gemm_with_row_hooks see each row once, A's before it is read and C's once final; C
// stored past the cache (aligned, written once) has the bits of C stored normally.
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// C (M, N) = alpha op(A) op(B) + beta C, in double, reading A, B, C0 with their strides
static void ref_gemm(int ta, int tb, long M, long N, long K, double alpha, const float *A, long lda, const float *B,
                     long ldb, double beta, const float *C0, long ldc, double *out) {
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++) {
            double s = 0;
            for (long p = 0; p < K; p++) {
                double a = ta ? A[p * lda + i] : A[i * lda + p];
                double b = tb ? B[j * ldb + p] : B[p * ldb + j];
                s += a * b;
            }
            out[i * N + j] = alpha * s + (beta == 0 ? 0 : beta * C0[i * ldc + j]);
        }
}

static void one_gemm(int ta, int tb, long M, long N, long K, float alpha, float beta, long pad) {
    long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    long lda = ac + pad, ldb = bc + 2 * pad, ldc = N + 3 * pad;
    float *A = malloc(sizeof(float) * (ar * lda + 1)), *B = malloc(sizeof(float) * (br * ldb + 1));
    float *C = malloc(sizeof(float) * (M * ldc + 1)), *C0 = malloc(sizeof(float) * (M * ldc + 1));
    for (long i = 0; i < ar * lda; i++) A[i] = frand();
    for (long i = 0; i < br * ldb; i++) B[i] = frand();
    for (long i = 0; i < M * ldc; i++) C[i] = C0[i] = frand();
    if (beta == 0)  // beta = 0 must ignore C entirely, even NaN
        for (long i = 0; i < M; i++) C[i * ldc] = C0[i * ldc] = NAN;
    double *ref = malloc(sizeof(double) * (M * N + 1));
    ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, ldc, ref);
    ct_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double maxd = 0, maxr = 1e-3;
    for (long i = 0; i < M; i++) {
        for (long j = 0; j < N; j++) {
            double d = fabs(C[i * ldc + j] - ref[i * N + j]);
            if (isnan(d)) d = INFINITY;
            if (d > maxd) maxd = d;
            if (fabs(ref[i * N + j]) > maxr) maxr = fabs(ref[i * N + j]);
        }
        for (long j = N; j < ldc; j++)
            CHECK(C[i * ldc + j] == C0[i * ldc + j], "padding column %ld of row %ld changed", j, i);
    }
    CHECK(maxd / maxr < 1e-5, "gemm ta=%d tb=%d M=%ld N=%ld K=%ld alpha=%g beta=%g pad=%ld: rel err %.3g", ta, tb, M,
          N, K, alpha, beta, pad, maxd / maxr);
    free(A), free(B), free(C), free(C0), free(ref);
}

static void test_gemm_transposes_and_strides(void) {
    long shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {65, 33, 130}, {64, 64, 64}, {3, 200, 17}};
    float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}};
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int a = 0; a < 3; a++)
                one_gemm(t >> 1, t & 1, shapes[s][0], shapes[s][1], shapes[s][2], ab[a][0], ab[a][1], (s + a) % 3 * 4);
}

// Past the blocks of the packed loops (KC 256, MC 120 / 40, NC 2048) and their edges.
static void test_gemm_blocked_shapes(void) {
    long shapes[][3] = {{130, 2100, 300}, {250, 40, 700}, {7, 3000, 260}, {300, 70, 64}, {2, 16, 513}};
    int threads[] = {1, 2, 3};
    int saved = omp_get_max_threads();
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            omp_set_num_threads(threads[(s + t) % 3]);
            one_gemm(t >> 1, t & 1, shapes[s][0], shapes[s][1], shapes[s][2], t == 2 ? 0.5f : 1.0f,
                     t == 1 ? 1.0f : t == 3 ? -0.75f : 0.0f, t % 2 * 4);
        }
    omp_set_num_threads(saved);
}

// A read in place (narrow products, N <= 256 on AVX-512) or packed (wide ones) is the same
// arithmetic: the first N columns of a 512-wide product are bit for bit the N-wide product, for
// A and A^T, with K past one K block, on 1 and 2 threads. A^T with rows 1,000 apart is read in
// place on AMD and packed on Intel (gemm.c, a_in_place); with rows 2,048 apart or more it is
// packed in both, and so is A with rows 2,100 apart (K 2100).
static void test_gemm_a_in_place_bits(void) {
    long shapes[][3] = {{130, 256, 700}, {300, 200, 520}, {61, 32, 300}, {40, 256, 2100}, {100, 256, 600}};
    int saved = omp_get_max_threads();
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            int ta = t & 1;
            long M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], W = 512;
            long lda = ta ? (s == 3 ? 2048 : s == 4 ? 1000 : M) : K;  // A^T rows lda apart
            float *A = malloc(sizeof(float) * (ta ? K * lda : M * K)), *B = malloc(sizeof(float) * K * W);
            float *Cw = malloc(sizeof(float) * M * W), *Cn = malloc(sizeof(float) * M * N);
            for (long i = 0; i < (ta ? K * lda : M * K); i++) A[i] = frand();
            for (long i = 0; i < K * W; i++) B[i] = frand();
            for (long i = 0; i < M * W; i++) Cw[i] = frand();
            for (long i = 0; i < M; i++)
                for (long j = 0; j < N; j++) Cn[i * N + j] = Cw[i * W + j];
            omp_set_num_threads(1 + (t >> 1));
            ct_gemm(ta, 0, M, W, K, 0.75f, A, lda, B, W, -0.5f, Cw, W);
            ct_gemm(ta, 0, M, N, K, 0.75f, A, lda, B, W, -0.5f, Cn, N);
            long differ = 0;
            for (long i = 0; i < M; i++) differ += memcmp(Cn + i * N, Cw + i * W, sizeof(float) * N) != 0;
            CHECK(differ == 0, "ta %d (%ld, %ld, %ld), %d threads: %ld rows differ from the wide product", ta, M, N,
                  K, 1 + (t >> 1), differ);
            free(A), free(B), free(Cw), free(Cn);
        }
    omp_set_num_threads(saved);
}

// A long K with a wide N takes panels narrower than NC, each packed whole (gemm.c, gemm_packed);
// A^T keeps NC-wide panels K block by K block. The same product through both (A and a copy of
// A^T, B and B^T, 1 and 2 threads) gives the same bits: the panels change no element's sums.
static void test_gemm_narrow_panels_bits(void) {
    long shapes[][3] = {{130, 1100, 1300}, {2048, 2048, 2048}, {61, 600, 900}};
    int saved = omp_get_max_threads();
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            int tb = t & 1, nt = 1 + (t >> 1);
            long M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            float *A = malloc(sizeof(float) * M * K), *At = malloc(sizeof(float) * K * M);
            float *B = malloc(sizeof(float) * K * N), *C1 = malloc(sizeof(float) * M * N);
            float *C2 = malloc(sizeof(float) * M * N);
            for (long i = 0; i < M * K; i++) A[i] = frand();
            for (long i = 0; i < M; i++)
                for (long k = 0; k < K; k++) At[k * M + i] = A[i * K + k];
            for (long i = 0; i < K * N; i++) B[i] = frand();
            for (long i = 0; i < M * N; i++) C1[i] = C2[i] = frand();
            omp_set_num_threads(nt);
            ct_gemm(0, tb, M, N, K, 1.25f, A, K, B, tb ? K : N, 0.5f, C1, N);   // narrow whole panels
            ct_gemm(1, tb, M, N, K, 1.25f, At, M, B, tb ? K : N, 0.5f, C2, N);  // NC panels, K block by K block
            CHECK(memcmp(C1, C2, sizeof(float) * M * N) == 0, "(%ld, %ld, %ld) tb %d, %d threads: A and A^T differ", M,
                  N, K, tb, nt);
            free(A), free(At), free(B), free(C1), free(C2);
        }
    omp_set_num_threads(saved);
}

// A panel too tall to pack whole is packed as many K blocks at a time as the buffer holds (with
// N = 200, 9 blocks: K 0-2304, 2304-4608, then the rest). The product in one call is, bit for
// bit, the product of the first 2,304 of K followed by the rest added with beta 1 (two calls,
// each a different pass structure), for A and A^T, B and B^T, on 1-3 threads; and it is the
// float64 product within rounding.
static void test_gemm_span_passes_bits(void) {
    const long M = 100, N = 200, K = 5000, K1 = 2304;
    int saved = omp_get_max_threads();
    for (int t = 0; t < 4; t++) {
        omp_set_num_threads(1 + t % 3);
        one_gemm(t >> 1, t & 1, M, N, K, 0.5f, t == 1 ? 1.0f : 0.25f, 0);
    }
    for (int t = 0; t < 12; t++) {
        int ta = t >> 1 & 1, tb = t & 1, nt = 1 + t / 4;
        long lda = ta ? M : K, ldb = tb ? K : N;
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
        float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
        for (long i = 0; i < M * K; i++) A[i] = frand();
        for (long i = 0; i < K * N; i++) B[i] = frand();
        for (long i = 0; i < M * N; i++) C1[i] = C2[i] = frand();
        omp_set_num_threads(nt);
        ct_gemm(ta, tb, M, N, K, 1.25f, A, lda, B, ldb, 0.5f, C1, N);
        // op(A)[:, k0:] starts at column k0 of A (row k0 of A^T); op(B)[k0:, :] at row k0 of B
        // (column k0 of B^T)
        ct_gemm(ta, tb, M, N, K1, 1.25f, A, lda, B, ldb, 0.5f, C2, N);
        ct_gemm(ta, tb, M, N, K - K1, 1.25f, ta ? A + K1 * lda : A + K1, lda, tb ? B + K1 : B + K1 * ldb, ldb,
                1.0f, C2, N);
        CHECK(memcmp(C1, C2, sizeof(float) * M * N) == 0,
              "(%ld, %ld, %ld) ta %d tb %d, %d threads: one call differs from the product split at K %ld", M, N, K, ta,
              tb, nt, K1);
        free(A), free(B), free(C1), free(C2);
    }
    omp_set_num_threads(saved);
}

// ct_gemm_with_row_hooks: before fills rows of A (NaN until then) right before they are read,
// after copies rows of C out as soon as they are final. For one-pass products (the hooks run on
// the team's row blocks) and products of several panels or K spans (the hooks run on all rows,
// around the product), on 1-3 threads: every row through each hook exactly once, before ahead of
// after for every row, the copies equal to the final C, and C ct_gemm's bits on the filled A.
typedef struct {
    float *A;        // (M, K): rows filled by before
    const float *A0; // (M, K): what they are filled with
    const float *C;  // (M, N)
    float *Ccopy;    // (M, N): rows copied by after
    int *before_n, *after_n;  // (M) calls per row
    long K, N;
} hook_rows;

static void hook_before(void *p, long r0, long n) {
    hook_rows *h = p;
    for (long i = r0; i < r0 + n; i++) {
        memcpy(h->A + i * h->K, h->A0 + i * h->K, sizeof(float) * h->K);
        __atomic_add_fetch(&h->before_n[i], 1, __ATOMIC_RELAXED);
    }
}

static void hook_after(void *p, long r0, long n) {
    hook_rows *h = p;
    for (long i = r0; i < r0 + n; i++) {
        if (__atomic_load_n(&h->before_n[i], __ATOMIC_RELAXED) != 1) h->after_n[i] = -1000;  // after before, always
        memcpy(h->Ccopy + i * h->N, h->C + i * h->N, sizeof(float) * h->N);
        __atomic_add_fetch(&h->after_n[i], 1, __ATOMIC_RELAXED);
    }
}

static void test_gemm_row_hooks(void) {
    // (M, N, K): one pass, small and packed; several panels (N > 2048); K spans (N = 200, K 5000)
    long shapes[][3] = {{61, 77, 64}, {1000, 768, 256}, {300, 2100, 100}, {130, 200, 5000}};
    int saved = omp_get_max_threads();
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 6; t++) {
            int tb = t & 1, nt = 1 + t / 2;
            long M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            float *A = malloc(sizeof(float) * M * K), *A0 = malloc(sizeof(float) * M * K);
            float *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N);
            float *Cref = malloc(sizeof(float) * M * N), *Ccopy = malloc(sizeof(float) * M * N);
            int *bn = calloc((size_t)M, sizeof(int)), *an = calloc((size_t)M, sizeof(int));
            for (long i = 0; i < M * K; i++) A0[i] = frand(), A[i] = NAN;
            for (long i = 0; i < K * N; i++) B[i] = frand();
            for (long i = 0; i < M * N; i++) C[i] = Cref[i] = frand(), Ccopy[i] = NAN;
            omp_set_num_threads(nt);
            ct_gemm(0, tb, M, N, K, 0.75f, A0, K, B, tb ? K : N, 0.5f, Cref, N);
            hook_rows h = {A, A0, C, Ccopy, bn, an, K, N};
            ct_gemm_row_hooks hooks = {hook_before, hook_after, &h};
            ct_gemm_with_row_hooks(tb, M, N, K, 0.75f, A, K, B, tb ? K : N, 0.5f, C, N, &hooks);
            long calls = 0;
            for (long i = 0; i < M; i++) calls += bn[i] != 1 || an[i] != 1;
            CHECK(calls == 0, "(%ld, %ld, %ld) tb %d, %d threads: %ld rows not through each hook once, before first",
                  M, N, K, tb, nt, calls);
            CHECK(memcmp(C, Cref, sizeof(float) * M * N) == 0, "(%ld, %ld, %ld) tb %d, %d threads: C differs from ct_gemm",
                  M, N, K, tb, nt);
            CHECK(memcmp(Ccopy, Cref, sizeof(float) * M * N) == 0,
                  "(%ld, %ld, %ld) tb %d, %d threads: after saw rows of C before they were final", M, N, K, tb, nt);
            free(A), free(A0), free(B), free(C), free(Cref), free(Ccopy), free(bn), free(an);
        }
    omp_set_num_threads(saved);
}

// The same product on 1, 2 and 3 threads: bitwise the same C (K is never split between
// threads, and every element is computed by the same arithmetic wherever its tile falls).
static void test_gemm_thread_count_invariance(void) {
    // (120, 288, 300) and (240, 288, 200): column splits with 4 and 5 tiles a column, so the
    // narrower column's thread finishes first and helps with the other's rows (help_columns),
    // through the packed and the small-product path
    long shapes[][3] = {{2048, 768, 256}, {768, 256, 2048}, {256, 256, 1000}, {130, 2100, 300}, {61, 77, 64},
                        {120, 288, 300}, {240, 288, 200}};
    int saved = omp_get_max_threads();
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            int ta = t >> 1, tb = t & 1;
            long M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
            float *A = malloc(sizeof(float) * ar * ac), *B = malloc(sizeof(float) * br * bc);
            float *C0 = malloc(sizeof(float) * M * N), *C[3];
            for (long i = 0; i < ar * ac; i++) A[i] = frand();
            for (long i = 0; i < br * bc; i++) B[i] = frand();
            for (long i = 0; i < M * N; i++) C0[i] = frand();
            for (int n = 0; n < 3; n++) {
                C[n] = malloc(sizeof(float) * M * N);
                memcpy(C[n], C0, sizeof(float) * M * N);
                omp_set_num_threads(n + 1);
                ct_gemm(ta, tb, M, N, K, 0.5f, A, ac, B, bc, 0.25f, C[n], N);
            }
            CHECK(memcmp(C[0], C[1], sizeof(float) * M * N) == 0 && memcmp(C[0], C[2], sizeof(float) * M * N) == 0,
                  "ta=%d tb=%d M=%ld N=%ld K=%ld: results differ between 1, 2 and 3 threads", ta, tb, M, N, K);
            free(A), free(B), free(C0), free(C[0]), free(C[1]), free(C[2]);
        }
    omp_set_num_threads(saved);
}

// Threads share a product's rows in units of 12 (AVX-512; 6 on AVX2) taken as whole blocks, then
// halves of what is left: for many row counts -- below, at and above whole blocks, ragged last
// units -- on 2 and 3 threads every row is computed exactly once (beta -0.5: a row done twice or
// not at all changes C), bitwise as on one thread; through one pass (K 300: every K block of the
// panel at once), a pass per K block (K 2100: the rows shared out again in each, so a row's K
// blocks may fall to different threads) and the small-product path (K 200: A read in place); and
// with A^T, which takes a pass per K block at any K over KC (gemm.c, next_pass). In each pass the
// threads of a row split pack one shared B panel, each its share of the slivers.
static void test_gemm_rows_shared_once(void) {
    const long Ms[] = {13, 97, 121, 240, 241, 359, 601, 1207}, shapes[][2] = {{256, 300}, {256, 2100}, {256, 200}};
    int saved = omp_get_max_threads();
    for (unsigned sh = 0; sh < 6; sh++)
        for (unsigned mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const int ta = sh >= 3;  // A^T: A (K, M), rows M apart
            long M = Ms[mi], N = shapes[sh % 3][0], K = shapes[sh % 3][1];
            float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C[3];
            for (long i = 0; i < M * K; i++) A[i] = frand();
            for (long i = 0; i < K * N; i++) B[i] = frand();
            for (int n = 2; n >= 0; n--) {  // 3 threads first: the packing buffers still hold the last B
                C[n] = malloc(sizeof(float) * M * N);
                for (long i = 0; i < M * N; i++) C[n][i] = (float)(i % 7) - 3.0f;
                omp_set_num_threads(n + 1);
                ct_gemm(ta, 0, M, N, K, 1.0f, A, ta ? M : K, B, N, -0.5f, C[n], N);
            }
            CHECK(memcmp(C[0], C[1], sizeof(float) * M * N) == 0 && memcmp(C[0], C[2], sizeof(float) * M * N) == 0,
                  "ta %d M=%ld N=%ld K=%ld: rows differ between 1, 2 and 3 threads", ta, M, N, K);
            free(A), free(B), free(C[0]), free(C[1]), free(C[2]);
        }
    omp_set_num_threads(saved);
}

// The opt-in team timing (bench_gemm_team): off, nothing is summed; on, a product run by a team
// adds its wall time, and the wait from the first thread's end to the last one's, which lies
// between 0 and that time; a product run on one thread adds nothing.
static void test_gemm_team_timing(void) {
    const long M = 480, N = 256, K = 300;  // a team product: M N K above the parallel threshold
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N);
    for (long i = 0; i < M * K; i++) A[i] = frand();
    for (long i = 0; i < K * N; i++) B[i] = frand();
    int saved = omp_get_max_threads();
    double total = -1, wait = -1;
    omp_set_num_threads(2);
    ct_gemm_team_timing(0);
    ct_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    ct_gemm_team_timing_read(&total, &wait);
    CHECK(total == 0 && wait == 0, "timing off: total %g s, wait %g s", total, wait);
    ct_gemm_team_timing(1);
    for (int r = 0; r < 3; r++) ct_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    ct_gemm_team_timing_read(&total, &wait);
    CHECK(total > 0 && wait >= 0 && wait <= total, "3 team products: total %g s, wait %g s", total, wait);
    double t1 = total;
    omp_set_num_threads(1);
    ct_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    ct_gemm_team_timing_read(&total, &wait);
    CHECK(total == t1, "a one-thread product added %g s", total - t1);
    ct_gemm_team_timing(0);
    omp_set_num_threads(saved);
    free(A), free(B), free(C);
}

// A short product (K <= 128) sums K in steps of 16 into C: split along K at a multiple of 16
// and accumulated in order (beta 1), it gives the whole product's bits -- micro-batches of
// 16-token sequences, tensor-parallel shards of a tiny model agree with one process.
static void test_gemm_short_k_split(void) {
    long M = 37, N = 45, K = 96;
    for (int t = 0; t < 4; t++) {
        int ta = t >> 1, tb = t & 1;
        long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        float *A = malloc(sizeof(float) * ar * ac), *B = malloc(sizeof(float) * br * bc);
        float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
        for (long i = 0; i < ar * ac; i++) A[i] = frand();
        for (long i = 0; i < br * bc; i++) B[i] = frand();
        for (long i = 0; i < M * N; i++) C1[i] = C2[i] = frand();
        ct_gemm(ta, tb, M, N, K, 1.0f, A, ac, B, bc, 1.0f, C1, N);
        for (long k0 = 0; k0 < K; k0 += 32)  // three pieces of 32
            ct_gemm(ta, tb, M, N, 32, 1.0f, ta ? A + k0 * ac : A + k0, ac, tb ? B + k0 : B + k0 * bc, bc, 1.0f, C2, N);
        CHECK(memcmp(C1, C2, sizeof(float) * M * N) == 0, "ta=%d tb=%d: K split at 32, 64 changes the bits", ta, tb);
        free(A), free(B), free(C1), free(C2);
    }
}

static void test_gemm_k_zero(void) {
    one_gemm(0, 0, 4, 5, 0, 1.0f, 0.5f, 2);  // C = beta C
    one_gemm(1, 1, 4, 5, 0, 1.0f, 0.0f, 0);  // C = 0
}

static void test_linear_forward_backward(void) {
    long N = 37, IC = 19, OC = 23;
    float *x = malloc(sizeof(float) * N * IC), *w = malloc(sizeof(float) * OC * IC);
    float *y = malloc(sizeof(float) * N * OC), *dy = malloc(sizeof(float) * N * OC);
    float *dx = malloc(sizeof(float) * N * IC), *dw = malloc(sizeof(float) * OC * IC), *dw0 = malloc(sizeof(float) * OC * IC);
    for (long i = 0; i < N * IC; i++) x[i] = frand(), dx[i] = NAN;  // dinp is overwritten
    for (long i = 0; i < OC * IC; i++) w[i] = frand(), dw[i] = dw0[i] = frand();  // dweight accumulates
    for (long i = 0; i < N * OC; i++) dy[i] = frand();
    ct_linear_forward(y, x, w, N, IC, OC);
    ct_linear_backward(dx, dw, dy, x, w, N, IC, OC);
    double ry[37 * 23], rdx[37 * 19], rdw[23 * 19];
    for (long n = 0; n < N; n++)
        for (long o = 0; o < OC; o++) {
            double s = 0;
            for (long i = 0; i < IC; i++) s += (double)x[n * IC + i] * w[o * IC + i];
            ry[n * OC + o] = s;
        }
    for (long n = 0; n < N; n++)
        for (long i = 0; i < IC; i++) {
            double s = 0;
            for (long o = 0; o < OC; o++) s += (double)dy[n * OC + o] * w[o * IC + i];
            rdx[n * IC + i] = s;
        }
    for (long o = 0; o < OC; o++)
        for (long i = 0; i < IC; i++) {
            double s = dw0[o * IC + i];
            for (long n = 0; n < N; n++) s += (double)dy[n * OC + o] * x[n * IC + i];
            rdw[o * IC + i] = s;
        }
    CHECK(ct_test_max_rel_err(y, ry, N * OC) < 1e-5, "linear forward");
    CHECK(ct_test_max_rel_err(dx, rdx, N * IC) < 1e-5, "linear dinp");
    CHECK(ct_test_max_rel_err(dw, rdw, OC * IC) < 1e-5, "linear dweight (accumulated)");
    // NULL skips: dweight alone, dinp untouched
    for (long i = 0; i < N * IC; i++) dx[i] = 7.0f;
    ct_linear_backward(NULL, dw, dy, x, w, N, IC, OC);
    ct_linear_backward(NULL, NULL, dy, x, w, N, IC, OC);
    CHECK(dx[0] == 7.0f, "dinp touched");
    free(x), free(w), free(y), free(dy), free(dx), free(dw), free(dw0);
}

// Products that write C once (beta 0, all of K in one block: 128 < K <= 256) store C's tiles past
// the cache where C and its rows are 64-byte aligned (gemm.c, stream_c). The same product into a
// C one float off alignment stores normally: both must give the same bits, match the float64
// reference, ignore C's NaN contents and leave the padding columns alone.
static void test_gemm_streamed_c_bits(void) {
    const long shapes[][3] = {{250, 320, 256}, {97, 1088, 200}, {130, 200, 256}, {600, 64, 129}};
    for (unsigned sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const long M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2], ldc = (N + 16 + 15) / 16 * 16;
                const long lda = ta ? M : K, ldb = tb ? K : N;
                float *A = malloc(sizeof(float) * (ta ? K : M) * lda), *B = malloc(sizeof(float) * (tb ? N : K) * ldb);
                for (long i = 0; i < (ta ? K : M) * lda; i++) A[i] = frand();
                for (long i = 0; i < (tb ? N : K) * ldb; i++) B[i] = frand();
                size_t cbytes = sizeof(float) * (size_t)(M * ldc + 16);
                size_t abytes = (cbytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of 64
                float *Ca = aligned_alloc(64, abytes), *Cu_base = aligned_alloc(64, abytes);
                float *Cu = Cu_base + 1;  // one float off: no streamed stores
                for (long i = 0; i < M * ldc; i++) Ca[i] = Cu[i] = i % 7 ? NAN : 3.0f;
                ct_gemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.0f, Ca, ldc);
                ct_gemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.0f, Cu, ldc);
                double *ref = malloc(sizeof(double) * M * N);
                ref_gemm(ta, tb, M, N, K, 0.75, A, lda, B, ldb, 0.0, NULL, ldc, ref);
                double maxd = 0;
                int same = 1, pad_kept = 1;
                for (long i = 0; i < M; i++) {
                    for (long j = 0; j < N; j++) {
                        double d = fabs(Ca[i * ldc + j] - ref[i * N + j]);
                        maxd = isnan(d) ? INFINITY : d > maxd ? d : maxd;
                        same &= memcmp(&Ca[i * ldc + j], &Cu[i * ldc + j], sizeof(float)) == 0;
                    }
                    for (long j = N; j < ldc; j++) {
                        float v = Ca[i * ldc + j];
                        pad_kept &= (i * ldc + j) % 7 ? isnan(v) : v == 3.0f;
                    }
                }
                CHECK(maxd < 1e-3, "M=%ld N=%ld K=%ld ta=%d tb=%d: off the reference by %g", M, N, K, ta, tb, maxd);
                CHECK(same, "M=%ld N=%ld K=%ld ta=%d tb=%d: aligned and unaligned C differ", M, N, K, ta, tb);
                CHECK(pad_kept, "M=%ld N=%ld K=%ld ta=%d tb=%d: padding columns changed", M, N, K, ta, tb);
                free(A), free(B), free(Ca), free(Cu_base), free(ref);
            }
}

static void test_matmul_peak_positive(void) {
    double g = ct_cpu_matmul_peak_gflops(128, 2);
    CHECK(g > 0.1 && g < 1e6, "peak %g GFLOP/s", g);
}

int main(void) {
    CT_RUN(test_gemm_transposes_and_strides);
    CT_RUN(test_gemm_blocked_shapes);
    CT_RUN(test_gemm_a_in_place_bits);
    CT_RUN(test_gemm_narrow_panels_bits);
    CT_RUN(test_gemm_span_passes_bits);
    CT_RUN(test_gemm_row_hooks);
    CT_RUN(test_gemm_thread_count_invariance);
    CT_RUN(test_gemm_rows_shared_once);
    CT_RUN(test_gemm_team_timing);
    CT_RUN(test_gemm_short_k_split);
    CT_RUN(test_gemm_k_zero);
    CT_RUN(test_gemm_streamed_c_bits);
    CT_RUN(test_linear_forward_backward);
    CT_RUN(test_matmul_peak_positive);
    CT_TEST_EXIT();
}
