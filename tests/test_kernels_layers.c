// Embedding, RMSNorm, RoPE and SwiGLU, forward and backward, against naive float64 code.
// Backward references are float64 central differences of sum(out * dout) (independent of the
// analytic formulas in the kernels); the row reductions are checked for bitwise reproducibility.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/float_formats.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_rand.h"

static float *falloc(long n) { return malloc(sizeof(float) * (n > 0 ? n : 1)); }

// ---------------------------------------------------------------- embedding
static void test_embedding_window_and_scatter(void) {
    long shapes[][3] = {{1, 1, 1}, {37, 65, 11}, {300, 130, 7}};  // N, C, V_local
    for (int s = 0; s < 3; s++) {
        long N = shapes[s][0], C = shapes[s][1], V = shapes[s][2], start = 5;
        int32_t *tok = malloc(sizeof(int32_t) * N);
        for (long n = 0; n < N; n++) tok[n] = (int32_t)(urand() * (V + 10));  // some below/above the window
        float *wte = falloc(V * C), *out = falloc(N * C), *dout = falloc(N * C);
        float *dw = falloc(V * C), *dw0 = falloc(V * C), *dw2 = falloc(V * C);
        for (long i = 0; i < V * C; i++) wte[i] = frand(1), dw[i] = dw0[i] = dw2[i] = frand(1);
        for (long i = 0; i < N * C; i++) dout[i] = frand(1), out[i] = NAN;
        ct_embedding_forward(out, tok, wte, N, C, start, V);
        for (long n = 0; n < N; n++) {
            long r = tok[n] - start;
            for (long c = 0; c < C; c++) {
                float want = (r >= 0 && r < V) ? wte[r * C + c] : 0.0f;
                CHECK(out[n * C + c] == want, "N=%ld row %ld col %ld", N, n, c);
            }
        }
        // From the table's bf16 copy: each row widened exactly (the row of bf16(wte)).
        uint16_t *wte16 = malloc(sizeof(uint16_t) * V * C);
        for (long i = 0; i < V * C; i++) wte16[i] = ct_f32_to_bf16(wte[i]);
        for (long i = 0; i < N * C; i++) out[i] = NAN;
        ct_embedding_forward_bf16(out, tok, wte16, N, C, start, V);
        long bad16 = 0;
        for (long n = 0; n < N; n++) {
            long r = tok[n] - start;
            for (long c = 0; c < C; c++)
                bad16 += out[n * C + c] != ((r >= 0 && r < V) ? ct_bf16_to_f32(wte16[r * C + c]) : 0.0f);
        }
        CHECK(bad16 == 0, "bf16 table, N=%ld: %ld of %ld values differ", N, bad16, N * C);
        free(wte16);
        double *ref = malloc(sizeof(double) * V * C);
        for (long i = 0; i < V * C; i++) ref[i] = dw0[i];
        for (long n = 0; n < N; n++) {
            long r = tok[n] - start;
            if (r < 0 || r >= V) continue;
            for (long c = 0; c < C; c++) ref[r * C + c] += dout[n * C + c];
        }
        ct_embedding_backward(dw, dout, tok, N, C, start, V);
        CHECK(ct_test_max_rel_err(dw, ref, V * C) < 1e-6, "dwte N=%ld", N);
        ct_embedding_backward(dw2, dout, tok, N, C, start, V);
        CHECK(memcmp(dw, dw2, sizeof(float) * V * C) == 0, "dwte not reproducible");
        free(tok), free(wte), free(out), free(dout), free(dw), free(dw0), free(dw2), free(ref);
    }
}

