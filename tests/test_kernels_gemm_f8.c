// ct_gemm_f8 / ct_gemm_mxfp8 against float64 on the dequantised inputs, and the quantise-then-
// multiply helper against fp32.
//
// The reference decodes every code with the OFP8 formulas written out here (not the code under
// test), applies the scales in float64 and sums in float64. Error bound per element:
//   |C - ref| <= (K + 4) * 2^-24 * (sum_k |term_k| + |beta C0|)   (+ K 2^-149 for MX, below)
// where term_k is the scaled product a[m,k] b[k,n] / (s_a s_b). Why: products of 8-bit values
// are exact in fp32 (header of kernels/cpu/gemm_f8.h), so the gemm's only error is summing K fp32
// terms, at most K-1 roundings (Higham's gamma_{K-1} bounds it by (K-1) u sum|terms|, u = 2^-24,
// in any order or blocking); the scale epilogue adds four roundings relative to the value (two
// reciprocals, their product, the multiply) and beta adds two (beta C0, the final sum). A wrong
// stride, transpose, scale index or format costs errors of order one, far beyond this.
//
// Every case runs on both paths: decode to fp32 + ct_gemm, and decode to bf16 + ct_gemm_bf16.
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "core/float_formats.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_f8.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/linear_f8.h"
#include "kernels/kernels.h"
#include "f8_spec.h"
#include "test.h"

#define U 0x1p-24


static uint8_t rand_code(ct_dtype f) {  // any finite code: subnormals, zeros, +-max included
    for (;;) {
        uint8_t b = (uint8_t)rnd32();
        if (isfinite(spec(b, f))) return b;
    }
}

// Every code decodes to the spec value, and that value is a bf16 value (the decode is exact).
static void test_codes_exact_in_bf16(void) {
    for (int f = 0; f < 2; f++) {
        ct_dtype fmt = f ? CT_F8_E5M2 : CT_F8_E4M3;
        for (int i = 0; i < 256; i++) {
            double want = spec((uint8_t)i, fmt);
            float got = ct_f8_to_f32((uint8_t)i, fmt);
            if (isnan(want)) {
                CHECK(isnan(got), "fmt %d code %02x", f, i);
                continue;
            }
            CHECK(got == want, "fmt %d code %02x: %g vs %g", f, i, got, want);
            CHECK(ct_bf16_to_f32(ct_f32_to_bf16(got)) == got, "fmt %d code %02x not a bf16", f, i);
        }
    }
}

static const char *fmt_name(ct_dtype f) { return f == CT_F8_E4M3 ? "e4m3" : "e5m2"; }

