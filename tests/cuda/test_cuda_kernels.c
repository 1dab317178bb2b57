// Every cuda kernel against the cpu backend (issue 17): the same random inputs of odd shapes
// through both tables, results compared with tolerances per kind of arithmetic:
//   exact (copies, embedding, bf16 casts): bit for bit;
//   8-bit matmuls and linears: a bound per element from the sum of the products' magnitudes
//   (cmp_bound, where it is derived);
//   elementwise fp32 with the cpu's operation order (AdamW, RoPE): 1e-6 relative;
//   reductions in another order (norms, softmax, matmuls, attention): 1e-4 relative with an
//   absolute floor scaled to the size of the sum.
// Built with CUDA=1 only (make test-cuda); without a CUDA device at run time it prints one line
// "SKIP: no CUDA device" and exits 0. `--peak [n]` prints cuBLASLt's matmul rates and the
// attention kernels' instead of testing.
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "core/memory.h"
#include "kernels/backend.h"
#include "test.h"
#include "test_rand.h"

static const ct_kernels *cpu, *gpu;
static ct_device dev;

static float *host_rand(long n, float a) {
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (long i = 0; i < n; i++) h[i] = frand(a);
    return h;
}
static void *up(const void *h, size_t bytes) {
    void *d = ct_mem_alloc_on(dev, CT_MEM_OTHER, bytes ? bytes : 4);
    gpu->copy_from_host(d, h, bytes);
    return d;
}
static float *upf(const float *h, long n) { return up(h, (size_t)n * sizeof(float)); }
// A scalar the table adds to: one double on the device starting at `start`, and its value now.
static double *dscalar(double start) { return up(&start, sizeof start); }
static double down_scalar(const double *d) {
    double h;
    gpu->copy_to_host(&h, d, sizeof h);
    return h;
}
static float *dzeros(long n) {
    float *d = ct_mem_alloc_on(dev, CT_MEM_OTHER, (size_t)(n > 0 ? n : 1) * sizeof(float));
    gpu->zero(d, (size_t)(n > 0 ? n : 1) * sizeof(float));
    return d;
}
// Compares device d (n) with host ref: |g - r| <= atol + rtol |r| everywhere (equal values, the
// infinities of fully masked rows' log-sum-exp included, and NaN against NaN agree), names the
// first that does not.
static void cmp(const char *what, const float *d, const float *ref, long n, double rtol, double atol) {
    float *g = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    gpu->copy_to_host(g, d, (size_t)n * sizeof(float));
    long bad = -1;
    for (long i = 0; i < n && bad < 0; i++)
        if (g[i] != ref[i] && !(fabs((double)g[i] - ref[i]) <= atol + rtol * fabs((double)ref[i])) &&
            !(isnan(g[i]) && isnan(ref[i])))
            bad = i;
    CHECK(bad < 0, "%s: element %ld gpu %.9g cpu %.9g", what, bad, bad >= 0 ? g[bad] : 0.0, bad >= 0 ? ref[bad] : 0.0);
    free(g);
}

static void gemm_all_transposes(void) {
    long M = 37, N = 29, K = 53, ld = 61;  // leading dimensions wider than the rows
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            long na = (ta ? K : M) * ld, nb = (tb ? N : K) * ld, nc = M * ld;
            float *A = host_rand(na, 1), *B = host_rand(nb, 1), *C = host_rand(nc, 1), *dA = upf(A, na),
                  *dB = upf(B, nb), *dC = upf(C, nc);
            cpu->gemm(ta, tb, M, N, K, 0.75f, A, ld, B, ld, 0.5f, C, ld);
            gpu->gemm(ta, tb, M, N, K, 0.75f, dA, ld, dB, ld, 0.5f, dC, ld);
            cmp(ta ? (tb ? "gemm TT" : "gemm TN") : (tb ? "gemm NT" : "gemm NN"), dC, C, nc, 1e-4, 1e-5 * K);
            free(A), free(B), free(C), ct_mem_free(dA), ct_mem_free(dB), ct_mem_free(dC);
        }
}

static void gemm_bf16_vs_cpu(void) {
    long M = 33, N = 47, K = 70;
    float *a32 = host_rand(M * K, 1), *b32 = host_rand(K * N, 1), *C = host_rand(M * N, 1);
    uint16_t *A = malloc((size_t)(M * K) * 2), *B = malloc((size_t)(K * N) * 2);
    cpu->f32_to_bf16(A, a32, M * K);
    cpu->f32_to_bf16(B, b32, K * N);
    uint16_t *dA = up(A, (size_t)(M * K) * 2), *dB = up(B, (size_t)(K * N) * 2);
    float *dC = upf(C, M * N);
    cpu->gemm_bf16(0, 1, M, N, K, 1.0f, A, K, B, K, 1.0f, C, N);  // B read as (N, K)
    gpu->gemm_bf16(0, 1, M, N, K, 1.0f, dA, K, dB, K, 1.0f, dC, N);
    cmp("gemm_bf16", dC, C, M * N, 1e-4, 1e-5 * K);
}

static void casts_and_vectors(void) {
    long n = 1001;
    float *x = host_rand(n, 3), *y = host_rand(n, 3), *dx = upf(x, n), *dy = upf(y, n);
    x[5] = NAN;
    gpu->copy_from_host(dx, x, (size_t)n * 4);
    uint16_t *hb = malloc((size_t)n * 2), *gb = malloc((size_t)n * 2), *db = up(hb, (size_t)n * 2);
    cpu->f32_to_bf16(hb, x, n);
    gpu->f32_to_bf16(db, dx, n);
    gpu->copy_to_host(gb, db, (size_t)n * 2);
    CHECK(memcmp(hb, gb, (size_t)n * 2) == 0, "f32_to_bf16 differs from the cpu's bits");
    float *back = malloc((size_t)n * 4), *dback = dzeros(n);
    cpu->bf16_to_f32(back, hb, n);
    gpu->bf16_to_f32(dback, db, n);
    cmp("bf16_to_f32", dback, back, n, 0, 0);
    x[5] = 0.5f;
    gpu->copy_from_host(dx, x, (size_t)n * 4);
    double ss_cpu = 1.5, *ss_gpu = dscalar(1.5);  // both add to what is there
    cpu->sum_squares(&ss_cpu, x, n);
    gpu->sum_squares(ss_gpu, dx, n);
    CHECK_CLOSE(down_scalar(ss_gpu), ss_cpu, 1e-12, 0);
    cpu->add_inplace(y, x, n);
    gpu->add_inplace(dy, dx, n);
    cmp("add_inplace", dy, y, n, 0, 0);
    cpu->scale_inplace(y, -0.3f, n);
    gpu->scale_inplace(dy, -0.3f, n);
    cmp("scale_inplace", dy, y, n, 0, 0);
}

static void adamw_vs_cpu(void) {
    long n = 777;
    float *p = host_rand(n, 1), *g = host_rand(n, 1), *m = host_rand(n, 0.1f), *v = host_rand(n, 0.1f);
    for (long i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *dp = upf(p, n), *dg = upf(g, n), *dm = upf(m, n), *dv = upf(v, n);
    for (long step = 1; step <= 3; step++) {
        const float gs = 0.7f;
        float *g_gs = up(&gs, sizeof gs);  // the clip factor lives on the device
        cpu->adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, &gs);
        gpu->adamw_update(dp, dg, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, g_gs);
        ct_mem_free(g_gs);
    }
    cmp("adamw param", dp, p, n, 1e-6, 0);
    cmp("adamw m", dm, m, n, 1e-6, 0);
    cmp("adamw v", dv, v, n, 1e-6, 0);
}

