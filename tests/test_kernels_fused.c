// The fused forward chains (kernels.h, "fused forward chains"), called through the cpu table,
// against the unfused kernels they replace and against float64:
//  - residual_rmsnorm_forward: x_out, norm_out, rstd the same bits as add_inplace + rmsnorm_forward,
//    with x_out separate, aliasing x, aliasing the delta (how the block calls it);
//  - rmsnorm_linear_forward: norm_out, rstd the same bits as rmsnorm_forward; out within the fp32
//    gemm bound of a float64 product of that norm_out, and linear_forward's bits on it (ct_gemm
//    sums an element alike whatever rows a call covers); norm_out NULL (rows through scratch) gives
//    the same bits, writing nothing past the *_scratch_floats size; with inputs whose products
//    and sums are exact in fp32 (so any summation order gives one answer) out is the unfused
//    chain's bits;
//  - rmsnorm_linear_forward on a weight of two K blocks and two column panels: out is
//    linear_forward's bits;
//  - linear_swiglu_forward: h13 within the gemm bound and linear_forward's bits, h the bits of
//    swiglu_forward(h13); h13 NULL (through scratch) gives the same h; exact inputs: both the
//    bits of linear_forward + swiglu_forward;
//  - linear_rope_forward: q and k heads within the bound of a float64 product rotated in float64,
//    v heads and padding columns within the gemm bound; pos NULL and not; exact inputs: the bits
//    of linear_forward + rope_forward (q heads) + rope_forward (k heads); N != B*T refused;
//  - rmsnorm_linear_rope_forward (norm -> QKV matmul -> RoPE): norm_out, rstd and qkv the unfused
//    chain's bits, with the norm kept and through scratch; N != B*T refused;
//  - adamw_update (already one fused pass, clipping scale folded in): a float64 step, the bits of
//    a per-element float reference, grad untouched.
// Each runs at 1, 2 and 3 threads, with shapes around the row blocks (odd N, C, OC; N = 1, which
// runs the chain on all rows at once; N = 37 .. 300: several blocks, a short last one).
//
// Gemm bound, per element: |out - ref| <= (K + 4) * 2^-24 * sum_k |a_k b_k| (fp32 summation of K
// products in any order, Higham's gamma_K, plus slack), as in test_kernels_gemm_bf16.c.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fatal_child.h"
#include "kernels/backend.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_rand.h"

#define U 0x1p-24

// k/8 for k in [-8, 8]: products are multiples of 2^-6 below 1 in size, so sums of up to 2^17 of
// them are exact in fp32 whatever the order.
static float dyadic(void) { return (float)((long)(urand() * 17) - 8) / 8.0f; }
static float *falloc(long n) { return malloc(sizeof(float) * (n > 0 ? n : 1)); }
static float *fill(long n, float a) {
    float *p = falloc(n);
    for (long i = 0; i < n; i++) p[i] = frand(a);
    return p;
}
static float *fill_dyadic(long n) {
    float *p = falloc(n);
    for (long i = 0; i < n; i++) p[i] = dyadic();
    return p;
}
static int same(const float *a, const float *b, long n) { return memcmp(a, b, sizeof(float) * n) == 0; }

// Scratch of `n` floats followed by a guard that a kernel must leave alone.
#define GUARD 64
static float *scratch_alloc(long n) {
    float *p = falloc(n + GUARD);
    for (long i = 0; i < n + GUARD; i++) p[i] = 12345.0f;
    return p;
}
static int guard_intact(const float *p, long n) {
    for (long i = n; i < n + GUARD; i++)
        if (p[i] != 12345.0f) return 0;
    return 1;
}

static const int threads[] = {1, 2, 3};
#define NTHREADS 3

