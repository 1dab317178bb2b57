// Fused forward chains (kernels.h, "fused forward chains") against the unfused calls they replace,
// at the block shapes of benchmarks S and M (N = B*T = 2048 rows):
//   S: C 256, FFN 768, QKV 768, head 64 (4 q + 4 kv heads)
//   M: C 768, FFN 2048, QKV 2304, head 64 (12 q + 12 kv heads)
// Each line: best time of the fused kernel, best time of the unfused chain (reps interleaved, so
// a load that comes and goes hits both alike) and fused / unfused (below 1: the fused is faster);
// then the same ratio of best process CPU time (all threads' work, barrier spinning included),
// which other jobs on the machine disturb less than the wall clock.
//   residual_rmsnorm  residual_rmsnorm_forward      vs add_inplace + rmsnorm_forward
//   rmsnorm_linear    rmsnorm_linear_forward (wqkv) vs rmsnorm_forward + linear_forward
//   linear_swiglu     linear_swiglu_forward (w13)   vs linear_forward + swiglu_forward
//   linear_rope       linear_rope_forward (wqkv)    vs linear_forward + rope_forward (q) + rope_forward (k)
//   norm_linear_rope  rmsnorm_linear_rope_forward   vs rmsnorm_forward + linear_forward + the two rope_forward
//
// usage: build/bench/bench_fused [S|M|all] [reps]     (default all, 7 reps; the memory-bound
// residual_rmsnorm runs 5x the reps)
#include <omp.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

typedef struct {
    const char *name;
    long N, C, F, QKV, HS, T;
} shape;

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *filled(long n, float a, unsigned seed) {
    float *p = malloc(sizeof(float) * (n > 0 ? n : 1));
    for (long i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f) * a;
    }
    return p;
}

typedef struct {
    const ct_kernels *k;
    shape s;
    long NH, NKV;
    float *x, *d, *xo, *w, *nrm, *rstd, *Wqkv, *W13, *qkv, *h13, *h, *cs, *sn;
} ctx;

static void run_fused(ctx *c, int which) {
    const ct_kernels *k = c->k;
    shape s = c->s;
    switch (which) {
    case 0: k->residual_rmsnorm_forward(c->xo, c->nrm, c->rstd, c->x, c->xo, c->w, s.N, s.C, 1e-5f); break;
    case 1:
        k->rmsnorm_linear_forward(c->qkv, c->nrm, c->rstd, c->x, c->w, c->Wqkv, s.N, s.C, s.QKV, 1e-5f, NULL);
        break;
    case 2: k->linear_swiglu_forward(c->h13, c->h, c->nrm, c->W13, s.N, s.C, s.F, NULL); break;
    case 4:
        k->rmsnorm_linear_rope_forward(c->qkv, c->nrm, c->rstd, c->x, c->w, c->Wqkv, s.N, s.C, s.QKV, 1e-5f, c->cs,
                                       c->sn, NULL, 0, s.N / s.T, s.T, c->NH, c->NKV, s.HS, NULL);
        break;
    default:
        k->linear_rope_forward(c->qkv, c->nrm, c->Wqkv, s.N, s.C, s.QKV, c->cs, c->sn, NULL, 0, s.N / s.T, s.T, c->NH,
                               c->NKV, s.HS, NULL);
    }
}

static void run_unfused(ctx *c, int which) {
    const ct_kernels *k = c->k;
    shape s = c->s;
    switch (which) {
    case 0:  // as the block: x_mid (the delta) += x, then the norm of x_mid
        k->add_inplace(c->xo, c->x, s.N * s.C);
        k->rmsnorm_forward(c->nrm, c->rstd, c->xo, c->w, s.N, s.C, 1e-5f);
        break;
    case 1:
        k->rmsnorm_forward(c->nrm, c->rstd, c->x, c->w, s.N, s.C, 1e-5f);
        k->linear_forward(c->qkv, c->nrm, c->Wqkv, s.N, s.C, s.QKV);
        break;
    case 2:
        k->linear_forward(c->h13, c->nrm, c->W13, s.N, s.C, 2 * s.F);
        k->swiglu_forward(c->h, c->h13, s.N, s.F);
        break;
    case 4:
        k->rmsnorm_forward(c->nrm, c->rstd, c->x, c->w, s.N, s.C, 1e-5f);
        __attribute__((fallthrough));  // then the linear and the rope of case 3
    default:
        k->linear_forward(c->qkv, c->nrm, c->Wqkv, s.N, s.C, s.QKV);
        k->rope_forward(c->qkv, c->cs, c->sn, NULL, 0, s.N / s.T, s.T, c->NH, s.HS, s.QKV);
        k->rope_forward(c->qkv + c->NH * s.HS, c->cs, c->sn, NULL, 0, s.N / s.T, s.T, c->NKV, s.HS, s.QKV);
    }
}