static void embedding_vs_cpu(void) {
    long N = 41, C = 67, V = 13, start = 5;
    int32_t tok[41];
    for (long i = 0; i < N; i++) tok[i] = (int32_t)(urand() * 25);  // some outside [5, 18)
    float *wte = host_rand(V * C, 1), *out = host_rand(N * C, 1), *dout = host_rand(N * C, 1), *dw = host_rand(V * C, 1);
    int32_t *dtok = up(tok, sizeof tok);
    float *dwte = upf(wte, V * C), *dout_d = upf(dout, N * C), *ddw = upf(dw, V * C), *dout2 = dzeros(N * C);
    cpu->embedding_forward(out, tok, wte, N, C, start, V);
    gpu->embedding_forward(dout2, dtok, dwte, N, C, start, V);
    cmp("embedding_forward", dout2, out, N * C, 0, 0);
    uint16_t *wte16 = malloc((size_t)(V * C) * sizeof(uint16_t));
    for (long i = 0; i < V * C; i++) wte16[i] = (uint16_t)(i * 2654435761u >> 16);  // any bf16 bits, NaNs aside
    for (long i = 0; i < V * C; i++)
        if ((wte16[i] & 0x7f80) == 0x7f80) wte16[i] &= 0xbfff;
    uint16_t *dwte16 = up(wte16, (size_t)(V * C) * sizeof(uint16_t));
    cpu->embedding_forward_bf16(out, tok, wte16, N, C, start, V);
    gpu->embedding_forward_bf16(dout2, dtok, dwte16, N, C, start, V);
    cmp("embedding_forward_bf16", dout2, out, N * C, 0, 0);
    free(wte16);
    cpu->embedding_backward(dw, dout, tok, N, C, start, V);
    gpu->embedding_backward(ddw, dout_d, dtok, N, C, start, V);
    cmp("embedding_backward", ddw, dw, V * C, 0, 0);  // same order of additions per element
}

// The router, the dispatch plan (its order exactly), permute / combine and the grouped linear.
static void moe_vs_cpu(void) {
    long N = 29, E = 8, k = 2, C = 37, OC = 19;
    float *logits = host_rand(N * E, 3), *bias = host_rand(E, 0.1f), *dw = host_rand(N * k, 1);
    float *scores = malloc(N * E * 4), *w = malloc(N * k * 4), *dz = malloc(N * E * 4);
    int32_t *ids = malloc(N * k * 4), *pos = malloc(N * k * 4);
    float *d_logits = upf(logits, N * E), *d_bias = upf(bias, E), *d_dw = upf(dw, N * k), *d_scores = dzeros(N * E);
    float *d_w = dzeros(N * k), *d_dz = dzeros(N * E);
    int32_t *d_ids = up(ids, N * k * 4), *d_pos = up(pos, N * k * 4);
    for (int sigmoid = 0; sigmoid < 2; sigmoid++) {
        cpu->moe_router_forward(ids, w, scores, logits, bias, N, E, k, sigmoid, 1);
        gpu->moe_router_forward(d_ids, d_w, d_scores, d_logits, d_bias, N, E, k, sigmoid, 1);
        int32_t *g_ids = malloc(N * k * 4);
        gpu->copy_to_host(g_ids, d_ids, N * k * 4);
        CHECK(!memcmp(g_ids, ids, N * k * 4), "moe_router_forward (sigmoid %d): other experts chosen", sigmoid);
        free(g_ids);
        cmp("moe_router_forward weights", d_w, w, N * k, 1e-5, 1e-7);
        cpu->moe_router_backward(dz, dw, NULL, scores, ids, N, E, k, sigmoid, 1);
        gpu->moe_router_backward(d_dz, d_dw, NULL, d_scores, d_ids, N, E, k, sigmoid, 1);
        cmp("moe_router_backward", d_dz, dz, N * E, 1e-4, 1e-6);
    }
    int64_t counts[8], g_counts[8];
    int64_t *d_counts = up(counts, sizeof counts);
    cpu->moe_dispatch_plan(counts, pos, ids, N, E, k);
    gpu->moe_dispatch_plan(d_counts, d_pos, d_ids, N, E, k);
    int32_t *g_pos = malloc(N * k * 4);
    gpu->copy_to_host(g_pos, d_pos, N * k * 4);
    gpu->copy_to_host(g_counts, d_counts, sizeof g_counts);
    CHECK(!memcmp(g_pos, pos, N * k * 4) && !memcmp(g_counts, counts, sizeof counts), "moe_dispatch_plan differs");
    free(g_pos);
    float *x = host_rand(N * C, 1), *xs = malloc(N * k * C * 4), *d_x = upf(x, N * C), *d_xs = dzeros(N * k * C);
    cpu->moe_permute(xs, x, pos, N, k, C);
    gpu->moe_permute(d_xs, d_x, d_pos, N, k, C);
    cmp("moe_permute", d_xs, xs, N * k * C, 0, 0);
    int64_t off[9] = {0};
    for (long e = 0; e < E; e++) off[e + 1] = off[e] + counts[e];
    float *W = host_rand(E * OC * C, 1), *d_W = upf(W, E * OC * C), *ys = malloc(N * k * OC * 4), *d_ys = dzeros(N * k * OC);
    cpu->grouped_linear_forward(ys, xs, W, off, E, C, OC);
    gpu->grouped_linear_forward(d_ys, d_xs, d_W, off, E, C, OC);
    cmp("grouped_linear_forward", d_ys, ys, N * k * OC, 1e-4, 1e-5);
    float *y = malloc(N * OC * 4), *d_y = dzeros(N * OC), *gy = host_rand(N * OC, 1), *d_gy = upf(gy, N * OC);
    cpu->moe_combine(y, ys, w, pos, N, k, OC);
    gpu->moe_combine(d_y, d_ys, d_w, d_pos, N, k, OC);
    cmp("moe_combine", d_y, y, N * OC, 1e-5, 1e-6);
    float *gys = malloc(N * k * OC * 4), *d_gys = dzeros(N * k * OC), *gw = malloc(N * k * 4), *d_gw = dzeros(N * k);
    cpu->moe_combine_backward(gys, gw, gy, ys, w, pos, N, k, OC);
    gpu->moe_combine_backward(d_gys, d_gw, d_gy, d_ys, d_w, d_pos, N, k, OC);
    cmp("moe_combine_backward dy_sorted", d_gys, gys, N * k * OC, 1e-6, 0);
    cmp("moe_combine_backward dweights", d_gw, gw, N * k, 1e-4, 1e-5);
    float *gxs = malloc(N * k * C * 4), *d_gxs = dzeros(N * k * C), *dWh = host_rand(E * OC * C, 1), *d_dWh = upf(dWh, E * OC * C);
    cpu->grouped_linear_backward(gxs, dWh, gys, xs, W, off, E, C, OC);
    gpu->grouped_linear_backward(d_gxs, d_dWh, d_gys, d_xs, d_W, off, E, C, OC);
    cmp("grouped_linear_backward dinp", d_gxs, gxs, N * k * C, 1e-4, 1e-5);
    cmp("grouped_linear_backward dweight", d_dWh, dWh, E * OC * C, 1e-4, 1e-5);
    // The same products under bf16: bf16 rows, weights and output gradients, fp32 accumulation.
    uint16_t *xs16 = malloc((size_t)(N * k * C) * 2), *W16 = malloc((size_t)(E * OC * C) * 2),
             *gys16 = malloc((size_t)(N * k * OC) * 2);
    cpu->f32_to_bf16(xs16, xs, N * k * C), cpu->f32_to_bf16(W16, W, E * OC * C), cpu->f32_to_bf16(gys16, gys, N * k * OC);
    uint16_t *d_xs16 = up(xs16, (size_t)(N * k * C) * 2), *d_W16 = up(W16, (size_t)(E * OC * C) * 2),
             *d_gys16 = up(gys16, (size_t)(N * k * OC) * 2);
    cpu->grouped_linear_forward_bf16(ys, xs16, W16, off, E, C, OC);
    gpu->grouped_linear_forward_bf16(d_ys, d_xs16, d_W16, off, E, C, OC);
    cmp("grouped_linear_forward_bf16", d_ys, ys, N * k * OC, 1e-4, 1e-5);
    float *dWh16 = host_rand(E * OC * C, 1), *d_dWh16 = upf(dWh16, E * OC * C);
    cpu->grouped_linear_backward_bf16(gxs, dWh16, gys16, xs16, W16, off, E, C, OC);
    gpu->grouped_linear_backward_bf16(d_gxs, d_dWh16, d_gys16, d_xs16, d_W16, off, E, C, OC);
    cmp("grouped_linear_backward_bf16 dinp", d_gxs, gxs, N * k * C, 1e-4, 1e-5);
    cmp("grouped_linear_backward_bf16 dweight", d_dWh16, dWh16, E * OC * C, 1e-4, 1e-5);
    free(xs16), free(W16), free(gys16), free(dWh16);
    // back to the fp32 input gradient for the permute's backward below
    cpu->grouped_linear_backward(gxs, dWh, gys, xs, W, off, E, C, OC);
    gpu->grouped_linear_backward(d_gxs, d_dWh, d_gys, d_xs, d_W, off, E, C, OC);
    float *gx = malloc(N * C * 4), *d_gx = dzeros(N * C);
    cpu->moe_permute_backward(gx, gxs, pos, N, k, C);
    gpu->moe_permute_backward(d_gx, d_gxs, d_pos, N, k, C);
    cmp("moe_permute_backward", d_gx, gx, N * C, 1e-6, 0);
}

