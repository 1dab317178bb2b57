// Array, MX-block and scaled float8 helpers over the scalar conversions in float_formats.h.
// Serial loops on purpose: the kernels decide how to split work across threads.
#include "core/float_formats.h"

#include <math.h>

// ---- arrays ---------------------------------------------------------------------------------

void ct_f32_to_bf16_n(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ct_f32_to_bf16(x[i]);
}

void ct_bf16_to_f32_n(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ct_bf16_to_f32(x[i]);
}

void ct_f32_to_f8_n(const float *x, uint8_t *y, int64_t n, ct_dtype fmt, int saturate) {
    if (fmt == CT_F8_E4M3)
        for (int64_t i = 0; i < n; i++) y[i] = ct_f32_to_e4m3(x[i], saturate);
    else
        for (int64_t i = 0; i < n; i++) y[i] = ct_f32_to_e5m2(x[i], saturate);
}

void ct_f8_to_f32_n(const uint8_t *x, float *y, int64_t n, ct_dtype fmt) {
    // A 256-entry table pays for itself from a few hundred elements on; below that decode inline.
    if (n < 256) {
        for (int64_t i = 0; i < n; i++) y[i] = ct_f8_to_f32(x[i], fmt);
        return;
    }
    float lut[256];
    for (int b = 0; b < 256; b++) lut[b] = ct_f8_to_f32((uint8_t)b, fmt);
    for (int64_t i = 0; i < n; i++) y[i] = lut[x[i]];
}

// ---- MX -------------------------------------------------------------------------------------

// floor(log2(a)) for a finite, positive fp32 given by its bits: exact, including subnormals
// (a subnormal's value is mant * 2^-149, so the leading bit's position says it).
static int floor_log2_bits(uint32_t a) {
    if (a >= 0x00800000u) return (int)(a >> 23) - 127;
    return 31 - __builtin_clz(a) - 149;
}

uint8_t ct_mx_scale_from_amax(float amax, ct_dtype elem) {
    uint32_t a = ct_ff_bits_(amax) & 0x7fffffffu;
    if (a >= 0x7f800000u) return CT_E8M0_NAN;  // inf or NaN in the block
    if (a == 0) return 0x00;                   // all zeros: smallest scale, 2^-127
    // emax_elem: the exponent of the element format's largest normal (MX v1.0 section 6.3):
    // e4m3 448 = 1.75 * 2^8, e5m2 57344 = 1.75 * 2^15.
    int emax_elem = elem == CT_F8_E4M3 ? 8 : 15;
    int x = floor_log2_bits(a) - emax_elem;
    if (x < -127) x = -127;  // e8m0 covers 2^-127 .. 2^127 (0xFF is NaN)
    if (x > 127) x = 127;
    return (uint8_t)(x + 127);
}

// v / 2^X for e8m0 bits s (X = s - 127, s in 0..254) as v * 2^(127 - s): the factor is itself
// an e8m0 value, 254 - s, so it is exact in fp32 (2^-127 is a subnormal but representable).
static float mx_scaled(float v, uint8_t s) { return v * ct_e8m0_to_f32((uint8_t)(254 - s)); }

void ct_mx_quantize_block(const float *x, int n, ct_dtype elem, uint8_t *q, uint8_t *scale) {
    float amax = 0;
    int nan = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (isnan(a)) nan = 1;
        else if (a > amax) amax = a;
    }
    uint8_t s = nan ? CT_E8M0_NAN : ct_mx_scale_from_amax(amax, elem);
    *scale = s;
    if (s == CT_E8M0_NAN) {  // the scale already says NaN; the elements follow suit
        uint8_t qn = elem == CT_F8_E4M3 ? CT_E4M3_NAN : CT_E5M2_NAN;
        for (int i = 0; i < n; i++) q[i] = qn;
        return;
    }
    // V_i / 2^X is exact (a power-of-two multiply that stays normal wherever the result can
    // reach the element's subnormals: |V_i / 2^X| < 2^(emax_elem + 1), scale >= 2^-127), so
    // the only rounding is the element cast; values beyond max normal clamp (saturate).
    for (int i = 0; i < n; i++) q[i] = ct_f32_to_f8(mx_scaled(x[i], s), elem, CT_F8_SATURATE);
}

void ct_mx_dequantize_block(const uint8_t *q, int n, ct_dtype elem, uint8_t scale, float *y) {
    float sc = ct_e8m0_to_f32(scale);  // NaN scale -> NaN elements (MX v1.0 section 5)
    // elem(q) * 2^X is exact in fp32: at most 4 significant bits, exponents within range
    // (down to 2^-9 * 2^-127 = 2^-136 > 2^-149, fp32's smallest subnormal).
    for (int i = 0; i < n; i++) y[i] = ct_f8_to_f32(q[i], elem) * sc;
}