// Worst |out - ref| / bound over (N, OC) with out = A (N, K) @ B (OC, K)^T; ref in float64.
static double gemm_err(const float *out, long ldo, const float *A, const float *B, long N, long K, long OC) {
    double worst = 0;
    for (long n = 0; n < N; n++)
        for (long o = 0; o < OC; o++) {
            double s = 0, sa = 0;
            for (long k = 0; k < K; k++) {
                double t = (double)A[n * K + k] * B[o * K + k];
                s += t, sa += fabs(t);
            }
            double e = fabs((double)out[n * ldo + o] - s) / ((K + 4) * U * sa + 1e-300);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
    return worst;
}

// ---------------------------------------------------------------- residual + RMSNorm
static void test_residual_rmsnorm_bits(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    long shapes[][2] = {{37, 45}, {1, 1}, {300, 130}, {64, 1000}, {5, 7}};
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int s = 0; s < 5; s++) {
            long N = shapes[s][0], C = shapes[s][1];
            float eps = 1e-5f;
            float *x = fill(N * C, 2), *d = fill(N * C, 1), *w = falloc(C);
            for (long c = 0; c < C; c++) w[c] = 1.0f + frand(0.5f);
            // unfused, as the block does it: delta += x in place, then the norm of it
            float *xr = falloc(N * C), *nr = falloc(N * C), *rr = falloc(N);
            memcpy(xr, d, sizeof(float) * N * C);
            k->add_inplace(xr, x, N * C);
            k->rmsnorm_forward(nr, rr, xr, w, N, C, eps);
            for (int alias = 0; alias < 3; alias++) {  // 0: x_out separate, 1: x_out = x, 2: x_out = delta
                float *xa = falloc(N * C), *da = falloc(N * C), *xo = falloc(N * C), *no = fill(N * C, 9);
                float *ro = fill(N, 9);
                memcpy(xa, x, sizeof(float) * N * C), memcpy(da, d, sizeof(float) * N * C);
                float *dst = alias == 0 ? xo : alias == 1 ? xa : da;
                k->residual_rmsnorm_forward(dst, no, ro, xa, da, w, N, C, eps);
                CHECK(same(dst, xr, N * C), "x_out differs N=%ld C=%ld alias %d threads %d", N, C, alias, threads[t]);
                CHECK(same(no, nr, N * C) && same(ro, rr, N), "norm differs N=%ld C=%ld alias %d threads %d", N, C,
                      alias, threads[t]);
                if (alias != 1) CHECK(same(xa, x, N * C), "x written");
                if (alias != 2) CHECK(same(da, d, N * C), "delta written");
                free(xa), free(da), free(xo), free(no), free(ro);
            }
            free(x), free(d), free(w), free(xr), free(nr), free(rr);
        }
    }
    omp_set_num_threads(2);
}

// ---------------------------------------------------------------- RMSNorm + linear
static const long lin_shapes[][3] = {{37, 45, 29}, {1, 7, 5}, {300, 45, 29}, {257, 64, 96}, {129, 33, 17}};
#define NLIN 5

static void test_rmsnorm_linear_random(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int s = 0; s < NLIN; s++) {
            long N = lin_shapes[s][0], C = lin_shapes[s][1], OC = lin_shapes[s][2];
            float eps = 1e-5f;
            float *x = fill(N * C, 2), *w = falloc(C), *W = fill(OC * C, 1);
            for (long c = 0; c < C; c++) w[c] = 1.0f + frand(0.5f);
            float *nr = falloc(N * C), *rr = falloc(N);
            k->rmsnorm_forward(nr, rr, x, w, N, C, eps);
            float *out = fill(N * OC, 9), *no = fill(N * C, 9), *ro = fill(N, 9);
            long sf = k->rmsnorm_linear_scratch_floats(N, C, OC);
            float *scr = scratch_alloc(sf);
            k->rmsnorm_linear_forward(out, no, ro, x, w, W, N, C, OC, eps, NULL);  // no scratch with norm_out
            CHECK(same(no, nr, N * C) && same(ro, rr, N), "norm_out/rstd differ N=%ld C=%ld threads %d", N, C,
                  threads[t]);
            double e = gemm_err(out, OC, nr, W, N, C, OC);
            CHECK(e <= 1.0, "out N=%ld C=%ld OC=%ld threads %d: %.3g of the bound", N, C, OC, threads[t], e);
            float *outr = falloc(N * OC);  // a block's product sums as the product on all rows
            k->linear_forward(outr, nr, W, N, C, OC);
            CHECK(same(out, outr, N * OC), "out is not linear_forward's N=%ld C=%ld OC=%ld threads %d", N, C, OC,
                  threads[t]);
            free(outr);
            // not kept: the rows go through scratch, the same bits
            float *out2 = fill(N * OC, 9), *ro2 = fill(N, 9);
            k->rmsnorm_linear_forward(out2, NULL, ro2, x, w, W, N, C, OC, eps, scr);
            CHECK(same(out2, out, N * OC) && same(ro2, rr, N), "norm_out NULL differs N=%ld threads %d", N,
                  threads[t]);
            CHECK(guard_intact(scr, sf), "wrote past its scratch (%ld floats) N=%ld threads %d", sf, N, threads[t]);
            free(x), free(w), free(W), free(nr), free(rr), free(out), free(no), free(ro), free(out2), free(ro2),
                free(scr);
        }
    }
    omp_set_num_threads(2);
}

