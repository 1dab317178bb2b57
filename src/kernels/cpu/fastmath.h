// Vectorisable float math for the CPU kernels (internal to src/kernels/cpu).
// glibc's expf is only vectorised under -ffast-math, which the build does not use; this
// exp is plain arithmetic plus a bit cast, so GCC vectorises the loops that call it.
#ifndef CT_CPU_FASTMATH_H
#define CT_CPU_FASTMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

// exp(x) for float x, relative error < 1.5 ulp (measured) on [-87.3, 88.3]; 0 below (no denormals),
// +inf above, NaN stays NaN. Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a
// degree-6 polynomial for exp(r) (the Cephes coefficients), scaled by 2^n built in the exponent.
static inline float ct_fast_expf(float x) {
    float xc = x < -87.3f ? -87.3f : x;  // (ternaries, not fminf: they vectorise)
    xc = xc > 88.3f ? 88.3f : xc;
    // round to nearest by adding 1.5 * 2^23 (floorf would block vectorisation in GCC 12)
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    y = x < -87.3f ? 0.0f : y;
    y = x > 88.3f ? INFINITY : y;
    return x != x ? x : y;
}

// 1 / (1 + exp(-x))
static inline float ct_fast_sigmoidf(float x) { return 1.0f / (1.0f + ct_fast_expf(-x)); }
#endif
