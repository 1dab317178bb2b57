// Tests of core/float_formats.h. Expected values come from the specifications' formulas worked
// in double inside this file (ref_decode, ref_encode, frexp for floor(log2)), never from the code
// under test: OFP8 rev 1.0 (e4m3 "fn": bias 7, S.1111.111 NaN, no inf; e5m2: bias 15, IEEE
// specials), OCP MX v1.0 (e8m0 = 2^(x-127), X = floor(log2(amax)) - emax_elem) and IEEE 754
// round-to-nearest-even for bf16 / f16.
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "core/float_formats.h"
#include "test.h"

static float bitsf(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

typedef struct { int ebits, mbits, bias, ieee; ct_dtype dt; uint8_t maxp; double next; } fmt8;
static const fmt8 E4M3 = {4, 3, 7, 0, CT_F8_E4M3, 0x7E, 480.0};    // next: the value past max
static const fmt8 E5M2 = {5, 2, 15, 1, CT_F8_E5M2, 0x7B, 65536.0};  // (for the overflow tie)

// (-1)^s * 2^(e-bias) * (1 + m/2^M), subnormal 2^(1-bias) * m/2^M when e == 0; specials.
static double ref_decode(const fmt8 *f, unsigned p) {
    unsigned s = (p >> (f->ebits + f->mbits)) & 1, e = (p >> f->mbits) & ((1u << f->ebits) - 1);
    unsigned m = p & ((1u << f->mbits) - 1), etop = (1u << f->ebits) - 1;
    double v;
    if (f->ieee && e == etop) v = m ? NAN : INFINITY;
    else if (!f->ieee && e == etop && m == (1u << f->mbits) - 1) v = NAN;
    else if (e == 0) v = ldexp((double)m / (1 << f->mbits), 1 - f->bias);
    else v = ldexp(1.0 + (double)m / (1 << f->mbits), (int)e - f->bias);
    return s ? -v : v;
}

// Nearest representable by search over the positive table; a tie goes to the even pattern
// (the pattern's last bit is the mantissa's). "next" stands in for the first value past max
// finite (pattern maxp + 1): choosing it, or anything beyond it, is an overflow.
static unsigned ref_encode(const fmt8 *f, float xf, int sat) {
    double x = xf, ax = fabs(x);
    unsigned sign = signbit(x) ? 0x80u : 0u, over = sat ? f->maxp : (f->ieee ? 0x7Cu : 0x7Fu);
    if (isnan(x)) return 0xFFu;  // any NaN: compared by isnan below
    if (ax >= f->next) return sign | over;
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned p = 0; p <= f->maxp + 1u; p++) {
        double v = p == f->maxp + 1u ? f->next : ref_decode(f, p), d = fabs(ax - v);
        if (d < bd || (d == bd && !(p & 1))) { bd = d; best = p; }
    }
    return sign | (best == f->maxp + 1u ? over : best);
}

static uint8_t enc(const fmt8 *f, float x, int sat) { return ct_f32_to_f8(x, f->dt, sat); }
static float dec(const fmt8 *f, uint8_t p) { return ct_f8_to_f32(p, f->dt); }
static int same(double a, double b) { return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)); }

static void check_all_patterns(const fmt8 *f) {
    int nan_count = 0;
    for (unsigned p = 0; p < 256; p++) {
        double want = ref_decode(f, p);
        float got = dec(f, (uint8_t)p);
        CHECK(same(got, want), "pattern 0x%02x: %.9g vs %.9g", p, got, want);
        nan_count += isnan(want);
        if (isnan(want)) {
            CHECK(isnan(dec(f, enc(f, got, 0))) && isnan(dec(f, enc(f, got, 1))), "NaN 0x%02x", p);
        } else {
            int sat = !isinf(want);  // inf re-encodes as inf only without saturation
            CHECK(enc(f, got, sat) == p, "encode(decode(0x%02x)) = 0x%02x", p, enc(f, got, sat));
        }
    }
    CHECK(nan_count == (f->ieee ? 6 : 2), "NaN patterns %d", nan_count);
}

