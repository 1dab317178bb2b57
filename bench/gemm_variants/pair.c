// ct_gemm built several ways (gemm_variants.sh compiles gemm.c and gemm_pack.c once per set of
// -D flags, renaming ct_gemm to ct_gemm_v<i>) and oneDNN's dnnl_sgemm, called in turn, one call
// each per round, the order rotating from round to round. Per shape it prints each one's median
// over the rounds of its time divided by variant 0's in the same round, and its best GFLOP/s.
//
// Why this way: on a shared VM the speed of a core swings by 30-50% within minutes, so two
// builds timed one after the other (or two best-of runs) differ by more than any tuning change;
// neighbouring calls see nearly the same machine, so a per-round ratio cancels most of the drift.
//
//   pair <variants> <rounds> ta tb M N K [ta tb M N K ...]
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define NV_MAX 5
#define ROUNDS_MAX 400
typedef void gemm_fn(int, int, long, long, long, float, const float *, long, const float *, long, float, float *,
                     long);
gemm_fn ct_gemm_v0, ct_gemm_v1, ct_gemm_v2, ct_gemm_v3, ct_gemm_v4;  // (unbuilt ones: stubs, never called)
static gemm_fn *const variants[NV_MAX] = {ct_gemm_v0, ct_gemm_v1, ct_gemm_v2, ct_gemm_v3, ct_gemm_v4};

static void onednn(int ta, int tb, long M, long N, long K, float alpha, const float *A, long lda, const float *B,
                   long ldb, float beta, float *C, long ldc) {
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int nv = argc > 2 ? atoi(argv[1]) : 0, rounds = argc > 2 ? atoi(argv[2]) : 0;
    if (nv < 1 || nv > NV_MAX || rounds < 1 || rounds > ROUNDS_MAX || (argc - 3) % 5 || argc == 3) {
        fprintf(stderr, "usage: pair <variants 1-%d> <rounds 1-%d> ta tb M N K [ta tb M N K ...]\n", NV_MAX,
                ROUNDS_MAX);
        return 2;
    }
    long most = 0;  // the largest operand, for one set of buffers
    for (int a = 3; a < argc; a += 5) {
        long M = atol(argv[a + 2]), N = atol(argv[a + 3]), K = atol(argv[a + 4]);
        if (M < 1 || N < 1 || K < 1) {
            fprintf(stderr, "pair: M, N, K must be positive (shape %d)\n", (a - 3) / 5 + 1);
            return 2;
        }
        long m = M * K > K * N ? M * K : K * N;
        m = m > M * N ? m : M * N;
        most = m > most ? m : most;
    }
    float *A = malloc(sizeof(float) * most), *B = malloc(sizeof(float) * most), *C = malloc(sizeof(float) * most);
    if (!A || !B || !C) {
        fprintf(stderr, "pair: out of memory\n");
        return 1;
    }
    for (long i = 0; i < most; i++) A[i] = (float)(i % 13) * 1e-3f, B[i] = (float)(i % 7) * 1e-3f, C[i] = 0.0f;
    printf("%d variant(s) and oneDNN, %d rounds, %d threads; per shape: median time / variant 0's (best GFLOP/s)\n",
           nv, rounds, omp_get_max_threads());
    for (int a = 3; a < argc; a += 5) {
        const int ta = atoi(argv[a]) != 0, tb = atoi(argv[a + 1]) != 0;
        const long M = atol(argv[a + 2]), N = atol(argv[a + 3]), K = atol(argv[a + 4]);
        const long lda = ta ? M : K, ldb = tb ? K : N;
        const int n = nv + 1;  // the variants, then oneDNN
        static double t[NV_MAX + 1][ROUNDS_MAX];
        double best[NV_MAX + 1];
        for (int v = 0; v < n; v++) best[v] = 1e300;
        for (int r = -1; r < rounds; r++)  // round -1: a warm-up of each
            for (int j = 0; j < n; j++) {
                const int v = (j + (r < 0 ? 0 : r)) % n;
                gemm_fn *f = v < nv ? variants[v] : onednn;
                double t0 = omp_get_wtime();
                f(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
                double d = omp_get_wtime() - t0;
                if (r >= 0) t[v][r] = d, best[v] = d < best[v] ? d : best[v];
            }
        printf("%c%c %6ld %6ld %6ld |", ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K);
        for (int v = 0; v < n; v++) {
            double q[ROUNDS_MAX];
            for (int r = 0; r < rounds; r++) q[r] = t[v][r] / t[0][r];
            qsort(q, (size_t)rounds, sizeof *q, by_value);
            if (v < nv)
                printf("  v%d %.3f (%.0f)", v, q[rounds / 2], 2.0 * M * N * K / best[v] * 1e-9);
            else
                printf("  oneDNN %.3f (%.0f)", q[rounds / 2], 2.0 * M * N * K / best[v] * 1e-9);
        }
        printf("\n");
    }
    free(A), free(B), free(C);
    return 0;
}