static void rmsnorm_swiglu_vs_cpu(void) {
    long N = 23, C = 129, F = 45;
    float *x = host_rand(N * C, 2), *w = host_rand(C, 1), *dy = host_rand(N * C, 1), *out = malloc(N * C * 4),
          *rstd = malloc(N * 4), *dx = host_rand(N * C, 1), *dw = host_rand(C, 1);
    float *d_x = upf(x, N * C), *d_w = upf(w, C), *d_dy = upf(dy, N * C), *d_out = dzeros(N * C), *d_rstd = dzeros(N),
          *d_dx = upf(dx, N * C), *d_dw = upf(dw, C);
    cpu->rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    gpu->rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, 1e-5f);
    cmp("rmsnorm_forward", d_out, out, N * C, 1e-5, 1e-6);
    cmp("rmsnorm rstd", d_rstd, rstd, N, 1e-5, 0);
    cpu->rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
    gpu->rmsnorm_backward(d_dx, d_dw, d_dy, d_x, d_w, d_rstd, N, C);
    cmp("rmsnorm_backward dinp", d_dx, dx, N * C, 1e-4, 1e-5);
    cmp("rmsnorm_backward dweight", d_dw, dw, C, 1e-4, 1e-5);
    {  // enough rows for several of the dweight kernel's row chunks
        long n2 = 300;
        float *x2 = host_rand(n2 * C, 2), *dy2 = host_rand(n2 * C, 1), *r2 = malloc(n2 * 4), *o2 = malloc(n2 * C * 4),
              *dw2 = host_rand(C, 1);
        float *g_x2 = upf(x2, n2 * C), *g_dy2 = upf(dy2, n2 * C), *g_r2 = dzeros(n2), *g_o2 = dzeros(n2 * C),
              *g_dw2 = upf(dw2, C);
        cpu->rmsnorm_forward(o2, r2, x2, w, n2, C, 1e-5f);
        gpu->rmsnorm_forward(g_o2, g_r2, g_x2, d_w, n2, C, 1e-5f);
        cpu->rmsnorm_backward(NULL, dw2, dy2, x2, w, r2, n2, C);
        gpu->rmsnorm_backward(NULL, g_dw2, g_dy2, g_x2, d_w, g_r2, n2, C);
        cmp("rmsnorm_backward dweight, 300 rows", g_dw2, dw2, C, 1e-4, 1e-5);
        free(x2), free(dy2), free(r2), free(o2), free(dw2);
    }
    float *h = host_rand(N * 2 * F, 4), *d_h = upf(h, N * 2 * F), *o = malloc(N * F * 4), *d_o = dzeros(N * F);
    float *go = host_rand(N * F, 1), *d_go = upf(go, N * F), *dh = malloc(N * 2 * F * 4), *d_dh = dzeros(N * 2 * F);
    cpu->swiglu_forward(o, h, N, F);
    gpu->swiglu_forward(d_o, d_h, N, F);
    cmp("swiglu_forward", d_o, o, N * F, 1e-5, 1e-6);
    cpu->swiglu_backward(dh, go, h, N, F);
    gpu->swiglu_backward(d_dh, d_go, d_h, N, F);
    cmp("swiglu_backward", d_dh, dh, N * 2 * F, 1e-5, 1e-6);

    // The bf16 forms: the same fp32 values rounded to bf16 (nearest even). The two devices' fp32
    // values differ in their last bits (sums in another order, expf), so a value near a rounding
    // boundary may round the other way: one bf16 step, 2^-7 of it at most.
    const double step = 0x1p-7;
    uint16_t *n16 = malloc((size_t)(N * C) * 2), *d_n16 = up(n16, (size_t)(N * C) * 2);
    float *wide = malloc((size_t)(N * 2 * F > N * C ? N * 2 * F : N * C) * 4);
    float *d_wide = dzeros(N * 2 * F > N * C ? N * 2 * F : N * C);
    cpu->rmsnorm_forward_bf16(n16, rstd, x, w, N, C, 1e-5f);
    gpu->rmsnorm_forward_bf16(d_n16, d_rstd, d_x, d_w, N, C, 1e-5f);
    cpu->bf16_to_f32(wide, n16, N * C), gpu->bf16_to_f32(d_wide, d_n16, N * C);
    cmp("rmsnorm_forward_bf16", d_wide, wide, N * C, step, 1e-6);
    cmp("rmsnorm_forward_bf16 rstd", d_rstd, rstd, N, 1e-5, 0);
    uint16_t *h16 = malloc((size_t)(N * 2 * F) * 2), *o16 = malloc((size_t)(N * F) * 2);
    uint16_t *d_h16 = up(h16, (size_t)(N * 2 * F) * 2), *d_o16 = up(o16, (size_t)(N * F) * 2);
    cpu->swiglu_forward_bf16(o16, h16, h, N, F);
    gpu->swiglu_forward_bf16(d_o16, d_h16, d_h, N, F);
    cpu->bf16_to_f32(wide, h16, N * 2 * F), gpu->bf16_to_f32(d_wide, d_h16, N * 2 * F);
    cmp("swiglu_forward_bf16 kept h13 (a rounding: exact)", d_wide, wide, N * 2 * F, 0, 0);
    cpu->bf16_to_f32(wide, o16, N * F), gpu->bf16_to_f32(d_wide, d_o16, N * F);
    cmp("swiglu_forward_bf16", d_wide, wide, N * F, step, 1e-6);
    cpu->swiglu_forward_bf16(o16, h16, NULL, N, F);  // the recompute's form: reads the kept h13
    gpu->swiglu_forward_bf16(d_o16, d_h16, NULL, N, F);
    gpu->bf16_to_f32(d_wide, d_o16, N * F), cpu->bf16_to_f32(wide, o16, N * F);
    cmp("swiglu_forward_bf16 from the kept h13", d_wide, wide, N * F, step, 1e-6);
    cpu->swiglu_backward_bf16(dh, go, h16, N, F);
    gpu->swiglu_backward_bf16(d_dh, d_go, d_h16, N, F);
    cmp("swiglu_backward_bf16", d_dh, dh, N * 2 * F, 1e-5, 1e-6);
    free(n16), free(wide), free(h16), free(o16);
}

