// The elementwise kernels that write (or read) bf16 under mixed precision, called through the cpu
// table (kernels.h ct_rmsnorm_forward_bf16, ct_swiglu_forward_bf16, ct_swiglu_backward_bf16):
//  - bits: each equals the fp32 chain the block ran before them -- fp32 kernel, then f32_to_bf16
//    (and bf16_to_f32 of the kept input) -- bit for bit: the block's bf16 runs rely on it;
//  - float64: each output within its error model of a float64 reference written here, rounded
//    values within half a bf16 ulp of the reference (plus the fp32 error below);
//  - the narrowing of h13 is round-to-nearest-even (this file's own rounding, test_bf16.h), and
//    h13 NULL (the recompute: h13_kept is the input) gives the same out;
//  - non-finite and out-of-range inputs (inf, NaN, exp's clamp) give the chain's bits.
// Each runs at 1, 2 and 3 threads on shapes around the kernels' 512-column tiles and the 16- and
// 8-lane loops (F = 1, 7, 8, 15, 16, 17, 511, 512, 513, 1100), odd row counts; under every kernel
// set the CPU runs (tests/run_tests.sh).
//
// Error model (u = 2^-24, fp32 unit roundoff):
//  - RMSNorm: the fp32 sum of C squares (positive terms) is within gamma_C of its value; the
//    mean, +eps, sqrt (halves a relative error), division: rstd within (C/2 + 4) u; y = x r w
//    two roundings more: y32 within e = (C/2 + 6) u of y relative;
//  - SwiGLU: exp within 1.5 ulp = 3u (fastmath.h), so sigmoid = 1 / (1 + exp(-g)) within 5u
//    (exp's error shrunk by e/(1+e) <= 1, the sum and the division one u each); o = g s u two
//    roundings more: within e = 8u relative;
//  - SwiGLU backward: du = d g s within 8u relative; dg = d u s (1 + g (1 - s)), whose last
//    factor A can cancel: its absolute error is at most 8u (1 + |g|) (1 - s: 6u; times g:
//    7u |g|; + 1: one u of |A| <= 1 + |g|), the product d u s 7u relative, so dg within
//    16u |d u s| (1 + |g|) absolutely;
//  - a value v32 within e of v relative, rounded to bf16: within half a bf16 ulp of |v| (1 + e),
//    plus e |v|, of v (rounding is monotonic and the ulp grows with |v|).
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "test.h"
#include "test_bf16.h"
#include "test_rand.h"

#define U 0x1p-24

static const int threads[] = {1, 2, 3};
#define NTHREADS 3

static float *falloc(long n) { return malloc(sizeof(float) * (n > 0 ? n : 1)); }
static uint16_t *halloc(long n) { return malloc(sizeof(uint16_t) * (n > 0 ? n : 1)); }
static double widen1(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

// Half a bf16 ulp at magnitude a (8 significant bits: the ulp of [2^k, 2^(k+1)) is 2^(k-7)).
static double half_ulp_bf16(double a) {
    if (a == 0) return 0x1p-134;  // bf16's smallest subnormal spacing, halved
    int k;
    frexp(a, &k);  // a in [2^(k-1), 2^k)
    return ldexp(1.0, k - 1 - 7) / 2;
}
// Whether the bf16 value got lies within the rounding of v32, known within e of v relative.
static int within_bf16(uint16_t got, double v, double e) {
    return fabs(widen1(got) - v) <= half_ulp_bf16(fabs(v) * (1 + e)) + e * fabs(v);
}

static const long rows[] = {1, 5, 37};
#define NROWS 3
static const long widths[] = {1, 7, 8, 15, 16, 17, 511, 512, 513, 1100};
#define NWIDTHS 10

// ---------------------------------------------------------------- RMSNorm
static void test_rmsnorm_bf16(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int r = 0; r < NROWS; r++)
            for (int s = 0; s < NWIDTHS; s++) {
                long N = rows[r], C = widths[s];
                float eps = 1e-5f;
                float *x = falloc(N * C), *w = falloc(C), *y32 = falloc(N * C), *r32 = falloc(N), *rs = falloc(N);
                for (long i = 0; i < N * C; i++) x[i] = frand(3);
                for (long c = 0; c < C; c++) w[c] = 1.0f + frand(0.5f);
                uint16_t *want = halloc(N * C), *got = halloc(N * C);
                k->rmsnorm_forward(y32, r32, x, w, N, C,
                                   eps);  // the chain the block ran before
                k->f32_to_bf16(want, y32, N * C);
                memset(got, 0xA5, sizeof(uint16_t) * N * C);
                k->rmsnorm_forward_bf16(got, rs, x, w, N, C, eps);
                CHECK(!memcmp(got, want, sizeof(uint16_t) * N * C) && !memcmp(rs, r32, sizeof(float) * N),
                      "N=%ld C=%ld threads %d: not rmsnorm_forward + f32_to_bf16's bits", N, C, threads[t]);
                double e = (C / 2.0 + 6) * U, er = (C / 2.0 + 4) * U;
                for (long n = 0; n < N; n++) {
                    double ss = 0;
                    for (long c = 0; c < C; c++) ss += (double)x[n * C + c] * x[n * C + c];
                    double rd = 1.0 / sqrt(ss / C + eps);
                    CHECK(fabs(rs[n] - rd) <= er * rd, "rstd N=%ld C=%ld row %ld: %.9g vs %.9g", N, C, n, rs[n], rd);
                    for (long c = 0; c < C; c++) {
                        double v = (double)x[n * C + c] * rd * w[c];
                        CHECK(within_bf16(got[n * C + c], v, e), "out N=%ld C=%ld (%ld, %ld): %.9g vs %.9g", N, C, n, c,
                              widen1(got[n * C + c]), v);
                    }
                }
                free(x), free(w), free(y32), free(r32), free(rs), free(want), free(got);
            }
    }
    omp_set_num_threads(2);
}

