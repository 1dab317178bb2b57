// fastmath.h's exp and sigmoid: accuracy against double precision, and the same bits from the
// scalar function and from every lane of the 8- and 16-lane versions (the kernels mix them: a
// vector body, a scalar tail), whether or not the ISA fuses multiply and add.
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/fastmath.h"
#include "test.h"

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

// Error of got against the exact e in units of the float spacing at e (ulp of the float that e
// rounds to; denormal results do not occur: ct_fast_expf is 0 below -87.3).
static double ulps(float got, double e) {
    int ex;
    frexp(e, &ex);
    return fabs((double)got - e) / ldexp(1.0, ex - 24);
}

// Every 41st float bit pattern inside [-87.3, 88.3], and every one within 2^12 patterns of 0 and of
// the ends: at most 1.5 ulp from exp (the bound fastmath.h promises).
static void test_fast_expf_accuracy(void) {
    double worst = 0.0;
    float worst_x = 0.0f;
    for (int sign = 0; sign < 2; sign++) {
        uint32_t top = sign ? 0xC2AE999Au : 0x42B0999Au;  // -87.3, 88.3 rounded to float, inward
        for (uint32_t b = 0; b <= (top & 0x7FFFFFFFu); b += (b < 4096 || (top & 0x7FFFFFFFu) - b < 4096) ? 1 : 41) {
            float x = from_bits(b | (sign ? 0x80000000u : 0u));
            if (x < -87.3f || x > 88.3f) continue;
            double u = ulps(ct_fast_expf(x), exp((double)x));
            if (u > worst) worst = u, worst_x = x;
        }
    }
    printf("  ct_fast_expf: worst %.3f ulp at x = %.9g\n", worst, worst_x);
    CHECK(worst < 1.5, "%.3f ulp at x = %.9g", worst, worst_x);
}

// Outside the range: 0 below, +inf above, NaN kept; sigmoid's limits.
static void test_fast_expf_edges(void) {
    CHECK(ct_fast_expf(-87.31f) == 0.0f && ct_fast_expf(-INFINITY) == 0.0f, "below the range");
    CHECK(ct_fast_expf(88.31f) == INFINITY && ct_fast_expf(INFINITY) == INFINITY, "above the range");
    CHECK(isnan(ct_fast_expf(NAN)), "NaN");
    CHECK(ct_fast_expf(0.0f) == 1.0f, "exp(0) = %.9g", ct_fast_expf(0.0f));
    CHECK(ct_fast_sigmoidf(-INFINITY) == 0.0f && ct_fast_sigmoidf(INFINITY) == 1.0f, "sigmoid's limits");
    CHECK_CLOSE(ct_fast_sigmoidf(1.5f), 1.0 / (1.0 + exp(-1.5)), 3e-7, 0);
}

// n results of two versions agree: the same bits, except that a NaN need only meet a NaN. IEEE 754
// leaves the sign (and payload) of a NaN result unspecified, and the compiler may use that: in the
// scalar sigmoid GCC rewrites 1 + (-x) as 1 - x, which gives a NaN input's result the other sign
// than the vector code's. Any number (infinities and zeros with their signs included) must match
// bit for bit, and a NaN against a number is a difference.
static bool same_results(const float *a, const float *b, int n) {
    for (int k = 0; k < n; k++) {
        if (isnan(a[k]) && isnan(b[k])) continue;
        if (memcmp(&a[k], &b[k], sizeof a[k]) != 0) return false;
    }
    return true;
}

// Scalar, 8 lanes and 16 lanes: the same results (same_results) for every 193rd bit pattern
// (NaNs, infinities, denormals, both ends) and for every pattern within 2^14 of the ends of the
// range, each value tried in every lane position.
static void test_fast_expf_widths_agree(void) {
    long differ = 0;
    const float ends[2] = {-87.3f, 88.3f};
    for (int pass = 0; pass < 3; pass++) {
        uint32_t start = 0, step = 193, count = 0xFFFFFFFFu / 193u / 16u;
        if (pass > 0) memcpy(&start, &ends[pass - 1], 4), start -= 1u << 14, step = 1, count = (1u << 15) / 16;
        for (uint32_t v = 0; v < count; v++) {
            float x[16], s[16];
            for (int k = 0; k < 16; k++) x[k] = from_bits(start + (v * 16u + (uint32_t)((k + v) % 16)) * step);
            for (int k = 0; k < 16; k++) s[k] = ct_fast_expf(x[k]);
            float y8[16], sg8[16], sg[16];
            ct_v8f_store(y8, ct_fast_expf_v8(ct_v8f_load(x)));
            ct_v8f_store(y8 + 8, ct_fast_expf_v8(ct_v8f_load(x + 8)));
            ct_v8f_store(sg8, ct_fast_sigmoidf_v8(ct_v8f_load(x)));
            ct_v8f_store(sg8 + 8, ct_fast_sigmoidf_v8(ct_v8f_load(x + 8)));
            for (int k = 0; k < 16; k++) sg[k] = ct_fast_sigmoidf(x[k]);
            differ += !same_results(s, y8, 16) || !same_results(sg, sg8, 16);
#ifdef CT_V16
            float y16[16];
            ct_v16f_store(y16, ct_fast_expf_v16(ct_v16f_load(x)));
            differ += !same_results(s, y16, 16);
            ct_v16f_store(y16, ct_fast_sigmoidf_v16(ct_v16f_load(x)));
            differ += !same_results(sg, y16, 16);
#endif
        }
    }
    CHECK(differ == 0, "%ld groups of 16 differ between the scalar and vector versions", differ);
}

int main(void) {
    CT_RUN(test_fast_expf_accuracy);
    CT_RUN(test_fast_expf_edges);
    CT_RUN(test_fast_expf_widths_agree);
    CT_TEST_EXIT();
}