static void rope_vs_cpu(void) {
    long B = 2, T = 11, H = 3, HS = 16, ld = H * HS + 5, maxT = 40;
    long half = HS / 2;
    float *cs = malloc(maxT * half * 4), *sn = malloc(maxT * half * 4), *dcs = dzeros(maxT * half),
          *dsn = dzeros(maxT * half);
    cpu->rope_tables(cs, sn, maxT, HS, 500000.0, 8.0, 1.0, 4.0, 16);
    gpu->rope_tables(dcs, dsn, maxT, HS, 500000.0, 8.0, 1.0, 4.0, 16);
    cmp("rope_tables cos", dcs, cs, maxT * half, 0, 0);
    int32_t pos[11];
    for (long t = 0; t < T; t++) pos[t] = (int32_t)(3 * t + 1);
    int32_t *dpos = up(pos, sizeof pos);
    long n = B * T * ld;
    float *x = host_rand(n, 1), *dx = upf(x, n);
    cpu->rope_forward(x, cs, sn, pos, 0, B, T, H, HS, ld);
    gpu->rope_forward(dx, dcs, dsn, dpos, 0, B, T, H, HS, ld);
    cmp("rope_forward", dx, x, n, 1e-6, 1e-7);
    cpu->rope_backward(x, cs, sn, NULL, 0, B, T, H, HS, ld);
    gpu->rope_backward(dx, dcs, dsn, NULL, 0, B, T, H, HS, ld);
    cmp("rope_backward", dx, x, n, 1e-6, 1e-7);
    // (B, T) positions, a row per sequence restarting at its documents
    int32_t rows[2 * 11] = {0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2};
    int32_t *drows = up(rows, sizeof rows);
    cpu->rope_forward(x, cs, sn, rows, T, B, T, H, HS, ld);
    gpu->rope_forward(dx, dcs, dsn, drows, T, B, T, H, HS, ld);
    cmp("rope_forward per-sequence positions", dx, x, n, 1e-6, 1e-7);
    cpu->rope_backward(x, cs, sn, rows, T, B, T, H, HS, ld);
    gpu->rope_backward(dx, dcs, dsn, drows, T, B, T, H, HS, ld);
    cmp("rope_backward per-sequence positions", dx, x, n, 1e-6, 1e-7);
}

// Grouped-query attention with explicit positions (a context-parallel chunk of queries against
// a chunk of keys, some rows seeing no key) and token strides wider than the heads.
static void attention_vs_cpu(void) {
    long B = 2, Tq = 19, Tk = 23, NH = 4, NKV = 2, HS = 40, ldq = NH * HS + 8, ldk = NKV * HS + 3, ldv = ldk;
    int32_t qp[19], kp[23];
    for (long i = 0; i < Tq; i++) qp[i] = (int32_t)(5 + 2 * i);
    for (long j = 0; j < Tk; j++) kp[j] = (int32_t)(7 + 2 * j);  // query 0 (position 5) sees no key
    long nq = B * Tq * ldq, nk = B * Tk * ldk, no = B * Tq * NH * HS, nl = B * NH * Tq;
    float *q = host_rand(nq, 1), *k = host_rand(nk, 1), *v = host_rand(nk, 1), *out = malloc(no * 4),
          *lse = malloc(nl * 4), *dout = host_rand(no, 1);
    float *dq = host_rand(nq, 0.1f), *dk = host_rand(nk, 0.1f), *dv = host_rand(nk, 0.1f);
    float *scratch = malloc((size_t)cpu->attention_scratch_floats(Tq, Tk, HS) * 4);
    float *g_q = upf(q, nq), *g_k = upf(k, nk), *g_v = upf(v, nk), *g_out = dzeros(no), *g_lse = dzeros(nl),
          *g_dout = upf(dout, no), *g_dq = upf(dq, nq), *g_dk = upf(dk, nk), *g_dv = upf(dv, nk),
          *g_scr = dzeros(gpu->attention_scratch_floats(Tq, Tk, HS));
    int32_t *g_qp = up(qp, sizeof qp), *g_kp = up(kp, sizeof kp);
    cpu->attention_forward(out, lse, q, ldq, k, ldk, v, ldv, qp, kp, NULL, NULL, B, Tq, Tk, NH, NKV, HS, scratch);
    gpu->attention_forward(g_out, g_lse, g_q, ldq, g_k, ldk, g_v, ldv, g_qp, g_kp, NULL, NULL, B, Tq, Tk, NH, NKV, HS, g_scr);
    cmp("attention out", g_out, out, no, 1e-4, 1e-5);
    cmp("attention lse", g_lse, lse, nl, 1e-5, 1e-5);
    cpu->attention_backward(dq, dk, dv, dout, out, lse, q, ldq, k, ldk, v, ldv, qp, kp, NULL, NULL, B, Tq, Tk, NH, NKV, HS,
                            scratch);
    gpu->attention_backward(g_dq, g_dk, g_dv, g_dout, g_out, g_lse, g_q, ldq, g_k, ldk, g_v, ldv, g_qp, g_kp, NULL, NULL, B, Tq,
                            Tk, NH, NKV, HS, g_scr);
    cmp("attention dq", g_dq, dq, nq, 1e-4, 1e-5);
    cmp("attention dk", g_dk, dk, nk, 1e-4, 1e-5);
    cmp("attention dv", g_dv, dv, nk, 1e-4, 1e-5);
    // causal without positions (0..T-1), Tq == Tk
    float *g_out2 = dzeros(B * Tk * NH * HS), *out2 = malloc(B * Tk * NH * HS * 4), *lse2 = malloc(B * NH * Tk * 4),
          *g_lse2 = dzeros(B * NH * Tk);
    float *qk = host_rand(B * Tk * ldk * 2, 1), *g_qk = upf(qk, B * Tk * ldk * 2);
    free(scratch);
    scratch = malloc((size_t)cpu->attention_scratch_floats(Tk, Tk, HS) * 4);
    cpu->attention_forward(out2, lse2, qk, 2 * ldk, k, ldk, v, ldv, NULL, NULL, NULL, NULL, B, Tk, Tk, NKV, NKV, HS, scratch);
    gpu->attention_forward(g_out2, g_lse2, g_qk, 2 * ldk, g_k, ldk, g_v, ldv, NULL, NULL, NULL, NULL, B, Tk, Tk, NKV, NKV, HS,
                           g_scr);
    cmp("attention causal out", g_out2, out2, B * Tk * NKV * HS, 1e-4, 1e-5);
}

