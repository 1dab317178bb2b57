// Table members the cuda backend runs through the cpu reference, by a round trip to the host:
// the float8 / MXFP8 matmuls and linears, the gathered cross-entropy rows, and the row-loss sum
// (which returns to the host anyway). Correct by construction (they ARE the cpu functions) and
// slow: each call copies its operands to the host, computes there and copies the results back,
// allocating host buffers per call (malloc, outside the memory tables). Phase 1 of the GPU
// backend; the real versions are cuBLASLt fp8 matmuls with scale pointers on sm_90+ and device
// quantisation kernels. The device scratch these members ask for is a token float: the host
// function gets its own host scratch.
#include <stdlib.h>

#include "core/error.h"
#include "core/float_formats.h"
#include "kernels/cpu/gemm_f8.h"
#include "kernels/cpu/linear_f8.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/kernels.h"

static void *host_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) ct_fatal("cuda", "host fallback: no host memory for %zu bytes", bytes);
    return p;
}

// A host copy of `bytes` of device memory at dev (NULL dev: a NULL result).
static void *down(const void *dev, size_t bytes) {
    if (!dev) return NULL;
    void *h = host_alloc(bytes);
    ct_cuda_to_host(h, dev, bytes);
    return h;
}

static void up_free(void *dev, void *host, size_t bytes) {
    if (dev && host) ct_cuda_from_host(dev, host, bytes);
    free(host);
}

// Elements a row-major (rows, cols) matrix with leading dimension ld spans.
static size_t span(long rows, long cols, long ld) { return rows > 0 && cols > 0 ? (size_t)((rows - 1) * ld + cols) : 0; }

long ct_cuda_gemm_f8_scratch_floats(long M, long N, long K, int with_beta) { return 1; }
long ct_cuda_f8_scratch_floats(long N, long IC, long OC) { return 1; }
long ct_cuda_f8_backward_scratch_floats(long N, long IC, long OC) { return 1; }

void ct_cuda_gemm_f8(int trans_a, int trans_b, long M, long N, long K, const uint8_t *A, long lda, ct_dtype fmt_a,
                     const float *scale_a, const uint8_t *B, long ldb, ct_dtype fmt_b, const float *scale_b,
                     int rowwise, float beta, float *C, long ldc, float *scratch) {
    size_t na = span(trans_a ? K : M, trans_a ? M : K, lda), nb = span(trans_b ? N : K, trans_b ? K : N, ldb);
    size_t nc = span(M, N, ldc) * sizeof(float);
    uint8_t *a = down(A, na), *b = down(B, nb);
    float *sa = down(scale_a, (size_t)(rowwise ? M : 1) * sizeof(float));
    float *sb = down(scale_b, (size_t)(rowwise ? N : 1) * sizeof(float));
    float *c = down(C, nc);  // also for beta == 0: the cells between rows must come back unchanged
    float *hs = host_alloc((size_t)ct_gemm_f8_scratch_floats(M, N, K, beta != 0.0f) * sizeof(float));
    ct_gemm_f8(trans_a, trans_b, M, N, K, a, lda, fmt_a, sa, b, ldb, fmt_b, sb, rowwise, beta, c, ldc, hs);
    up_free(C, c, nc);
    free(a), free(b), free(sa), free(sb), free(hs);
}

void ct_cuda_gemm_mxfp8(long M, long N, long K, const uint8_t *A, const uint8_t *scale_a, ct_dtype fmt_a,
                        const uint8_t *B, const uint8_t *scale_b, ct_dtype fmt_b, float beta, float *C,
                        float *scratch) {
    size_t nblk = (size_t)ct_mx_nblocks(K), nc = (size_t)(M * N) * sizeof(float);
    uint8_t *a = down(A, (size_t)(M * K)), *b = down(B, (size_t)(N * K));
    uint8_t *sa = down(scale_a, (size_t)M * nblk), *sb = down(scale_b, (size_t)N * nblk);
    float *c = down(C, nc);
    float *hs = host_alloc((size_t)ct_gemm_f8_scratch_floats(M, N, K, 0) * sizeof(float));
    ct_gemm_mxfp8(M, N, K, a, sa, fmt_a, b, sb, fmt_b, beta, c, hs);
    up_free(C, c, nc);
    free(a), free(b), free(sa), free(sb), free(hs);
}