// ---------------------------------------------------------------- RMSNorm
static void rms_ref(double *y, const double *x, const double *w, long N, long C, double eps) {
    for (long n = 0; n < N; n++) {
        double ss = 0;
        for (long c = 0; c < C; c++) ss += x[n * C + c] * x[n * C + c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (long c = 0; c < C; c++) y[n * C + c] = x[n * C + c] * r * w[c];
    }
}

static void test_rmsnorm_forward_backward(void) {
    long shapes[][2] = {{1, 1}, {7, 16}, {65, 130}, {3, 7}};
    for (int s = 0; s < 4; s++) {
        long N = shapes[s][0], C = shapes[s][1];
        float eps = 1e-5f;
        float *x = falloc(N * C), *w = falloc(C), *y = falloc(N * C), *rstd = falloc(N), *dy = falloc(N * C);
        float *dx = falloc(N * C), *dx0 = falloc(N * C), *dw = falloc(C), *dw0 = falloc(C);
        double *xd = malloc(sizeof(double) * N * C), *wd = malloc(sizeof(double) * C);
        double *yd = malloc(sizeof(double) * N * C), *rdx = malloc(sizeof(double) * N * C), *rdw = malloc(sizeof(double) * C);
        for (long i = 0; i < N * C; i++) x[i] = frand(2), xd[i] = x[i], dy[i] = frand(1), dx[i] = dx0[i] = frand(1);
        for (long c = 0; c < C; c++) w[c] = 1.0f + frand(0.5f), wd[c] = w[c], dw[c] = dw0[c] = frand(1);
        rms_ref(yd, xd, wd, N, C, eps);
        ct_rmsnorm_forward(y, rstd, x, w, N, C, eps);
        CHECK(ct_test_max_rel_err(y, yd, N * C) < 1e-5, "rmsnorm out N=%ld C=%ld", N, C);
        // gradients of f = sum(y * dy) by central differences in double
        double h = 1e-6;
        for (long i = 0; i < N * C; i++) {
            double f[2], save = xd[i];
            for (int k = 0; k < 2; k++) {
                xd[i] = save + (k ? h : -h);
                rms_ref(yd, xd, wd, N, C, eps);
                f[k] = 0;
                for (long j = 0; j < N * C; j++) f[k] += yd[j] * dy[j];
            }
            xd[i] = save;
            rdx[i] = dx0[i] + (f[1] - f[0]) / (2 * h);
        }
        for (long c = 0; c < C; c++) {
            double f[2], save = wd[c];
            for (int k = 0; k < 2; k++) {
                wd[c] = save + (k ? h : -h);
                rms_ref(yd, xd, wd, N, C, eps);
                f[k] = 0;
                for (long j = 0; j < N * C; j++) f[k] += yd[j] * dy[j];
            }
            wd[c] = save;
            rdw[c] = dw0[c] + (f[1] - f[0]) / (2 * h);
        }
        ct_rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
        CHECK(ct_test_max_rel_err(dx, rdx, N * C) < 1e-4, "rmsnorm dinp (+=) N=%ld C=%ld: %g", N, C,
              ct_test_max_rel_err(dx, rdx, N * C));
        CHECK(ct_test_max_rel_err(dw, rdw, C) < 1e-4, "rmsnorm dweight (+=) N=%ld C=%ld: %g", N, C,
              ct_test_max_rel_err(dw, rdw, C));
        // reproducible
        float *dx2 = falloc(N * C), *dw2 = falloc(C);
        memcpy(dx2, dx0, sizeof(float) * N * C), memcpy(dw2, dw0, sizeof(float) * C);
        ct_rmsnorm_backward(dx2, dw2, dy, x, w, rstd, N, C);
        CHECK(memcmp(dx, dx2, sizeof(float) * N * C) == 0 && memcmp(dw, dw2, sizeof(float) * C) == 0,
              "rmsnorm backward not reproducible");
        free(x), free(w), free(y), free(rstd), free(dy), free(dx), free(dx0), free(dw), free(dw0), free(xd), free(wd);
        free(yd), free(rdx), free(rdw), free(dx2), free(dw2);
    }
}

// The backward's weight gradient is summed over blocks of rows in a fixed order: the same bits on
// 1, 2 and 3 threads, each half alone (dinp only, dweight only) the same bits as both together,
// and rows wider than the 16,384 columns a pass holds (a pass per span) checked against float64.
static void test_rmsnorm_backward_bits(void) {
    long shapes[][2] = {{300, 96}, {130, 16384 + 40}};  // N, C
    for (int s = 0; s < 2; s++) {
        long N = shapes[s][0], C = shapes[s][1];
        float *x = falloc(N * C), *w = falloc(C), *rstd = falloc(N), *dy = falloc(N * C);
        float *dx0 = falloc(N * C), *dw0 = falloc(C);
        for (long i = 0; i < N * C; i++) x[i] = frand(1), dy[i] = frand(1), dx0[i] = frand(1);
        for (long c = 0; c < C; c++) w[c] = frand(1), dw0[c] = frand(1);
        for (long n = 0; n < N; n++) rstd[n] = 0.5f + (float)urand();
        float *dx[3], *dw[3];
        int threads = omp_get_max_threads();
        for (int t = 0; t < 3; t++) {
            dx[t] = falloc(N * C), dw[t] = falloc(C);
            memcpy(dx[t], dx0, sizeof(float) * N * C), memcpy(dw[t], dw0, sizeof(float) * C);
            omp_set_num_threads(t + 1);
            ct_rmsnorm_backward(dx[t], dw[t], dy, x, w, rstd, N, C);
        }
        omp_set_num_threads(threads);
        for (int t = 1; t < 3; t++)
            CHECK(memcmp(dx[0], dx[t], sizeof(float) * N * C) == 0 && memcmp(dw[0], dw[t], sizeof(float) * C) == 0,
                  "rmsnorm backward N=%ld C=%ld: %d threads differ from 1", N, C, t + 1);
        float *dxs = falloc(N * C), *dws = falloc(C);
        memcpy(dxs, dx0, sizeof(float) * N * C), memcpy(dws, dw0, sizeof(float) * C);
        ct_rmsnorm_backward(dxs, NULL, dy, x, w, rstd, N, C);
        ct_rmsnorm_backward(NULL, dws, dy, x, w, rstd, N, C);
        CHECK(memcmp(dx[0], dxs, sizeof(float) * N * C) == 0 && memcmp(dw[0], dws, sizeof(float) * C) == 0,
              "rmsnorm backward N=%ld C=%ld: the halves alone differ from both together", N, C);
        double *rdx = malloc(sizeof(double) * N * C), *rdw = malloc(sizeof(double) * C);
        for (long c = 0; c < C; c++) rdw[c] = dw0[c];
        for (long n = 0; n < N; n++) {
            double r = rstd[n], dot = 0;
            for (long c = 0; c < C; c++) dot += (double)dy[n * C + c] * w[c] * x[n * C + c];
            for (long c = 0; c < C; c++) {
                long i = n * C + c;
                rdx[i] = dx0[i] + r * w[c] * dy[i] - r * r * r * dot / (double)C * x[i];
                rdw[c] += (double)dy[i] * x[i] * r;
            }
        }
        CHECK(ct_test_max_rel_err(dx[0], rdx, N * C) < 1e-4, "rmsnorm dinp N=%ld C=%ld: %g", N, C,
              ct_test_max_rel_err(dx[0], rdx, N * C));
        CHECK(ct_test_max_rel_err(dw[0], rdw, C) < 1e-4, "rmsnorm dweight N=%ld C=%ld: %g", N, C,
              ct_test_max_rel_err(dw[0], rdw, C));
        for (int t = 0; t < 3; t++) free(dx[t]), free(dw[t]);
        free(x), free(w), free(rstd), free(dy), free(dx0), free(dw0), free(dxs), free(dws), free(rdx), free(rdw);
    }
}

// ---------------------------------------------------------------- RoPE
// Meta's apply_scaling, written from the Llama 3.1 reference code.
static double llama31_freq(long i, long HS, double theta, double factor, double lo, double hi, long orig) {
    double freq = 1.0 / pow(theta, (double)(2 * i) / (double)HS);
    if (factor <= 0) return freq;
    double wavelen = 2 * M_PI / freq;
    if (wavelen < orig / hi) return freq;
    if (wavelen > orig / lo) return freq / factor;
    double smooth = (orig / wavelen - lo) / (hi - lo);
    return (1 - smooth) * freq / factor + smooth * freq;
}

static void test_rope_tables_llama31(void) {
    long T = 40, HS = 128;
    float *c = falloc(T * HS / 2), *s = falloc(T * HS / 2);
    ct_rope_tables(c, s, T, HS, 500000.0, 8.0, 1.0, 4.0, 8192);
    // hand-worked: pair 0 has freq 1 (wavelength 2 pi < 2048: unscaled), so angle(p) = p
    CHECK_CLOSE(c[3 * 64 + 0], cos(3.0), 0, 1e-6);
    CHECK_CLOSE(s[3 * 64 + 0], sin(3.0), 0, 1e-6);
    // the last pair: freq = 500000^(-126/128) ~ 2.4e-6, wavelength ~ 2.6e6 > 8192: divided by 8
    double f63 = pow(500000.0, -126.0 / 128.0) / 8.0;
    CHECK_CLOSE(s[39 * 64 + 63], sin(39 * f63), 0, 1e-7);
    int seen_mid = 0;
    for (long i = 0; i < HS / 2; i++) {
        double f = llama31_freq(i, HS, 500000.0, 8.0, 1.0, 4.0, 8192);
        double wl = 2 * M_PI / pow(500000.0, -(double)(2 * i) / HS);
        if (wl >= 2048 && wl <= 8192) seen_mid = 1;
        for (long p = 0; p < T; p++) {
            CHECK_CLOSE(c[p * 64 + i], cos(p * f), 0, 1e-6);
            CHECK_CLOSE(s[p * 64 + i], sin(p * f), 0, 1e-6);
        }
    }
    CHECK(seen_mid, "no pair in the interpolated band: the test does not cover it");
    // scale_factor <= 0: plain theta^(-2i/HS)
    ct_rope_tables(c, s, T, HS, 10000.0, 0.0, 1.0, 4.0, 8192);
    for (long i = 0; i < HS / 2; i++) CHECK_CLOSE(s[7 * 64 + i], sin(7 * pow(10000.0, -(double)(2 * i) / HS)), 0, 1e-6);
    free(c), free(s);
}

static void test_rope_forward_backward(void) {
    long B = 2, T = 9, H = 3, HS = 24, ld = H * HS + 10, maxT = 64;
    float *c = falloc(maxT * HS / 2), *s = falloc(maxT * HS / 2);
    ct_rope_tables(c, s, maxT, HS, 10000.0, 8.0, 1.0, 4.0, 16);  // small original length: the interpolated and stretched bands
    int32_t pos[9] = {5, 6, 7, 8, 40, 41, 42, 0, 63};
    // (B, T) a row per sequence, restarting at each document (model.rope_positions document)
    int32_t rows[2 * 9] = {0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 0, 1};
    // use_pos 0: 0..T-1; 1: pos (T) shared by both sequences; 2: rows (B, T)
    for (int use_pos = 0; use_pos < 3; use_pos++) {
        const int32_t *pp = use_pos == 0 ? NULL : use_pos == 1 ? pos : rows;
        long pp_ld = use_pos == 2 ? T : 0;
        float *x = falloc(B * T * ld), *x0 = falloc(B * T * ld), *g = falloc(B * T * ld), *g0 = falloc(B * T * ld);
        for (long i = 0; i < B * T * ld; i++) x[i] = x0[i] = frand(1), g[i] = g0[i] = frand(1);
        ct_rope_forward(x, c, s, pp, pp_ld, B, T, H, HS, ld);
        ct_rope_backward(g, c, s, pp, pp_ld, B, T, H, HS, ld);
        double dot_fx_g = 0, dot_x_bg = 0;  // <R x, g> == <x, R^T g>: backward is the transpose
        for (long b = 0; b < B; b++)
            for (long t = 0; t < T; t++) {
                long p = use_pos == 0 ? t : use_pos == 1 ? pos[t] : rows[b * T + t];
                for (long x_ = H * HS; x_ < ld; x_++)
                    CHECK(x[(b * T + t) * ld + x_] == x0[(b * T + t) * ld + x_], "padding touched");
                for (long h = 0; h < H; h++)
                    for (long i = 0; i < HS / 2; i++) {
                        double f = llama31_freq(i, HS, 10000.0, 8.0, 1.0, 4.0, 16), a = p * f;
                        long o = (b * T + t) * ld + h * HS + 2 * i;
                        double r0 = x0[o] * cos(a) - x0[o + 1] * sin(a), r1 = x0[o] * sin(a) + x0[o + 1] * cos(a);
                        CHECK_CLOSE(x[o], r0, 1e-5, 1e-6);
                        CHECK_CLOSE(x[o + 1], r1, 1e-5, 1e-6);
                        dot_fx_g += r0 * g0[o] + r1 * g0[o + 1];
                        dot_x_bg += (double)x0[o] * g[o] + (double)x0[o + 1] * g[o + 1];
                    }
            }
        CHECK_CLOSE(dot_x_bg, dot_fx_g, 1e-5, 1e-5);
        free(x), free(x0), free(g), free(g0);
    }
    free(c), free(s);
}

// RoPE against the pair formula in float, bit for bit (a contracted FMA or a reordered sum would
// show), for head sizes GCC's vector loop covers whole or with a tail, both directions.
static void test_rope_bits(void) {
    const long HSs[] = {64, 24, 8, 6, 520}, B = 1, T = 5, H = 2, maxT = 8;
    for (unsigned k = 0; k < sizeof HSs / sizeof HSs[0]; k++) {
        long HS = HSs[k], ld = H * HS;
        float *c = falloc(maxT * HS / 2), *s = falloc(maxT * HS / 2);
        ct_rope_tables(c, s, maxT, HS, 10000.0, 0.0, 1.0, 4.0, 8192);
        for (int dir = 1; dir >= -1; dir -= 2) {
            float *x = falloc(B * T * ld), *ref = falloc(B * T * ld);
            for (long i = 0; i < B * T * ld; i++) x[i] = frand(1);
            for (long t = 0; t < T; t++)
                for (long h = 0; h < H; h++)
                    for (long i = 0; i < HS / 2; i++) {
                        long o = t * ld + h * HS + 2 * i;
                        float x0 = x[o], x1 = x[o + 1], cc = c[t * HS / 2 + i], ss = (float)dir * s[t * HS / 2 + i];
                        ref[o] = x0 * cc - x1 * ss;
                        ref[o + 1] = x0 * ss + x1 * cc;
                    }
            if (dir > 0) ct_rope_forward(x, c, s, NULL, 0, B, T, H, HS, ld);
            else ct_rope_backward(x, c, s, NULL, 0, B, T, H, HS, ld);
            CHECK(memcmp(x, ref, sizeof(float) * B * T * ld) == 0, "HS %ld dir %d: not the pair formula's bits", HS, dir);
            free(x), free(ref);
        }
        free(c), free(s);
    }
}

// ---------------------------------------------------------------- SwiGLU
static double silu(double x) { return x / (1 + exp(-x)); }

static void test_swiglu_forward_backward(void) {
    long shapes[][2] = {{1, 1}, {5, 7}, {33, 130}};
    for (int s = 0; s < 3; s++) {
        long N = shapes[s][0], F = shapes[s][1];
        float *inp = falloc(N * 2 * F), *out = falloc(N * F), *dout = falloc(N * F), *dinp = falloc(N * 2 * F);
        double *ro = malloc(sizeof(double) * N * F), *rd = malloc(sizeof(double) * N * 2 * F);
        for (long i = 0; i < N * 2 * F; i++) inp[i] = frand(6), dinp[i] = NAN;  // dinp is overwritten
        if (N * F > 4) inp[0] = -100.0f, inp[1] = 100.0f;  // saturated sigmoid: no NaN/inf
        for (long i = 0; i < N * F; i++) dout[i] = frand(1);
        for (long n = 0; n < N; n++)
            for (long f = 0; f < F; f++) {
                double g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], h = 1e-6;
                ro[n * F + f] = silu(g) * u;
                rd[n * 2 * F + f] = dout[n * F + f] * u * (silu(g + h) - silu(g - h)) / (2 * h);
                rd[n * 2 * F + F + f] = dout[n * F + f] * silu(g);
            }
        ct_swiglu_forward(out, inp, N, F);
        ct_swiglu_backward(dinp, dout, inp, N, F);
        CHECK(ct_test_max_rel_err(out, ro, N * F) < 1e-5, "swiglu out N=%ld F=%ld", N, F);
        CHECK(ct_test_max_rel_err(dinp, rd, N * 2 * F) < 1e-4, "swiglu dinp N=%ld F=%ld: %g", N, F,
              ct_test_max_rel_err(dinp, rd, N * 2 * F));
        free(inp), free(out), free(dout), free(dinp), free(ro), free(rd);
    }
}

int main(void) {
    rng_state = 0x13198A2E03707344ull;
    CT_RUN(test_embedding_window_and_scatter);
    CT_RUN(test_rmsnorm_forward_backward);
    CT_RUN(test_rmsnorm_backward_bits);
    CT_RUN(test_rope_tables_llama31);
    CT_RUN(test_rope_forward_backward);
    CT_RUN(test_rope_bits);
    CT_RUN(test_swiglu_forward_backward);
    CT_TEST_EXIT();
}