// ---------------------------------------------------------------- SwiGLU
// sigmoid in float64
static double sig(double g) { return 1.0 / (1.0 + exp(-g)); }

// The fp32 chain the block ran before the bf16 kernels: h13 narrowed into kept, widened back,
// swiglu_forward, out narrowed.
static void swiglu_chain(const ct_kernels *k, uint16_t *out, uint16_t *kept, const float *h13, long N, long F) {
    float *wide = falloc(N * 2 * F), *o = falloc(N * F);
    k->f32_to_bf16(kept, h13, N * 2 * F);
    k->bf16_to_f32(wide, kept, N * 2 * F);
    k->swiglu_forward(o, wide, N, F);
    k->f32_to_bf16(out, o, N * F);
    free(wide), free(o);
}

static void test_swiglu_forward_bf16(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int r = 0; r < NROWS; r++)
            for (int s = 0; s < NWIDTHS; s++) {
                long N = rows[r], F = widths[s];
                float *h13 = falloc(N * 2 * F);
                for (long i = 0; i < N * 2 * F; i++) h13[i] = frand(8);
                uint16_t *kw = halloc(N * 2 * F), *ow = halloc(N * F), *kg = halloc(N * 2 * F), *og = halloc(N * F);
                swiglu_chain(k, ow, kw, h13, N, F);
                memset(kg, 0xA5, sizeof(uint16_t) * N * 2 * F), memset(og, 0xA5, sizeof(uint16_t) * N * F);
                k->swiglu_forward_bf16(og, kg, h13, N, F);
                CHECK(!memcmp(kg, kw, sizeof(uint16_t) * N * 2 * F) && !memcmp(og, ow, sizeof(uint16_t) * N * F),
                      "N=%ld F=%ld threads %d: not the fp32 chain's bits", N, F, threads[t]);
                int rounded = 1;
                for (long i = 0; i < N * 2 * F; i++) rounded &= widen1(kg[i]) == (double)round_bf16(h13[i]);
                CHECK(rounded, "N=%ld F=%ld: h13_kept is not h13 rounded to nearest even", N, F);
                double e = 8 * U;
                for (long n = 0; n < N; n++)
                    for (long f = 0; f < F; f++) {
                        double g = widen1(kg[n * 2 * F + f]), u = widen1(kg[n * 2 * F + F + f]);
                        double v = g * sig(g) * u;
                        CHECK(within_bf16(og[n * F + f], v, e), "out N=%ld F=%ld (%ld, %ld): %.9g vs %.9g", N, F, n, f,
                              widen1(og[n * F + f]), v);
                    }
                // the recompute: from the kept bf16 h13 alone
                uint16_t *o2 = halloc(N * F);
                memset(o2, 0xA5, sizeof(uint16_t) * N * F);
                k->swiglu_forward_bf16(o2, kg, NULL, N, F);
                CHECK(!memcmp(o2, og, sizeof(uint16_t) * N * F) && !memcmp(kg, kw, sizeof(uint16_t) * N * 2 * F),
                      "N=%ld F=%ld: h13 NULL differs, or wrote h13_kept", N, F);
                free(h13), free(kw), free(ow), free(kg), free(og), free(o2);
            }
    }
    omp_set_num_threads(2);
}