// eps 0 and rows of +-2^j make rstd a power of two, so norm_out is exact dyadic and the gemm exact.
static void test_rmsnorm_linear_exact_chain(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int s = 0; s < NLIN; s++) {
            long N = lin_shapes[s][0], C = lin_shapes[s][1], OC = lin_shapes[s][2];
            float *x = falloc(N * C), *w = fill_dyadic(C), *W = fill_dyadic(OC * C);
            for (long n = 0; n < N; n++) {
                float a = ldexpf(1.0f, (int)(n % 5) - 2);
                for (long c = 0; c < C; c++) x[n * C + c] = urand() < 0.5 ? -a : a;
            }
            float *nr = falloc(N * C), *rr = falloc(N), *outr = falloc(N * OC);
            k->rmsnorm_forward(nr, rr, x, w, N, C, 0.0f);
            k->linear_forward(outr, nr, W, N, C, OC);
            float *out = fill(N * OC, 9), *no = falloc(N * C), *ro = falloc(N);
            k->rmsnorm_linear_forward(out, no, ro, x, w, W, N, C, OC, 0.0f, NULL);
            CHECK(same(out, outr, N * OC) && same(no, nr, N * C) && same(ro, rr, N),
                  "exact chain differs N=%ld C=%ld OC=%ld threads %d", N, C, OC, threads[t]);
            free(x), free(w), free(W), free(nr), free(rr), free(outr), free(out), free(no), free(ro);
        }
    }
    omp_set_num_threads(2);
}

// Row blocks of a product whose weight spans two K blocks (C > 256) and two column panels
// (OC > 2048): out is still linear_forward's bits.
static void test_rmsnorm_linear_panels(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    const long N = 260, C = 300, OC = 2100;
    float *x = fill(N * C, 2), *w = fill(C, 1), *W = fill(OC * C, 1);
    float *nr = falloc(N * C), *rr = falloc(N), *outr = falloc(N * OC);
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        k->rmsnorm_forward(nr, rr, x, w, N, C, 1e-5f);
        k->linear_forward(outr, nr, W, N, C, OC);
        long sf = k->rmsnorm_linear_scratch_floats(N, C, OC);
        float *scr = scratch_alloc(sf), *out = fill(N * OC, 9), *ro = falloc(N);
        k->rmsnorm_linear_forward(out, NULL, ro, x, w, W, N, C, OC, 1e-5f, scr);
        CHECK(same(out, outr, N * OC), "out is not linear_forward's (C %ld, OC %ld) threads %d", C, OC, threads[t]);
        CHECK(guard_intact(scr, sf), "wrote past its scratch (%ld floats) threads %d", sf, threads[t]);
        free(scr), free(out), free(ro);
    }
    free(x), free(w), free(W), free(nr), free(rr), free(outr);
    omp_set_num_threads(2);
}

// ---------------------------------------------------------------- linear + SwiGLU
static const long swi_shapes[][3] = {{37, 45, 29}, {1, 3, 1}, {300, 45, 13}, {257, 64, 48}};  // N, C, F
#define NSWI 4

