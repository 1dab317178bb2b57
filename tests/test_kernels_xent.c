// Fused output projection + cross-entropy against a naive float64 reference: loss, dx, dW for
// chunk sizes that do and do not divide N, ignored targets (-1), forward-only (dx == NULL),
// large logits (max subtraction), reproducibility.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/float_formats.h"
#include "kernels/backend.h"
#include "kernels/cpu/xent_row.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_bf16.h"
#include "test_rand.h"


// loss = sum over valid rows of lse - z[t]; dx = s dlogits W, dW = dW0 + s dlogits^T x
static double ref_xent(double *dx, double *dW, const float *x, const float *W, const float *dW0, const int32_t *tg,
                       long N, long C, long V, double s) {
    double loss = 0, *z = malloc(sizeof(double) * V);
    for (long i = 0; i < V * C; i++) dW[i] = dW0[i];
    for (long n = 0; n < N; n++) {
        for (long c = 0; c < C; c++) dx[n * C + c] = 0;
        if (tg[n] < 0) continue;
        double mx = -INFINITY, sum = 0;
        for (long v = 0; v < V; v++) {
            z[v] = 0;
            for (long c = 0; c < C; c++) z[v] += (double)x[n * C + c] * W[v * C + c];
            if (z[v] > mx) mx = z[v];
        }
        for (long v = 0; v < V; v++) sum += exp(z[v] - mx);
        double lse = mx + log(sum);
        loss += lse - z[tg[n]];
        for (long v = 0; v < V; v++) {
            double d = (exp(z[v] - lse) - (v == tg[n])) * s;
            for (long c = 0; c < C; c++) {
                dx[n * C + c] += d * W[v * C + c];
                dW[v * C + c] += d * x[n * C + c];
            }
        }
    }
    free(z);
    return loss;
}

static void one_case(long N, long C, long V, long chunk, float xscale) {
    float *x = malloc(sizeof(float) * N * C), *W = malloc(sizeof(float) * V * C), *dx = malloc(sizeof(float) * N * C);
    float *dW = malloc(sizeof(float) * V * C), *dW0 = malloc(sizeof(float) * V * C), *dW2 = malloc(sizeof(float) * V * C);
    float *dx2 = malloc(sizeof(float) * N * C);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (long i = 0; i < N * C; i++) x[i] = frand(xscale), dx[i] = NAN;  // dx is overwritten
    for (long i = 0; i < V * C; i++) W[i] = frand(1), dW[i] = dW0[i] = dW2[i] = frand(1);  // dW accumulates
    long valid = 0;
    for (long n = 0; n < N; n++) {
        tg[n] = urand() < 0.25 ? -1 : (int32_t)(urand() * V);
        valid += tg[n] >= 0;
    }
    float s = valid ? 1.0f / (float)valid : 1.0f;
    float *scratch = malloc(sizeof(float) * ct_xent_scratch_floats(chunk, V, C, false));
    double *rdx = malloc(sizeof(double) * N * C), *rdW = malloc(sizeof(double) * V * C);
    double rloss = ref_xent(rdx, rdW, x, W, dW0, tg, N, C, V, s);
    double loss = ct_xent_fused(dx, dW, x, W, tg, N, C, V, s, chunk, false, scratch);
    CHECK(fabs(loss - rloss) <= 1e-5 * (fabs(rloss) + 1), "N=%ld C=%ld V=%ld chunk=%ld: loss %.9g vs %.9g", N, C, V,
          chunk, loss, rloss);
    CHECK(ct_test_max_rel_err(dx, rdx, N * C) < 1e-4, "dx N=%ld chunk=%ld: %g", N, chunk,
          ct_test_max_rel_err(dx, rdx, N * C));
    CHECK(ct_test_max_rel_err(dW, rdW, V * C) < 1e-4, "dW N=%ld chunk=%ld: %g", N, chunk,
          ct_test_max_rel_err(dW, rdW, V * C));
    for (long n = 0; n < N; n++)
        if (tg[n] < 0)
            for (long c = 0; c < C; c++) CHECK(dx[n * C + c] == 0.0f, "ignored row %ld has a gradient", n);
    // forward only: same loss, nothing written
    float keep = dW2[0];
    double loss_f = ct_xent_fused(NULL, dW2, x, W, tg, N, C, V, s, chunk, false, scratch);
    CHECK(fabs(loss_f - rloss) <= 1e-5 * (fabs(rloss) + 1), "forward-only loss %.9g vs %.9g", loss_f, rloss);
    CHECK(dW2[0] == keep, "forward-only wrote dW");
    // reproducible
    memcpy(dW2, dW0, sizeof(float) * V * C);
    double loss2 = ct_xent_fused(dx2, dW2, x, W, tg, N, C, V, s, chunk, false, scratch);
    CHECK(loss2 == loss && memcmp(dx, dx2, sizeof(float) * N * C) == 0 && memcmp(dW, dW2, sizeof(float) * V * C) == 0,
          "not reproducible");
    free(x), free(W), free(dx), free(dW), free(dW0), free(dW2), free(dx2), free(tg), free(scratch), free(rdx), free(rdW);
}

