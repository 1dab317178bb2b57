// ct_linear_backward_f8 (kernels/cpu/linear_f8.h): the float8 backward of a Linear against
// float64 on operands quantised here, independently, with core/float_formats' serial helpers and
// decoded with the OFP8 formulas written out below; its contract (overwrite / accumulate / NULL
// outputs) against ct_linear_backward's; and its distance from the fp32 backward.
//
// Per matmul the reference is what the recipe says each operand becomes (linear_f8.h):
//   dinp (N, IC) = dout (N, OC) @ W (OC, IC), reduced over OC:
//     tensorwise: dout, W one scale each; rowwise: dout per row, W per column (powers of two);
//     mxfp8: dout's rows and W^T's rows in 32-blocks along OC.
//   dweight (OC, IC) += dout^T @ inp (N, IC), reduced over N:
//     tensorwise: as above; rowwise: dout per column, inp per column; mxfp8: dout^T's and inp^T's
//     rows in 32-blocks along N.
// dout in e5m2, inp and W in e4m3. Error bound per element, as tests/test_kernels_gemm_f8.c
// argues it: |C - ref| <= (K + 4) 2^-24 (sum_k |term_k| + |C0|) + K 2^-149 (MX subnormal sums),
// with C0 the accumulated dweight (0 for dinp). A scale on the wrong axis, a wrong format or a
// missed transpose moves the result by far more (the scales differ by powers of two and more).
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "core/float_formats.h"
#include "f8_spec.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_f8.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/linear_f8.h"
#include "kernels/kernels.h"
#include "test.h"

#define U 0x1p-24


static const char *names[] = {"tensorwise", "rowwise", "mxfp8"};

// ---- reference quantisation: (r, c) fp32 -> the dequantised values in double, same shape
static double *dq_tensor(const float *x, long r, long c, ct_dtype f) {
    uint8_t *q = malloc(r * c + 1);
    double *y = malloc((r * c + 1) * sizeof(double));
    float s = ct_f8_scale_from_amax(ct_amax_f32(x, r * c), f, 0);
    ct_f8_quantize(x, r * c, f, s, q);
    for (long i = 0; i < r * c; i++) y[i] = spec(q[i], f) / s;
    free(q);
    return y;
}
static double *dq_axis(const float *x, long r, long c, ct_dtype f, int cols) {  // pow2 rowwise / colwise
    uint8_t *q = malloc(r * c + 1);
    float *s = malloc(((cols ? c : r) + 1) * sizeof(float));
    double *y = malloc((r * c + 1) * sizeof(double));
    if (cols)
        ct_f8_quantize_cols(x, r, c, f, 1, q, s);
    else
        ct_f8_quantize_rows(x, r, c, f, 1, q, s);
    for (long i = 0; i < r; i++)
        for (long j = 0; j < c; j++) y[i * c + j] = spec(q[i * c + j], f) / s[cols ? j : i];
    free(q), free(s);
    return y;
}
static double *dq_mx(const float *x, long r, long c, ct_dtype f) {  // blocks along each row
    long nb = ct_mx_nblocks(c);
    uint8_t *q = malloc(r * c + 1), *xs = malloc(r * nb + 1);
    double *y = malloc((r * c + 1) * sizeof(double));
    ct_mx_quantize_rows(x, r, c, f, q, xs);
    for (long i = 0; i < r; i++)
        for (long j = 0; j < c; j++) y[i * c + j] = ldexp(spec(q[i * c + j], f), xs[i * nb + j / 32] - 127);
    free(q), free(xs);
    return y;
}
static float *tr_f(const float *x, long r, long c) {
    float *y = calloc(r * c + 1, sizeof(float));
    for (long i = 0; i < r; i++)
        for (long j = 0; j < c; j++) y[j * r + i] = x[i * c + j];
    return y;
}
static double *tr_d_free(double *x, long r, long c) {  // returns x^T, frees x
    double *y = malloc((r * c + 1) * sizeof(double));
    for (long i = 0; i < r; i++)
        for (long j = 0; j < c; j++) y[j * r + i] = x[i * c + j];
    free(x);
    return y;
}
// MX-quantise x (r, c) blocked along r (its columns' direction): quantise x^T, return in x's shape.
static double *dq_mx_cols(const float *x, long r, long c, ct_dtype f) {
    float *t = tr_f(x, r, c);
    double *y = tr_d_free(dq_mx(t, c, r, f), c, r);
    free(t);
    return y;
}