static void test_linear_swiglu(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int s = 0; s < NSWI; s++) {
            long N = swi_shapes[s][0], C = swi_shapes[s][1], F = swi_shapes[s][2];
            float *inp = fill(N * C, 1), *W = fill(2 * F * C, 1);
            float *h13 = fill(N * 2 * F, 9), *h = fill(N * F, 9), *hr = falloc(N * F);
            long sf = k->linear_swiglu_scratch_floats(N, C, F);
            float *scr = scratch_alloc(sf);
            k->linear_swiglu_forward(h13, h, inp, W, N, C, F, NULL);  // no scratch with h13
            double e = gemm_err(h13, 2 * F, inp, W, N, C, 2 * F);
            CHECK(e <= 1.0, "h13 N=%ld C=%ld F=%ld threads %d: %.3g of the bound", N, C, F, threads[t], e);
            float *h13u = falloc(N * 2 * F);  // a block's product sums as the product on all rows
            k->linear_forward(h13u, inp, W, N, C, 2 * F);
            CHECK(same(h13, h13u, N * 2 * F), "h13 is not linear_forward's N=%ld C=%ld F=%ld threads %d", N, C, F,
                  threads[t]);
            free(h13u);
            k->swiglu_forward(hr, h13, N, F);
            CHECK(same(h, hr, N * F), "h is not swiglu_forward(h13) N=%ld F=%ld threads %d", N, F, threads[t]);
            float *h2 = fill(N * F, 9);
            k->linear_swiglu_forward(NULL, h2, inp, W, N, C, F, scr);
            CHECK(same(h2, h, N * F), "h13 NULL differs N=%ld threads %d", N, threads[t]);
            CHECK(guard_intact(scr, sf), "wrote past its scratch (%ld floats) N=%ld threads %d", sf, N, threads[t]);
            free(inp), free(W), free(h13), free(h), free(hr), free(h2);

            // exact inputs: the unfused chain's bits
            inp = fill_dyadic(N * C), W = fill_dyadic(2 * F * C);
            float *h13r = falloc(N * 2 * F);
            hr = falloc(N * F), h13 = fill(N * 2 * F, 9), h = fill(N * F, 9);
            k->linear_forward(h13r, inp, W, N, C, 2 * F);
            k->swiglu_forward(hr, h13r, N, F);
            k->linear_swiglu_forward(h13, h, inp, W, N, C, F, NULL);
            CHECK(same(h13, h13r, N * 2 * F) && same(h, hr, N * F), "exact chain differs N=%ld C=%ld F=%ld threads %d",
                  N, C, F, threads[t]);
            free(inp), free(W), free(h13r), free(hr), free(h13), free(h), free(scr);
        }
    }
    omp_set_num_threads(2);
}

// ---------------------------------------------------------------- linear + RoPE
typedef struct {
    long B, T, C, NH, NKV, HS, pad;
} rope_shape;
static const rope_shape rope_shapes[] = {
    {3, 13, 45, 3, 1, 6, 3},   // N = 39, padding columns after v
    {1, 1, 7, 2, 2, 2, 0},     // one row
    {2, 150, 45, 4, 2, 8, 0},  // N = 300: several row blocks, a short last one
    {5, 37, 33, 2, 1, 10, 1},  // N = 185
};
#define NROPE 4

// One case of the RoPE chains: a shape, its angle tables, positions (NULL: 0..T-1), the threads.
typedef struct {
    const ct_kernels *k;
    rope_shape r;
    long N, HS, half, QKV, C;
    const float *cs, *sn;
    const int32_t *pp;  // use_pos 1: (T) shared by every sequence; 2: (B, T) a row per sequence
    long pp_ld;         // 0 or T, as rope_forward's pos_ld
    int use_pos, threads;
} rope_case;

// Runs check on every shape of rope_shapes, without positions, with (T) and with (B, T) ones, at 1, 2 and 3 threads.
static void for_each_rope_case(void (*check)(const rope_case *)) {
    const ct_kernels *k = ct_kernels_get("cpu");
    const long maxT = 400;
    for (int t = 0; t < NTHREADS; t++) {
        omp_set_num_threads(threads[t]);
        for (int s = 0; s < NROPE; s++)
            for (int use_pos = 0; use_pos < 3; use_pos++) {
                rope_shape r = rope_shapes[s];
                long half = r.HS / 2;
                float *cs = falloc(maxT * half), *sn = falloc(maxT * half);
                k->rope_tables(cs, sn, maxT, r.HS, 10000.0, 8.0, 1.0, 4.0, 16);
                long npos = use_pos == 2 ? r.B * r.T : r.T;
                int32_t *pos = malloc(sizeof(int32_t) * npos);
                for (long i = 0; i < npos; i++) pos[i] = (int32_t)(urand() * maxT);
                rope_case c = {k, r, r.B * r.T, r.HS, half, (r.NH + 2 * r.NKV) * r.HS + r.pad, r.C, cs, sn,
                               use_pos ? pos : NULL, use_pos == 2 ? r.T : 0, use_pos, threads[t]};
                check(&c);
                free(cs), free(sn), free(pos);
            }
    }
    omp_set_num_threads(2);
}