static void test_swiglu_backward_bf16(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int r = 0; r < NROWS; r++)
            for (int s = 0; s < NWIDTHS; s++) {
                long N = rows[r], F = widths[s];
                uint16_t *h16 = halloc(N * 2 * F);
                float *dout = falloc(N * F), *wide = falloc(N * 2 * F), *want = falloc(N * 2 * F);
                float *got = falloc(N * 2 * F);
                for (long i = 0; i < N * 2 * F; i++) {
                    float v = round_bf16(frand(8));
                    uint32_t b;
                    memcpy(&b, &v, 4);
                    h16[i] = (uint16_t)(b >> 16);
                }
                for (long i = 0; i < N * F; i++) dout[i] = frand(2);
                k->bf16_to_f32(wide, h16, N * 2 * F);  // the chain the block ran before
                k->swiglu_backward(want, dout, wide, N, F);
                for (long i = 0; i < N * 2 * F; i++) got[i] = NAN;
                k->swiglu_backward_bf16(got, dout, h16, N, F);
                CHECK(!memcmp(got, want, sizeof(float) * N * 2 * F),
                      "N=%ld F=%ld threads %d: not bf16_to_f32 + swiglu_backward's bits", N, F, threads[t]);
                for (long n = 0; n < N; n++)
                    for (long f = 0; f < F; f++) {
                        double g = widen1(h16[n * 2 * F + f]), u = widen1(h16[n * 2 * F + F + f]);
                        double d = dout[n * F + f], sg = sig(g);
                        double du = d * g * sg, dg = d * u * sg * (1 + g * (1 - sg));
                        double gdu = got[n * 2 * F + F + f], gdg = got[n * 2 * F + f];
                        CHECK(fabs(gdu - du) <= 8 * U * fabs(du), "du N=%ld F=%ld (%ld, %ld): %.9g vs %.9g", N, F, n, f,
                              gdu, du);
                        CHECK(fabs(gdg - dg) <= 16 * U * fabs(d * u * sg) * (1 + fabs(g)),
                              "dg N=%ld F=%ld (%ld, %ld): %.9g vs %.9g", N, F, n, f, gdg, dg);
                    }
                free(h16), free(dout), free(wide), free(want), free(got);
            }
    }
    omp_set_num_threads(2);
}

// inf, NaN, values past exp's clamp (|g| > 87.3) and past bf16's largest finite (rounding up to
// inf): the fp32 chain's bits, forward and backward.
static void test_swiglu_bf16_special(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    const float sp[] = {INFINITY, -INFINITY, NAN, -NAN, 100.0f, -100.0f, 3.4e38f, -3.4e38f, 0.0f, -0.0f, 1e-40f};
    long N = 3, F = 37, n = 11;
    float *h13 = falloc(N * 2 * F), *dout = falloc(N * F);
    for (long i = 0; i < N * 2 * F; i++) h13[i] = i % 3 == 0 ? sp[(i / 3) % n] : frand(4);
    for (long i = 0; i < N * F; i++) dout[i] = frand(1);
    uint16_t *kw = halloc(N * 2 * F), *ow = halloc(N * F), *kg = halloc(N * 2 * F), *og = halloc(N * F);
    swiglu_chain(k, ow, kw, h13, N, F);
    k->swiglu_forward_bf16(og, kg, h13, N, F);
    CHECK(!memcmp(kg, kw, sizeof(uint16_t) * N * 2 * F) && !memcmp(og, ow, sizeof(uint16_t) * N * F),
          "forward: not the fp32 chain's bits");
    float *wide = falloc(N * 2 * F), *want = falloc(N * 2 * F), *got = falloc(N * 2 * F);
    k->bf16_to_f32(wide, kg, N * 2 * F);
    k->swiglu_backward(want, dout, wide, N, F);
    k->swiglu_backward_bf16(got, dout, kg, N, F);
    CHECK(!memcmp(got, want, sizeof(float) * N * 2 * F), "backward: not the fp32 chain's bits");
    float *x = falloc(2 * F), *w = falloc(F), *y = falloc(2 * F), *r32 = falloc(2), *rs = falloc(2);
    for (long i = 0; i < 2 * F; i++) x[i] = i < F ? sp[i % n] : frand(1);  // row 0 non-finite, row 1 not
    for (long c = 0; c < F; c++) w[c] = 1.0f;
    uint16_t *yw = halloc(2 * F), *yg = halloc(2 * F);
    k->rmsnorm_forward(y, r32, x, w, 2, F, 1e-5f);
    k->f32_to_bf16(yw, y, 2 * F);
    k->rmsnorm_forward_bf16(yg, rs, x, w, 2, F, 1e-5f);
    CHECK(!memcmp(yg, yw, sizeof(uint16_t) * 2 * F) && !memcmp(rs, r32, sizeof(float) * 2),
          "rmsnorm: not the fp32 chain's bits");
    free(h13), free(dout), free(kw), free(ow), free(kg), free(og), free(wide), free(want), free(got);
    free(x), free(w), free(y), free(r32), free(rs), free(yw), free(yg);
}