// Under tp the cpu function hands its amaxes to split->amax_max in host memory, while the hook
// (this device's comm backend) reduces device memory: a round trip through the small buffer.
static void host_amax_max(void *ctx, float *amax, long n) {
    const ct_f8_split *dev = ctx;
    size_t bytes = (size_t)n * sizeof(float);
    float *d = ct_cuda_small_buffer(bytes);
    ct_cuda_from_host(d, amax, bytes);
    dev->amax_max(dev->ctx, d, n);
    ct_cuda_to_host(amax, d, bytes);
}
static const ct_f8_split *host_split(const ct_f8_split *dev, ct_f8_split *h) {
    if (!dev || !dev->amax_max) return dev;
    *h = *dev;
    h->amax_max = host_amax_max;
    h->ctx = (void *)dev;
    return h;
}

// The input's bytes, in the dtype it is kept in (f32 or bf16; the cpu function refuses others).
static size_t input_bytes(long N, long IC, ct_dtype dt) { return (size_t)(N * IC) * ct_dtype_size(dt); }

void ct_cuda_linear_forward_f8(float *out, const void *inp, ct_dtype inp_dtype, const float *weight, long N,
                               long IC, long OC, ct_f8_recipe recipe, const ct_f8_split *split, float *scratch) {
    size_t no = (size_t)(N * OC) * sizeof(float);
    void *x = down(inp, input_bytes(N, IC, inp_dtype));
    float *w = down(weight, (size_t)(OC * IC) * sizeof(float));
    float *o = host_alloc(no), *hs = host_alloc((size_t)ct_f8_scratch_floats(N, IC, OC) * sizeof(float));
    ct_f8_split hsp;
    ct_linear_forward_f8(o, x, inp_dtype, w, N, IC, OC, recipe, host_split(split, &hsp), hs);
    up_free(out, o, no);
    free(x), free(w), free(hs);
}

void ct_cuda_linear_backward_f8(float *dinp, float *dweight, const float *dout, const void *inp,
                                ct_dtype inp_dtype, const float *weight, long N, long IC, long OC,
                                ct_f8_recipe recipe, const ct_f8_split *split, float *scratch) {
    size_t ndi = (size_t)(N * IC) * sizeof(float), ndw = (size_t)(OC * IC) * sizeof(float);
    float *dy = down(dout, (size_t)(N * OC) * sizeof(float)), *w = down(weight, ndw);
    void *x = down(inp, input_bytes(N, IC, inp_dtype));
    float *di = dinp ? host_alloc(ndi) : NULL, *dw = down(dweight, ndw);  // dweight accumulates: bring it down
    float *hs = host_alloc((size_t)ct_f8_backward_scratch_floats(N, IC, OC) * sizeof(float));
    ct_f8_split hsp;
    ct_linear_backward_f8(di, dw, dy, x, inp_dtype, w, N, IC, OC, recipe, host_split(split, &hsp), hs);
    up_free(dinp, di, ndi);
    up_free(dweight, dw, ndw);
    free(dy), free(x), free(w), free(hs);
}

void ct_cuda_xent_rows_gathered(float *G, float *mx, float *sum, float *zt, const int32_t *targets, long P, long R,
                                long V, long mine, float grad_scale, int dlogits) {
    size_t ng = (size_t)(P * R * V) * sizeof(float), nr = (size_t)R * sizeof(float);
    float *g = down(G, ng);
    int32_t *t = down(targets, (size_t)R * sizeof(int32_t));
    float *hm = host_alloc(nr), *hsum = host_alloc(nr), *hzt = host_alloc(nr);
    ct_xent_rows_gathered(g, hm, hsum, hzt, t, P, R, V, mine, grad_scale, dlogits);
    if (dlogits) up_free(G, g, ng);
    else free(g);
    up_free(mx, hm, nr);
    up_free(sum, hsum, nr);
    up_free(zt, hzt, nr);
    free(t);
}