static void linear_rope_case(const rope_case *x) {
    const ct_kernels *k = x->k;
    const rope_shape r = x->r;
    const long N = x->N, HS = x->HS, half = x->half, QKV = x->QKV, C = x->C;
    const float *cs = x->cs, *sn = x->sn;
    const int32_t *pp = x->pp;
    // random values against float64
    float *inp = fill(N * C, 1), *W = fill(QKV * C, 1), *qkv = fill(N * QKV, 9);
    CHECK(k->linear_rope_scratch_floats(N, C, QKV) == 0, "the cpu rope asks for scratch");
    k->linear_rope_forward(qkv, inp, W, N, C, QKV, cs, sn, pp, x->pp_ld, r.B, r.T, r.NH, r.NKV, HS, NULL);
    double worst = 0;
    for (long n = 0; n < N; n++) {
        long tt = n % r.T, p = pp ? pp[n / r.T * x->pp_ld + tt] : tt;
        for (long o = 0; o < QKV; o += 2) {
            double v[2] = {0, 0}, a[2] = {0, 0};
            for (int j = 0; j < 2 && o + j < QKV; j++) {
                v[j] = a[j] = 0;
                for (long c = 0; c < C; c++) {
                    double t = (double)inp[n * C + c] * W[(o + j) * C + c];
                    v[j] += t, a[j] += fabs(t);
                }
            }
            if (o < (r.NH + r.NKV) * HS) {  // a rotated pair
                double c = cs[p * half + (o % HS) / 2], sv = sn[p * half + (o % HS) / 2];
                double r0 = v[0] * c - v[1] * sv, r1 = v[0] * sv + v[1] * c;
                double bound = (C + 8) * U * (fabs(c) * a[0] + fabs(sv) * a[1]) + 1e-300;
                double e0 = fabs(qkv[n * QKV + o] - r0) / bound;
                bound = (C + 8) * U * (fabs(sv) * a[0] + fabs(c) * a[1]) + 1e-300;
                double e1 = fabs(qkv[n * QKV + o + 1] - r1) / bound;
                if (!(e0 <= worst)) worst = isnan(e0) ? INFINITY : e0;
                if (!(e1 <= worst)) worst = isnan(e1) ? INFINITY : e1;
            } else {  // v heads and padding: the product only
                for (int j = 0; j < 2 && o + j < QKV; j++) {
                    double e = fabs(qkv[n * QKV + o + j] - v[j]) / ((C + 4) * U * a[j] + 1e-300);
                    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
                }
            }
        }
    }
    CHECK(worst <= 1.0, "qkv B=%ld T=%ld HS=%ld pos %d threads %d: %.3g of the bound", r.B, r.T, HS, x->use_pos,
          x->threads, worst);
    free(inp), free(W), free(qkv);

    // exact inputs: the unfused chain's bits
    inp = fill_dyadic(N * C), W = fill_dyadic(QKV * C), qkv = fill(N * QKV, 9);
    float *ref = falloc(N * QKV);
    k->linear_forward(ref, inp, W, N, C, QKV);
    k->rope_forward(ref, cs, sn, pp, x->pp_ld, r.B, r.T, r.NH, HS, QKV);
    k->rope_forward(ref + r.NH * HS, cs, sn, pp, x->pp_ld, r.B, r.T, r.NKV, HS, QKV);
    k->linear_rope_forward(qkv, inp, W, N, C, QKV, cs, sn, pp, x->pp_ld, r.B, r.T, r.NH, r.NKV, HS, NULL);
    CHECK(same(qkv, ref, N * QKV), "exact chain differs B=%ld T=%ld pos %d threads %d", r.B, r.T, x->use_pos,
          x->threads);
    free(inp), free(W), free(qkv), free(ref);
}

static void test_linear_rope(void) { for_each_rope_case(linear_rope_case); }