// The dequantised operands of both matmuls, all stored in the fp32 tensors' own shapes:
// dinp = gA (N, OC) @ wB (OC, IC); dweight = gT^T @ xB with gT (N, OC), xB (N, IC).
typedef struct {
    double *gA, *wB, *gT, *xB;
} ref_ops;
static ref_ops ref_quantise(int recipe, const float *dout, const float *inp, const float *w, long N, long IC, long OC) {
    ref_ops o;
    const ct_dtype G = CT_F8_E5M2, E = CT_F8_E4M3;
    switch (recipe) {
    case 0:
        o.gA = dq_tensor(dout, N, OC, G), o.wB = dq_tensor(w, OC, IC, E);
        o.gT = dq_tensor(dout, N, OC, G), o.xB = dq_tensor(inp, N, IC, E);
        break;
    case 1:
        o.gA = dq_axis(dout, N, OC, G, 0), o.wB = dq_axis(w, OC, IC, E, 1);
        o.gT = dq_axis(dout, N, OC, G, 1), o.xB = dq_axis(inp, N, IC, E, 1);
        break;
    default:
        o.gA = dq_mx(dout, N, OC, G), o.wB = dq_mx_cols(w, OC, IC, E);
        o.gT = dq_mx_cols(dout, N, OC, G), o.xB = dq_mx_cols(inp, N, IC, E);
        break;
    }
    return o;
}
static void ref_free(ref_ops *o) { free(o->gA), free(o->wB), free(o->gT), free(o->xB); }

// max over elements of |got - ref| / bound (see the top); C0 = NULL: nothing accumulated.
static double worst_dinp(const float *got, const ref_ops *o, long N, long IC, long OC) {
    double worst = 0;
    for (long n = 0; n < N; n++)
        for (long i = 0; i < IC; i++) {
            double sum = 0, abs_sum = 0;
            for (long k = 0; k < OC; k++) {
                double t = o->gA[n * OC + k] * o->wB[k * IC + i];
                sum += t, abs_sum += fabs(t);
            }
            double bound = (OC + 4) * U * abs_sum + OC * 0x1p-149 + 1e-300;
            double r = fabs(got[n * IC + i] - sum) / bound;
            if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
        }
    return worst;
}
static double worst_dweight(const float *got, const float *C0, const ref_ops *o, long N, long IC, long OC) {
    double worst = 0;
    for (long c = 0; c < OC; c++)
        for (long i = 0; i < IC; i++) {
            double sum = 0, abs_sum = 0;
            for (long k = 0; k < N; k++) {
                double t = o->gT[k * OC + c] * o->xB[k * IC + i];
                sum += t, abs_sum += fabs(t);
            }
            double c0 = C0[c * IC + i], bound = (N + 4) * U * (abs_sum + fabs(c0)) + N * 0x1p-149 + 1e-300;
            double r = fabs(got[c * IC + i] - (sum + c0)) / bound;
            if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
        }
    return worst;
}

typedef struct {
    float *dout, *inp, *w;
} data;
// Gradient-like dout (small, one zero row), activations with an outlier and a zero column,
// weights 0.02: zero rows / columns take the amax floor (scale from 1e-12) on their axis.
static data make_data(long N, long IC, long OC) {
    data d;
    d.dout = malloc((N * OC + 1) * sizeof(float));
    d.inp = malloc((N * IC + 1) * sizeof(float));
    d.w = malloc((OC * IC + 1) * sizeof(float));
    for (long i = 0; i < N * OC; i++) d.dout[i] = nrand() * 1e-3f;
    for (long i = 0; i < N * IC; i++) d.inp[i] = nrand() * 3.0f;
    for (long i = 0; i < OC * IC; i++) d.w[i] = nrand() * 0.02f;
    if (N > 2 && IC > 2 && OC > 2) {
        for (long k = 0; k < OC; k++) d.dout[N / 2 * OC + k] = 0.0f;
        for (long n = 0; n < N; n++) d.inp[n * IC + 1] = 0.0f;
        d.inp[2] = 60.0f;
    }
    return d;
}
static void free_data(data *d) { free(d->dout), free(d->inp), free(d->w); }

static float *scratch_with_canary(long N, long IC, long OC, long *ns) {
    *ns = ct_f8_backward_scratch_floats(N, IC, OC);
    float *s = malloc((*ns + 8) * sizeof(float));
    for (int i = 0; i < 8; i++) s[*ns + i] = -3.0f;
    return s;
}
static int canary_bad(const float *s, long ns) {
    int bad = 0;
    for (int i = 0; i < 8; i++) bad += s[ns + i] != -3.0f;
    return bad;
}