static void test_xent_shapes_and_chunks(void) {
    one_case(1, 1, 1, 1, 1.0f);
    one_case(7, 16, 33, 3, 1.0f);
    one_case(65, 24, 130, 64, 1.0f);
    one_case(130, 8, 257, 130, 1.0f);
    one_case(20, 8, 50, 1000, 1.0f);  // chunk larger than N
}

static void test_xent_large_logits(void) { one_case(9, 16, 40, 4, 30.0f); }  // logits in the hundreds

static void test_xent_all_ignored(void) {
    long N = 4, C = 3, V = 5;
    float x[12], W[15], dx[12], dW[15] = {0}, scratch[5 * 4 + 8];
    int32_t tg[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 12; i++) x[i] = frand(1);
    for (int i = 0; i < 15; i++) W[i] = frand(1);
    CHECK(ct_xent_scratch_floats(4, 5, C, false) <= (long)(sizeof scratch / sizeof scratch[0]), "scratch size");
    double loss = ct_xent_fused(dx, dW, x, W, tg, N, C, V, 1.0f, 4, false, scratch);
    CHECK(loss == 0.0, "loss %g", loss);
    for (int i = 0; i < 12; i++) CHECK(dx[i] == 0.0f, "dx");
    for (int i = 0; i < 15; i++) CHECK(dW[i] == 0.0f, "dW");
}

// A target outside [0, V) that is not -1 is a caller bug: the kernel stops with a message
// (exit status non-zero) instead of reading outside the logits row. Run in a child process.
static void test_xent_bad_target_is_fatal(void) {
    int32_t bad[2][2] = {{0, 5}, {-2, 1}};  // V = 5: 5 is one past the end, -2 is not the ignore value
    for (int b = 0; b < 2; b++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            freopen("/dev/null", "w", stderr);
            float x[6] = {0}, W[15] = {0}, dx[6], dW[15] = {0}, scratch[32];
            ct_xent_fused(dx, dW, x, W, bad[b], 2, 3, 5, 1.0f, 2, false, scratch);
            _exit(0);  // reached only if the kernel accepted the bad target
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, "bad target %d accepted (status %d)", bad[b][b == 0 ? 1 : 0], st);
    }
}