// ---------------------------------------------------------------- RoPE into the kept qkv
// qkv_rope_to_bf16 against the chain it replaces (rope_forward on the q heads and on the k heads,
// in place, then f32_to_bf16): the same bits; and against float64 RoPE of the same inputs with
// the same fp32 tables: each output x0 c - x1 s is two products and a difference (3u relative of
// |x0 c| + |x1 s|), then rounded to bf16. Positions shared by the sequences, per sequence, and
// none (0..T-1); 1 to 3 threads.
static void test_qkv_rope_to_bf16(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    const long B = 2, T = 9, NH = 4, NKV = 2, HS = 6, QKV = (NH + 2 * NKV) * HS, N = B * T, half = HS / 2;
    const long maxT = 40;
    float *cs = falloc(maxT * half), *sn = falloc(maxT * half);
    k->rope_tables(cs, sn, maxT, HS, 500000.0, 0, 0, 0, 0);
    float *x = falloc(N * QKV), *chain = falloc(N * QKV);
    uint16_t *want = halloc(N * QKV), *got = halloc(N * QKV);
    int32_t shared[9], per[18];
    for (long t = 0; t < T; t++) shared[t] = (int32_t)(3 * t + 1);
    for (long i = 0; i < B * T; i++) per[i] = (int32_t)((i * 7) % maxT);
    const int32_t *posv[3] = {shared, per, NULL};
    const long ldv[3] = {0, T, 0};
    long bad = 0, far = 0;
    for (int pi = 0; pi < 3; pi++)
        for (int th = 0; th < NTHREADS; th++) {
            omp_set_num_threads(threads[th]);
            for (long i = 0; i < N * QKV; i++) x[i] = frand(3.0f);
            memcpy(chain, x, sizeof(float) * N * QKV);
            k->rope_forward(chain, cs, sn, posv[pi], ldv[pi], B, T, NH, HS, QKV);
            k->rope_forward(chain + NH * HS, cs, sn, posv[pi], ldv[pi], B, T, NKV, HS, QKV);
            k->f32_to_bf16(want, chain, N * QKV);
            k->qkv_rope_to_bf16(got, x, cs, sn, posv[pi], ldv[pi], B, T, NH, NKV, HS);
            bad += memcmp(want, got, sizeof(uint16_t) * N * QKV) != 0;
            for (long r = 0; r < N; r++) {
                long p = posv[pi] ? posv[pi][pi == 1 ? r : r % T] : r % T;
                for (long d = 0; d < QKV; d++) {
                    const float *xr = x + r * QKV;
                    double v = xr[d], e = 0;
                    if (d < (NH + NKV) * HS) {
                        long i = (d % HS) / 2, d0 = d - d % 2;
                        double c = cs[p * half + i], s_ = sn[p * half + i], x0 = xr[d0], x1 = xr[d0 + 1];
                        v = d % 2 ? x0 * s_ + x1 * c : x0 * c - x1 * s_;
                        e = 3 * U * (fabs(x0 * c) + fabs(x1 * s_)) / fmax(fabs(v), 1e-30);
                    }
                    far += !within_bf16(got[r * QKV + d], v, e);
                }
            }
        }
    omp_set_num_threads(NTHREADS);
    CHECK(bad == 0, "%ld of 9 calls differ from rope_forward + f32_to_bf16", bad);
    CHECK(far == 0, "%ld values outside the rounding of float64 RoPE", far);
    free(cs), free(sn), free(x), free(chain), free(want), free(got);
}

int main(void) {
    rng_state = 0x9E3779B97F4A7C15ull;
    CT_RUN(test_rmsnorm_bf16);
    CT_RUN(test_swiglu_forward_bf16);
    CT_RUN(test_swiglu_backward_bf16);
    CT_RUN(test_swiglu_bf16_special);
    CT_RUN(test_qkv_rope_to_bf16);
    CT_TEST_EXIT();
}
