// AdamW and the vector helpers against float64 loops: several steps (bias corrections),
// weight decay, gradient scale; sum of squares reproducible and accurate for sizes around the
// partition boundaries.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"
#include "test_rand.h"


static void test_adamw_steps(void) {
    long n = 1000;
    float *p = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    double *rp = malloc(sizeof(double) * n), *rm = calloc(n, sizeof(double)), *rv = calloc(n, sizeof(double));
    for (long i = 0; i < n; i++) p[i] = frand(1), rp[i] = p[i];
    double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
    for (long step = 1; step <= 5; step++) {
        for (long i = 0; i < n; i++) g[i] = frand(2);
        const float gsf = (float)gs;
        ct_adamw_update(p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, step, &gsf);
        for (long i = 0; i < n; i++) {  // Loshchilov & Hutter, Algorithm 2, with Adam's bias corrections
            double gi = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
    }
    CHECK(ct_test_max_rel_err(p, rp, n) < 1e-5, "param %g", ct_test_max_rel_err(p, rp, n));
    CHECK(ct_test_max_rel_err(m, rm, n) < 1e-5, "m");
    CHECK(ct_test_max_rel_err(v, rv, n) < 1e-5, "v");
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
}

// hand-worked first step: m_hat = g, v_hat = g^2, so the update is lr * (sign(g) + wd * p)
static void test_adamw_first_step_hand(void) {
    float p[2] = {1.0f, -2.0f}, g[2] = {3.0f, -0.5f}, m[2] = {0}, v[2] = {0};
    const float one = 1.0f;
    ct_adamw_update(p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 0.0f, 0.5f, 1, &one);
    CHECK_CLOSE(p[0], 1.0 - 0.1 * (1.0 + 0.5 * 1.0), 1e-6, 1e-6);
    CHECK_CLOSE(p[1], -2.0 - 0.1 * (-1.0 + 0.5 * -2.0), 1e-6, 1e-6);
}

// *grad_scale == 0 is a skipped step: parameters and moments stay as they were.
static void test_adamw_skipped_step(void) {
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {3.0f, -0.5f, 1.0f}, m[3] = {0.1f, 0.2f, 0.3f}, v[3] = {1, 2, 3};
    const float zero = 0.0f;
    ct_adamw_update(p, g, m, v, 3, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 4, &zero);
    CHECK(p[0] == 1.0f && p[1] == -2.0f && p[2] == 0.5f, "a skipped step moved the parameters");
    CHECK(m[0] == 0.1f && m[1] == 0.2f && m[2] == 0.3f && v[0] == 1 && v[1] == 2 && v[2] == 3,
          "a skipped step moved the moments");
}

// The clip factor from (loss sum, sum of squares): worked by hand.
static void test_clip_factor(void) {
    float s = -1;
    double sc[2] = {12.5, 9.0};  // norm 3
    ct_clip_factor(&s, sc, 1.0);
    CHECK(s == (float)(1.0 / (3.0 + 1e-6)), "norm 3, max 1: %.9g", s);
    ct_clip_factor(&s, sc, 4.0);
    CHECK(s == 1.0f, "norm 3, max 4: %.9g (no clipping)", s);
    ct_clip_factor(&s, sc, 0.0);
    CHECK(s == 1.0f, "max_norm 0 turns clipping off: %.9g", s);
    sc[0] = NAN;
    ct_clip_factor(&s, sc, 1.0);
    CHECK(s == 0.0f, "NaN loss: %.9g, want 0 (skip)", s);
    sc[0] = 1.0, sc[1] = INFINITY;
    ct_clip_factor(&s, sc, 1.0);
    CHECK(s == 0.0f, "infinite norm: %.9g, want 0 (skip)", s);
    sc[1] = NAN;
    ct_clip_factor(&s, sc, 0.0);
    CHECK(s == 0.0f, "NaN norm, clipping off: %.9g, want 0 (skip)", s);
}

static void test_sum_squares(void) {
    long sizes[] = {0, 1, 63, 64, 65, 1000, 100003};
    for (int s = 0; s < 7; s++) {
        long n = sizes[s];
        float *x = malloc(sizeof(float) * (n + 1));
        double ref = 0;
        for (long i = 0; i < n; i++) x[i] = frand(3), ref += (double)x[i] * x[i];
        double a = ct_sum_squares(x, n), b = ct_sum_squares(x, n);
        CHECK(fabs(a - ref) <= 1e-12 * (ref + 1), "n=%ld: %.17g vs %.17g", n, a, ref);
        CHECK(a == b, "not reproducible");
        free(x);
    }
}

static void test_add_scale(void) {
    long n = 777;
    float *y = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n), *y0 = malloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) y[i] = y0[i] = frand(1), x[i] = frand(1);
    ct_add_inplace(y, x, n);
    for (long i = 0; i < n; i++) CHECK(y[i] == y0[i] + x[i], "add at %ld", i);
    ct_scale_inplace(y, -0.25f, n);
    for (long i = 0; i < n; i++) CHECK(y[i] == (y0[i] + x[i]) * -0.25f, "scale at %ld", i);
    free(y), free(x), free(y0);
}

int main(void) {
    rng_state = 0x082EFA98EC4E6C89ull;
    CT_RUN(test_adamw_steps);
    CT_RUN(test_adamw_first_step_hand);
    CT_RUN(test_adamw_skipped_step);
    CT_RUN(test_clip_factor);
    CT_RUN(test_sum_squares);
    CT_RUN(test_add_scale);
    CT_TEST_EXIT();
}