// The softmax exp of the rows and the attention (fastmath.h's ct_fast_expf_v16_quick: no
// clamps or selects for a vector whose lanes are all in range, ct_fast_expf_v16 for any other)
// has ct_fast_expf_v16's bits: every 61st float bit
// pattern (NaNs, infinities, zeros, denormals, both ends of the range; a vector of 16 steps of 61
// often has lanes on both sides of -87.3 or 88.3), and every pattern near those two ends.
static void test_xent_exp_bits(void) {
#ifdef CT_V16
    long differ = 0;
    const float ends[2] = {-87.3f, 88.3f};
    for (int pass = 0; pass < 3; pass++) {
        uint32_t start = 0, step = 61, count = (uint32_t)(0xFFFFFFFFu / (61u * 16u));
        if (pass > 0) memcpy(&start, &ends[pass - 1], 4), start -= 1u << 16, step = 1, count = (1u << 17) / 16;
        for (uint32_t v = 0; v < count; v++) {
            uint32_t b[16];
            for (int k = 0; k < 16; k++) b[k] = start + (v * 16u + (uint32_t)k) * step;
            ct_v16f x, a, e;
            memcpy(&x, b, sizeof x);
            a = ct_fast_expf_v16_quick(x), e = ct_fast_expf_v16(x);
            differ += memcmp(&a, &e, sizeof a) != 0;
        }
    }
    CHECK(differ == 0, "%ld vectors of 16 differ from ct_fast_expf_v16", differ);
#endif
}

// |got - ref| within fp32 summation of K products whose magnitudes sum to mag
static int within(double got, double ref, long K, double mag) {
    return fabs(got - ref) <= (K + 4) * 0x1p-24 * mag + 1e-30;
}

// The output layer's products (ct_head_products, kernels/backend.h) against float64, in fp32 and
// in bf16: the bf16 products take W in bf16 (as FSDP gathers it), x as it is (bf16 values
// already) and the dlogits rounded to bf16 (as PyTorch's autocast rounds them), worked out here.
static void test_head_products(void) {
    const long N = 37, C = 24, V = 70, chunk = 40;
    const ct_kernels *k = ct_kernels_get("cpu");
    float *x = malloc(sizeof(float) * N * C), *W = malloc(sizeof(float) * V * C), *z = malloc(sizeof(float) * N * V);
    float *dW0 = malloc(sizeof(float) * V * C), *dW = malloc(sizeof(float) * V * C);
    float *dx = malloc(sizeof(float) * N * C), *logits = malloc(sizeof(float) * N * V);
    float *scratch = malloc(sizeof(float) * (ct_head_products_floats(chunk, V, C, true) + 1));
    for (long i = 0; i < N * C; i++) x[i] = round_bf16(2 * urand() - 1);
    for (long i = 0; i < V * C; i++) W[i] = round_bf16(2 * urand() - 1), dW0[i] = 2 * urand() - 1;
    for (long i = 0; i < N * V; i++) z[i] = (2 * urand() - 1) * 0.01f;  // fp32 dlogits: not bf16 values
    CHECK(ct_head_products_floats(chunk, V, C, false) == 0, "fp32 needs no copies");
    uint16_t *W16 = malloc(sizeof(uint16_t) * V * C);
    ct_f32_to_bf16_n(W, W16, V * C);  // exact: W holds bf16 values
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const void *Wk = bf16 ? (const void *)W16 : W;
        ct_head_products h = ct_head_products_begin(k, bf16, Wk, V, C, chunk, scratch);
        ct_head_logits(&h, logits, x, Wk, N);
        memcpy(dW, dW0, sizeof(float) * V * C);
        ct_head_backward(&h, dx, dW, z, x, Wk, N);
        long bad = 0;
        for (long n = 0; n < N; n++)
            for (long v = 0; v < V; v++) {
                double s = 0, m = 0;
                for (long c = 0; c < C; c++) {
                    double p = (double)x[n * C + c] * W[v * C + c];
                    s += p, m += fabs(p);
                }
                bad += !within(logits[n * V + v], s, C, m);
            }
        for (long n = 0; n < N; n++)
            for (long c = 0; c < C; c++) {
                double s = 0, m = 0;
                for (long v = 0; v < V; v++) {
                    double d = bf16 ? round_bf16(z[n * V + v]) : z[n * V + v];
                    s += d * W[v * C + c], m += fabs(d * W[v * C + c]);
                }
                bad += !within(dx[n * C + c], s, V, m);
            }
        for (long v = 0; v < V; v++)
            for (long c = 0; c < C; c++) {
                double s = dW0[v * C + c], m = fabs(s);
                for (long n = 0; n < N; n++) {
                    double d = bf16 ? round_bf16(z[n * V + v]) : z[n * V + v];
                    s += d * x[n * C + c], m += fabs(d * x[n * C + c]);
                }
                bad += !within(dW[v * C + c], s, N, m);
            }
        CHECK(bad == 0, "%s: %ld of %ld results outside fp32 summation error", bf16 ? "bf16" : "fp32", bad,
              N * V + N * C + V * C);
    }
    free(x), free(W), free(W16), free(z), free(dW0), free(dW), free(dx), free(logits), free(scratch);
}