// The whole chain of a block without sequence parallel, norm -> QKV matmul -> RoPE, random
// values: norm_out and rstd are rmsnorm_forward's bits, qkv the bits of linear_forward on that
// norm_out then rope_forward on the q and the k heads (ct_gemm sums an element alike whatever rows
// a call covers; the rotation is rope's row); norm_out NULL (rows through scratch) gives the same
// bits and stays inside its scratch.
static void rmsnorm_linear_rope_case(const rope_case *c) {
    const ct_kernels *k = c->k;
    const rope_shape r = c->r;
    const long N = c->N, HS = c->HS, QKV = c->QKV, C = c->C;
    const float eps = 1e-5f;
    float *x = fill(N * C, 2), *w = falloc(C), *W = fill(QKV * C, 1);
    for (long i = 0; i < C; i++) w[i] = 1.0f + frand(0.5f);
    // the unfused chain
    float *nr = falloc(N * C), *rr = falloc(N), *ref = falloc(N * QKV);
    k->rmsnorm_forward(nr, rr, x, w, N, C, eps);
    k->linear_forward(ref, nr, W, N, C, QKV);
    k->rope_forward(ref, c->cs, c->sn, c->pp, c->pp_ld, r.B, r.T, r.NH, HS, QKV);
    k->rope_forward(ref + r.NH * HS, c->cs, c->sn, c->pp, c->pp_ld, r.B, r.T, r.NKV, HS, QKV);
    // fused, the norm kept
    float *qkv = fill(N * QKV, 9), *no = fill(N * C, 9), *ro = fill(N, 9);
    k->rmsnorm_linear_rope_forward(qkv, no, ro, x, w, W, N, C, QKV, eps, c->cs, c->sn, c->pp, c->pp_ld, r.B, r.T,
                                   r.NH, r.NKV, HS, NULL);
    CHECK(same(no, nr, N * C) && same(ro, rr, N), "norm_out/rstd differ B=%ld T=%ld threads %d", r.B, r.T,
          c->threads);
    CHECK(same(qkv, ref, N * QKV), "qkv is not the unfused chain's B=%ld T=%ld HS=%ld pos %d threads %d", r.B, r.T,
          HS, c->use_pos, c->threads);
    // not kept: through scratch
    long sf = k->rmsnorm_linear_scratch_floats(N, C, QKV);
    float *scr = scratch_alloc(sf), *qkv2 = fill(N * QKV, 9), *ro2 = fill(N, 9);
    k->rmsnorm_linear_rope_forward(qkv2, NULL, ro2, x, w, W, N, C, QKV, eps, c->cs, c->sn, c->pp, c->pp_ld, r.B, r.T,
                                   r.NH, r.NKV, HS, scr);
    CHECK(same(qkv2, ref, N * QKV) && same(ro2, rr, N), "norm_out NULL differs B=%ld T=%ld threads %d", r.B, r.T,
          c->threads);
    CHECK(guard_intact(scr, sf), "wrote past its scratch (%ld floats) N=%ld threads %d", sf, N, c->threads);
    free(x), free(w), free(W), free(nr), free(rr), free(ref), free(qkv), free(no), free(ro), free(scr), free(qkv2),
        free(ro2);
}

static void test_rmsnorm_linear_rope(void) { for_each_rope_case(rmsnorm_linear_rope_case); }

static void norm_rope_bad_rows(void) {
    float x[64] = {0}, w[4] = {1, 1, 1, 1}, cs[4] = {1, 1, 1, 1}, sn[4] = {0}, r[4];
    ct_rmsnorm_linear_rope_forward(x, x, r, x, w, x, 3, 1, 4, 1e-5f, cs, sn, NULL, 0, 1, 2, 1, 1, 2, NULL);  // N 3 != 2
}

static void rope_bad_rows(void) {
    float x[64] = {0}, cs[4] = {1, 1, 1, 1}, sn[4] = {0};
    ct_linear_rope_forward(x, x, x, 3, 1, 4, cs, sn, NULL, 0, 1, 2, 1, 1, 2, NULL);  // N 3 != B*T 2
}

static void test_linear_rope_refuses_bad_rows(void) {
    char err[512];
    int rc = ct_test_run_fatal_void(rope_bad_rows, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "ct_linear_rope_forward") != NULL, "rc %d, stderr: %s", rc, err);
    rc = ct_test_run_fatal_void(norm_rope_bad_rows, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "ct_rmsnorm_linear_rope_forward") != NULL, "rc %d, stderr: %s", rc, err);
}