static void test_e4m3_all_patterns(void) {
    check_all_patterns(&E4M3);
    CHECK(ct_e4m3_to_f32(0x7E) == 448.0f && ct_e4m3_to_f32(0x01) == 0x1p-9f && ct_e4m3_to_f32(0x08) == 0x1p-6f,
          "anchors");
}

static void test_e5m2_all_patterns(void) {
    check_all_patterns(&E5M2);
    CHECK(ct_e5m2_to_f32(0x7B) == 57344.0f && ct_e5m2_to_f32(0x01) == 0x1p-16f && isinf(ct_e5m2_to_f32(0x7C)),
          "anchors");
}

// Halfway points between consecutive values (taken from the spec table) round to the even
// pattern; one fp32 ulp either side rounds to the nearer neighbour. Both signs, both modes.
static void check_halfway(const fmt8 *f) {
    for (unsigned p = 0; p <= f->maxp; p++) {
        double lo = ref_decode(f, p), hi = p == f->maxp ? f->next : ref_decode(f, p + 1);
        float mid = (float)((lo + hi) / 2);  // exact: a few significant bits
        CHECK((double)mid == (lo + hi) / 2, "mid not exact");
        unsigned even = (p & 1) ? p + 1 : p, up = p + 1;
        if (p == f->maxp) up = even = f->ieee ? 0x7C : 0x7F;  // past max: overflow...
        if (p == f->maxp && !(p & 1)) even = p;              // ...unless the tie goes to max
        for (int sat = 0; sat < 2; sat++)
            for (int neg = 0; neg < 2; neg++) {
                float sg = neg ? -1.0f : 1.0f, m = sg * mid;
                unsigned sb = neg ? 0x80u : 0u;
                unsigned e_mid = even, e_up = up;
                if (sat && e_mid > f->maxp) e_mid = f->maxp;
                if (sat && e_up > f->maxp) e_up = f->maxp;
                CHECK(enc(f, m, sat) == (sb | e_mid), "tie %g sat %d: 0x%02x", m, sat, enc(f, m, sat));
                CHECK(enc(f, nextafterf(m, sg * INFINITY), sat) == (sb | e_up), "above %g", m);
                CHECK(enc(f, nextafterf(m, 0.0f), sat) == (sb | p), "below %g", m);
            }
    }
}
static void test_f8_halfway_ties_to_even(void) { check_halfway(&E4M3); check_halfway(&E5M2); }

static void test_f8_saturation_and_overflow(void) {
    const float big[] = {449.0f, 480.0f, 1e6f, FLT_MAX, INFINITY};
    for (int i = 0; i < 5; i++) {
        CHECK(ct_f32_to_e4m3(big[i], CT_F8_SATURATE) == 0x7E, "%g -> 448", big[i]);
        CHECK(ct_f32_to_e4m3(-big[i], CT_F8_SATURATE) == 0xFE, "-%g -> -448", big[i]);
    }
    // Non-saturating: IEEE rounds first, so 449 (< 464, halfway to the missing 480) is 448.
    CHECK(ct_f32_to_e4m3(449.0f, CT_F8_NONSAT) == 0x7E, "449 nonsat");
    CHECK(isnan(ct_e4m3_to_f32(ct_f32_to_e4m3(465.0f, CT_F8_NONSAT))), "465 nonsat NaN");
    CHECK(ct_f32_to_e4m3(1e6f, CT_F8_NONSAT) == 0x7F && ct_f32_to_e4m3(-INFINITY, CT_F8_NONSAT) == 0xFF, "NaN");
    const float big5[] = {57345.0f, 61439.0f, 61440.0f, 1e9f, INFINITY};
    for (int i = 0; i < 5; i++) {
        CHECK(ct_f32_to_e5m2(big5[i], CT_F8_SATURATE) == 0x7B, "%g -> 57344", big5[i]);
        CHECK(ct_f32_to_e5m2(-big5[i], CT_F8_SATURATE) == 0xFB, "-%g", big5[i]);
    }
    CHECK(ct_f32_to_e5m2(61439.0f, CT_F8_NONSAT) == 0x7B, "below halfway stays max");
    CHECK(ct_f32_to_e5m2(61440.0f, CT_F8_NONSAT) == 0x7C, "halfway ties to even = inf");
    CHECK(ct_f32_to_e5m2(-1e9f, CT_F8_NONSAT) == 0xFC && ct_f32_to_e5m2(INFINITY, CT_F8_NONSAT) == 0x7C, "inf");
    CHECK(ct_f32_to_e4m3(448.0f, 0) == 0x7E && ct_f32_to_e4m3(-448.0f, 1) == 0xFE, "largest e4m3");
    CHECK(ct_f32_to_e5m2(57344.0f, 0) == 0x7B && ct_f32_to_e5m2(-57344.0f, 1) == 0xFB, "largest e5m2");
}

