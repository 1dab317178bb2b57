// Narrow floating-point formats: bf16, IEEE f16, OCP float8 (e4m3 "fn", e5m2), the OCP MX
// scale e8m0, MX block scaling (MXFP8) and torchao-style tensorwise / rowwise float8 scaling.
//
// Every narrowing rounds to nearest, ties to even, computed on the fp32 bit pattern (exact: no
// intermediate rounding). Specifications:
//   OCP 8-bit Floating Point Specification (OFP8) rev 1.0, "E4M3" / "E5M2" tables:
//     e4m3: bias 7, no infinities, S.1111.111 is NaN, max finite S.1111.110 = 448,
//           smallest subnormal 2^-9;
//     e5m2: bias 15, IEEE-like, S.11111.00 = inf, S.11111.{01,10,11} NaN, max finite 57344,
//           smallest subnormal 2^-16.
//   OCP Microscaling Formats (MX) v1.0: E8M0 scale (2^(x-127), 0xFF NaN, no zero, no sign);
//     conversion to MX (section 6.3): X = floor(log2(amax)) - emax_elem, P_i = V_i / 2^X
//     quantised to the element format, clamping to its max normal.
// Scalars are static inline CT_FF_HD (they run in the kernels' inner loops), and host-and-device functions
// under nvcc, so the cuda kernels cast with these very lines; array and block helpers are in
// float_formats.c and are plain serial loops (the kernels parallelise around them).
#ifndef CT_FLOAT_FORMATS_H
#define CT_FLOAT_FORMATS_H
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

#ifdef __CUDACC__
#define CT_FF_HD __host__ __device__
#else
#define CT_FF_HD
#endif

// Overflow policy of an fp32 -> fp8 cast. SATURATE (what training casts use, torchao's
// to_fp8_saturated and the MX spec's element quantisation): beyond max finite, +-inf included,
// becomes +-max finite. NONSAT (OFP8's plain conversion): overflow gives NaN in e4m3 (it has no
// infinity) and +-inf in e5m2. NaN stays NaN either way.
#define CT_F8_NONSAT 0
#define CT_F8_SATURATE 1

#define CT_E4M3_MAX 448.0f
#define CT_E5M2_MAX 57344.0f
#define CT_E4M3_NAN 0x7Fu   // canonical NaN written by the casts (sign kept from the input)
#define CT_E5M2_NAN 0x7Eu   // quiet NaN, S.11111.10
#define CT_E8M0_NAN 0xFFu
#define CT_MX_BLOCK 32      // MX block size k (MX v1.0: k = 32 for every concrete format)