// The fused loss in bf16 computes the same softmax on logits that differ from fp32's only in
// summation order: the same loss to 1e-5. Its gradients take the dlogits rounded to bf16, each
// within 2^-9 of itself; where the softmax and the one-hot target cancel in the sums of dx and dW
// that costs up to a few times 2^-9 of the result (test_head_products holds each sum to the
// rounded dlogits exactly): relative RMS within 2^-7 (2^-9.2 measured). A dropped chunk or a
// wrong scale moves them by order 1.
static void test_xent_bf16(void) {
    const long N = 29, C = 16, V = 53, chunk = 8;
    float *x = malloc(sizeof(float) * N * C), *W = malloc(sizeof(float) * V * C);
    float *dx[2], *dW[2];
    int32_t tg[29];
    for (long i = 0; i < N * C; i++) x[i] = round_bf16(2 * urand() - 1);
    for (long i = 0; i < V * C; i++) W[i] = round_bf16(2 * urand() - 1);
    for (long n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : (int32_t)(urand() * V);
    uint16_t *W16 = malloc(sizeof(uint16_t) * V * C);
    ct_f32_to_bf16_n(W, W16, V * C);  // exact: W holds bf16 values
    double loss[2];
    for (int b = 0; b < 2; b++) {
        dx[b] = malloc(sizeof(float) * N * C), dW[b] = calloc((size_t)(V * C), sizeof(float));
        float *scratch = malloc(sizeof(float) * ct_xent_scratch_floats(chunk, V, C, b));
        loss[b] = ct_xent_fused(dx[b], dW[b], x, b ? (const void *)W16 : W, tg, N, C, V, 1.0f / N, chunk, b, scratch);
        free(scratch);
    }
    CHECK(fabs(loss[1] - loss[0]) <= 1e-5 * fabs(loss[0]), "loss bf16 %.9g fp32 %.9g", loss[1], loss[0]);
    double e = 0, n2 = 0;
    for (long i = 0; i < N * C; i++) {
        double d = (double)dx[1][i] - dx[0][i];
        e += d * d, n2 += (double)dx[0][i] * dx[0][i];
    }
    CHECK(sqrt(e / n2) < 0x1p-7, "dx bf16 vs fp32: relative %g (bf16 dlogits: < 2^-7)", sqrt(e / n2));
    e = 0, n2 = 0;
    for (long i = 0; i < V * C; i++) {
        double d = (double)dW[1][i] - dW[0][i];
        e += d * d, n2 += (double)dW[0][i] * dW[0][i];
    }
    CHECK(sqrt(e / n2) < 0x1p-7, "dW bf16 vs fp32: relative %g (bf16 dlogits: < 2^-7)", sqrt(e / n2));
    for (int b = 0; b < 2; b++) free(dx[b]), free(dW[b]);
    free(x), free(W);
}

int main(void) {
    rng_state = 0xA4093822299F31D0ull;
    CT_RUN(test_head_products);
    CT_RUN(test_xent_bf16);
    CT_RUN(test_xent_bad_target_is_fatal);
    CT_RUN(test_xent_shapes_and_chunks);
    CT_RUN(test_xent_large_logits);
    CT_RUN(test_xent_all_ignored);
    CT_RUN(test_xent_exp_bits);
    CT_TEST_EXIT();
}