static void test_f8_nan_zero_subnormal(void) {
    const fmt8 *fs[2] = {&E4M3, &E5M2};
    for (int k = 0; k < 2; k++) {
        const fmt8 *f = fs[k];
        double tiny = ref_decode(f, 1);  // smallest subnormal from the formula
        for (int sat = 0; sat < 2; sat++) {
            CHECK(isnan(dec(f, enc(f, NAN, sat))) && isnan(dec(f, enc(f, -NAN, sat))), "NaN");
            CHECK(enc(f, (float)tiny, sat) == 0x01 && enc(f, (float)-tiny, sat) == 0x81, "smallest subnormal");
            CHECK(enc(f, (float)(tiny / 2), sat) == 0x00, "half smallest ties to even zero");
            CHECK(enc(f, (float)(-tiny / 2), sat) == 0x80, "-half smallest -> -0");
            CHECK(enc(f, nextafterf((float)(tiny / 2), 1), sat) == 0x01, "just above half");
            CHECK(enc(f, (float)(tiny / 3), sat) == 0x00 && enc(f, (float)(-tiny / 3), sat) == 0x80, "below");
            CHECK(enc(f, 1e-45f, sat) == 0x00 && enc(f, -1e-45f, sat) == 0x80, "fp32 subnormal");
            CHECK(enc(f, 0.0f, sat) == 0x00 && enc(f, -0.0f, sat) == 0x80, "signed zero");
            CHECK(signbit(dec(f, 0x80)) && dec(f, 0x80) == 0, "-0 decodes");
            double sub_max = ref_decode(f, (1u << f->mbits) - 1), nmin = ref_decode(f, 1u << f->mbits);
            CHECK(enc(f, (float)((sub_max + nmin) / 2), sat) == (1u << f->mbits), "subnormal->normal tie");
        }
    }
}

// Random fp32 patterns (all exponents, both signs) against the table search.
static void test_f8_random_vs_reference(void) {
    uint64_t st = 0x9E3779B97F4A7C15ull;
    const fmt8 *fs[2] = {&E4M3, &E5M2};
    int bad = 0;
    for (int i = 0; i < 200000 && bad < 5; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(st >> 32);
        if (i & 1) u = (u & 0x807fffffu) | ((uint32_t)(100 + (st >> 20) % 60) << 23);  // near the range
        float x = bitsf(u);
        for (int k = 0; k < 2; k++)
            for (int sat = 0; sat < 2; sat++) {
                unsigned want = ref_encode(fs[k], x, sat), got = enc(fs[k], x, sat);
                int ok = isnan(x) ? isnan(dec(fs[k], (uint8_t)got)) : got == want;
                if (!ok) bad++;
                CHECK(ok, "x=%.9g (0x%08x) fmt %d sat %d: 0x%02x vs 0x%02x", x, u, k, sat, got, want);
            }
    }
}