// ---------------------------------------------------------------- AdamW
// The kernel is one pass: each element's param, m, v are read and written once, the gradient
// read once and multiplied by grad_scale (the clipping factor) as it is read.
static void test_adamw_fused_step(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    long n = 100003;
    float *p = fill(n, 1), *m = falloc(n), *v = falloc(n), *g = falloc(n), *g0 = falloc(n);
    float *fp = falloc(n), *fm = falloc(n), *fv = falloc(n);
    double *rp = malloc(sizeof(double) * n), *rm = calloc(n, sizeof(double)), *rv = calloc(n, sizeof(double));
    for (long i = 0; i < n; i++) m[i] = v[i] = fm[i] = fv[i] = 0, fp[i] = p[i], rp[i] = p[i];
    float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    for (long step = 1; step <= 4; step++) {
        float gs = step == 2 ? 1.0f : 0.37f;  // a clipped step and an unclipped one
        for (long i = 0; i < n; i++) g[i] = g0[i] = frand(2);
        omp_set_num_threads(threads[step % NTHREADS]);
        k->adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, step, &gs);
        CHECK(same(g, g0, n), "grad written (step %ld)", step);
        // per-element float reference with the same operations: the same bits
        float bc1 = (float)(1.0 - pow((double)b1, (double)step)), bc2 = (float)(1.0 - pow((double)b2, (double)step));
        for (long i = 0; i < n; i++) {
            float gi = g0[i] * gs;
            fm[i] = b1 * fm[i] + (1.0f - b1) * gi;
            fv[i] = b2 * fv[i] + (1.0f - b2) * gi * gi;
            fp[i] -= lr * (fm[i] / bc1 / (sqrtf(fv[i] / bc2) + eps) + wd * fp[i]);
        }
        // float64 step (Loshchilov & Hutter's AdamW, Adam's bias corrections) from the same hyper-parameters
        for (long i = 0; i < n; i++) {
            double gi = (double)g0[i] * gs;
            rm[i] = b1 * rm[i] + (1 - (double)b1) * gi;
            rv[i] = b2 * rv[i] + (1 - (double)b2) * gi * gi;
            double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
    }
    omp_set_num_threads(2);
    CHECK(same(p, fp, n) && same(m, fm, n) && same(v, fv, n), "differs from the per-element float reference");
    CHECK(ct_test_max_rel_err(p, rp, n) < 1e-5, "param vs float64: %g", ct_test_max_rel_err(p, rp, n));
    CHECK(ct_test_max_rel_err(m, rm, n) < 1e-5, "m vs float64: %g", ct_test_max_rel_err(m, rm, n));
    CHECK(ct_test_max_rel_err(v, rv, n) < 1e-5, "v vs float64: %g", ct_test_max_rel_err(v, rv, n));
    free(p), free(m), free(v), free(g), free(g0), free(fp), free(fm), free(fv), free(rp), free(rm), free(rv);
}

// The table points at the kernels.h functions.
static void test_table(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    CHECK((const void *)k->residual_rmsnorm_forward == CT_KERNEL_TARGET(ct_residual_rmsnorm_forward) &&
              (const void *)k->rmsnorm_linear_forward == CT_KERNEL_TARGET(ct_rmsnorm_linear_forward) &&
              (const void *)k->rmsnorm_linear_rope_forward == CT_KERNEL_TARGET(ct_rmsnorm_linear_rope_forward) &&
              (const void *)k->rmsnorm_linear_scratch_floats == CT_KERNEL_TARGET(ct_rmsnorm_linear_scratch_floats) &&
              (const void *)k->linear_swiglu_forward == CT_KERNEL_TARGET(ct_linear_swiglu_forward) &&
              (const void *)k->linear_swiglu_scratch_floats == CT_KERNEL_TARGET(ct_linear_swiglu_scratch_floats) &&
              (const void *)k->linear_rope_scratch_floats == CT_KERNEL_TARGET(ct_linear_rope_scratch_floats) &&
              (const void *)k->linear_rope_forward == CT_KERNEL_TARGET(ct_linear_rope_forward) &&
              (const void *)k->adamw_update == CT_KERNEL_TARGET(ct_adamw_update),
          "a fused member is not its kernels.h function");
}

int main(void) {
    rng_state = 0x452821E638D01377ull;
    CT_RUN(test_table);
    CT_RUN(test_residual_rmsnorm_bits);
    CT_RUN(test_rmsnorm_linear_random);
    CT_RUN(test_rmsnorm_linear_exact_chain);
    CT_RUN(test_rmsnorm_linear_panels);
    CT_RUN(test_linear_swiglu);
    CT_RUN(test_linear_rope);
    CT_RUN(test_rmsnorm_linear_rope);
    CT_RUN(test_linear_rope_refuses_bad_rows);
    CT_RUN(test_adamw_fused_step);
    CT_TEST_EXIT();
}