static void bench_shape(const ct_kernels *k, shape s, int reps) {
    ctx c = {.k = k, .s = s, .NH = s.C / s.HS};
    c.NKV = (s.QKV / s.HS - c.NH) / 2;
    long N = s.N, C = s.C, half = s.HS / 2;
    c.x = filled(N * C, 1, 1), c.d = filled(N * C, 1e-3f, 2), c.xo = filled(N * C, 1, 3), c.w = filled(C, 1, 4);
    c.nrm = filled(N * C, 1, 5), c.rstd = filled(N, 1, 6);
    c.Wqkv = filled(s.QKV * C, 0.05f, 7), c.W13 = filled(2 * s.F * C, 0.05f, 8);
    c.qkv = filled(N * s.QKV, 1, 9), c.h13 = filled(N * 2 * s.F, 1, 10), c.h = filled(N * s.F, 1, 11);
    c.cs = malloc(sizeof(float) * s.T * half), c.sn = malloc(sizeof(float) * s.T * half);
    k->rope_tables(c.cs, c.sn, s.T, s.HS, 500000.0, 0.0, 1.0, 4.0, 8192);
    const char *names[5] = {"residual_rmsnorm", "rmsnorm_linear", "linear_swiglu", "linear_rope", "norm_linear_rope"};
    for (int which = 0; which < 5; which++) {
        int r = which == 0 ? 5 * reps : reps;
        double best_f = 1e30, best_u = 1e30, cpu_f = 1e30, cpu_u = 1e30;
        run_fused(&c, which), run_unfused(&c, which);  // warm-up (pages, oneDNN kernels)
        for (int i = 0; i < r; i++) {
            if (which == 0) memcpy(c.xo, c.d, sizeof(float) * N * C);  // keep the residual stream bounded
            double c0 = cpu_seconds(), t0 = omp_get_wtime();
            run_fused(&c, which);
            double t1 = omp_get_wtime(), c1 = cpu_seconds();
            if (which == 0) memcpy(c.xo, c.d, sizeof(float) * N * C);
            double c2 = cpu_seconds(), t2 = omp_get_wtime();
            run_unfused(&c, which);
            double t3 = omp_get_wtime(), c3 = cpu_seconds();
            if (t1 - t0 < best_f) best_f = t1 - t0;
            if (t3 - t2 < best_u) best_u = t3 - t2;
            if (c1 - c0 < cpu_f) cpu_f = c1 - c0;
            if (c3 - c2 < cpu_u) cpu_u = c3 - c2;
        }
        printf("%s %-17s fused %8.3f ms  unfused %8.3f ms  ratio %.3f   (cpu time ratio %.3f)\n", s.name,
               names[which], best_f * 1e3, best_u * 1e3, best_f / best_u, cpu_f / cpu_u);
        fflush(stdout);
    }
    free(c.x), free(c.d), free(c.xo), free(c.w), free(c.nrm), free(c.rstd), free(c.Wqkv), free(c.W13), free(c.qkv);
    free(c.h13), free(c.h), free(c.cs), free(c.sn);
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    if (reps < 1) reps = 1;
    const ct_kernels *k = ct_kernels_get("cpu");
    shape S = {"S", 2048, 256, 768, 768, 64, 256}, M = {"M", 2048, 768, 2048, 2304, 64, 512};
    printf("fused vs unfused forward chains, threads %d, best of %d (ratio = fused / unfused)\n",
           omp_get_max_threads(), reps);
    if (!strcmp(which, "S") || !strcmp(which, "all")) bench_shape(k, S, reps);
    if (!strcmp(which, "M") || !strcmp(which, "all")) bench_shape(k, M, reps);
    return 0;
}