static void test_bf16(void) {
    const uint32_t in[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F817FFFu, 0x3F800000u, 0x80000000u,
                           0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x00000001u, 0x807FFFFFu};
    const uint16_t want[] = {0x3F80, 0x3F82, 0x3F81, 0x3F81, 0x3F80, 0x8000, 0x7F80, 0xFF80, 0x7F80, 0x0000, 0x8080};
    for (int i = 0; i < 11; i++)
        CHECK(ct_f32_to_bf16(bitsf(in[i])) == want[i], "0x%08x -> 0x%04x", in[i], ct_f32_to_bf16(bitsf(in[i])));
    const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu};
    for (int i = 0; i < 4; i++) CHECK(isnan(ct_bf16_to_f32(ct_f32_to_bf16(bitsf(nans[i])))), "NaN 0x%08x", nans[i]);
    // Random finite values: nearest of the two neighbours in double, ties to the even one.
    uint64_t st = 12345;
    for (int i = 0; i < 100000; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(st >> 32);
        if ((u & 0x7f800000u) == 0x7f800000u || (u & 0x7fff0000u) >= 0x7f7f0000u) continue;
        if (i & 1) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
        uint32_t lo = u >> 16, hi = lo + 1;
        double x = bitsf(u), dl = fabs(x - bitsf(lo << 16)), dh = fabs(x - bitsf(hi << 16));
        uint32_t w = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
        CHECK(ct_f32_to_bf16(bitsf(u)) == w, "0x%08x", u);
    }
    uint16_t b[3];
    float src[3] = {1.00390625f, -0.0f, 3.0f}, back[3];
    ct_f32_to_bf16_n(src, b, 3);
    ct_bf16_to_f32_n(b, back, 3);
    CHECK(b[0] == 0x3F80 && b[1] == 0x8000 && back[2] == 3.0f && signbit(back[1]), "arrays");
}

static void test_f16(void) {
    const fmt8 F16 = {5, 10, 15, 1, CT_F16, 0, 0};
    for (unsigned p = 0; p < 65536; p++) {
        double want = ref_decode(&F16, p);
        float got = ct_f16_to_f32((uint16_t)p);
        CHECK(same(got, want), "f16 0x%04x", p);
        if (!isnan(want)) CHECK(ct_f32_to_f16(got) == p, "f16 round trip 0x%04x", p);
    }
    CHECK(ct_f32_to_f16(65504.0f) == 0x7BFF && ct_f32_to_f16(65519.0f) == 0x7BFF, "max");
    CHECK(ct_f32_to_f16(65520.0f) == 0x7C00 && ct_f32_to_f16(0x1p-25f) == 0 && ct_f32_to_f16(0x1p-24f) == 1, "edges");
}

static void test_e8m0(void) {
    for (unsigned x = 0; x < 256; x++) {
        float got = ct_e8m0_to_f32((uint8_t)x);
        if (x == 255) CHECK(isnan(got), "0xFF NaN");
        else CHECK((double)got == ldexp(1.0, (int)x - 127), "e8m0 %u: %g", x, got);
    }
}

// floor(log2(a)) by frexp: a = m * 2^e with m in [0.5, 1), so floor(log2 a) = e - 1.
static int ref_floor_log2(double a) { int e; frexp(a, &e); return e - 1; }