// One ct_gemm_f8 case against float64. Operands stored with padded leading dimensions; C's
// padding must stay untouched; the scratch gets a canary tail that must survive.
static void f8_case(long M, long N, long K, int ta, int tb, ct_dtype fa, ct_dtype fb, int rowwise, float beta,
                    int path) {
    long ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    long lda = ac + 3, ldb = bc + 1, ldc = N + 2;
    uint8_t *A = malloc(ar * lda + 1), *B = malloc(br * ldb + 1);
    for (long i = 0; i < ar * lda; i++) A[i] = rand_code(fa);
    for (long i = 0; i < br * ldb; i++) B[i] = rand_code(fb);
    long nsa = rowwise ? M : 1, nsb = rowwise ? N : 1;
    float *sa = malloc(nsa * sizeof(float)), *sb = malloc(nsb * sizeof(float));
    // Scales in [2^-6, 2^6], not powers of two (the epilogue's rounding is part of what is tested).
    for (long i = 0; i < nsa; i++) sa[i] = (float)exp((urand() - 0.5) * 8.3);
    for (long i = 0; i < nsb; i++) sb[i] = (float)exp((urand() - 0.5) * 8.3);
    float *C = malloc(M * ldc * sizeof(float)), *C0 = malloc(M * ldc * sizeof(float));
    for (long i = 0; i < M * ldc; i++) C0[i] = C[i] = beta == 0.0f ? NAN : nrand() * 1000.0f;
    for (long m = 0; m < M; m++) C0[m * ldc + N] = C[m * ldc + N] = C0[m * ldc + N + 1] = C[m * ldc + N + 1] = 7.0f;
    long ns = ct_gemm_f8_scratch_floats(M, N, K, beta != 0.0f);
    float *scratch = malloc((ns + 8) * sizeof(float));
    for (int i = 0; i < 8; i++) scratch[ns + i] = -3.0f;

    ct_gemm_f8_test_path(path);
    ct_gemm_f8(ta, tb, M, N, K, A, lda, fa, sa, B, ldb, fb, sb, rowwise, beta, C, ldc, scratch);
    ct_gemm_f8_test_path(0);

    double worst = 0;  // max of |C - ref| / bound
    int pad_bad = 0;
    for (long m = 0; m < M; m++) {
        for (long n = 0; n < N; n++) {
            double sum = 0, abs_sum = 0, s = (double)sa[rowwise ? m : 0] * sb[rowwise ? n : 0];
            for (long k = 0; k < K; k++) {
                double a = spec(ta ? A[k * lda + m] : A[m * lda + k], fa);
                double b = spec(tb ? B[n * ldb + k] : B[k * ldb + n], fb);
                sum += a * b / s, abs_sum += fabs(a * b / s);
            }
            double c0 = beta == 0.0f ? 0.0 : (double)beta * C0[m * ldc + n];
            double ref = sum + c0, bound = (K + 4) * U * (abs_sum + fabs(c0)) + 1e-300;
            double r = fabs(C[m * ldc + n] - ref) / bound;
            if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
        }
        pad_bad += C[m * ldc + N] != 7.0f || C[m * ldc + N + 1] != 7.0f;
    }
    int canary_bad = 0;
    for (int i = 0; i < 8; i++) canary_bad += scratch[ns + i] != -3.0f;
    CHECK(worst <= 1.0, "%ldx%ldx%ld ta=%d tb=%d %s x %s rowwise=%d beta=%g path=%d: error %.3g x bound", M, N, K, ta,
          tb, fmt_name(fa), fmt_name(fb), rowwise, beta, path, worst);
    CHECK(!pad_bad && !canary_bad, "padding of C or scratch canary overwritten (%d, %d)", pad_bad, canary_bad);
    free(A), free(B), free(sa), free(sb), free(C), free(C0), free(scratch);
}

static void test_gemm_f8(void) {
    static const long shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 129}, {5, 3, 0}};
    static const ct_dtype fmts[][2] = {{CT_F8_E4M3, CT_F8_E4M3}, {CT_F8_E5M2, CT_F8_E4M3}, {CT_F8_E4M3, CT_F8_E5M2}};
    int cases = 0;
    for (int s = 0; s < 4; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int f = 0; f < 3; f++)
                    for (int rw = 0; rw < 2; rw++)
                        for (int bt = 0; bt < 2; bt++)
                            for (int path = 1; path <= 2; path++, cases++)
                                f8_case(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, fmts[f][0], fmts[f][1], rw,
                                        bt ? 0.75f : 0.0f, path);
    printf("  %d float8 cases (shapes x transposes x formats x tensorwise/rowwise x beta x fp32/bf16 path)\n", cases);
}

