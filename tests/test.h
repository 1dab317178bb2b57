// Minimal test harness. A test program calls CT_RUN(fn) for each case; each case uses
// CHECK(cond, fmt, ...) and CHECK_CLOSE(a, b, rtol, atol). The program prints one line per
// case ("PASS name" / "FAIL name: why") and exits non-zero when any case failed.
// tests/run_tests.sh adds the PASS/FAIL lines of every program into "N passed, N failed".
#ifndef CT_TEST_H
#define CT_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int ct_test_case_failed;
static int ct_test_failures;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            if (!ct_test_case_failed) {                                               \
                printf("  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);     \
                printf(__VA_ARGS__);                                                  \
                printf("\n");                                                         \
            }                                                                         \
            ct_test_case_failed = 1;                                                  \
        }                                                                             \
    } while (0)

// |a - b| <= atol + rtol * |b|
#define CHECK_CLOSE(a, b, rtol, atol)                                                 \
    do {                                                                              \
        double ct_a_ = (double)(a), ct_b_ = (double)(b);                              \
        CHECK(fabs(ct_a_ - ct_b_) <= (atol) + (rtol) * fabs(ct_b_) && !isnan(ct_a_),  \
              "%s=%.9g vs %s=%.9g", #a, ct_a_, #b, ct_b_);                            \
    } while (0)

#define CT_RUN(fn)                                                                    \
    do {                                                                              \
        ct_test_case_failed = 0;                                                      \
        fn();                                                                         \
        printf("%s %s\n", ct_test_case_failed ? "FAIL" : "PASS", #fn);               \
        fflush(stdout);                                                               \
        ct_test_failures += ct_test_case_failed;                                      \
    } while (0)

#define CT_TEST_EXIT() return ct_test_failures ? 1 : 0

// Max relative error between two arrays, scaled by the larger of max|b| and a floor.
static inline double ct_test_max_rel_err(const float *a, const double *b, long n) {
    double maxb = 1e-6, maxd = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (fabs(b[i]) > maxb) maxb = fabs(b[i]);
        if (d > maxd || isnan(d)) maxd = isnan(d) ? INFINITY : d;
    }
    return maxd / maxb;
}
#endif