// One attention case through both tables, forward and backward: qp / kp explicit positions
// (NULL: 0..T-1), docs: document ids (B, T), three documents per sequence, when set (Tq == Tk).
static void attention_case(const char *what, long B, long Tq, long Tk, long NH, long NKV, long HS, const int32_t *qp,
                           const int32_t *kp, bool docs) {
    long ldq = NH * HS + 8, ldk = NKV * HS + 4, ldv = ldk;
    long nq = B * Tq * ldq, nk = B * Tk * ldk, no = B * Tq * NH * HS, nl = B * NH * Tq;
    int32_t *qd = NULL, *kd = NULL, *g_qd = NULL, *g_kd = NULL;
    if (docs) {
        qd = malloc((size_t)(B * Tq) * sizeof *qd), kd = malloc((size_t)(B * Tk) * sizeof *kd);
        for (long i = 0; i < B * Tq; i++) qd[i] = (int32_t)((i % Tq) * 3 / Tq + i / Tq);
        for (long j = 0; j < B * Tk; j++) kd[j] = (int32_t)((j % Tk) * 3 / Tk + j / Tk);
        g_qd = up(qd, (size_t)(B * Tq) * sizeof *qd), g_kd = up(kd, (size_t)(B * Tk) * sizeof *kd);
    }
    int32_t *g_qp = qp ? up(qp, (size_t)Tq * sizeof *qp) : NULL, *g_kp = kp ? up(kp, (size_t)Tk * sizeof *kp) : NULL;
    float *q = host_rand(nq, 1), *k = host_rand(nk, 1), *v = host_rand(nk, 1), *out = malloc(no * 4),
          *lse = malloc(nl * 4), *dout = host_rand(no, 1);
    float *dq = host_rand(nq, 0.1f), *dk = host_rand(nk, 0.1f), *dv = host_rand(nk, 0.1f);
    float *scratch = malloc((size_t)cpu->attention_scratch_floats(Tq, Tk, HS) * 4);
    float *g_q = upf(q, nq), *g_k = upf(k, nk), *g_v = upf(v, nk), *g_out = dzeros(no), *g_lse = dzeros(nl),
          *g_dout = upf(dout, no), *g_dq = upf(dq, nq), *g_dk = upf(dk, nk), *g_dv = upf(dv, nk),
          *g_scr = dzeros(gpu->attention_scratch_floats(Tq, Tk, HS));
    char name[96];
    cpu->attention_forward(out, lse, q, ldq, k, ldk, v, ldv, qp, kp, qd, kd, B, Tq, Tk, NH, NKV, HS, scratch);
    gpu->attention_forward(g_out, g_lse, g_q, ldq, g_k, ldk, g_v, ldv, g_qp, g_kp, g_qd, g_kd, B, Tq, Tk, NH, NKV, HS,
                           g_scr);
    snprintf(name, sizeof name, "%s HS %ld out", what, HS), cmp(name, g_out, out, no, 1e-4, 1e-5);
    snprintf(name, sizeof name, "%s HS %ld lse", what, HS), cmp(name, g_lse, lse, nl, 1e-5, 1e-5);
    cpu->attention_backward(dq, dk, dv, dout, out, lse, q, ldq, k, ldk, v, ldv, qp, kp, qd, kd, B, Tq, Tk, NH, NKV, HS,
                            scratch);
    gpu->attention_backward(g_dq, g_dk, g_dv, g_dout, g_out, g_lse, g_q, ldq, g_k, ldk, g_v, ldv, g_qp, g_kp, g_qd, g_kd,
                            B, Tq, Tk, NH, NKV, HS, g_scr);
    snprintf(name, sizeof name, "%s HS %ld dq", what, HS), cmp(name, g_dq, dq, nq, 1e-4, 1e-5);
    snprintf(name, sizeof name, "%s HS %ld dk", what, HS), cmp(name, g_dk, dk, nk, 1e-4, 1e-5);
    snprintf(name, sizeof name, "%s HS %ld dv", what, HS), cmp(name, g_dv, dv, nk, 1e-4, 1e-5);
    free(q), free(k), free(v), free(out), free(lse), free(dout), free(dq), free(dk), free(dv), free(scratch);
    free(qd), free(kd);
}