// One ct_gemm_mxfp8 case. A (M, K), B (N, K), scales (rows, nblocks). tiny_row: row 0 of A gets
// the smallest e8m0 scale (2^-127) on every block, so its dequantised values are fp32 subnormals
// down to 2^-136 -- bf16 would round them; the call must take the exact fp32 path.
static void mx_case(long M, long N, long K, ct_dtype fa, ct_dtype fb, float beta, int path, int tiny_row) {
    long nb = ct_mx_nblocks(K);
    uint8_t *A = malloc(M * K + 1), *B = malloc(N * K + 1), *xa = malloc(M * nb + 1), *xb = malloc(N * nb + 1);
    for (long i = 0; i < M * K; i++) A[i] = rand_code(fa);
    for (long i = 0; i < N * K; i++) B[i] = rand_code(fb);
    // Scales 2^-6 .. 2^6 (B's >= 1 when a tiny row is present, so its products stay exact in fp32).
    for (long i = 0; i < M * nb; i++) xa[i] = (uint8_t)(121 + rnd32() % 13);
    for (long i = 0; i < N * nb; i++) xb[i] = (uint8_t)((tiny_row ? 127 : 121) + rnd32() % (tiny_row ? 7 : 13));
    if (tiny_row)
        for (long b = 0; b < nb; b++) xa[b] = 0;
    float *C = malloc(M * N * sizeof(float)), *C0 = malloc(M * N * sizeof(float));
    for (long i = 0; i < M * N; i++) C0[i] = C[i] = beta == 0.0f ? NAN : nrand();
    long ns = ct_gemm_f8_scratch_floats(M, N, K, 0);
    float *scratch = malloc((ns + 8) * sizeof(float));
    for (int i = 0; i < 8; i++) scratch[ns + i] = -3.0f;

    ct_gemm_f8_test_path(path);
    ct_gemm_mxfp8(M, N, K, A, xa, fa, B, xb, fb, beta, C, scratch);
    ct_gemm_f8_test_path(0);

    double worst = 0;
    for (long m = 0; m < M; m++)
        for (long n = 0; n < N; n++) {
            double sum = 0, abs_sum = 0;
            for (long k = 0; k < K; k++) {
                double a = ldexp(spec(A[m * K + k], fa), xa[m * nb + k / 32] - 127);
                double b = ldexp(spec(B[n * K + k], fb), xb[n * nb + k / 32] - 127);
                sum += a * b, abs_sum += fabs(a * b);
            }
            double c0 = beta == 0.0f ? 0.0 : (double)beta * C0[m * N + n];
            // K 2^-149: additions of fp32 subnormals round to that grid (only tiny rows reach it).
            double ref = sum + c0, bound = (K + 4) * U * (abs_sum + fabs(c0)) + K * 0x1p-149 + 1e-300;
            double r = fabs(C[m * N + n] - ref) / bound;
            if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
        }
    int canary_bad = 0;
    for (int i = 0; i < 8; i++) canary_bad += scratch[ns + i] != -3.0f;
    CHECK(worst <= 1.0, "MX %ldx%ldx%ld %s x %s beta=%g path=%d tiny=%d: error %.3g x bound", M, N, K, fmt_name(fa),
          fmt_name(fb), beta, path, tiny_row, worst);
    CHECK(!canary_bad, "scratch canary overwritten");
    free(A), free(B), free(xa), free(xb), free(C), free(C0), free(scratch);
}

static void test_gemm_mxfp8(void) {
    // K multiples of 32, and tails (K % 32 != 0: a shorter last block with its own scale).
    static const long shapes[][3] = {{1, 1, 32}, {7, 13, 64}, {33, 65, 128}, {1, 1, 1}, {7, 13, 45}, {33, 65, 129}};
    int cases = 0;
    for (int s = 0; s < 6; s++)
        for (int f = 0; f < 2; f++)
            for (int bt = 0; bt < 2; bt++)
                for (int path = 1; path <= 2; path++, cases++)
                    mx_case(shapes[s][0], shapes[s][1], shapes[s][2], f ? CT_F8_E5M2 : CT_F8_E4M3, CT_F8_E4M3,
                            bt ? -1.5f : 0.0f, path, 0);
    for (int path = 1; path <= 2; path++) mx_case(3, 4, 96, CT_F8_E4M3, CT_F8_E4M3, 0.0f, path, 1), cases++;
    printf("  %d MXFP8 cases\n", cases);

    // A NaN scale (0xFF) makes its block, and so every output of that row, NaN (MX v1.0 section 5).
    uint8_t A[64], B[64], xa[2] = {127, 0xFF}, xb[2] = {127, 127};
    for (int i = 0; i < 64; i++) A[i] = B[i] = 0x38;  // 1.0 in e4m3
    float C[1], scratch[128];
    ct_gemm_mxfp8(1, 1, 64, A, xa, CT_F8_E4M3, B, xb, CT_F8_E4M3, 0.0f, C, scratch);
    CHECK(isnan(C[0]), "NaN scale gave %g", C[0]);
    xa[1] = 128;  // 32 * 1 + 32 * 2 = 96
    ct_gemm_mxfp8(1, 1, 64, A, xa, CT_F8_E4M3, B, xb, CT_F8_E4M3, 0.0f, C, scratch);
    CHECK(C[0] == 96.0f, "C = %g, want 96", C[0]);
}