static inline CT_FF_HD uint32_t ct_ff_bits_(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline CT_FF_HD float ct_ff_float_(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

// ---- bf16: the top half of an fp32 ---------------------------------------------------------
static inline CT_FF_HD uint16_t ct_f32_to_bf16(float x) {
    uint32_t u = ct_ff_bits_(x);
    // NaN: keep sign and top payload, force the quiet bit so truncation cannot make it inf.
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out of
    // the mantissa bumps the exponent, which is also right (up to inf past bf16's max).
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline CT_FF_HD float ct_bf16_to_f32(uint16_t b) { return ct_ff_float_((uint32_t)b << 16); }

// ---- generic narrow encoder / decoder (1 sign bit, E exponent bits, M mantissa bits) --------
// mag_max: largest finite magnitude pattern; mag_inf: infinity pattern or 0 when none;
// mag_nan: NaN pattern written; sign_shift: where the sign bit goes (7 for fp8, 15 for f16).
static inline CT_FF_HD uint32_t ct_ff_encode_(float x, int mbits, int bias, uint32_t mag_max, uint32_t mag_inf,
                                     uint32_t mag_nan, int sign_shift, int saturate) {
    uint32_t u = ct_ff_bits_(x), sign = (u >> 31) << sign_shift, a = u & 0x7fffffffu;
    uint32_t overflow = saturate ? mag_max : (mag_inf ? mag_inf : mag_nan);
    if (a > 0x7f800000u) return sign | mag_nan;
    if (a == 0x7f800000u) return sign | overflow;
    int e = (int)(a >> 23);
    uint32_t sig = a & 0x7fffffu;
    if (e) sig |= 0x800000u; else e = 1;  // fp32 subnormal: no hidden bit, exponent -126
    e -= 127;                              // |x| = sig * 2^(e - 23)
    int emin = 1 - bias, shift = 23 - mbits;
    uint32_t base;
    if (e >= emin) {
        // Normal target: q = sig >> shift carries the hidden bit at 2^mbits, which adds one to
        // the exponent field, hence (e + bias - 1). A rounding carry bumps the exponent too.
        base = (uint32_t)(e + bias - 1) << mbits;
    } else {
        // Subnormal target: count units of 2^(emin - mbits); reaching 2^mbits units is exactly
        // the smallest normal's pattern, so the carry needs no special case either.
        shift += emin - e;
        base = 0;
    }
    uint32_t q = 0;
    if (shift <= 25) {  // beyond 25 even the largest sig is below half a unit: rounds to zero
        uint32_t r = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
        q = sig >> shift;
        if (r > half || (r == half && (q & 1u))) q++;
    }
    uint32_t mag = base + q;
    return sign | (mag > mag_max ? overflow : mag);
}

// ieee: the all-ones exponent is inf (mantissa 0) / NaN; otherwise (e4m3fn) only the all-ones
// pattern is NaN and the rest of that binade holds ordinary numbers.
static inline CT_FF_HD float ct_ff_decode_(uint32_t b, int ebits, int mbits, int bias, int ieee) {
    uint32_t sign = (b >> (ebits + mbits)) & 1u, e = (b >> mbits) & ((1u << ebits) - 1u);
    uint32_t m = b & ((1u << mbits) - 1u), s32 = sign << 31, etop = (1u << ebits) - 1u;
    if (e == etop && (ieee || m == (1u << mbits) - 1u))
        return ct_ff_float_(s32 | (m ? 0x7fc00000u : 0x7f800000u));
    if (e == 0)  // subnormal: m * 2^(1 - bias - mbits), an exact fp32 product
        return ct_ff_float_(s32 | ct_ff_bits_((float)m * ct_ff_float_((uint32_t)(128 - bias - mbits) << 23)));
    return ct_ff_float_(s32 | ((e - (uint32_t)bias + 127u) << 23) | (m << (23 - mbits)));
}

// ---- float8 ---------------------------------------------------------------------------------
static inline CT_FF_HD uint8_t ct_f32_to_e4m3(float x, int saturate) {
    return (uint8_t)ct_ff_encode_(x, 3, 7, 0x7Eu, 0, CT_E4M3_NAN, 7, saturate);
}
static inline CT_FF_HD uint8_t ct_f32_to_e5m2(float x, int saturate) {
    return (uint8_t)ct_ff_encode_(x, 2, 15, 0x7Bu, 0x7Cu, CT_E5M2_NAN, 7, saturate);
}
static inline CT_FF_HD float ct_e4m3_to_f32(uint8_t b) { return ct_ff_decode_(b, 4, 3, 7, 0); }
static inline CT_FF_HD float ct_e5m2_to_f32(uint8_t b) { return ct_ff_decode_(b, 5, 2, 15, 1); }
// fmt is CT_F8_E4M3 or CT_F8_E5M2 (anything else is treated as e5m2: callers check dtypes).
static inline CT_FF_HD uint8_t ct_f32_to_f8(float x, ct_dtype fmt, int saturate) {
    return fmt == CT_F8_E4M3 ? ct_f32_to_e4m3(x, saturate) : ct_f32_to_e5m2(x, saturate);
}
static inline CT_FF_HD float ct_f8_to_f32(uint8_t b, ct_dtype fmt) {
    return fmt == CT_F8_E4M3 ? ct_e4m3_to_f32(b) : ct_e5m2_to_f32(b);
}
static inline CT_FF_HD float ct_f8_max(ct_dtype fmt) { return fmt == CT_F8_E4M3 ? CT_E4M3_MAX : CT_E5M2_MAX; }

// ---- IEEE binary16 (for f16 checkpoints; RNE, overflow to inf as IEEE 754 says) -------------
static inline CT_FF_HD uint16_t ct_f32_to_f16(float x) {
    return (uint16_t)ct_ff_encode_(x, 10, 15, 0x7BFFu, 0x7C00u, 0x7E00u, 15, 0);
}
static inline CT_FF_HD float ct_f16_to_f32(uint16_t h) { return ct_ff_decode_(h, 5, 10, 15, 1); }

// ---- e8m0: 2^(x - 127); 0x00 = 2^-127 (an fp32 subnormal, exact), 0xFF = NaN ---------------
static inline CT_FF_HD float ct_e8m0_to_f32(uint8_t x) {
    if (x == CT_E8M0_NAN) return ct_ff_float_(0x7fc00000u);
    return ct_ff_float_(x ? (uint32_t)x << 23 : 0x00400000u);
}

// ---- arrays (n elements, serial) ------------------------------------------------------------
void ct_f32_to_bf16_n(const float *x, uint16_t *y, int64_t n);
void ct_bf16_to_f32_n(const uint16_t *x, float *y, int64_t n);
void ct_f32_to_f8_n(const float *x, uint8_t *y, int64_t n, ct_dtype fmt, int saturate);
void ct_f8_to_f32_n(const uint8_t *x, float *y, int64_t n, ct_dtype fmt);

// ---- MX block scaling (OCP MX v1.0 section 6.3), elements e4m3 (MXFP8) or e5m2 ---------------
// Shared scale for a block whose largest magnitude is amax, as e8m0 bits:
//   X = floor(log2(amax)) - emax_elem  (emax_elem 8 for e4m3, 15 for e5m2), clamped to the
//   e8m0 range [-127, 127]; amax == 0 (all-zero block) gives the smallest scale, 0x00 = 2^-127
//   (log2(0) = -inf clamped, as torchao does; any scale decodes zeros to zeros); amax NaN or
//   inf gives 0xFF (NaN), which makes the whole block decode to NaN (MX v1.0 section 5).
uint8_t ct_mx_scale_from_amax(float amax, ct_dtype elem);
// One block of n <= CT_MX_BLOCK values: *scale = the block's e8m0 scale, q[i] = saturating
// cast of x[i] / 2^X (an exact power-of-two multiply). dequantize: y[i] = elem(q[i]) * 2^X.
void ct_mx_quantize_block(const float *x, int n, ct_dtype elem, uint8_t *q, uint8_t *scale);
void ct_mx_dequantize_block(const uint8_t *q, int n, ct_dtype elem, uint8_t scale, float *y);
// Row-major (rows, cols) blocked along cols (the reduction dimension of x @ w^T). The scale
// array is (rows, ct_mx_nblocks(cols)); when cols % 32 != 0 the last block of each row is a
// shorter tail block with its own scale (the spec's k = 32 padded with zeros, which cannot change
// amax). A (K, N) operand blocked along K: quantise its transpose.
static inline int64_t ct_mx_nblocks(int64_t cols) { return (cols + CT_MX_BLOCK - 1) / CT_MX_BLOCK; }
void ct_mx_quantize_rows(const float *x, int64_t rows, int64_t cols, ct_dtype elem, uint8_t *q, uint8_t *scales);
void ct_mx_dequantize_rows(const uint8_t *q, const uint8_t *scales, int64_t rows, int64_t cols, ct_dtype elem,
                           float *y);

// ---- tensorwise / rowwise float8 scaling (torchao float8 training) ---------------------------
// amax: max |x|; NaN if any element is NaN (as torch.amax), 0 for n == 0.
float ct_amax_f32(const float *x, int64_t n);
void ct_amax_rows(const float *x, int64_t rows, int64_t cols, float *amax);  // amax[rows]
void ct_amax_cols(const float *x, int64_t rows, int64_t cols, float *amax);  // amax[cols]
// scale = max_finite(fmt) / max(amax, CT_F8_AMAX_EPS), in double then rounded to fp32 (torchao's
// amax_to_scale). pow2: round the scale down to a power of two (torchao's
// round_scales_to_power_of_2, used by its rowwise recipe) so scaling is exact.
#define CT_F8_AMAX_EPS 1e-12
float ct_f8_scale_from_amax(float amax, ct_dtype fmt, int pow2);
// q[i] = saturating cast of fp32(x[i] * scale); dequantize: y[i] = fp32(f8(q[i]) / scale).
void ct_f8_quantize(const float *x, int64_t n, ct_dtype fmt, float scale, uint8_t *q);
void ct_f8_dequantize(const uint8_t *q, int64_t n, ct_dtype fmt, float scale, float *y);
// Rowwise: one scale per row (scales[rows]); colwise: one per column (scales[cols]). Each
// computes the amax, the scale (pow2 as above) and the saturating cast in one call.
void ct_f8_quantize_rows(const float *x, int64_t rows, int64_t cols, ct_dtype fmt, int pow2, uint8_t *q,
                         float *scales);
void ct_f8_quantize_cols(const float *x, int64_t rows, int64_t cols, ct_dtype fmt, int pow2, uint8_t *q,
                         float *scales);
void ct_f8_dequantize_rows(const uint8_t *q, const float *scales, int64_t rows, int64_t cols, ct_dtype fmt,
                           float *y);
void ct_f8_dequantize_cols(const uint8_t *q, const float *scales, int64_t rows, int64_t cols, ct_dtype fmt,
                           float *y);
#endif