static void test_table(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    CHECK(k && (const void *)k->linear_backward_f8 == CT_KERNEL_TARGET(ct_linear_backward_f8) &&
              (const void *)k->f8_backward_scratch_floats == CT_KERNEL_TARGET(ct_f8_backward_scratch_floats) &&
              (const void *)k->linear_forward_f8 == CT_KERNEL_TARGET(ct_linear_forward_f8) &&
              (const void *)k->f8_scratch_floats == CT_KERNEL_TARGET(ct_f8_scratch_floats),
          "cpu table members");
}

// Both outputs against float64 on the reference operands, for each recipe on both decode
// paths (fp32 + ct_gemm, bf16 + ct_gemm_bf16). dinp starts as NaN (must be overwritten),
// dweight as random values (must be accumulated into).
static void test_against_float64(void) {
    // (N, IC, OC): odd shapes, K = OC and K = N below, at and above 32 with tails; 1x1x1; one
    // large enough for the parallel loops (every operand above 65536 elements).
    static const long shapes[][3] = {{37, 45, 29}, {64, 33, 70}, {33, 64, 32}, {1, 1, 1}, {600, 130, 129}};
    const ct_kernels *k = ct_kernels_get("cpu");
    int cases = 0;
    for (int s = 0; s < 5; s++) {
        long N = shapes[s][0], IC = shapes[s][1], OC = shapes[s][2], ns;
        data d = make_data(N, IC, OC);
        float *dinp = malloc(N * IC * sizeof(float)), *dw = malloc(OC * IC * sizeof(float));
        float *C0 = malloc(OC * IC * sizeof(float)), *scratch = scratch_with_canary(N, IC, OC, &ns);
        for (long i = 0; i < OC * IC; i++) C0[i] = nrand() * 0.01f;
        for (int r = 0; r < 3; r++) {
            ref_ops o = ref_quantise(r, d.dout, d.inp, d.w, N, IC, OC);
            for (int path = 1; path <= 2; path++, cases++) {
                for (long i = 0; i < N * IC; i++) dinp[i] = NAN;
                memcpy(dw, C0, OC * IC * sizeof(float));
                ct_gemm_f8_test_path(path);
                k->linear_backward_f8(dinp, dw, d.dout, d.inp, CT_F32, d.w, N, IC, OC, (ct_f8_recipe)r, NULL, scratch);
                ct_gemm_f8_test_path(0);
                double e1 = worst_dinp(dinp, &o, N, IC, OC), e2 = worst_dweight(dw, C0, &o, N, IC, OC);
                CHECK(e1 <= 1.0 && e2 <= 1.0, "N=%ld IC=%ld OC=%ld %s path %d: dinp %.3g, dweight %.3g x bound", N,
                      IC, OC, names[r], path, e1, e2);
                CHECK(!canary_bad(scratch, ns), "scratch canary overwritten (%s, %ldx%ldx%ld)", names[r], N, IC, OC);
            }
            ref_free(&o);
        }
        free_data(&d), free(dinp), free(dw), free(C0), free(scratch);
    }
    printf("  %d cases (shapes x recipes x fp32/bf16 decode)\n", cases);
}

