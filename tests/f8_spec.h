// What the 8-bit matmul tests share: a seeded generator (each test picks its seed) and the OFP8
// rev 1.0 value of every e4m3 / e5m2 code, worked from the specification's formulas (not from the
// code under test): double, NaN for NaN patterns, +-inf for e5m2's infinities.
#ifndef CT_TEST_F8_SPEC_H
#define CT_TEST_F8_SPEC_H
#include <math.h>
#include <stdint.h>

#include "core/dtype.h"

static uint64_t rng;  // set by the test before use
static uint32_t rnd32(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 32);
}
static double urand(void) { return (rnd32() + 0.5) / 4294967296.0; }  // (0, 1)
static float nrand(void) { return (float)(sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand())); }

static double spec_e4m3(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? ldexp(m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}
static double spec_e5m2(uint8_t b) {
    int s = b >> 7, e = (b >> 2) & 31, m = b & 3;
    if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
    double v = e == 0 ? ldexp(m, -16) : ldexp(1.0 + m / 4.0, e - 15);
    return s ? -v : v;
}
static double spec(uint8_t b, ct_dtype f) { return f == CT_F8_E4M3 ? spec_e4m3(b) : spec_e5m2(b); }
#endif
