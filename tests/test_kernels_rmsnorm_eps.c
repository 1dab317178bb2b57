// RMSNorm where eps matters: rows whose mean square is near eps (eps/10 .. 10 eps) and an
// all-zero row, rstd and output against a float64 reference rstd = 1 / sqrt(ms + eps).
// On rows of order 1 (test_kernels_layers.c) eps changes rstd by ~5e-6, under any sensible
// tolerance, so `1 / (sqrt(ms) + eps)` would pass there; here the two differ by 40% and more
// (zero row: 1/sqrt(eps) against 1/eps), and the tolerance is 1e-5.
// Checked through ct_rmsnorm_forward, the cpu table's rmsnorm_forward and the fused
// residual_rmsnorm_forward (zero delta), which all normalise a row with the same code.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_rand.h"

enum { N = 6, C = 96 };

// Row n: zero (n == 0), else entries of random sign with mean square eps * scale[n].
static void make_rows(float *x, float eps) {
    static const double scale[N] = {0, 0.1, 0.5, 1, 2, 10};
    for (int n = 0; n < N; n++) {
        double ms = 0;
        for (int c = 0; c < C; c++) {
            double v = (0.5 + urand()) * (urand() < 0.5 ? -1 : 1);
            x[n * C + c] = (float)v;
            ms += v * v / C;
        }
        double k = sqrt(eps * scale[n] / ms);  // rescale to the wanted mean square
        for (int c = 0; c < C; c++) x[n * C + c] = (float)(x[n * C + c] * k);
    }
}

typedef void (*norm_fn)(float *out, float *rstd, const float *x, const float *w, float eps);

static void via_kernel(float *out, float *rstd, const float *x, const float *w, float eps) {
    ct_rmsnorm_forward(out, rstd, x, w, N, C, eps);
}
static void via_table(float *out, float *rstd, const float *x, const float *w, float eps) {
    ct_kernels_get("cpu")->rmsnorm_forward(out, rstd, x, w, N, C, eps);
}
static void via_fused(float *out, float *rstd, const float *x, const float *w, float eps) {
    float xo[N * C], zero[N * C];
    memset(zero, 0, sizeof zero);
    ct_kernels_get("cpu")->residual_rmsnorm_forward(xo, out, rstd, x, zero, w, N, C, eps);
}

static void check(norm_fn fn, const char *name) {
    static const float epss[] = {1e-5f, 1e-6f};
    for (int e = 0; e < 2; e++) {
        const float eps = epss[e];
        float x[N * C], w[C], out[N * C], rstd[N];
        make_rows(x, eps);
        for (int c = 0; c < C; c++) w[c] = (float)(0.5 + urand());
        fn(out, rstd, x, w, eps);
        for (int n = 0; n < N; n++) {
            double ms = 0;
            for (int c = 0; c < C; c++) ms += (double)x[n * C + c] * x[n * C + c];
            ms /= C;
            double r = 1.0 / sqrt(ms + (double)eps);
            CHECK(fabs(rstd[n] - r) <= 1e-5 * r, "%s eps %g row %d (ms/eps %.3g): rstd %.8g, float64 %.8g", name,
                  (double)eps, n, ms / eps, (double)rstd[n], r);
            double maxd = 0, maxy = 0;
            for (int c = 0; c < C; c++) {
                double y = (double)x[n * C + c] * r * w[c];
                maxd = fmax(maxd, fabs(out[n * C + c] - y));
                maxy = fmax(maxy, fabs(y));
            }
            CHECK(maxd <= 1e-5 * maxy, "%s eps %g row %d: output off by %.3g of %.3g", name, (double)eps, n, maxd,
                  maxy);
        }
    }
}

static void test_rmsnorm_eps_kernel(void) { check(via_kernel, "ct_rmsnorm_forward"); }
static void test_rmsnorm_eps_cpu_table(void) { check(via_table, "cpu rmsnorm_forward"); }
static void test_rmsnorm_eps_fused_residual(void) { check(via_fused, "cpu residual_rmsnorm_forward"); }

int main(void) {
    rng_state = 0x243f6a8885a308d3ull;
    CT_RUN(test_rmsnorm_eps_kernel);
    CT_RUN(test_rmsnorm_eps_cpu_table);
    CT_RUN(test_rmsnorm_eps_fused_residual);
    CT_TEST_EXIT();
}