static void test_mx_scale_selection(void) {
    float z[32] = {0}, y[32];
    uint8_t q[32], s;
    ct_mx_quantize_block(z, 32, CT_F8_E4M3, q, &s);
    CHECK(s == 0x00, "all-zero block: smallest scale 2^-127, got 0x%02x", s);
    ct_mx_dequantize_block(q, 32, CT_F8_E4M3, s, y);
    for (int i = 0; i < 32; i++) CHECK(q[i] == 0 && y[i] == 0, "zero element %d", i);
    // One huge value: X = floor(log2 1e30) - 8 = 91; the small ones flush to zero.
    float h[32];
    for (int i = 0; i < 32; i++) h[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + (float)i);
    h[7] = 1e30f;
    ct_mx_quantize_block(h, 32, CT_F8_E4M3, q, &s);
    int X = ref_floor_log2(1e30f) - 8;
    CHECK(X == 91 && s == X + 127, "huge: scale 0x%02x, X %d", s, X);
    ct_mx_dequantize_block(q, 32, CT_F8_E4M3, s, y);
    for (int i = 0; i < 32; i++)
        if (i != 7) CHECK((q[i] & 0x7F) == 0 && y[i] == 0, "small %d flushes: 0x%02x", i, q[i]);
    CHECK((double)y[7] == 416.0 * ldexp(1, 91), "huge element 1e30/2^91 = 403.9 -> 416: %g", y[7]);
    // amax exactly 2^5: X = -3, element 256 exactly.
    float p2[32];
    for (int i = 0; i < 32; i++) p2[i] = 0.37f * (float)(i - 16);
    p2[3] = -32.0f;
    ct_mx_quantize_block(p2, 32, CT_F8_E4M3, q, &s);
    CHECK(s == 127 - 3 && q[3] == 0xF8, "power of two amax: scale 0x%02x q 0x%02x", s, q[3]);
    // amax just below 2^5: X = -4, 31.999998 * 16 rounds past 448 and clamps to 448 (-> 28).
    p2[3] = nextafterf(32.0f, 0);
    ct_mx_quantize_block(p2, 32, CT_F8_E4M3, q, &s);
    ct_mx_dequantize_block(q, 32, CT_F8_E4M3, s, y);
    CHECK(s == 127 - 4 && q[3] == 0x7E && y[3] == 28.0f, "below 2^5: 0x%02x 0x%02x %g", s, q[3], y[3]);
    // e5m2 elements: emax 15.
    CHECK(ct_mx_scale_from_amax(1.0f, CT_F8_E5M2) == 127 - 15 && ct_mx_scale_from_amax(1.0f, CT_F8_E4M3) == 119, "emax");
    // Clamping to the e8m0 range and specials.
    CHECK(ct_mx_scale_from_amax(1e-40f, CT_F8_E4M3) == 0 && ct_mx_scale_from_amax(FLT_MAX, CT_F8_E4M3) == 127 + 119,
          "range");
    CHECK(ct_mx_scale_from_amax(INFINITY, CT_F8_E4M3) == 0xFF && ct_mx_scale_from_amax(NAN, CT_F8_E4M3) == 0xFF, "nan");
    p2[9] = NAN;
    ct_mx_quantize_block(p2, 32, CT_F8_E4M3, q, &s);
    ct_mx_dequantize_block(q, 32, CT_F8_E4M3, s, y);
    CHECK(s == 0xFF && isnan(y[0]) && isnan(y[31]), "NaN block");
}

// quantise -> dequantise error within half an e4m3 ulp at the block's scale (or the clamp).
static void test_mx_roundtrip_error_and_rows(void) {
    enum { R = 5, C = 70 };  // 70 = 2 full blocks + a tail of 6
    static float x[R * C], y[R * C], yb[32];
    static uint8_t q[R * C], sc[R * 3], qb[32];
    uint64_t st = 7;
    for (int i = 0; i < R * C; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(st >> 11) / 9007199254740992.0;
        x[i] = (float)((u - 0.5) * ldexp(1, (int)((st >> 5) % 40) - 20));
    }
    ct_mx_quantize_rows(x, R, C, CT_F8_E4M3, q, sc);
    ct_mx_dequantize_rows(q, sc, R, C, CT_F8_E4M3, y);
    CHECK(ct_mx_nblocks(C) == 3, "blocks");
    for (int r = 0; r < R; r++)
        for (int b = 0; b < 3; b++) {
            int c0 = b * 32, n = b == 2 ? 6 : 32;
            double amax = 0;
            for (int i = 0; i < n; i++) amax = fmax(amax, fabs(x[r * C + c0 + i]));
            int X = ref_floor_log2(amax) - 8;
            CHECK(sc[r * 3 + b] == X + 127, "row %d block %d scale", r, b);
            uint8_t s1;
            ct_mx_quantize_block(x + r * C + c0, n, CT_F8_E4M3, qb, &s1);
            ct_mx_dequantize_block(qb, n, CT_F8_E4M3, s1, yb);
            for (int i = 0; i < n; i++) {
                double v = fabs((double)x[r * C + c0 + i]) / ldexp(1, X), err = fabs((double)y[r * C + c0 + i] - x[r * C + c0 + i]);
                double half = v < ldexp(1, -6) ? ldexp(1, -10) : ldexp(1, ref_floor_log2(v) - 4);
                double bound = (v > 448 ? v - 448 : half) * ldexp(1, X);
                CHECK(err <= bound, "r%d c%d err %g bound %g", r, c0 + i, err, bound);
                CHECK(yb[i] == y[r * C + c0 + i], "rows == blocks");
            }
        }
}