// The tiled kernels (head sizes 64 and 128): sequences that end inside a tile, grouped heads,
// a context-parallel chunk with explicit positions whose first queries see no key, documents.
static void attention_tiled_vs_cpu(void) {
    int32_t qp[70], kp[90];
    for (long i = 0; i < 70; i++) qp[i] = (int32_t)(100 + 3 * i);
    for (long j = 0; j < 90; j++) kp[j] = (int32_t)(110 + 2 * j);  // queries 0..3 see no key
    for (long HS = 64; HS <= 128; HS *= 2) {
        attention_case("causal", 2, 150, 150, 4, 2, HS, NULL, NULL, false);
        attention_case("positions", 2, 70, 90, 6, 2, HS, qp, kp, false);
        attention_case("documents", 2, 130, 130, 2, 1, HS, NULL, NULL, true);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Forward and backward TFLOP/s of the attention kernels at a model's shape (causal: half the
// T x T products): B 4, T 2048, head size 64 (32 heads, 8 kv) and 128 (16 heads, 8 kv).
static void attention_rates(void) {
    for (long HS = 64; HS <= 128; HS *= 2) {
        long B = 4, T = 2048, NH = 2048 / HS, NKV = 8, ld = NH * HS, ldk = NKV * HS;
        float *q = dzeros(B * T * ld), *k = dzeros(B * T * ldk), *v = dzeros(B * T * ldk), *o = dzeros(B * T * ld),
              *l = dzeros(B * NH * T), *dq = dzeros(B * T * ld), *dk = dzeros(B * T * ldk), *dv = dzeros(B * T * ldk),
              *scr = dzeros(gpu->attention_scratch_floats(T, T, HS));
        double flops = 4.0 * B * NH * HS * (double)T * T / 2, t[2] = {0, 0};
        for (int rep = 0; rep < 4; rep++) {
            gpu->synchronize();
            double t0 = now_s();
            gpu->attention_forward(o, l, q, ld, k, ldk, v, ldk, NULL, NULL, NULL, NULL, B, T, T, NH, NKV, HS, scr);
            gpu->synchronize();
            double t1 = now_s();
            gpu->attention_backward(dq, dk, dv, o, o, l, q, ld, k, ldk, v, ldk, NULL, NULL, NULL, NULL, B, T, T, NH, NKV, HS,
                                    scr);
            gpu->synchronize();
            if (rep > 0) t[0] += t1 - t0, t[1] += now_s() - t1;  // the first warms up
        }
        printf("attention HS %ld (B %ld, T %ld, %ld heads): forward %.1f TFLOP/s, backward %.1f TFLOP/s\n", HS, B, T, NH,
               3 * flops / t[0] / 1e12, 3 * 2.5 * flops / t[1] / 1e12);
    }
}

static void xent_vs_cpu(void) {
    long N = 23, C = 33, V = 101, chunk = 7;
    int32_t t[23];
    for (long i = 0; i < N; i++) t[i] = i % 5 == 3 ? -1 : (int32_t)(urand() * V);
    float *x = host_rand(N * C, 1), *W = host_rand(V * C, 1), *dx = malloc(N * C * 4), *dW = host_rand(V * C, 0.1f);
    float *scr = malloc((size_t)cpu->xent_scratch_floats(chunk, V, C, false) * 4);
    float *g_x = upf(x, N * C), *g_W = upf(W, V * C), *g_dx = dzeros(N * C), *g_dW = upf(dW, V * C),
          *g_scr = dzeros(gpu->xent_scratch_floats(chunk, V, C, false));
    int32_t *g_t = up(t, sizeof t);
    CHECK(!gpu->xent_bad_target, "cuda checks targets with a device read per loss call (kernels/backend.h)");
    double lc = 2.0, *g_l = dscalar(2.0);  // the loss is added to what is there, on the device
    cpu->xent_fused(&lc, dx, dW, x, W, t, N, C, V, 0.25f, chunk, false, scr);
    gpu->xent_fused(g_l, g_dx, g_dW, g_x, g_W, g_t, N, C, V, 0.25f, chunk, false, g_scr);
    CHECK(lc > 2.0, "cpu loss %.9g did not add to its sum", lc);
    CHECK_CLOSE(down_scalar(g_l), lc, 1e-5, 1e-5);
    cmp("xent dx", g_dx, dx, N * C, 1e-4, 1e-6);
    cmp("xent dW", g_dW, dW, V * C, 1e-4, 1e-6);
    // row pieces on one slice of the vocabulary [40, 40 + V)
    float *z = host_rand(N * V, 4), *g_z = upf(z, N * V), mx[23], sum[23], zt[23];
    float *g_mx = dzeros(N), *g_sum = dzeros(N), *g_zt = dzeros(N);
    cpu->xent_rows_max(mx, z, t, N, V);
    gpu->xent_rows_max(g_mx, g_z, g_t, N, V);
    cmp("xent_rows_max", g_mx, mx, N, 0, 0);
    cpu->xent_rows_exp_sum(z, sum, zt, mx, t, N, V, 40);
    gpu->xent_rows_exp_sum(g_z, g_sum, g_zt, g_mx, g_t, N, V, 40);
    cmp("xent_rows_exp_sum sum", g_sum, sum, N, 1e-5, 0);
    cmp("xent_rows_exp_sum zt", g_zt, zt, N, 0, 0);
    double rl = -1.0, *g_rl = dscalar(-1.0);
    cpu->xent_rows_loss(&rl, mx, sum, zt, t, N);
    gpu->xent_rows_loss(g_rl, g_mx, g_sum, g_zt, g_t, N);
    CHECK_CLOSE(down_scalar(g_rl), rl, 1e-5, 0);
    cpu->xent_rows_dlogits(z, sum, t, N, V, 40, 0.5f);
    gpu->xent_rows_dlogits(g_z, g_sum, g_t, N, V, 40, 0.5f);
    cmp("xent_rows_dlogits", g_z, z, N * V, 1e-5, 1e-7);
}

static void fused_chains_vs_cpu(void) {
    long B = 1, T = 13, N = B * T, C = 48, F = 20, NH = 2, NKV = 1, HS = 16, QKV = (NH + 2 * NKV) * HS, maxT = 16;
    float *x = host_rand(N * C, 1), *d = host_rand(N * C, 1), *w = host_rand(C, 1), *W = host_rand(QKV * C, 0.2f);
    float *W13 = host_rand(2 * F * C, 0.2f), *xo = malloc(N * C * 4), *no = malloc(N * C * 4), *rs = malloc(N * 4);
    float *g_x = upf(x, N * C), *g_d = upf(d, N * C), *g_w = upf(w, C), *g_W = upf(W, QKV * C),
          *g_W13 = upf(W13, 2 * F * C), *g_xo = dzeros(N * C), *g_no = dzeros(N * C), *g_rs = dzeros(N);
    cpu->residual_rmsnorm_forward(xo, no, rs, x, d, w, N, C, 1e-5f);
    gpu->residual_rmsnorm_forward(g_xo, g_no, g_rs, g_x, g_d, g_w, N, C, 1e-5f);
    cmp("residual_rmsnorm x_out", g_xo, xo, N * C, 0, 0);
    cmp("residual_rmsnorm norm", g_no, no, N * C, 1e-5, 1e-6);
    float *out = malloc(N * QKV * 4), *g_out = dzeros(N * QKV);
    float *scr = malloc((size_t)(cpu->rmsnorm_linear_scratch_floats(N, C, QKV) + 1) * 4),
          *g_scr = dzeros(gpu->rmsnorm_linear_scratch_floats(N, C, QKV) + 1);
    cpu->rmsnorm_linear_forward(out, NULL, rs, x, w, W, N, C, QKV, 1e-5f, scr);
    gpu->rmsnorm_linear_forward(g_out, NULL, g_rs, g_x, g_w, g_W, N, C, QKV, 1e-5f, g_scr);
    cmp("rmsnorm_linear", g_out, out, N * QKV, 1e-4, 1e-5);
    float *h = malloc(N * F * 4), *g_h = dzeros(N * F), *h13 = malloc(N * 2 * F * 4), *g_h13 = dzeros(N * 2 * F);
    cpu->linear_swiglu_forward(h13, h, x, W13, N, C, F, NULL);
    gpu->linear_swiglu_forward(g_h13, g_h, g_x, g_W13, N, C, F, NULL);
    cmp("linear_swiglu h", g_h, h, N * F, 1e-4, 1e-5);
    float *cs = malloc(maxT * HS / 2 * 4), *sn = malloc(maxT * HS / 2 * 4);
    cpu->rope_tables(cs, sn, maxT, HS, 10000.0, 0, 1, 4, 8192);
    float *g_cs = upf(cs, maxT * HS / 2), *g_sn = upf(sn, maxT * HS / 2);
    cpu->linear_rope_forward(out, x, W, N, C, QKV, cs, sn, NULL, 0, B, T, NH, NKV, HS, NULL);
    gpu->linear_rope_forward(g_out, g_x, g_W, N, C, QKV, g_cs, g_sn, NULL, 0, B, T, NH, NKV, HS, NULL);
    cmp("linear_rope", g_out, out, N * QKV, 1e-4, 1e-5);
    cpu->rmsnorm_linear_rope_forward(out, NULL, rs, x, w, W, N, C, QKV, 1e-5f, cs, sn, NULL, 0, B, T, NH, NKV, HS, scr);
    gpu->rmsnorm_linear_rope_forward(g_out, NULL, g_rs, g_x, g_w, g_W, N, C, QKV, 1e-5f, g_cs, g_sn, NULL, 0, B, T, NH,
                                     NKV, HS, g_scr);
    cmp("rmsnorm_linear_rope", g_out, out, N * QKV, 1e-4, 1e-5);
}

// ---- 8-bit matmuls and linears against the cpu backend.
// Tolerance from the arithmetic: both backends cast to the same codes with the same scales (the
// casts are bit-exact ports), every product of two 8-bit values is exact in fp32, and the scales
// are applied by the same float operations; what differs is the order in which the K products
// are summed in fp32. Two orders of a K-term sum differ by at most 2 (K - 1) u sum_k |p_k|
// (u = 2^-24), and that sum of magnitudes is the cpu's own result on |A|, |B| (the same codes
// without their signs: casts are symmetric in the sign and the amaxes are the same), so each
// element gets bound 2 K u abs[i], plus a few u of its value for the epilogue's rounding of a
// different accumulator (and beta C).
#define U24 (1.0 / 16777216.0)
static void cmp_bound(const char *what, const float *d, const float *ref, const float *abs_ref, long n, long K) {
    float *g = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    gpu->copy_to_host(g, d, (size_t)n * sizeof(float));
    long bad = -1;
    for (long i = 0; i < n && bad < 0; i++) {
        if (g[i] == ref[i] || (isnan(g[i]) && isnan(ref[i]))) continue;
        double bound = 2.0 * (double)K * U24 * fabs((double)abs_ref[i]) + 8.0 * U24 * fabs((double)ref[i]);
        if (!(fabs((double)g[i] - ref[i]) <= bound)) bad = i;
    }
    CHECK(bad < 0, "%s: element %ld gpu %.9g cpu %.9g (bound from |A||B| %.9g)", what, bad, bad >= 0 ? g[bad] : 0.0,
          bad >= 0 ? ref[bad] : 0.0, bad >= 0 ? abs_ref[bad] : 0.0);
    free(g);
}
static float *fabs_copy(const float *x, long n) {
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (long i = 0; i < n; i++) a[i] = fabsf(x[i]);
    return a;
}
static float *host_copy(const float *x, long n) {
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(a, x, (size_t)n * sizeof(float));
    return a;
}
// Random fp8 codes, none NaN or infinite (e4m3: 0x7f / 0xff; e5m2: exponent 31).
static uint8_t *rand_codes(long n, int e4m3) {
    uint8_t *q = malloc((size_t)(n > 0 ? n : 1));
    for (long i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(urand() * 256);
        if (e4m3 ? (c & 0x7f) == 0x7f : ((c >> 2) & 0x1f) == 0x1f) c &= 0xbf;
        q[i] = c;
    }
    return q;
}
static uint8_t *unsigned_codes(const uint8_t *q, long n) {
    uint8_t *a = malloc((size_t)(n > 0 ? n : 1));
    for (long i = 0; i < n; i++) a[i] = q[i] & 0x7f;
    return a;
}

// gemm_f8 with every transpose, leading dimensions wider than the rows, K not a multiple of 16,
// tensorwise and rowwise scales, beta 0 and 0.5, e5m2 x e4m3 and e4m3 x e4m3.
static void gemm_f8_vs_cpu(void) {
    long M = 19, N = 23, K = 45, ld = 50, nc = M * ld;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int rw = 0; rw < 2; rw++) {
                ct_dtype fa = rw ? CT_F8_E5M2 : CT_F8_E4M3;
                long na = (ta ? K : M) * ld, nb = (tb ? N : K) * ld;
                uint8_t *A = rand_codes(na, fa == CT_F8_E4M3), *B = rand_codes(nb, 1);
                uint8_t *Aa = unsigned_codes(A, na), *Ba = unsigned_codes(B, nb);
                float sa[19], sb[23];
                for (long i = 0; i < M; i++) sa[i] = rw ? ldexpf(1.0f, (int)(urand() * 8) - 4) : 3.7f;
                for (long i = 0; i < N; i++) sb[i] = rw ? ldexpf(1.0f, (int)(urand() * 8) - 4) : 0.3f;
                float beta = rw ? 0.5f : 0.0f, *C = host_rand(nc, 1), *Cabs = calloc((size_t)nc, 4);
                float *scr = malloc((size_t)cpu->gemm_f8_scratch_floats(M, N, K, 1) * 4);
                float *gC = upf(C, nc), *gsa = upf(sa, M), *gsb = upf(sb, N);
                float *gscr = dzeros(gpu->gemm_f8_scratch_floats(M, N, K, 1));
                uint8_t *gA = up(A, (size_t)na), *gB = up(B, (size_t)nb);
                cpu->gemm_f8(ta, tb, M, N, K, Aa, ld, fa, sa, Ba, ld, CT_F8_E4M3, sb, rw, 0.0f, Cabs, ld, scr);
                for (long i = 0; i < nc; i++) Cabs[i] = fabsf(Cabs[i]) + fabsf(beta * C[i]);
                cpu->gemm_f8(ta, tb, M, N, K, A, ld, fa, sa, B, ld, CT_F8_E4M3, sb, rw, beta, C, ld, scr);
                gpu->gemm_f8(ta, tb, M, N, K, gA, ld, fa, gsa, gB, ld, CT_F8_E4M3, gsb, rw, beta, gC, ld, gscr);
                char what[64];
                snprintf(what, sizeof what, "gemm_f8 trans %d %d %s", ta, tb, rw ? "rowwise e5m2" : "tensorwise");
                cmp_bound(what, gC, C, Cabs, nc, K);
                free(A), free(B), free(Aa), free(Ba), free(C), free(Cabs), free(scr);
                ct_mem_free(gC), ct_mem_free(gsa), ct_mem_free(gsb), ct_mem_free(gscr), ct_mem_free(gA), ct_mem_free(gB);
            }
}

// gemm_mxfp8 on codes and e8m0 scales as a quantiser makes them (K = 70: a tail block of 6).
static void gemm_mxfp8_vs_cpu(void) {
    long M = 17, N = 21, K = 70, nb = (K + 31) / 32;
    uint8_t *A = rand_codes(M * K, 0), *B = rand_codes(N * K, 1), sa[17 * 3], sb[21 * 3];
    for (long i = 0; i < M * nb; i++) sa[i] = (uint8_t)(118 + urand() * 16);
    for (long i = 0; i < N * nb; i++) sb[i] = (uint8_t)(118 + urand() * 16);
    uint8_t *Aa = unsigned_codes(A, M * K), *Ba = unsigned_codes(B, N * K);
    float *C = host_rand(M * N, 1), *Cabs = calloc((size_t)(M * N), 4);
    float *scr = malloc((size_t)cpu->gemm_f8_scratch_floats(M, N, K, 0) * 4);
    float *gC = upf(C, M * N), *gscr = dzeros(gpu->gemm_f8_scratch_floats(M, N, K, 0));
    uint8_t *gA = up(A, (size_t)(M * K)), *gB = up(B, (size_t)(N * K)), *gsa = up(sa, sizeof sa), *gsb = up(sb, sizeof sb);
    cpu->gemm_mxfp8(M, N, K, Aa, sa, CT_F8_E5M2, Ba, sb, CT_F8_E4M3, 0.0f, Cabs, scr);
    for (long i = 0; i < M * N; i++) Cabs[i] = fabsf(Cabs[i]) + fabsf(C[i]);
    cpu->gemm_mxfp8(M, N, K, A, sa, CT_F8_E5M2, B, sb, CT_F8_E4M3, 1.0f, C, scr);
    gpu->gemm_mxfp8(M, N, K, gA, gsa, CT_F8_E5M2, gB, gsb, CT_F8_E4M3, 1.0f, gC, gscr);
    cmp_bound("gemm_mxfp8", gC, C, Cabs, M * N, K);
}

// One linear, forward and backward, every recipe, on the device and the cpu. x may hold NaN,
// infinities and values that saturate; x16 (when not NULL) is x in bf16 and the device gets it,
// the cpu its fp32 widening (the same values). Bounds from the cpu's run on |x|, |w|, |dy|.
static void f8_linear_case(const char *what, long N, long IC, long OC, const float *x, const float *w, const float *dy,
                           int bf16_input) {
    uint16_t *x16 = malloc((size_t)(N * IC > 0 ? N * IC : 1) * sizeof(uint16_t));
    float *xc = host_copy(x, N * IC);
    if (bf16_input) {
        cpu->f32_to_bf16(x16, x, N * IC);
        cpu->bf16_to_f32(xc, x16, N * IC);
    }
    float *xa = fabs_copy(xc, N * IC), *wa = fabs_copy(w, OC * IC), *dya = fabs_copy(dy, N * OC);
    long nf = cpu->f8_scratch_floats(N, IC, OC), nb = cpu->f8_backward_scratch_floats(N, IC, OC);
    float *scr = malloc((size_t)(nf > nb ? nf : nb) * 4 + 4);
    long gf = gpu->f8_scratch_floats(N, IC, OC), gb = gpu->f8_backward_scratch_floats(N, IC, OC);
    float *g_scr = dzeros(gf > gb ? gf : gb);
    float *out = malloc((size_t)(N * OC) * 4 + 4), *oa = malloc((size_t)(N * OC) * 4 + 4);
    float *di = malloc((size_t)(N * IC) * 4 + 4), *dia = malloc((size_t)(N * IC) * 4 + 4);
    float *dw0 = host_rand(OC * IC, 0.5f), *dw = malloc((size_t)(OC * IC) * 4 + 4), *dwa = malloc((size_t)(OC * IC) * 4 + 4);
    float *g_out = dzeros(N * OC), *g_di = dzeros(N * IC), *g_dw = dzeros(OC * IC), *g_dy = upf(dy, N * OC),
          *g_w = upf(w, OC * IC);
    void *g_x = bf16_input ? up(x16, (size_t)(N * IC) * 2) : (void *)upf(x, N * IC);
    ct_dtype xdt = bf16_input ? CT_BF16 : CT_F32;
    const char *names[3] = {"tensorwise", "rowwise", "mxfp8"};
    for (int r = 0; r < 3; r++) {
        char w_[128];
        ct_f8_recipe rec = (ct_f8_recipe)r;
        cpu->linear_forward_f8(oa, xa, CT_F32, wa, N, IC, OC, rec, NULL, scr);
        cpu->linear_forward_f8(out, xc, CT_F32, w, N, IC, OC, rec, NULL, scr);
        gpu->linear_forward_f8(g_out, g_x, xdt, g_w, N, IC, OC, rec, NULL, g_scr);
        snprintf(w_, sizeof w_, "%s %s forward", what, names[r]);
        cmp_bound(w_, g_out, out, oa, N * OC, IC);
        memset(dwa, 0, (size_t)(OC * IC) * 4);
        cpu->linear_backward_f8(dia, dwa, dya, xa, CT_F32, wa, N, IC, OC, rec, NULL, scr);
        for (long i = 0; i < OC * IC; i++) dwa[i] += fabsf(dw0[i]);
        memcpy(dw, dw0, (size_t)(OC * IC) * 4);
        gpu->copy_from_host(g_dw, dw0, (size_t)(OC * IC) * 4);
        cpu->linear_backward_f8(di, dw, dy, xc, CT_F32, w, N, IC, OC, rec, NULL, scr);
        gpu->linear_backward_f8(g_di, g_dw, g_dy, g_x, xdt, g_w, N, IC, OC, rec, NULL, g_scr);
        snprintf(w_, sizeof w_, "%s %s dinp", what, names[r]);
        cmp_bound(w_, g_di, di, dia, N * IC, OC);
        snprintf(w_, sizeof w_, "%s %s dweight", what, names[r]);
        cmp_bound(w_, g_dw, dw, dwa, OC * IC, N);
    }
    free(x16), free(xc), free(xa), free(wa), free(dya), free(scr), free(out), free(oa), free(di), free(dia), free(dw0),
        free(dw), free(dwa);
    ct_mem_free(g_scr), ct_mem_free(g_out), ct_mem_free(g_di), ct_mem_free(g_dw), ct_mem_free(g_dy), ct_mem_free(g_w),
        ct_mem_free(g_x);
}

static void f8_linear_vs_cpu(void) {
    // odd shapes: IC 70 and N 37 are neither multiples of 16 (cuBLASLt's padding) nor of 32 (MX tails)
    long N = 37, IC = 70, OC = 29;
    float *x = host_rand(N * IC, 2), *w = host_rand(OC * IC, 1), *dy = host_rand(N * OC, 1e-3f);
    x[5] = 479.0f;     // saturates in its MX block (X = 0: 479 > 448) and is its rows' amax elsewhere
    x[IC + 3] = 1e-30f;  // a tiny value next to normal ones (flushed to zero by its casts)
    f8_linear_case("linear_f8", N, IC, OC, x, w, dy, 0);
    f8_linear_case("linear_f8 bf16 input", N, IC, OC, x, w, dy, 1);
    float *xa = host_rand(32 * 64, 2), *wa = host_rand(48 * 64, 1), *dya = host_rand(32 * 48, 1e-3f);
    f8_linear_case("linear_f8 aligned", 32, 64, 48, xa, wa, dya, 0);  // no padding anywhere
    free(xa), free(wa), free(dya);
    f8_linear_case("linear_f8 zero rows", 0, IC, OC, x, w, dy, 0);
    // non-finite input: NaN in row 2 and inf in row 4 (tensorwise: every output NaN; rowwise:
    // those rows; MXFP8: the rows with the NaN-scaled blocks), NaN compared equal to NaN
    x[2 * IC + 7] = NAN;
    x[4 * IC + 40] = INFINITY;
    f8_linear_case("linear_f8 nan/inf", N, IC, OC, x, w, dy, 0);
    free(x), free(w), free(dy);
}

// Gather mode of the cross-entropy rows: P = 3 slices, ignored rows, block `mine` = 1 -> dlogits.
static void xent_rows_gathered_vs_cpu(void) {
    long P = 3, R = 23, V = 37, mine = 1;
    int32_t t[23];
    for (long i = 0; i < R; i++) t[i] = i % 7 == 2 ? -1 : (int32_t)(urand() * P * V);
    float *G = host_rand(P * R * V, 4), *g_G = upf(G, P * R * V), mx[23], sum[23], zt[23];
    float *g_mx = dzeros(R), *g_sum = dzeros(R), *g_zt = dzeros(R);
    int32_t *g_t = up(t, sizeof t);
    for (int dl = 0; dl < 2; dl++) {
        cpu->xent_rows_gathered(G, mx, sum, zt, t, P, R, V, mine, 0.5f, dl);
        gpu->xent_rows_gathered(g_G, g_mx, g_sum, g_zt, g_t, P, R, V, mine, 0.5f, dl);
        cmp("xent_rows_gathered mx", g_mx, mx, R, 0, 0);
        cmp("xent_rows_gathered sum", g_sum, sum, R, 1e-5, 0);  // exp and summation order differ
        cmp("xent_rows_gathered zt", g_zt, zt, R, 0, 0);
        cmp("xent_rows_gathered G", g_G, G, P * R * V, 1e-5, 1e-7);
    }
    gpu->xent_rows_gathered(g_G, g_mx, g_sum, g_zt, g_t, P, 0, V, mine, 0.5f, 1);  // zero rows: nothing to do
}

// fp8 product rates through the table (codes laid out as the linears lay them: no repacking
// beyond the table member's own), and MXFP8's (decode + fp32 product on sm_90).
static void f8_rates(long n) {
    uint8_t *a = ct_mem_alloc_on(dev, CT_MEM_OTHER, (size_t)(n * n)), *b = ct_mem_alloc_on(dev, CT_MEM_OTHER, (size_t)(n * n));
    gpu->zero(a, (size_t)(n * n)), gpu->zero(b, (size_t)(n * n));
    float one = 1.0f, *s = upf(&one, 1), *c = dzeros(n * n), *scr = dzeros(gpu->gemm_f8_scratch_floats(n, n, n, 0));
    long nb = (n + 31) / 32;
    uint8_t *e = ct_mem_alloc_on(dev, CT_MEM_OTHER, (size_t)(n * nb));
    gpu->zero(e, (size_t)(n * nb));
    for (int mx = 0; mx < 2; mx++) {
        double best = 0;
        for (int r = 0; r < 6; r++) {
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0), cudaEventCreate(&e1);
            cudaEventRecord(e0, 0);
            if (mx) gpu->gemm_mxfp8(n, n, n, a, e, CT_F8_E4M3, b, e, CT_F8_E4M3, 0.0f, c, scr);
            else gpu->gemm_f8(0, 1, n, n, n, a, n, CT_F8_E4M3, s, b, n, CT_F8_E4M3, s, 0, 0.0f, c, n, scr);
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            double tf = ms > 0 ? 2.0 * n * n * n / (ms * 1e9) : 0;
            if (r > 0 && tf > best) best = tf;  // the first run chooses algorithms
            cudaEventDestroy(e0), cudaEventDestroy(e1);
        }
        printf("%s n=%ld %.1f TFLOP/s (table member, quantised operands given)\n", mx ? "gemm_mxfp8" : "gemm_f8", n, best);
    }
    ct_mem_free(a), ct_mem_free(b), ct_mem_free(s), ct_mem_free(c), ct_mem_free(scr), ct_mem_free(e);
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    cpu = ct_kernels_get("cpu");
    gpu = ct_kernels_get("cuda");
    if (!gpu) {
        printf("FAIL cuda_backend: ct_kernels_get(\"cuda\") is NULL in a CUDA=1 build\n");
        return 1;
    }
    int d = 0;
    cudaGetDevice(&d);
    dev = (ct_device){CT_DEVICE_CUDA, d};
    if (argc > 1 && strcmp(argv[1], "--peak") == 0) {  // scripts/gpu_check.sh: cuBLASLt rates, no tests
        long sz = argc > 2 ? atol(argv[2]) : 8192;
        printf("matmul_peak n=%ld bf16 %.1f TFLOP/s fp32 %.1f TFLOP/s\n", sz, gpu->matmul_peak_gflops_bf16(sz, 10) / 1e3,
               gpu->matmul_peak_gflops(sz, 3) / 1e3);
        attention_rates();
        f8_rates(sz);
        return 0;
    }
    rng_state = 1234;
    CT_RUN(gemm_all_transposes);
    CT_RUN(gemm_bf16_vs_cpu);
    CT_RUN(casts_and_vectors);
    CT_RUN(adamw_vs_cpu);
    CT_RUN(embedding_vs_cpu);
    CT_RUN(rmsnorm_swiglu_vs_cpu);
    CT_RUN(moe_vs_cpu);
    CT_RUN(rope_vs_cpu);
    CT_RUN(attention_vs_cpu);
    CT_RUN(attention_tiled_vs_cpu);
    CT_RUN(xent_vs_cpu);
    CT_RUN(fused_chains_vs_cpu);
    CT_RUN(xent_rows_gathered_vs_cpu);
    CT_RUN(gemm_f8_vs_cpu);
    CT_RUN(gemm_mxfp8_vs_cpu);
    CT_RUN(f8_linear_vs_cpu);
    printf("device memory still held (other): %zu bytes\n", ct_mem_current_on(dev, CT_MEM_OTHER));
    return ct_test_failures ? 1 : 0;
}