// NULL outputs: the other one is computed exactly as in the full call (same bits); degenerate
// sizes follow ct_linear_backward (OC = 0: dinp = 0; N = 0: dweight unchanged).
static void test_null_and_degenerate(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    long N = 37, IC = 45, OC = 29, ns;
    data d = make_data(N, IC, OC);
    float *di1 = malloc(N * IC * sizeof(float)), *di2 = malloc(N * IC * sizeof(float));
    float *dw1 = malloc(OC * IC * sizeof(float)), *dw2 = malloc(OC * IC * sizeof(float));
    float *scratch = scratch_with_canary(N, IC, OC, &ns);
    for (int r = 0; r < 3; r++) {
        for (long i = 0; i < OC * IC; i++) dw1[i] = dw2[i] = (float)i * 1e-4f;
        k->linear_backward_f8(di1, dw1, d.dout, d.inp, CT_F32, d.w, N, IC, OC, (ct_f8_recipe)r, NULL, scratch);
        for (long i = 0; i < N * IC; i++) di2[i] = NAN;
        k->linear_backward_f8(di2, NULL, d.dout, d.inp, CT_F32, d.w, N, IC, OC, (ct_f8_recipe)r, NULL, scratch);
        CHECK(!memcmp(di1, di2, N * IC * sizeof(float)), "%s: dinp with dweight NULL differs", names[r]);
        k->linear_backward_f8(NULL, dw2, d.dout, d.inp, CT_F32, d.w, N, IC, OC, (ct_f8_recipe)r, NULL, scratch);
        CHECK(!memcmp(dw1, dw2, OC * IC * sizeof(float)), "%s: dweight with dinp NULL differs", names[r]);
        k->linear_backward_f8(NULL, NULL, d.dout, d.inp, CT_F32, d.w, N, IC, OC, (ct_f8_recipe)r, NULL, scratch);
        CHECK(!canary_bad(scratch, ns), "%s: scratch canary", names[r]);

        // OC = 0: dinp (N, IC) = an empty sum = 0; dweight has no elements.
        for (long i = 0; i < N * IC; i++) di2[i] = NAN;
        long ns0;
        float *s0 = scratch_with_canary(N, IC, 0, &ns0);
        k->linear_backward_f8(di2, dw2, d.dout, d.inp, CT_F32, d.w, N, IC, 0, (ct_f8_recipe)r, NULL, s0);
        int nz = 0;
        for (long i = 0; i < N * IC; i++) nz += di2[i] != 0.0f;
        CHECK(nz == 0 && !canary_bad(s0, ns0), "%s OC=0: %d nonzero dinp", names[r], nz);
        free(s0);
        // N = 0: dweight += an empty sum: unchanged.
        memcpy(dw2, dw1, OC * IC * sizeof(float));
        s0 = scratch_with_canary(0, IC, OC, &ns0);
        k->linear_backward_f8(di2, dw2, d.dout, d.inp, CT_F32, d.w, 0, IC, OC, (ct_f8_recipe)r, NULL, s0);
        CHECK(!memcmp(dw1, dw2, OC * IC * sizeof(float)) && !canary_bad(s0, ns0), "%s N=0: dweight changed",
              names[r]);
        free(s0);
    }
    free_data(&d), free(di1), free(di2), free(dw1), free(dw2), free(scratch);
}

// Against the fp32 backward on random data: e5m2 (2 mantissa bits, about 2^-3 relative
// rounding per element) times e4m3 (2^-4) leaves a few percent of relative Frobenius error
// on the products; below 0.15, and above 1e-4 so a path that skipped quantisation would fail.
static void test_against_fp32(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    static const long shapes[][3] = {{64, 200, 48}, {37, 45, 29}, {300, 256, 129}};
    for (int s = 0; s < 3; s++) {
        long N = shapes[s][0], IC = shapes[s][1], OC = shapes[s][2], ns;
        data d = make_data(N, IC, OC);
        float *ri = malloc(N * IC * sizeof(float)), *rw = calloc(OC * IC, sizeof(float));
        float *di = malloc(N * IC * sizeof(float)), *dw = malloc(OC * IC * sizeof(float));
        float *scratch = scratch_with_canary(N, IC, OC, &ns);
        ct_linear_backward(ri, rw, d.dout, d.inp, d.w, N, IC, OC);
        for (int r = 0; r < 3; r++) {
            memset(dw, 0, OC * IC * sizeof(float));
            k->linear_backward_f8(di, dw, d.dout, d.inp, CT_F32, d.w, N, IC, OC, (ct_f8_recipe)r, NULL, scratch);
            double rel[2];
            for (int t = 0; t < 2; t++) {
                const float *a = t ? dw : di, *b = t ? rw : ri;
                long n = t ? OC * IC : N * IC;
                double num = 0, den = 0;
                for (long i = 0; i < n; i++) {
                    double e = (double)a[i] - b[i];
                    num += e * e, den += (double)b[i] * b[i];
                }
                rel[t] = sqrt(num / den);
            }
            printf("  N=%ld IC=%ld OC=%ld %-10s: relative Frobenius error dinp %.4f, dweight %.4f\n", N, IC, OC,
                   names[r], rel[0], rel[1]);
            CHECK(rel[0] < 0.15 && rel[1] < 0.15 && rel[0] > 1e-4 && rel[1] > 1e-4, "%s %ldx%ldx%ld: %g, %g",
                  names[r], N, IC, OC, rel[0], rel[1]);
            CHECK(!canary_bad(scratch, ns), "scratch canary");
        }
        free_data(&d), free(ri), free(rw), free(di), free(dw), free(scratch);
    }
}

int main(void) {
    rng = 0x853c49e6748fea9bull;
    CT_RUN(test_table);
    CT_RUN(test_against_float64);
    CT_RUN(test_null_and_degenerate);
    CT_RUN(test_against_fp32);
    CT_TEST_EXIT();
}