static void test_tensorwise_rowwise(void) {
    CHECK(ct_f8_scale_from_amax(2.0f, CT_F8_E4M3, 0) == 224.0f, "448/2");
    CHECK(ct_f8_scale_from_amax(0.0f, CT_F8_E4M3, 0) == (float)(448.0 / 1e-12), "eps");
    CHECK(ct_f8_scale_from_amax(3.0f, CT_F8_E4M3, 1) == 128.0f && ct_f8_scale_from_amax(1.0f, CT_F8_E5M2, 1) == 32768.0f,
          "pow2");
    float x[] = {1.5f, -3.0f, 0.01f, 2.9f, 0.0f, -0.7f}, amax_r[2], amax_c[3], s[3], y[6];
    uint8_t q[6];
    CHECK(ct_amax_f32(x, 6) == 3.0f, "amax");
    ct_amax_rows(x, 2, 3, amax_r);
    ct_amax_cols(x, 2, 3, amax_c);
    CHECK(amax_r[0] == 3.0f && amax_r[1] == 2.9f && amax_c[0] == 2.9f && amax_c[1] == 3.0f && amax_c[2] == 0.7f, "rc");
    float sc = ct_f8_scale_from_amax(3.0f, CT_F8_E4M3, 0);
    ct_f8_quantize(x, 6, CT_F8_E4M3, sc, q);
    CHECK(q[1] == 0xFE, "amax maps to -448");
    ct_f8_dequantize(q, 6, CT_F8_E4M3, sc, y);
    for (int i = 0; i < 6; i++) CHECK_CLOSE(y[i], x[i], 1.0 / 16, 1e-6);  // half ulp: 2^-4 relative
    ct_f8_quantize_rows(x, 2, 3, CT_F8_E5M2, 0, q, s);
    CHECK(s[0] == (float)(57344.0 / 3.0) && q[1] == 0xFB && q[3] == 0x7B, "rowwise amax -> max");
    ct_f8_dequantize_rows(q, s, 2, 3, CT_F8_E5M2, y);
    for (int i = 0; i < 6; i++) CHECK_CLOSE(y[i], x[i], 1.0 / 8, 1e-6);
    ct_f8_quantize_cols(x, 2, 3, CT_F8_E4M3, 1, q, s);
    CHECK(s[0] == 128.0f && s[1] == 128.0f && s[2] == 512.0f, "colwise pow2 scales %g %g %g", s[0], s[1], s[2]);
    ct_f8_dequantize_cols(q, s, 2, 3, CT_F8_E4M3, y);
    for (int i = 0; i < 6; i++) CHECK_CLOSE(y[i], x[i], 1.0 / 16, 1e-6);
    x[4] = NAN;
    ct_amax_cols(x, 2, 3, amax_c);
    CHECK(isnan(ct_amax_f32(x, 6)) && isnan(amax_c[1]) && !isnan(amax_c[0]), "NaN amax");
    uint8_t b8[300];
    float f8in[300], f8out[300];
    for (int i = 0; i < 300; i++) b8[i] = (uint8_t)i;
    ct_f8_to_f32_n(b8, f8out, 300, CT_F8_E5M2);
    for (int i = 0; i < 300; i++) CHECK(same(f8out[i], ref_decode(&E5M2, (uint8_t)i)), "table decode %d", i);
    for (int i = 0; i < 300; i++) f8in[i] = f8out[i] * 1.1f;
    ct_f32_to_f8_n(f8in, b8, 300, CT_F8_E4M3, 1);
    for (int i = 0; i < 300; i++) CHECK(b8[i] == ct_f32_to_e4m3(f8in[i], 1) || isnan(f8in[i]), "array cast %d", i);
}

int main(void) {
    CT_RUN(test_e4m3_all_patterns);
    CT_RUN(test_e5m2_all_patterns);
    CT_RUN(test_f8_halfway_ties_to_even);
    CT_RUN(test_f8_saturation_and_overflow);
    CT_RUN(test_f8_nan_zero_subnormal);
    CT_RUN(test_f8_random_vs_reference);
    CT_RUN(test_bf16);
    CT_RUN(test_f16);
    CT_RUN(test_e8m0);
    CT_RUN(test_mx_scale_selection);
    CT_RUN(test_mx_roundtrip_error_and_rows);
    CT_RUN(test_tensorwise_rowwise);
    CT_TEST_EXIT();
}