// Quantise then multiply, against fp32 on random normal data: the relative Frobenius error must
// look like e4m3's 3 mantissa bits (about 2^-4 relative rounding per element, a few percent on
// the product), i.e. below 0.1 -- and above 1e-4, so a path that skipped quantisation would fail.
static void test_linear_forward_f8(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    CHECK(k && (const void *)k->gemm_f8 == CT_KERNEL_TARGET(ct_gemm_f8) &&
              (const void *)k->gemm_mxfp8 == CT_KERNEL_TARGET(ct_gemm_mxfp8) &&
              (const void *)k->linear_forward_f8 == CT_KERNEL_TARGET(ct_linear_forward_f8) &&
              (const void *)k->f8_scratch_floats == CT_KERNEL_TARGET(ct_f8_scratch_floats) &&
              (const void *)k->gemm_f8_scratch_floats == CT_KERNEL_TARGET(ct_gemm_f8_scratch_floats),
          "cpu table members");
    static const long shapes[][3] = {{64, 200, 48}, {1, 1, 1}, {300, 256, 129}};  // N, IC, OC; IC 200: MX tail
    static const char *names[] = {"tensorwise", "rowwise", "mxfp8"};
    for (int s = 0; s < 3; s++) {
        long N = shapes[s][0], IC = shapes[s][1], OC = shapes[s][2];
        float *x = malloc(N * IC * sizeof(float)), *w = malloc(OC * IC * sizeof(float));
        float *ref = malloc(N * OC * sizeof(float)), *out = malloc(N * OC * sizeof(float));
        for (long i = 0; i < N * IC; i++) x[i] = nrand() * 3.0f;
        for (long i = 0; i < OC * IC; i++) w[i] = nrand() * 0.02f;
        if (s == 0) x[5] = 40.0f;  // an outlier: tensorwise loses more than rowwise / MX
        ct_linear_forward(ref, x, w, N, IC, OC);
        long ns = ct_f8_scratch_floats(N, IC, OC);
        float *scratch = malloc((ns + 8) * sizeof(float));
        for (int i = 0; i < 8; i++) scratch[ns + i] = -3.0f;
        for (int r = 0; r < 3; r++)
            for (int path = 1; path <= 2; path++) {
                ct_gemm_f8_test_path(path);
                k->linear_forward_f8(out, x, CT_F32, w, N, IC, OC, (ct_f8_recipe)r, NULL, scratch);
                ct_gemm_f8_test_path(0);
                double num = 0, den = 0;
                for (long i = 0; i < N * OC; i++) {
                    double d = (double)out[i] - ref[i];
                    num += d * d, den += (double)ref[i] * ref[i];
                }
                double rel = sqrt(num / den);
                if (path == 1)
                    printf("  N=%ld IC=%ld OC=%ld %-10s: relative Frobenius error %.4f\n", N, IC, OC, names[r], rel);
                // 1x1x1: one product, each factor within 2^-4 relative of its value (e4m3's half
                // ulp), so up to ~0.125; and tensorwise maps both to exactly +-448 (no rounding).
                CHECK(rel < (N * IC == 1 ? 0.13 : 0.1) && (rel > 1e-4 || N * IC == 1),
                      "%s %ldx%ldx%ld path %d: rel error %g", names[r], N, IC, OC, path, rel);
            }
        int canary_bad = 0;
        for (int i = 0; i < 8; i++) canary_bad += scratch[ns + i] != -3.0f;
        CHECK(!canary_bad, "scratch canary overwritten");
        free(x), free(w), free(ref), free(out), free(scratch);
    }
}

int main(void) {
    rng = 0x2545f4914f6cdd1dull;
    printf("  bf16 gemm path on this CPU: %s\n", ct_bf16_gemm_path());
    CT_RUN(test_codes_exact_in_bf16);
    CT_RUN(test_gemm_f8);
    CT_RUN(test_gemm_mxfp8);
    CT_RUN(test_linear_forward_f8);
    CT_TEST_EXIT();
}
