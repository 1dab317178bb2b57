// The MoE layer's grouped matmul (grouped_linear_forward / _backward: one linear per expert over
// its rows) against the dense matmul peak measured in the same run, on expert shapes of the size
// bench M runs (C 768): 2048 tokens x top-8 routed rows over 64 experts of hidden 256, so 256
// rows an expert on average -- the shape of a Qwen3-30B-A3B-like layer scaled to this machine.
// Two routings: balanced (every expert 256 rows) and skewed (sizes drawn so the most loaded
// expert gets about 3x the mean, as an unbalanced router does early in training). Each figure is
// GFLOP/s of the whole grouped call (2 x rows x IC x OC per product), best of several runs, and
// its ratio to the square 2048^3 peak (ct_cpu_matmul_peak_gflops) and to one dense linear over
// all the routed rows with the same IC and OC (what the grouping costs).
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

enum { E = 64, ROWS = 2048 * 8, C = 768, F = 256 };

static float *filled(long n, int mod) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) p[i] = (float)(i % mod) * 0.01f - 0.05f;
    return p;
}

// offsets (E + 1) of ROWS rows over E experts: balanced, or sizes proportional to w_e = 1 + 2 x_e^3
// for x_e evenly spaced in [0, 1] (the heaviest about 3x the mean).
static void routing(int64_t *off, int skewed) {
    double w[E], sum = 0;
    for (int e = 0; e < E; e++) sum += w[e] = skewed ? 1.0 + 2.0 * pow((double)e / (E - 1), 3) : 1.0;
    long given = 0;
    off[0] = 0;
    for (int e = 0; e < E; e++) {
        long n = e == E - 1 ? ROWS - given : (long)(ROWS * w[e] / sum);
        given += n;
        off[e + 1] = off[e] + n;
    }
}

typedef struct {
    double fwd, bwd;  // GFLOP/s
} rate;

// Best rates of the grouped forward and backward (dinp and dweight) for IC -> OC over n_experts
// weights and the row groups off (n_experts + 1). One expert over all the rows is the dense
// linear the grouping is compared with (the grouped call runs exactly ct_linear_* then).
static rate measure(const int64_t *off, long n_experts, long IC, long OC) {
    float *x = filled(ROWS * IC, 13), *w = filled(n_experts * OC * IC, 11), *y = calloc((size_t)(ROWS * OC), sizeof(float));
    float *dx = calloc((size_t)(ROWS * IC), sizeof(float)), *dw = calloc((size_t)(n_experts * OC * IC), sizeof(float));
    double flops = 2.0 * ROWS * IC * OC;
    rate best = {0, 0};
    for (int r = 0; r < 5; r++) {  // the first warms up
        double t0 = omp_get_wtime();
        ct_grouped_linear_forward(y, x, w, off, n_experts, IC, OC);
        double t1 = omp_get_wtime();
        ct_grouped_linear_backward(dx, dw, y, x, w, off, n_experts, IC, OC);
        double t2 = omp_get_wtime();
        if (r == 0) continue;
        if (flops / (t1 - t0) / 1e9 > best.fwd) best.fwd = flops / (t1 - t0) / 1e9;
        if (2 * flops / (t2 - t1) / 1e9 > best.bwd) best.bwd = 2 * flops / (t2 - t1) / 1e9;
    }
    free(x), free(w), free(y), free(dx), free(dw);
    return best;
}

int main(void) {
    printf("threads %d; %d experts, %d routed rows, C %d, expert hidden %d\n", omp_get_max_threads(), E, ROWS, C, F);
    double peak = ct_cpu_matmul_peak_gflops(2048, 4);
    const long shapes[2][2] = {{C, 2 * F}, {F, C}};  // w13 (IC -> 2F), w2 (F -> C)
    const char *names[2] = {"w13", "w2"};
    for (int skewed = 0; skewed < 2; skewed++) {
        int64_t off[E + 1];
        routing(off, skewed);
        long most = 0;
        for (int e = 0; e < E; e++) most = off[e + 1] - off[e] > most ? off[e + 1] - off[e] : most;
        for (int s = 0; s < 2; s++) {
            long IC = shapes[s][0], OC = shapes[s][1];
            const int64_t all[2] = {0, ROWS};
            rate g = measure(off, E, IC, OC), d = measure(all, 1, IC, OC);
            printf("%-8s %-3s %4ld->%-4ld (largest group %4ld rows): forward %6.1f GFLOP/s (%.2f x peak, %.2f x dense)  "
                   "backward %6.1f (%.2f x peak, %.2f x dense)\n",
                   skewed ? "skewed" : "balanced", names[s], IC, OC, most, g.fwd, g.fwd / peak, g.fwd / d.fwd, g.bwd,
                   g.bwd / peak, g.bwd / d.bwd);
        }
    }
    printf("peak (square 2048^3, ct_cpu_matmul_peak_gflops) %.1f GFLOP/s\n", peak);
    return 0;
}