void ct_mx_quantize_rows(const float *x, int64_t rows, int64_t cols, ct_dtype elem, uint8_t *q, uint8_t *scales) {
    int64_t nb = ct_mx_nblocks(cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < nb; b++) {
            int64_t c0 = b * CT_MX_BLOCK;
            int n = (int)(cols - c0 < CT_MX_BLOCK ? cols - c0 : CT_MX_BLOCK);
            ct_mx_quantize_block(x + r * cols + c0, n, elem, q + r * cols + c0, scales + r * nb + b);
        }
}

void ct_mx_dequantize_rows(const uint8_t *q, const uint8_t *scales, int64_t rows, int64_t cols, ct_dtype elem,
                           float *y) {
    int64_t nb = ct_mx_nblocks(cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < nb; b++) {
            int64_t c0 = b * CT_MX_BLOCK;
            int n = (int)(cols - c0 < CT_MX_BLOCK ? cols - c0 : CT_MX_BLOCK);
            ct_mx_dequantize_block(q + r * cols + c0, n, elem, scales[r * nb + b], y + r * cols + c0);
        }
}

// ---- tensorwise / rowwise float8 (torchao) ---------------------------------------------------

float ct_amax_f32(const float *x, int64_t n) {
    float m = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (isnan(a)) return a;
        if (a > m) m = a;
    }
    return m;
}

void ct_amax_rows(const float *x, int64_t rows, int64_t cols, float *amax) {
    for (int64_t r = 0; r < rows; r++) amax[r] = ct_amax_f32(x + r * cols, cols);
}

void ct_amax_cols(const float *x, int64_t rows, int64_t cols, float *amax) {
    for (int64_t c = 0; c < cols; c++) amax[c] = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float a = fabsf(x[r * cols + c]);
            if (isnan(amax[c])) continue;   // NaN sticks, as in torch.amax
            if (isnan(a) || a > amax[c]) amax[c] = a;
        }
}

float ct_f8_scale_from_amax(float amax, ct_dtype fmt, int pow2) {
    // torchao amax_to_scale: float8_max / clamp(amax.double(), min=EPS), then to fp32.
    double a = (double)amax < CT_F8_AMAX_EPS ? CT_F8_AMAX_EPS : (double)amax;  // NaN falls through
    float s = (float)((double)ct_f8_max(fmt) / a);
    if (pow2 && isfinite(s) && s > 0) {
        // torchao _round_scale_down_to_power_of_2: exp2(floor(log2(s))); exact via the exponent
        // (s >= 448 / 3.4e38 stays an fp32 normal, so clearing the mantissa is floor).
        s = ct_ff_float_(ct_ff_bits_(s) & 0x7f800000u);
    }
    return s;
}

void ct_f8_quantize(const float *x, int64_t n, ct_dtype fmt, float scale, uint8_t *q) {
    for (int64_t i = 0; i < n; i++) q[i] = ct_f32_to_f8(x[i] * scale, fmt, CT_F8_SATURATE);
}

void ct_f8_dequantize(const uint8_t *q, int64_t n, ct_dtype fmt, float scale, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = ct_f8_to_f32(q[i], fmt) / scale;
}

void ct_f8_quantize_rows(const float *x, int64_t rows, int64_t cols, ct_dtype fmt, int pow2, uint8_t *q,
                         float *scales) {
    for (int64_t r = 0; r < rows; r++) {
        scales[r] = ct_f8_scale_from_amax(ct_amax_f32(x + r * cols, cols), fmt, pow2);
        ct_f8_quantize(x + r * cols, cols, fmt, scales[r], q + r * cols);
    }
}

void ct_f8_quantize_cols(const float *x, int64_t rows, int64_t cols, ct_dtype fmt, int pow2, uint8_t *q,
                         float *scales) {
    ct_amax_cols(x, rows, cols, scales);
    for (int64_t c = 0; c < cols; c++) scales[c] = ct_f8_scale_from_amax(scales[c], fmt, pow2);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            q[r * cols + c] = ct_f32_to_f8(x[r * cols + c] * scales[c], fmt, CT_F8_SATURATE);
}

void ct_f8_dequantize_rows(const uint8_t *q, const float *scales, int64_t rows, int64_t cols, ct_dtype fmt,
                           float *y) {
    for (int64_t r = 0; r < rows; r++) ct_f8_dequantize(q + r * cols, cols, fmt, scales[r], y + r * cols);
}

void ct_f8_dequantize_cols(const uint8_t *q, const float *scales, int64_t rows, int64_t cols, ct_dtype fmt,
                           float *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = ct_f8_to_f32(q[r * cols + c], fmt) / scales[c];
}
