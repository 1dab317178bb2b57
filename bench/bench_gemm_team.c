// How long ct_gemm's threads wait for one another at the end of each product, at the shapes of
// a bench S step (its four linear layers, forward and both backward products, and the output
// projection + loss's three), on this machine's threads. Prints, per shape, the wall time of a
// product and the time from the first thread's end to the last one's (ct_gemm_team_timing), as
// a share of the product's time: the reference is 0, where every thread finishes together.
//
// Before the row sharing in units of MR rows (gemm.c, "row blocks"), row-split products at these
// shapes waited 7-10% of their time; one thread finished a whole 120-row block after the other.
//
//   build/bench/bench_gemm_team [reps]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

typedef struct {
    const char *what;
    int ta, tb;
    long M, N, K;
} shape;

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) {
        fprintf(stderr, "bench_gemm_team: reps must be at least 1, got '%s'\n", argv[1]);
        return 2;
    }
    // bench S: 8 x 256 tokens, dim 256, FFN 768 (w1|w3: 1536), vocabulary 8192, loss chunks of 1024
    const long T = 2048, C = 256, F = 768, V = 8192, R = 1024;
    const shape shapes[] = {
        {"wqkv forward", 0, 1, T, 3 * C, C},  {"wqkv dinp", 0, 0, T, C, 3 * C},  {"wqkv dweight", 1, 0, 3 * C, C, T},
        {"wo forward", 0, 1, T, C, C},        {"wo dinp", 0, 0, T, C, C},        {"wo dweight", 1, 0, C, C, T},
        {"w13 forward", 0, 1, T, 2 * F, C},   {"w13 dinp", 0, 0, T, C, 2 * F},   {"w13 dweight", 1, 0, 2 * F, C, T},
        {"w2 forward", 0, 1, T, C, F},        {"w2 dinp", 0, 0, T, F, C},        {"w2 dweight", 1, 0, C, F, T},
        {"loss logits", 0, 1, R, V, C},       {"loss dx", 0, 0, R, C, V},        {"loss dW", 1, 0, V, C, R},
    };
    printf("threads %d, %d products per shape\n", omp_get_max_threads(), reps);
    double all_total = 0, all_wait = 0;
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *p = &shapes[s];
        long ar = p->ta ? p->K : p->M, ac = p->ta ? p->M : p->K, br = p->tb ? p->N : p->K, bc = p->tb ? p->K : p->N;
        float *A = malloc(sizeof(float) * ar * ac), *B = malloc(sizeof(float) * br * bc);
        float *Cm = calloc((size_t)(p->M * p->N), sizeof(float));
        for (long i = 0; i < ar * ac; i++) A[i] = (float)(i % 13) * 0.1f;
        for (long i = 0; i < br * bc; i++) B[i] = (float)(i % 7) * 0.1f;
        ct_gemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, ac, B, bc, 0.0f, Cm, p->N);  // warm-up
        ct_gemm_team_timing(1);
        for (int r = 0; r < reps; r++) ct_gemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, ac, B, bc, 0.0f, Cm, p->N);
        double total, wait;
        ct_gemm_team_timing_read(&total, &wait);
        ct_gemm_team_timing(0);
        all_total += total, all_wait += wait;
        if (total > 0)
            printf("  %-13s %c%c %5ld x %5ld x %5ld  %7.3f ms a product, %6.1f GFLOP/s; end wait %5.1f%%\n", p->what,
                   p->ta ? 'T' : 'N', p->tb ? 'T' : 'N', p->M, p->N, p->K, 1e3 * total / reps,
                   2.0 * p->M * p->N * p->K * reps / total / 1e9, 100.0 * wait / total);
        else
            printf("  %-13s runs on one thread\n", p->what);
        free(A), free(B), free(Cm);
    }
    if (all_total > 0) printf("all shapes: end wait %.1f%% of the products' time\n", 100.0 * all_wait / all_total);
    return 0;
}
